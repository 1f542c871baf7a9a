//! `flash_decode`: attention for decode-like problems (a few query rows per head, long key
//! sequences), where a grid of one block per (head, 128 query rows) leaves most SMs idle and each
//! query head re-reads the K/V its group shares. Two ideas (FlashDecoding's) make it bandwidth-bound:
//!
//! - **Grouped-query packing.** A block's rows are the `group x S_q` queries of all the query
//!   heads that share one KV head (packed row `r` is query head `r / S_q` of the group, position
//!   `r % S_q`), so K and V are read once per group, not once per query head.
//! - **Split-KV.** Each row block's key range is cut into `kv_splits` slices of whole KV tiles,
//!   one block each (grid x = row block + row blocks x split, grid y/z = the KV heads). With one
//!   slice the block writes the output (and log-sum-exp) itself; with more, each block writes
//!   its rows' normalised fp32 partial output and base-2 log-sum-exp into the workspace, counts
//!   itself done on its row block's counter, and the last slice to finish merges them all
//!   (`merge_if_last`), in the same launch.
//!
//! Inside a block the warps share the rows and split each KV tile's keys (`WARP_KEYS` each), each
//! warp with its own online softmax (`FragmentSoftmax`) on `mma.sync` fragments. K/V tiles stream
//! through a `pipeline::TileStream`, `STAGES` deep: every thread's `cp.async` copies under the
//! light (or legacy) policy's block barriers, two per KV tile (tile landed; tile no longer read),
//! as `flash_mma`; or, under the mbarrier policy (sm_90a), the copy engine's boxes (`TmaRing`),
//! with no block barrier in the loop. After the loop the warps' partial results are merged
//! through shared memory.

use core::marker::PhantomData;

use super::fragment::FragmentSoftmax;
use super::packing::{slice_tiles, PackedRows};
use super::paged::DecodeKv;
use super::pipeline::{KvPipeline, MapBoxes, Synced, TileBoxes, TileStream, TmaRing};
use super::shape::{Tiles, WarpShape};
use super::varlen::Varlen;
use super::warp_mma;
use super::{record_barriers, start_counting, Buffers, Problem, MAP_K, MAP_V};
use crate::arch::{self, SharedAddr};
use crate::policy::BarrierPolicy;
use crate::softmax::RowState;
use crate::tile::swizzled::ATOM_BYTES;
use crate::tile::{self, Element, Padded};

/// Bytes of one warp's partial output row in the merge buffer: `D` floats plus 16 bytes, so the
/// eight rows a fragment store touches at one column fall into different banks.
const fn merge_row_bytes(d: usize) -> u32 {
    (4 * d + 16) as u32
}

/// Shared memory for the cross-warp merge: every warp's (scaled max, sum) per row, then every
/// warp's partial output rows. It reuses the K/V slots once the loop is done.
const fn merge_bytes(d: usize, block_m: usize, warps: usize) -> u32 {
    (warps * block_m) as u32 * (8 + merge_row_bytes(d))
}

/// Whether policy `P` hands the KV tiles over by mbarriers: then the copy engine brings them
/// (`TmaRing`, sm_90a only), else every thread's `cp.async` under the policy's block barriers.
const fn by_copy_engine<P: BarrierPolicy>() -> bool {
    P::BARRIERS_PER_TILE == 0
}

/// Shared memory the kernel needs, in bytes. With `cp.async` (`tma` false): one padded Q tile,
/// then the larger of the `STAGES` K/V slots and the merge buffers. With the copy engine: slack
/// to align the ring to 1024 bytes, the ring (its slots hold the merge buffers afterwards, its
/// barriers follow them), then Q.
pub const fn smem_bytes(
    d: usize,
    block_m: usize,
    block_n: usize,
    stages: usize,
    warps: usize,
    tma: bool,
) -> u32 {
    let merge = merge_bytes(d, block_m, warps);
    let q = tile::tile_bytes(block_m, d);
    if tma {
        let slots = 2 * stages as u32 * tile::swizzled::tile_bytes(block_n, d);
        assert!(merge <= slots, "the merge buffers must fit in the ring's slots");
        return ATOM_BYTES + slots + 16 * stages as u32 + q;
    }
    let kv = 2 * stages as u32 * tile::tile_bytes(block_n, d);
    q + if kv > merge { kv } else { merge }
}

