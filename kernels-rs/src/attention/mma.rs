//! `flash_mma`: FlashAttention-2's algorithm on tensor cores (`mma.sync.m16n8k16`, fp32 accumulate).
//!
//! Each warp owns 16 query rows (`BLOCK_M = 16 * NUM_WARPS`), keeps its Q fragments in registers
//! for the whole KV loop, and walks the keys in tiles of `BLOCK_N` streamed `STAGES` deep through
//! shared memory with `cp.async`. Per tile:
//! - S = Q K^T: `ldmatrix` K (row-major K is exactly the column-major B operand), `mma` into
//!   `N_TILES = BLOCK_N / 8` accumulators of 16x8;
//! - softmax on the accumulators: lane `4g + c` holds rows `g` and `g + 8`, columns `2c, 2c + 1`
//!   of each 16x8 tile, so a row's max is a reduction over the 4 lanes of a quad;
//! - O += P V: the fp32 probabilities are packed into A fragments in registers (the accumulator
//!   layout of two adjacent 16x8 tiles *is* the A layout of one 16x16 k-step), V comes through
//!   `ldmatrix.trans`.

use super::{record_barriers, Problem};
use crate::arch;
use crate::policy::{sync, BarrierPolicy, SyncPoint};
use crate::softmax::{self, RowState};
use crate::tile::{self, Element};

/// Shared memory the kernel needs, in bytes: one Q tile and `STAGES` K and V tiles.
pub const fn smem_bytes(d: usize, num_warps: usize, block_n: usize, stages: usize) -> u32 {
    tile::tile_bytes(16 * num_warps, d) + 2 * stages as u32 * tile::tile_bytes(block_n, d)
}

#[allow(clippy::too_many_arguments)]
#[inline(always)]
pub unsafe fn flash_mma<
    T: Element,
    P: BarrierPolicy,
    const COUNT: bool,
    const D: usize,
    const BLOCK_N: usize,
    const NUM_WARPS: usize,
    const STAGES: usize,
    // Derived sizes, spelled out because stable Rust cannot compute array lengths from generics.
    const N_TILES: usize,
    const D_TILES: usize,
    const K_STEPS: usize,
