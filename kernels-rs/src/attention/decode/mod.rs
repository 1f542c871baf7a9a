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
use super::pipeline::{KvPipeline, MapBoxes, Synced, TmaRing};
use super::shape::WarpShape;
use super::varlen::Varlen;
use super::{Buffers, Problem, MAP_K, MAP_V};
use crate::arch::{self, SharedAddr};
use crate::policy::BarrierPolicy;
use crate::tile::swizzled::ATOM_BYTES;
use crate::tile::{self, Element, Padded};
use merge::{merge_bytes, merge_if_last, Merge};
use walk::KeyWalk;

mod merge;
mod walk;

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
            $crate::attention::warp_mma::Warp<{ $bn / $w / 8 }, { $d / 8 }, { $d / 16 }>,
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

/// The keys the block's packed rows `first_row .. first_row + block_m` can see (causal, a sliding
/// window): from its first position's `key_start` to its last position's `key_end`.
#[inline(always)]
fn block_keys(problem: &Problem, rows: &PackedRows, first_row: u32, block_m: u32) -> (u32, u32) {
    (
        problem.key_start(rows.first_position(first_row, block_m)),
        problem.key_end(rows.last_position(first_row, block_m)),
    )
}

/// Packed row `row`'s keys; a row past the packed ones sees every key (its zero query gives finite
/// scores, and it is never written).
#[inline(always)]
fn row_keys(problem: &Problem, rows: &PackedRows, row: u32) -> (u32, u32) {
    if row < rows.count {
        let position = rows.place(row).1;
        (problem.key_start(position), problem.key_end(position))
    } else {
        (0, problem.seq_k)
    }
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
    // The register arrays of one warp's keys of a tile (`warp_mma::Warp`).
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

    // This split's whole KV tiles, trimmed to the keys the block's rows can see.
    let block_keys = block_keys(&problem, &rows, first_row, block_m);
    let (first_tile, tiles) = slice_tiles(problem.seq_k, BLOCK_N as u32, (splits, split), block_keys);
    let first_key = first_tile * BLOCK_N as u32;

    let (q_smem, kv_smem) = smem_plan::<P, D, BLOCK_N, STAGES>(block_m);

    load_packed_q::<D>(q_smem, q, &problem, &rows, (first_row, block_m), thread, threads);

    // Every warp holds all the block's rows.
    let key_range = |row: u32| row_keys(&problem, &rows, first_row + row);
    let walk = KeyWalk {
        first_key,
        tiles,
        softmax: FragmentSoftmax::<ROW_TILES>::with_key_ranges(&problem, 0, key_range),
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