/// Where the Q tile and the K/V slots start (see `smem_bytes`).
#[inline(always)]
fn smem_plan<P: BarrierPolicy, const D: usize, const BLOCK_N: usize, const STAGES: usize>(
    block_m: u32,
) -> (SharedAddr, SharedAddr) {
    let base = arch::dynamic_smem_base();
    if by_copy_engine::<P>() {
        let kv = tile::swizzled::atom_aligned(base);
        (kv + TmaRing::<D, BLOCK_N, STAGES, MapBoxes>::smem_bytes(), kv)
    } else {
        (base, base + block_m * tile::row_stride_bytes(D))
    }
}

/// Exports one `flash_decode` variant of `kernels.toml`: the invocation `build.rs` writes for it
/// (symbol names, then `Spec::kernel_args`), expanded through `kernel!` in `lib.rs`.
macro_rules! flash_decode {
    ($name:ident $counted:ident $smem:ident $barriers:ident,
     $t:ty, $policy:ty, d = $d:literal, m = $bm:literal, n = $bn:literal, w = $w:literal,
     stages = $stages:literal) => {
        kernel!(@export $name, $counted, $smem,
            $crate::attention::decode::smem_bytes($d, $bm, $bn, $stages, $w,
                <$policy as $crate::policy::BarrierPolicy>::BARRIERS_PER_TILE == 0), $barriers,
            <$policy as $crate::policy::BarrierPolicy>::BARRIERS_PER_TILE, wait_at_entry = true,
            |io, p, COUNT| flash_decode!(@body io, p, COUNT, false, false, $t, $policy, $d, $bm, $bn, $w, $stages));
    };
    (@body $io:ident, $p:ident, $count:ident, $paged:literal, $varlen:literal, $t:ty, $policy:ty,
     $d:literal, $bm:literal, $bn:literal, $w:literal, $stages:literal) => {
        $crate::attention::decode::flash_decode::<
            $t, $policy, $count, $paged, $varlen, $d, $bn, $w, { $bm / 16 }, $stages, { $bn / $w },
            $crate::attention::shape::Warp<{ $bn / $w / 8 }, { $d / 8 }, { $d / 16 }>,
        >($io, $p)
    };
    // A twin's two entry points (plain, counted): the body with `$paged`/`$varlen` set.
    (@twins $name:ident $counted:ident, $paged:literal, $varlen:literal,
     $t:ty, $policy:ty, d = $d:literal, m = $bm:literal, n = $bn:literal, w = $w:literal,
     stages = $stages:literal) => {
        with_launch_params!(kernel!(@entry $name, false, wait_at_entry = true, |io, p, COUNT|
            flash_decode!(@body io, p, COUNT, $paged, $varlen, $t, $policy, $d, $bm, $bn, $w, $stages);));
        // The instrumentation twin, only in builds that ask for it (`build.rs`, FLASHRS_VARIANTS).
        #[cfg(flashrs_counted)]
        with_launch_params!(kernel!(@entry $counted, true, wait_at_entry = true, |io, p, COUNT|
            flash_decode!(@body io, p, COUNT, $paged, $varlen, $t, $policy, $d, $bm, $bn, $w, $stages);));
    };
}

/// The paged-cache twins of a `flash_decode` variant (`build.rs` writes them beside it): the same
/// body reading K and V through the block table (`attention::paged`); shared memory and barriers
/// are the variant's own.
macro_rules! flash_decode_paged {
    ($name:ident $counted:ident, $($args:tt)*) => {
        flash_decode!(@twins $name $counted, true, false, $($args)*);
    };
}

/// The variable-length twins of a `flash_decode` variant (`build.rs` writes them beside it): the
/// same body on packed sequences (`attention::varlen`); shared memory and barriers are the
/// variant's own.
macro_rules! flash_decode_varlen {
    ($name:ident $counted:ident, $($args:tt)*) => {
        flash_decode!(@twins $name $counted, false, true, $($args)*);
    };
}

