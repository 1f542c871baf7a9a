//! `flash_mma`: FlashAttention-2's algorithm on tensor cores (`mma.sync.m16n8k16`, fp32 accumulate).
//!
//! Each warp owns `ROW_TILES` tiles of 16 query rows (`BLOCK_M = 16 * ROW_TILES * NUM_WARPS`) and
//! walks the keys in tiles of `BLOCK_N`, streamed `STAGES` deep through shared memory with
//! `cp.async`. Per KV tile:
//! - S = Q K^T: `ldmatrix` K (row-major K is exactly the column-major B operand) once per 16
//!   keys x 16 dims and use it for every row tile of the warp: more row tiles per warp means fewer
//!   shared-memory reads per `mma`. Q fragments stay in registers (`Q_IN_REGS`) or, when the
//!   registers are needed for accumulators, are re-read from shared memory each tile.
//! - softmax on the accumulators: lane `4g + c` holds rows `g` and `g + 8` of each row tile,
//!   columns `2c, 2c + 1` of each 8-key tile, so a row's max is a reduction over a quad.
//! - O += P V: the probabilities are packed into A fragments in registers (the accumulator layout
//!   of two adjacent 8-key tiles *is* the A layout of one 16-key k-step); V through `ldmatrix.trans`.

use super::fragment::FragmentSoftmax;
use super::pipeline::KvPipeline;
use super::shape::{Tiles, WarpShape};
use super::warp_mma;
use super::{record_barriers, start_counting, Buffers, Problem};
use crate::arch;
use crate::policy::{sync, BarrierPolicy, SyncPoint};
use crate::tile::{self, Element, Padded};

/// Shared memory the kernel needs, in bytes: one Q tile and `STAGES` K and V tiles.
pub const fn smem_bytes(d: usize, block_m: usize, block_n: usize, stages: usize) -> u32 {
    tile::tile_bytes(block_m, d) + 2 * stages as u32 * tile::tile_bytes(block_n, d)
}

/// Exports one `flash_mma` variant of `kernels.toml`: the invocation `build.rs` writes for it
/// (symbol names, then `Spec::kernel_args`), expanded through `kernel!` in `lib.rs`.
macro_rules! flash_mma {
    ($name:ident $counted:ident $smem:ident $barriers:ident,
     $t:ty, $policy:ty, d = $d:literal, m = $bm:literal, n = $bn:literal, w = $w:literal,
     stages = $stages:literal, q_in_regs = $qr:literal, sub_n = $sub:literal) => {
        kernel!(@export $name, $counted, $smem,
            $crate::attention::mma::smem_bytes($d, $bm, $bn, $stages), $barriers,
            <$policy as $crate::policy::BarrierPolicy>::BARRIERS_PER_TILE, wait_at_entry = true,
            |io, p, COUNT| $crate::attention::mma::flash_mma::<
                $t, $policy, COUNT, $d, $bn, $w, { $bm / (16 * $w) }, $stages, $qr,
                $crate::attention::warp_mma::Warp<{ $sub / 8 }, { $d / 8 }, { $d / 16 }>,
            >(io, p));
    };
}

/// # Safety
/// Launched as `attention`'s calling convention says: `q`, `k`, `v` and `out` hold the tensors
/// `problem` describes (and `problem.lse`, when not null, `[B, H, S_q]` fp32), the grid covers
/// `problem`, the block has `32 * NUM_WARPS` threads and the `smem_bytes` of dynamic shared memory, and with
/// `COUNT` `barrier_log` holds `launch::record::WORDS` `u32` per block.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
pub unsafe fn flash_mma<
    T: Element,
    P: BarrierPolicy,
    const COUNT: bool,
    const D: usize,
    const BLOCK_N: usize,
    const NUM_WARPS: usize,
    const ROW_TILES: usize,
    const STAGES: usize,
    const Q_IN_REGS: bool,
    // The register arrays of one compute step (`warp_mma::Warp`), `W::KEYS` keys: the KV tile is
    // loaded whole and consumed a step at a time, so a big tile (fewer barriers and copy batches
    // per key) does not cost a big score tile in registers.
    W: WarpShape,
