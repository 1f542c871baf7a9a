//! `flash_decode`'s KV loop: a block's walk over its key slice (`KeyWalk`).

use crate::arch::{self, SharedAddr};
use crate::attention::fragment::FragmentSoftmax;
use crate::attention::pipeline::{TileBoxes, TileStream, TmaRing};
use crate::attention::shape::{Tiles, WarpShape};
use crate::attention::warp_mma;
use crate::attention::{record_barriers, start_counting};
use crate::policy::BarrierPolicy;
use crate::tile::{self, Element};

/// One block's walk over its KV tiles: its key slice (`tiles` tiles from `first_key`), each
/// warp's softmax state over the block's rows, and Q's tile in shared memory.
pub(super) struct KeyWalk<const ROW_TILES: usize> {
    pub(super) first_key: u32,
    pub(super) tiles: u32,
    pub(super) softmax: FragmentSoftmax<ROW_TILES>,
    pub(super) q_smem: SharedAddr,
}

impl<const ROW_TILES: usize> KeyWalk<ROW_TILES> {
    /// `run` over the tiles of a copy-engine ring at `kv_smem` (`smem_plan`) that `boxes` fill,
    /// thread 0 the producer; waits for Q's copies and sets the ring up first.
    ///
    /// # Safety
    /// As `run`, with Q's copies issued (one commit group) and the ring's shared memory the
    /// block's; `boxes`' maps describe this launch's K and V.
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    pub(super) unsafe fn through_ring<
        T: Element,
        P: BarrierPolicy,
        const COUNT: bool,
        const D: usize,
        const BLOCK_N: usize,
        const STAGES: usize,
        W: WarpShape,
        B: TileBoxes,
    >(
        self,
        kv_smem: SharedAddr,
        boxes: B,
        thread: u32,
        barrier_log: *mut u32,
    ) -> (FragmentSoftmax<ROW_TILES>, [W::Output; ROW_TILES]) {
        let ring =
            TmaRing::<D, BLOCK_N, STAGES, B>::new(kv_smem, boxes, self.first_key, self.tiles, thread == 0);
        ring.start(BLOCK_N as u32 / W::KEYS as u32);
        arch::cp_async_wait::<0>();
        arch::sync_threads(); // Q and the ring's barriers visible to every warp
        self.run::<T, P, COUNT, BLOCK_N, W, _>(&ring, barrier_log)
    }

    /// Reads Q's fragments, then walks the tiles `stream` brings: this warp's `W::KEYS` keys of
    /// each `BLOCK_N`-key tile, S = Q K^T, the online softmax, O += P V. Returns the warp's
    /// softmax state and output accumulators; with `COUNT`, records the loop's block barriers.
    ///
    /// # Safety
    /// Q's tile is visible to every warp; `stream` brings `tiles` tiles of the block's K and V.
    #[inline(always)]
    pub(super) unsafe fn run<
        T: Element,
        P: BarrierPolicy,
        const COUNT: bool,
        const BLOCK_N: usize,
        W: WarpShape,
        S: TileStream,
    >(
        mut self,
        stream: &S,
        barrier_log: *mut u32,
    ) -> (FragmentSoftmax<ROW_TILES>, [W::Output; ROW_TILES]) {
        let q_frag = W::q_fragments::<ROW_TILES>(self.q_smem, 0, tile::row_stride_bytes(W::D));
        let mut o_acc = [W::Output::zero(); ROW_TILES];
        let warp_key0 = arch::warp_id() * W::KEYS as u32; // this warp's first key inside each tile
        let loop_start = start_counting::<COUNT>(0);
        for t in 0..self.tiles {
            let stage = stream.acquire(t);
            stream.clear_stale(t, stage, (warp_key0, W::KEYS as u32));
            // This warp's keys as a tile of their own (a page's, where the copy engine brings a
            // tile page by page).
            let (k_tile, rows, key_row) = stream.rows_from(stream.k_tile(stage), BLOCK_N as u32, warp_key0);
            let (v_tile, ..) = stream.rows_from(stream.v_tile(stage), BLOCK_N as u32, warp_key0);
            // S = Q K^T on this warp's keys: one ldmatrix.x4 gives two adjacent 8-key B fragments.
            let mut s_acc = [W::Scores::zero(); ROW_TILES];
            for ks in 0..W::Query::LEN {
                let a = core::array::from_fn(|mt| *q_frag[mt].tile(ks));
                warp_mma::scores_step::<T, W, S::Layout, ROW_TILES>(
                    &mut s_acc, &a, k_tile, rows, key_row, ks,
                );
            }
            let first_key = self.first_key + t * BLOCK_N as u32 + warp_key0;
            self.softmax
                .step::<P, COUNT, _, _>(&mut s_acc, &mut o_acc, first_key);

            // O += P V, P straight from the accumulators.
            warp_mma::attend::<T, W, S::Layout, ROW_TILES>(&mut o_acc, &s_acc, v_tile, rows, key_row);
            stream.release(t);
        }
        if COUNT {
            record_barriers(barrier_log, self.tiles, loop_start, 0);
        }
        (self.softmax, o_acc)
    }
}