/// # Safety
/// Launched as `attention`'s calling convention says for Q, K, V, the output and the LSE, but with
/// the grid `(row blocks x kv_splits, KV heads on y/z)`, row blocks = `ceil(group * S_q / 16 /
/// ROW_TILES)`; `problem.workspace` must hold the split partials when `kv_splits > 1`, and
/// `problem.split_counters` one counter per (KV head, row block) of the grid, each 0; the block
/// has `32 * NUM_WARPS` threads and `smem_bytes` of dynamic shared memory; with `COUNT`,
/// `barrier_log` holds `launch::record::WORDS` `u32` per block. With `PAGED`, K and V are the paged cache that
/// `problem.pages` describes (`attention::paged`): `seqlens` holds `B` lengths and the table
/// lists an existing page for every key below each length. With `VARLEN`, Q, K, V, the output
/// and the LSE are packed as `attention::varlen` says, `cu_q`/`cu_k` checked by the host, and the
/// grid's row blocks are those of the longest sequence (`grid_dim.x = row blocks x kv_splits`).
#[allow(clippy::too_many_arguments)]
#[inline(always)]
pub unsafe fn flash_decode<
    T: Element,
    P: BarrierPolicy,
    const COUNT: bool,
    // K and V in a paged cache (`attention::paged`): the paged entry points.
    const PAGED: bool,
    // Packed sequences of their own lengths (`attention::varlen`): the varlen entry points.
    const VARLEN: bool,
    const D: usize,
    const BLOCK_N: usize,
    const NUM_WARPS: usize,
    const ROW_TILES: usize,
    const STAGES: usize,
    // Keys of each KV tile that one warp takes: `BLOCK_N / NUM_WARPS`.
    const WARP_KEYS: usize,
    // The register arrays of one warp's keys of a tile (`shape::Warp`).
    W: WarpShape,
>(
    io: Buffers,
    problem: Problem,
) {
    const {
        assert!(WARP_KEYS * NUM_WARPS == BLOCK_N && WARP_KEYS.is_multiple_of(16));
        assert!(W::KEYS == WARP_KEYS && W::D == D);
        assert!(STAGES >= 1 && ROW_TILES >= 1 && !(PAGED && VARLEN));
        // The copy engine reads contiguous K and V through the maps of a dense launch, or a
        // paged cache through the maps of its pages; packed sequences have no maps here.
        assert!(!(by_copy_engine::<P>() && VARLEN));
    };
    let block_m = 16 * ROW_TILES as u32;
    let threads = (NUM_WARPS * 32) as u32;
    let thread = arch::thread_idx_x();

    // The KV head (= b * H_kv + h_kv) on y and z, as the other families put query heads there.
    let kv_head = arch::block_idx_y() + arch::block_idx_z() * arch::grid_dim_y();
    let group = problem.kv_group;
    if kv_head >= problem.batch_heads / group {
        return; // past the last KV head: before any barrier
    }
    let heads_kv = problem.heads / group;
    let splits = problem.kv_splits.max(1);
    // The grid's (KV head, row block) this block is a slice of: its counter's index.
    let grid_row_blocks = arch::grid_dim_x() / splits;
    let counter_slot = kv_head * grid_row_blocks + arch::block_idx_x() % grid_row_blocks;
    let Some((io, problem, kv_head, row_blocks)) =
        block_sequence::<PAGED, VARLEN, D>(io, problem, kv_head, block_m)
    else {
        return; // past the sequence's rows: before any barrier
    };
    let (q, k, v, out, barrier_log) = (io.q, io.k, io.v, io.out, io.barrier_log);
    let rows = PackedRows::new(kv_head, group, problem.seq_q);
    let (row_block, split) = (arch::block_idx_x() % row_blocks, arch::block_idx_x() / row_blocks);
    let first_row = row_block * block_m;

    // This split's whole KV tiles, trimmed to the keys the block's rows can see (causal).
    let block_key_end = problem.key_end(rows.last_position(first_row, block_m));
    let (first_tile, tiles) = slice_tiles(problem.seq_k, BLOCK_N as u32, splits, split, block_key_end);
    let first_key = first_tile * BLOCK_N as u32;

    let (q_smem, kv_smem) = smem_plan::<P, D, BLOCK_N, STAGES>(block_m);

    load_packed_q::<D>(q_smem, q, &problem, &rows, (first_row, block_m), thread, threads);

    // Every warp holds all the block's rows; a row past the packed ones sees every key (its
    // zero query gives finite scores, and it is never written).
    let key_end = |row: u32| {
        if first_row + row < rows.count {
            problem.key_end(rows.place(first_row + row).1)
        } else {
            problem.seq_k
        }
    };
    let walk = KeyWalk {
        first_key,
        tiles,
        softmax: FragmentSoftmax::<ROW_TILES>::with_key_ends(&problem, 0, key_end),
        q_smem,
    };
    let (softmax, o_acc) = if by_copy_engine::<P>() {
        // The copy engine's tiles, from the maps of K and V the host encoded for this call.
        let (k_map, v_map) = (io.tensor_map(MAP_K), io.tensor_map(MAP_V));
        let (batch, head) = (kv_head / heads_kv, kv_head % heads_kv);
        if PAGED {
            // A warp's keys lie inside one page (pages are powers of two from 16 keys on).
            const { assert!(W::KEYS == 16) };
            let boxes = problem.pages.boxes((k_map, v_map), batch, head, problem.seq_k);
            walk.through_ring::<T, P, COUNT, D, BLOCK_N, STAGES, W, _>(kv_smem, boxes, thread, barrier_log)
        } else {
            let (head, batch) = (head as i32, batch as i32);
            let boxes = MapBoxes {
                k_map,
                v_map,
                head,
                batch,
            };
            walk.through_ring::<T, P, COUNT, D, BLOCK_N, STAGES, W, _>(kv_smem, boxes, thread, barrier_log)
        }
    } else {
        // K and V from this split's first key on: the pipeline counts tiles from there.
        let skip = |mut kv_rows: tile::Rows| {
            if tiles > 0 {
                kv_rows.base = kv_rows.base.add(first_key as usize * kv_rows.stride as usize);
                kv_rows.count -= first_key;
            }
            kv_rows
        };
        let head0 = rows.first_head as usize;
        let source = if PAGED {
            let sequence = (kv_head / heads_kv, kv_head % heads_kv, heads_kv);
            DecodeKv::<PAGED>::paged(problem.pages.rows::<D>(k, v, sequence, first_key, problem.seq_k))
        } else {
            DecodeKv::<PAGED>::contiguous(
                skip(problem.kv_rows::<D>(k, head0)),
                skip(problem.kv_rows::<D>(v, head0)),
            )
        };
        let kv =
            KvPipeline::<Padded, D, BLOCK_N, STAGES, _>::from_source(kv_smem, source, tiles, thread, threads);
        kv.start();
        arch::cp_async_wait_stage::<STAGES>();
        arch::sync_threads(); // Q visible to every warp (once, outside the tile loop)
        let stream = Synced::<P, COUNT, _>(kv, PhantomData);
        let result = walk.run::<T, P, COUNT, BLOCK_N, W, _>(&stream, barrier_log);
        stream.0.finish();
        result
    };

    // The merge reuses the K/V slots: every warp must be done reading them (with no tiles, no
    // loop barrier ran), and no copy is in flight (`finish`).
    arch::sync_threads();
    let merge = Merge::<D>::new(kv_smem, block_m, NUM_WARPS as u32);
    merge.gather(softmax, &o_acc, problem.scale_log2);
    merge.store::<T>(out, &problem, &rows, first_row, (split, splits), thread, threads);
    if splits > 1 {
        let counter = problem.split_counters.add(counter_slot as usize);
        let warps = NUM_WARPS as u32;
        merge_if_last::<T, D>(
            out,
            &problem,
            &rows,
            (first_row, block_m),
            counter,
            kv_smem,
            thread,
            warps,
        );
    }
}