>(
    io: Buffers,
    problem: Problem,
) {
    const {
        assert!(W::D == D && W::KEYS.is_multiple_of(16) && BLOCK_N.is_multiple_of(W::KEYS));
        assert!(STAGES >= 1 && ROW_TILES >= 1);
    };
    let warp_rows = 16 * ROW_TILES as u32;
    let block_m = warp_rows * NUM_WARPS as u32;
    let threads = (NUM_WARPS * 32) as u32;
    let thread = arch::thread_idx_x();
    let warp = arch::warp_id();
    let Some(head) = problem.head() else {
        return; // past the last head (the grid's z slices round B*H up): before any barrier
    };
    let first_row = arch::block_idx_x() * block_m;
    let stride = tile::row_stride_bytes(D);

    let (q_rows, k_rows, v_rows) = io.rows::<D>(&problem, head);

    // Shared memory: [Q tile][STAGES x (K tile, V tile)]
    let q_smem = arch::dynamic_smem_base();
    let kv_smem = q_smem + block_m * stride;
    let tiles = problem.kv_tiles(first_row, block_m, BLOCK_N as u32);
    let kv = KvPipeline::<Padded, D, BLOCK_N, STAGES>::new(kv_smem, k_rows, v_rows, tiles, thread, threads);

    // Q is its own copy group, issued before the first K/V tiles so it lands first.
    tile::load_async::<D>(q_smem, q_rows, first_row, block_m, thread, threads);
    arch::cp_async_commit();
    kv.start();
    arch::cp_async_wait_stage::<STAGES>();
    arch::sync_threads(); // Q visible to every warp (once, outside the tile loop)

    let warp_row0 = warp * warp_rows;
    let q_fragment = |mt: usize, ks: usize| warp_mma::a_fragment(q_smem, warp_row0, stride, mt, ks);
    let q_frag = if Q_IN_REGS {
        W::q_fragments::<ROW_TILES>(q_smem, warp_row0, stride)
    } else {
        [W::Query::zero(); ROW_TILES]
    };

    let mut softmax = FragmentSoftmax::<ROW_TILES>::new(&problem, first_row + warp_row0);
    let mut o_acc = [W::Output::zero(); ROW_TILES];
    let loop_start = start_counting::<COUNT>(0);

    for t in 0..tiles {
        let stage = kv.advance(t);
        sync::<P, COUNT>(SyncPoint::KvLoaded);
        // A rolled loop when there are several steps: unrolled, their live ranges overlap.
        let steps = if BLOCK_N == W::KEYS {
            1
        } else {
            arch::opaque((BLOCK_N / W::KEYS) as u32)
        };
        for sub in 0..steps {
            let sub_row = sub * W::KEYS as u32; // first key of this step inside the tile

            // S = Q K^T. One ldmatrix.x4 gives the B fragments of two adjacent 8-key tiles, used by
            // every row tile.
            let mut s_acc = [W::Scores::zero(); ROW_TILES];
            for ks in 0..W::Query::LEN {
                let mut a = [[0u32; 4]; ROW_TILES];
                for (mt, frag) in a.iter_mut().enumerate() {
                    *frag = if Q_IN_REGS {
                        *q_frag[mt].tile(ks)
                    } else {
                        q_fragment(mt, ks)
                    };
                }
                warp_mma::scores_step::<T, W, Padded, ROW_TILES>(
                    &mut s_acc,
                    &a,
                    kv.k_tile(stage),
                    BLOCK_N as u32,
                    sub_row,
                    ks,
                );
            }
            softmax.step::<P, COUNT, _, _>(&mut s_acc, &mut o_acc, t * BLOCK_N as u32 + sub_row);

            // O += P V, P straight from the accumulators.
            let v_tile = kv.v_tile(stage);
            warp_mma::attend::<T, W, Padded, ROW_TILES>(&mut o_acc, &s_acc, v_tile, BLOCK_N as u32, sub_row);
        }
        sync::<P, COUNT>(SyncPoint::BeforeSmemReuse);
    }
    kv.finish();
    softmax.finish::<T, D, _>(&o_acc, &problem, io.out, head);
    if COUNT {
        record_barriers(io.barrier_log, tiles, loop_start, 0);
    }
}