>(
    q: *const u16,
    k: *const u16,
    v: *const u16,
    out: *mut u16,
    problem: Problem,
    barrier_log: *mut u32,
) {
    const {
        assert!(N_TILES * 8 == BLOCK_N && BLOCK_N % 16 == 0);
        assert!(D_TILES * 8 == D && K_STEPS * 16 == D);
        assert!(STAGES >= 1);
    };
    let block_m = 16 * NUM_WARPS as u32;
    let threads = (NUM_WARPS * 32) as u32;
    let thread = arch::thread_idx_x();
    let lane = arch::lane_id();
    let warp = arch::warp_id();
    let head = arch::block_idx_y() as usize;
    let first_row = arch::block_idx_x() * block_m;
    let stride = tile::row_stride_bytes(D);

    let q_head = q.add(head * problem.seq_q as usize * D);
    let k_head = k.add(head * problem.seq_k as usize * D);
    let v_head = v.add(head * problem.seq_k as usize * D);

    // Shared memory: [Q tile][STAGES x (K tile, V tile)]
    let q_smem = arch::dynamic_smem_base();
    let kv_smem = q_smem + tile::tile_bytes(16 * NUM_WARPS, D);
    let kv_stage_bytes = 2 * tile::tile_bytes(BLOCK_N, D);
    let k_tile = |stage: u32| kv_smem + stage * kv_stage_bytes;
    let v_tile = |stage: u32| kv_smem + stage * kv_stage_bytes + tile::tile_bytes(BLOCK_N, D);

    let tiles = problem.kv_tiles(first_row, block_m, BLOCK_N as u32);
    let load_tile = |t: u32| {
        if t < tiles {
            let stage = t % STAGES as u32;
            let first_key = t * BLOCK_N as u32;
            tile::load_async::<D>(k_tile(stage), k_head, BLOCK_N as u32, first_key, problem.seq_k, thread, threads);
            tile::load_async::<D>(v_tile(stage), v_head, BLOCK_N as u32, first_key, problem.seq_k, thread, threads);
        }
        // Committing even an empty group keeps "the oldest pending group is the next tile" true.
        arch::cp_async_commit();
    };

    // Q is its own copy group, issued before the first K/V tiles so it lands first.
    tile::load_async::<D>(q_smem, q_head, block_m, first_row, problem.seq_q, thread, threads);
    arch::cp_async_commit();
    for t in 0..STAGES as u32 - 1 {
        load_tile(t);
    }
    arch::cp_async_wait_stage::<STAGES>();
    arch::sync_threads(); // Q visible to every warp (once, outside the tile loop)

    // Q fragments for the whole loop: matrices (rows 0-7 | 8-15) x (cols 0-7 | 8-15) of each k-step.
    let warp_row0 = warp * 16;
    let mut q_frag = [[0u32; 4]; K_STEPS];
    for (ks, frag) in q_frag.iter_mut().enumerate() {
        let row = warp_row0 + lane % 16;
        let col = (16 * ks) as u32 + (lane / 16) * 8;
        *frag = arch::ldmatrix_x4(q_smem + row * stride + col * 2);
    }

    let group = lane / 4; // accumulator rows `group` and `group + 8`
    let pair = lane % 4; // accumulator columns `2 * pair`, `2 * pair + 1`
    let my_rows = [first_row + warp_row0 + group, first_row + warp_row0 + group + 8];
    let key_end = [problem.key_end(my_rows[0]), problem.key_end(my_rows[1])];
    // key_end grows with the row, so the warp's first row bounds where masking can start.
    let warp_key_end = problem.key_end(first_row + warp_row0);

    let mut state = [RowState::EMPTY; 2];
    let mut o_acc = [[0.0f32; 4]; D_TILES];
    let mut barriers = 0u32;

    for t in 0..tiles {
        load_tile(t + STAGES as u32 - 1);
        arch::cp_async_wait_stage::<STAGES>();
        sync::<P, COUNT>(SyncPoint::KvLoaded, &mut barriers);
        let stage = t % STAGES as u32;
        let first_key = t * BLOCK_N as u32;

        // S = Q K^T. One ldmatrix.x4 gives the B fragments of two adjacent 8-key tiles.
        let mut s_acc = [[0.0f32; 4]; N_TILES];
        for (ks, a) in q_frag.iter().enumerate() {
            for jp in 0..N_TILES / 2 {
                let key_row = (16 * jp) as u32 + (lane / 16) * 8 + lane % 8;
                let col = (16 * ks) as u32 + ((lane / 8) % 2) * 8;
                let b = arch::ldmatrix_x4(k_tile(stage) + key_row * stride + col * 2);
                T::mma(&mut s_acc[2 * jp], *a, [b[0], b[1]]);
                T::mma(&mut s_acc[2 * jp + 1], *a, [b[2], b[3]]);
            }
        }
        sync::<P, COUNT>(SyncPoint::ScoresComputed, &mut barriers);

        // Mask only tiles that reach past the sequence end or the causal diagonal (warp-uniform).
        if first_key + BLOCK_N as u32 > warp_key_end {
            for (j, acc) in s_acc.iter_mut().enumerate() {
                for (e, s) in acc.iter_mut().enumerate() {
                    let key = first_key + (8 * j) as u32 + 2 * pair + (e % 2) as u32;
                    if key >= key_end[e / 2] {
                        *s = f32::NEG_INFINITY;
                    }
                }
            }
        }

        // Online softmax over the two rows this lane holds.
        let mut tile_max = [f32::NEG_INFINITY; 2];
        for acc in s_acc.iter() {
            for (e, s) in acc.iter().enumerate() {
                tile_max[e / 2] = arch::max(tile_max[e / 2], *s);
            }
        }
        for m in tile_max.iter_mut() {
            *m = arch::quad_max(*m);
        }
        sync::<P, COUNT>(SyncPoint::RowMaxExchanged, &mut barriers);
        let mut offset = [0.0f32; 2];
        for h in 0..2 {
            let correction = state[h].rescale(tile_max[h], problem.scale_log2);
            offset[h] = state[h].offset(problem.scale_log2);
            for acc in o_acc.iter_mut() {
                acc[2 * h] *= correction;
                acc[2 * h + 1] *= correction;
            }
        }
        for acc in s_acc.iter_mut() {
            for (e, s) in acc.iter_mut().enumerate() {
                *s = softmax::probability(*s, problem.scale_log2, offset[e / 2]);
                // Each lane keeps a partial row sum; the quad adds them once, after the loop.
                state[e / 2].row_sum += *s;
            }
        }
        sync::<P, COUNT>(SyncPoint::RowSumExchanged, &mut barriers);
        sync::<P, COUNT>(SyncPoint::ProbsStaged, &mut barriers);

        // O += P V, P straight from the accumulators: tiles 2kk and 2kk+1 form k-step kk's A.
        for kk in 0..N_TILES / 2 {
            let lo = &s_acc[2 * kk];
            let hi = &s_acc[2 * kk + 1];
            let a = [T::pack(lo[0], lo[1]), T::pack(lo[2], lo[3]), T::pack(hi[0], hi[1]), T::pack(hi[2], hi[3])];
            for dp in 0..D_TILES / 2 {
                let key_row = (16 * kk) as u32 + lane % 8 + ((lane / 8) % 2) * 8;
                let col = (16 * dp) as u32 + (lane / 16) * 8;
                let b = arch::ldmatrix_x4_trans(v_tile(stage) + key_row * stride + col * 2);
                T::mma(&mut o_acc[2 * dp], a, [b[0], b[1]]);
                T::mma(&mut o_acc[2 * dp + 1], a, [b[2], b[3]]);
            }
        }
        sync::<P, COUNT>(SyncPoint::BeforeSmemReuse, &mut barriers);
    }
    arch::cp_async_wait::<0>();

    for h in 0..2 {
        state[h].row_sum = arch::quad_sum(state[h].row_sum);
        let row = my_rows[h];
        if row < problem.seq_q {
            let norm = state[h].normaliser();
            let o = out.add((head * problem.seq_q as usize + row as usize) * D) as *mut u32;
            for (j, acc) in o_acc.iter().enumerate() {
                let packed = T::pack(acc[2 * h] * norm, acc[2 * h + 1] * norm);
                arch::st_global_u32(o.add(4 * j + pair as usize), packed);
            }
        }
    }
    if COUNT {
        record_barriers(barrier_log, barriers, tiles);
    }
}