/// Copies the block's packed rows of Q (`first_row ..`, `block_m` of them) into the padded tile at
/// `q_smem`, each from its own head and position, zeros past the last; one commit group.
///
/// # Safety
/// `q` holds the problem's Q; the tile is this block's shared memory, read after the copies land.
#[inline(always)]
unsafe fn load_packed_q<const D: usize>(
    q_smem: SharedAddr,
    q: *const u16,
    problem: &Problem,
    rows: &PackedRows,
    (first_row, block_m): (u32, u32),
    thread: u32,
    threads: u32,
) {
    let stride = tile::row_stride_bytes(D);
    for chunk in (thread..block_m * D as u32 / 8).step_by(threads as usize) {
        let (row, column) = (chunk / (D as u32 / 8), chunk % (D as u32 / 8));
        let dst = q_smem + row * stride + column * 16;
        if first_row + row < rows.count {
            let (head, position) = rows.place(first_row + row);
            let q_rows = problem.q_rows::<D>(q, head);
            let src = q_rows
                .base
                .add(position as usize * q_rows.stride as usize + 8 * column as usize);
            arch::cp_async_16(dst, src as *const u8, 16);
        } else {
            arch::cp_async_16(dst, q as *const u8, 0);
        }
    }
    arch::cp_async_commit();
}

/// One block's walk over its KV tiles: its key slice (`tiles` tiles from `first_key`), each
/// warp's softmax state over the block's rows, and Q's tile in shared memory.
struct KeyWalk<const ROW_TILES: usize> {
    first_key: u32,
    tiles: u32,
    softmax: FragmentSoftmax<ROW_TILES>,
    q_smem: SharedAddr,
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
    unsafe fn through_ring<
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
    unsafe fn run<
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

/// The block's view of its sequence: with `PAGED`, the problem with the sequence's own key
/// count; with `VARLEN`, the sequence as a batch of one (`Varlen::sequence`), its KV head the
/// in-sequence one, and `None` when the block's row block is past the sequence's packed rows
/// (the grid has the longest sequence's). Also the row blocks per KV head of the grid.
///
/// # Safety
/// As `flash_decode`; `kv_head` is one of the launch's KV heads.
#[inline(always)]
unsafe fn block_sequence<const PAGED: bool, const VARLEN: bool, const D: usize>(
    io: Buffers,
    problem: Problem,
    kv_head: u32,
    block_m: u32,
) -> Option<(Buffers, Problem, u32, u32)> {
    let (group, splits) = (problem.kv_group, problem.kv_splits.max(1));
    let heads_kv = problem.heads / group;
    if PAGED {
        let problem = problem.pages.sequence(&problem, kv_head / heads_kv);
        return Some((io, problem, kv_head, (group * problem.seq_q).div_ceil(block_m)));
    }
    if !VARLEN {
        return Some((io, problem, kv_head, (group * problem.seq_q).div_ceil(block_m)));
    }
    let row_blocks = arch::grid_dim_x() / splits;
    let first_row = (arch::block_idx_x() % row_blocks) * block_m;
    let batch = (kv_head / heads_kv) as usize;
    let (io, sequence) = Varlen::sequence::<D>(io, &problem, batch, first_row, group)?;
    Some((io, sequence, kv_head % heads_kv, row_blocks))
}

/// A row state's running maximum in the exponent's units (`max * scale_log2`), `-inf` for a row
/// that has seen no key (unlike `RowState::offset`, which is 0 there so that no NaN appears).
#[inline(always)]
fn scaled_max(state: &RowState, scale_log2: f32) -> f32 {
    if state.row_max == f32::NEG_INFINITY {
        f32::NEG_INFINITY
    } else {
        state.row_max * scale_log2
    }
}

/// `2^(max - total_max)`: how much a partial result with maximum `max` weighs against the merged
/// maximum; 0 for a part that saw no key.
#[inline(always)]
fn weight(max: f32, total_max: f32) -> f32 {
    if max == f32::NEG_INFINITY {
        0.0
    } else {
        arch::exp2(max - total_max)
    }
}

/// The cross-warp merge buffers in shared memory: per warp and row a (scaled max, sum) pair, then
/// per warp and row `D` partial output floats (rows `merge_row_bytes` apart).
struct Merge<const D: usize> {
    stats: SharedAddr,
    partials: SharedAddr,
    block_m: u32,
    warps: u32,
}

impl<const D: usize> Merge<D> {
    /// The buffers from `base` on (the K/V slots, free once the loop is done), for `warps` warps
    /// of `block_m` rows each.
    #[inline(always)]
    fn new(base: SharedAddr, block_m: u32, warps: u32) -> Self {
        Merge {
            stats: base,
            partials: base + warps * block_m * 8,
            block_m,
            warps,
        }
    }

    /// Puts this warp's rows into the buffers: each row's (scaled max, sum), then, once every
    /// warp's are visible, its accumulators rescaled to the block's row maximum; ends with the
    /// partial rows visible to the block.
    ///
    /// # Safety
    /// Called by every thread of the block (it holds two block barriers), after a barrier that
    /// follows the last read of the memory the buffers reuse and with no copy into it in flight.
    #[inline(always)]
    unsafe fn gather<O: Tiles<f32>, const ROW_TILES: usize>(
        &self,
        softmax: FragmentSoftmax<ROW_TILES>,
        o_acc: &[O; ROW_TILES],
        scale_log2: f32,
    ) {
        let (lane, warp) = (arch::lane_id(), arch::warp_id());
        let mut warp_max = [[f32::NEG_INFINITY; 2]; ROW_TILES];
        softmax.finish_with(|mt, half, row, state| {
            warp_max[mt][half] = scaled_max(state, scale_log2);
            if lane % 4 == 0 {
                // Safety: row < block_m, warp < warps: inside the stats buffer.
                unsafe { self.put_stats(warp, row, warp_max[mt][half], state.row_sum) };
            }
        });
        arch::sync_threads(); // every warp's row statistics visible

        let (group_lane, pair) = (lane / 4, lane % 4);
        for mt in 0..ROW_TILES {
            for half in 0..2 {
                let row = (16 * mt + 8 * half) as u32 + group_lane;
                let (row_max, _) = self.row_totals(row);
                let weight = weight(warp_max[mt][half], row_max);
                for j in 0..O::LEN {
                    let col = (8 * j) as u32 + 2 * pair;
                    let x = o_acc[mt].tile(j);
                    self.put_partial(warp, row, col, x[2 * half] * weight, x[2 * half + 1] * weight);
                }
            }
        }
        arch::sync_threads(); // every warp's partial rows visible
    }

    /// Sums the gathered rows over the warps, normalises and writes them, four columns per step
    /// spread over the block's `threads` threads: into the output (and the log-sum-exp) with one
    /// key slice, else into slice `split`'s partials of the workspace. Rows past the packed ones
    /// are skipped.
    ///
    /// # Safety
    /// After `gather`; `out` holds the problem's output, `problem.lse` (when not null) its
    /// log-sum-exp and, with `splits > 1`, `problem.workspace` the split partials.
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    unsafe fn store<T: Element>(
        &self,
        out: *mut u16,
        problem: &Problem,
        rows: &PackedRows,
        first_row: u32,
        (split, splits): (u32, u32),
        thread: u32,
        threads: u32,
    ) {
        let quads = D as u32 / 4;
        for item in (thread..self.block_m * quads).step_by(threads as usize) {
            let (row, quad) = (item / quads, item % quads);
            if first_row + row >= rows.count {
                continue;
            }
            let (head, position) = rows.place(first_row + row);
            let (row_max, row_sum) = self.row_totals(row);
            let sum = self.summed(row, 4 * quad);
            let norm = if row_sum > 0.0 { arch::recip(row_sum) } else { 0.0 };
            // Base 2; -inf for a row that saw no key in this slice.
            let lse2 = if row_sum > 0.0 {
                row_max + arch::log2(row_sum)
            } else {
                f32::NEG_INFINITY
            };
            // Safety: the caller's contract; `head` and `position` are a packed row's, inside
            // the problem.
            unsafe {
                if splits == 1 {
                    let o = problem.out_row::<D>(out, head, position) as *mut u32;
                    arch::st_global_u32(o.add(2 * quad as usize), T::pack(sum[0] * norm, sum[1] * norm));
                    arch::st_global_u32(
                        o.add(2 * quad as usize + 1),
                        T::pack(sum[2] * norm, sum[3] * norm),
                    );
                    if quad == 0 && !problem.lse.is_null() {
                        *problem.lse.add(problem.lse_index(head, position)) = lse2 * core::f32::consts::LN_2;
                    }
                } else {
                    let partial = Partials::new(problem, split);
                    let o = partial.output_row::<D>(head, position).add(4 * quad as usize);
                    for i in 0..4 {
                        *o.add(i) = sum[i] * norm;
                    }
                    if quad == 0 {
                        *partial.lse2::<D>(head, position) = lse2;
                    }
                }
            }
        }
    }

    /// # Safety
    /// `warp < warps`, `row < block_m`; the buffers lie in this block's shared memory, and a
    /// barrier separates this write from the reads.
    #[inline(always)]
    unsafe fn put_stats(&self, warp: u32, row: u32, max: f32, sum: f32) {
        let at = self.stats + (warp * self.block_m + row) * 8;
        arch::st_shared_f32(at, max);
        arch::st_shared_f32(at + 4, sum);
    }

    /// Row `row`'s maximum over the warps and its sum of probabilities relative to it.
    #[inline(always)]
    fn row_totals(&self, row: u32) -> (f32, f32) {
        let stat = |warp: u32| {
            let at = self.stats + (warp * self.block_m + row) * 8;
            // Safety: inside the stats buffer, written before the barrier that precedes this read.
            unsafe { (arch::ld_shared_f32(at), arch::ld_shared_f32(at + 4)) }
        };
        let mut max = f32::NEG_INFINITY;
        for warp in 0..self.warps {
            max = arch::max(max, stat(warp).0);
        }
        let mut sum = 0.0;
        for warp in 0..self.warps {
            let (warp_max, warp_sum) = stat(warp);
            sum += warp_sum * weight(warp_max, max);
        }
        (max, sum)
    }

    /// Writes columns `col, col + 1` of warp `warp`'s partial row `row`.
    #[inline(always)]
    fn put_partial(&self, warp: u32, row: u32, col: u32, lo: f32, hi: f32) {
        let at = self.partials + (warp * self.block_m + row) * merge_row_bytes(D) + col * 4;
        // Safety: inside the partial buffer (row < block_m, col + 1 < D); read after a barrier.
        unsafe {
            arch::st_shared_f32(at, lo);
            arch::st_shared_f32(at + 4, hi);
        }
    }

    /// Columns `col .. col + 4` of row `row`, summed over the warps.
    #[inline(always)]
    fn summed(&self, row: u32, col: u32) -> [f32; 4] {
        let mut sum = [0.0f32; 4];
        for warp in 0..self.warps {
            let at = self.partials + (warp * self.block_m + row) * merge_row_bytes(D) + col * 4;
            // Safety: 16 aligned bytes inside the partial buffer, written before the barrier.
            let words = unsafe { arch::ld_shared_v4_u32(at) };
            // Indexed, not zipped: an array's by-value iterator lands in local memory here.
            for i in 0..4 {
                sum[i] += f32::from_bits(words[i]);
            }
        }
        sum
    }
}

/// Slices whose partial rows one warp's merge loads at once (`Partials::merge_row`).
const MERGE_BATCH: usize = 8;

/// The workspace of a split launch: `[kv_splits, B*H, S_q, D]` fp32 partial outputs, then
/// `[kv_splits, B*H, S_q]` base-2 log-sum-exps, one slice per split (varlen: `[kv_splits, H,
/// total_q, ..]`, the packed sequences as a batch of one of `total_q` rows).
#[derive(Clone, Copy)]
struct Partials {
    base: *mut f32,
    /// `B * H * S_q`: rows per split.
    rows: usize,
    /// Rows per head (`S_q`, varlen `total_q`) and the sequence's first (0 unless varlen).
    seq_q: usize,
    q_start: usize,
    split: usize,
    splits: usize,
}

impl Partials {
    #[inline(always)]
    fn new(problem: &Problem, split: u32) -> Partials {
        Partials {
            base: problem.workspace,
            rows: problem.batch_heads as usize * problem.varlen.lse_rows as usize,
            seq_q: problem.varlen.lse_rows as usize,
            q_start: problem.varlen.q_start as usize,
            split: split as usize,
            splits: problem.kv_splits as usize,
        }
    }

    /// # Safety
    /// The workspace holds `splits` slices; `head < B*H`, `position < S_q`, `split < splits`.
    #[inline(always)]
    unsafe fn output_row<const D: usize>(&self, head: usize, position: u32) -> *mut f32 {
        let row = self.split * self.rows + head * self.seq_q + self.q_start + position as usize;
        self.base.add(row * D)
    }

    /// # Safety
    /// As `output_row`.
    #[inline(always)]
    unsafe fn lse2<const D: usize>(&self, head: usize, position: u32) -> *mut f32 {
        let lse = self.base.add(self.splits * self.rows * D);
        lse.add(self.split * self.rows + head * self.seq_q + self.q_start + position as usize)
    }

    /// Slice `split`'s view of the same workspace.
    #[inline(always)]
    fn slice(&self, split: usize) -> Partials {
        Partials { split, ..*self }
    }

    /// Merges query row (`head`, `position`) over every slice into the output (and the
    /// log-sum-exp, when asked), one warp, `D / 32` columns per lane: weights `2^(lse_i - max)`,
    /// the normalised sum, the log-sum-exp `(max + log2(sum)) ln 2`. Slices that saw no key weigh
    /// nothing; a row that saw none gives 0 and `-inf`.
    ///
    /// The slices come in batches of `MERGE_BATCH` whose loads are all issued before any is used:
    /// one trip to L2 per batch, where a slice at a time (its weight, then its row) took two per
    /// slice, and this merge is the launch's tail (32 slices at grouped decode).
    ///
    /// # Safety
    /// Every slice's row is written and visible to this warp; `out` and `problem.lse` are the
    /// problem's, `head` and `position` inside it.
    #[inline(always)]
    unsafe fn merge_row<T: Element, const D: usize>(
        &self,
        out: *mut u16,
        problem: &Problem,
        (head, position): (usize, u32),
        lane: u32,
    ) {
        const { assert!(D == 64 || D == 128) };
        let cols = D / 32;
        let mut max = f32::NEG_INFINITY;
        for split in (lane as usize..self.splits).step_by(32) {
            max = arch::max(max, *self.slice(split).lse2::<D>(head, position));
        }
        let max = arch::warp_max(max);
        let mut total = 0.0f32;
        let mut acc = [0.0f32; 4];
        let last = self.splits - 1;
        for first in (0..self.splits).step_by(MERGE_BATCH) {
            // Past the last slice the batch reads the last one again and weighs it 0: every
            // load stays inside the workspace and none waits on a branch.
            let slice = |i: usize| self.slice((first + i).min(last));
            let lse: [f32; MERGE_BATCH] = core::array::from_fn(|i| *slice(i).lse2::<D>(head, position));
            let rows: [[f32; 4]; MERGE_BATCH] = core::array::from_fn(|i| {
                // Every slice wrote its row (0 where it saw no key), so the unweighted read of a
                // slice with weight 0 is finite and adds nothing.
                let part = slice(i).output_row::<D>(head, position).add(lane as usize * cols) as *const u32;
                let words = if D == 128 {
                    arch::ld_global_v4_u32(part)
                } else {
                    let [a, b] = arch::ld_global_v2_u32(part);
                    [a, b, 0, 0]
                };
                words.map(f32::from_bits)
            });
            for i in 0..MERGE_BATCH {
                let w = if first + i < self.splits {
                    weight(lse[i], max)
                } else {
                    0.0
                };
                total += w;
                for c in 0..cols {
                    acc[c] = arch::fma(w, rows[i][c], acc[c]);
                }
            }
        }
        let norm = if total > 0.0 { arch::recip(total) } else { 0.0 };
        let o = problem.out_row::<D>(out, head, position) as *mut u32;
        for c in 0..cols / 2 {
            let packed = T::pack(acc[2 * c] * norm, acc[2 * c + 1] * norm);
            arch::st_global_u32(o.add(lane as usize * cols / 2 + c), packed);
        }
        if lane == 0 && !problem.lse.is_null() {
            *problem.lse.add(problem.lse_index(head, position)) = if total > 0.0 {
                (max + arch::log2(total)) * core::f32::consts::LN_2
            } else {
                f32::NEG_INFINITY
            };
        }
    }
}

/// With the keys split over several blocks: once this block's partial rows are out, counts its
/// slice done on `counter`; the block whose count completes the row block's slices merges them
/// into the output (`Partials::merge_row`, one warp per row) and sets the counter back to 0 for
/// the next launch. The last slice to finish does the merge, so no second kernel (and no launch
/// gap) follows the split one.
///
/// # Safety
/// Called by every thread of the block after `Merge::store` with `splits > 1`; `counter` is the
/// grid's (KV head, row block) counter, 0 before the launch's first slice of it counted, and
/// `flag` a word of this block's shared memory nobody reads now.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
unsafe fn merge_if_last<T: Element, const D: usize>(
    out: *mut u16,
    problem: &Problem,
    rows: &PackedRows,
    (first_row, block_m): (u32, u32),
    counter: *mut u32,
    flag: SharedAddr,
    thread: u32,
    warps: u32,
) {
    // Every thread's partial rows before thread 0's fence (the barrier), which releases them all
    // before the count (a release is cumulative): one `MEMBAR.GPU` per block, not one per thread
    // (as flash_ws's tail split: docs/kernels/flash_ws.md, the split-KV merge).
    arch::sync_threads();
    if thread == 0 {
        arch::fence_acq_rel_gpu();
        let last = arch::atomic_add_u32(counter, 1) + 1 == problem.kv_splits;
        if last {
            // The other slices' rows, written before their counts that ours followed: acquired
            // here, and by every thread through the barrier below.
            arch::fence_acq_rel_gpu();
            arch::st_global_u32(counter, 0); // every slice has counted: nobody adds any more
        }
        arch::st_shared_u32(flag, last as u32);
    }
    arch::sync_threads();
    if arch::ld_shared_u32(flag) == 0 {
        return;
    }
    let partials = Partials::new(problem, 0);
    let lane = arch::lane_id();
    for row in (arch::warp_id()..block_m).step_by(warps as usize) {
        if first_row + row < rows.count {
            partials.merge_row::<T, D>(out, problem, rows.place(first_row + row), lane);
        }
    }
}
