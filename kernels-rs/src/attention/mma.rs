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

use super::{record_barriers, start_counting, Problem};
use crate::arch;
use crate::policy::{sync, BarrierPolicy, SyncPoint};
use crate::softmax::{self, RowState};
use crate::tile::{self, Element};

/// Shared memory the kernel needs, in bytes: one Q tile and `STAGES` K and V tiles.
pub const fn smem_bytes(d: usize, block_m: usize, block_n: usize, stages: usize) -> u32 {
    tile::tile_bytes(block_m, d) + 2 * stages as u32 * tile::tile_bytes(block_n, d)
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
    const ROW_TILES: usize,
    const STAGES: usize,
    const Q_IN_REGS: bool,
    // Keys per compute step: the KV tile is loaded whole and consumed SUB_N keys at a time, so a
    // big tile (fewer barriers and copy batches per key) does not cost a big score tile in
    // registers.
    const SUB_N: usize,
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
        assert!(N_TILES * 8 == SUB_N && SUB_N % 16 == 0 && BLOCK_N % SUB_N == 0);
        assert!(D_TILES * 8 == D && K_STEPS * 16 == D);
        assert!(STAGES >= 1 && ROW_TILES >= 1);
    };
    let warp_rows = 16 * ROW_TILES as u32;
    let block_m = warp_rows * NUM_WARPS as u32;
    let threads = (NUM_WARPS * 32) as u32;
    let thread = arch::thread_idx_x();
    let lane = arch::lane_id();
    let warp = arch::warp_id();
    let Some(head) = problem.head() else {
        return; // past the last head (the grid's z slices round B*H up): before any barrier
    };
    let first_row = arch::block_idx_x() * block_m;
    let stride = tile::row_stride_bytes(D);

    let q_rows = problem.q_rows::<D>(q, head);
    let (k_rows, v_rows) = (problem.kv_rows::<D>(k, head), problem.kv_rows::<D>(v, head));

    // Shared memory: [Q tile][STAGES x (K tile, V tile)]
    let q_smem = arch::dynamic_smem_base();
    let kv_smem = q_smem + block_m * stride;
    let kv_stage_bytes = 2 * tile::tile_bytes(BLOCK_N, D);
    let k_tile = |stage: u32| kv_smem + stage * kv_stage_bytes;
    let v_tile = |stage: u32| kv_smem + stage * kv_stage_bytes + tile::tile_bytes(BLOCK_N, D);

    let tiles = problem.kv_tiles(first_row, block_m, BLOCK_N as u32);
    let load_tile = |t: u32| {
        if t < tiles {
            let stage = t % STAGES as u32;
            let first_key = t * BLOCK_N as u32;
            tile::load_async::<D>(k_tile(stage), k_rows, first_key, BLOCK_N as u32, thread, threads);
            tile::load_async::<D>(v_tile(stage), v_rows, first_key, BLOCK_N as u32, thread, threads);
        }
        // Committing even an empty group keeps "the oldest pending group is the next tile" true.
        arch::cp_async_commit();
    };

    // Q is its own copy group, issued before the first K/V tiles so it lands first.
    tile::load_async::<D>(q_smem, q_rows, first_row, block_m, thread, threads);
    arch::cp_async_commit();
    for t in 0..STAGES as u32 - 1 {
        load_tile(t);
    }
    arch::cp_async_wait_stage::<STAGES>();
    arch::sync_threads(); // Q visible to every warp (once, outside the tile loop)

    // The A fragment of row tile `mt`, k-step `ks`: matrices (rows 0-7 | 8-15) x (cols 0-7 | 8-15).
    let warp_row0 = warp * warp_rows;
    let q_fragment = |mt: usize, ks: usize| {
        let row = warp_row0 + (16 * mt) as u32 + lane % 16;
        let col = (16 * ks) as u32 + (lane / 16) * 8;
        arch::ldmatrix_x4(q_smem + row * stride + col * 2)
    };
    let mut q_frag = [[[0u32; 4]; K_STEPS]; ROW_TILES];
    if Q_IN_REGS {
        for (mt, frags) in q_frag.iter_mut().enumerate() {
            for (ks, frag) in frags.iter_mut().enumerate() {
                *frag = q_fragment(mt, ks);
            }
        }
    }

    let group = lane / 4; // accumulator rows `group` and `group + 8` of each row tile
    let pair = lane % 4; // accumulator columns `2 * pair`, `2 * pair + 1` of each 8-key tile
    let row_of = |mt: usize, half: usize| first_row + warp_row0 + (16 * mt + 8 * half) as u32 + group;
    let mut key_end = [[0u32; 2]; ROW_TILES];
    for (mt, ends) in key_end.iter_mut().enumerate() {
        for (half, end) in ends.iter_mut().enumerate() {
            *end = problem.key_end(row_of(mt, half));
        }
    }
    // key_end grows with the row, so the warp's first row bounds where masking can start.
    let warp_key_end = problem.key_end(first_row + warp_row0);

    let mut state = [[RowState::EMPTY; 2]; ROW_TILES];
    let mut o_acc = [[[0.0f32; 4]; D_TILES]; ROW_TILES];
    let loop_start = start_counting::<COUNT>();

    for t in 0..tiles {
        load_tile(t + STAGES as u32 - 1);
        arch::cp_async_wait_stage::<STAGES>();
        sync::<P, COUNT>(SyncPoint::KvLoaded);
        let stage = t % STAGES as u32;
        // A rolled loop when there are several steps: unrolled, their live ranges overlap.
        let steps = if BLOCK_N == SUB_N {
            1
        } else {
            arch::opaque((BLOCK_N / SUB_N) as u32)
        };
        for sub in 0..steps {
            let sub_row = sub * SUB_N as u32; // first key of this step inside the tile
            let first_key = t * BLOCK_N as u32 + sub_row;

            // S = Q K^T. One ldmatrix.x4 gives the B fragments of two adjacent 8-key tiles, used by
            // every row tile.
            let mut s_acc = [[[0.0f32; 4]; N_TILES]; ROW_TILES];
            for ks in 0..K_STEPS {
                let mut a = [[0u32; 4]; ROW_TILES];
                for (mt, frag) in a.iter_mut().enumerate() {
                    *frag = if Q_IN_REGS {
                        q_frag[mt][ks]
                    } else {
                        q_fragment(mt, ks)
                    };
                }
                for jp in 0..N_TILES / 2 {
                    let key_row = sub_row + (16 * jp) as u32 + (lane / 16) * 8 + lane % 8;
                    let col = (16 * ks) as u32 + ((lane / 8) % 2) * 8;
                    let b = arch::ldmatrix_x4(k_tile(stage) + key_row * stride + col * 2);
                    for mt in 0..ROW_TILES {
                        T::mma(&mut s_acc[mt][2 * jp], a[mt], [b[0], b[1]]);
                        T::mma(&mut s_acc[mt][2 * jp + 1], a[mt], [b[2], b[3]]);
                    }
                }
            }
            sync::<P, COUNT>(SyncPoint::ScoresComputed);

            // Mask only tiles that reach past the sequence end or the causal diagonal (warp-uniform).
            if first_key + SUB_N as u32 > warp_key_end {
                for mt in 0..ROW_TILES {
                    for (j, acc) in s_acc[mt].iter_mut().enumerate() {
                        for (e, s) in acc.iter_mut().enumerate() {
                            let key = first_key + (8 * j) as u32 + 2 * pair + (e % 2) as u32;
                            if key >= key_end[mt][e / 2] {
                                *s = f32::NEG_INFINITY;
                            }
                        }
                    }
                }
            }

            // Online softmax over the rows this lane holds.
            let mut tile_max = [[f32::NEG_INFINITY; 2]; ROW_TILES];
            for mt in 0..ROW_TILES {
                for acc in s_acc[mt].iter() {
                    for (e, s) in acc.iter().enumerate() {
                        tile_max[mt][e / 2] = arch::max(tile_max[mt][e / 2], *s);
                    }
                }
                for m in tile_max[mt].iter_mut() {
                    *m = arch::quad_max(*m);
                }
            }
            sync::<P, COUNT>(SyncPoint::RowMaxExchanged);
            let mut correction = [[1.0f32; 2]; ROW_TILES];
            for mt in 0..ROW_TILES {
                for h in 0..2 {
                    correction[mt][h] = state[mt][h].rescale(tile_max[mt][h], problem.scale_log2);
                }
            }
            // Once the running maxima settle, most tiles raise none of them: skip the D-wide rescale
            // of the output accumulators unless some row of the warp needs it (a warp-uniform branch).
            if arch::warp_any(correction.iter().flatten().any(|&c| c != 1.0)) {
                for mt in 0..ROW_TILES {
                    for acc in o_acc[mt].iter_mut() {
                        for (e, x) in acc.iter_mut().enumerate() {
                            *x *= correction[mt][e / 2];
                        }
                    }
                }
            }
            for mt in 0..ROW_TILES {
                let offset = [
                    state[mt][0].offset(problem.scale_log2),
                    state[mt][1].offset(problem.scale_log2),
                ];
                for acc in s_acc[mt].iter_mut() {
                    for (e, s) in acc.iter_mut().enumerate() {
                        *s = softmax::probability(*s, problem.scale_log2, offset[e / 2]);
                        // Each lane keeps a partial row sum; the quad adds them once, after the loop.
                        state[mt][e / 2].row_sum += *s;
                    }
                }
            }
            sync::<P, COUNT>(SyncPoint::RowSumExchanged);
            sync::<P, COUNT>(SyncPoint::ProbsStaged);

            // O += P V, P straight from the accumulators: tiles 2kk and 2kk+1 form k-step kk's A.
            for kk in 0..N_TILES / 2 {
                let mut a = [[0u32; 4]; ROW_TILES];
                for (mt, frag) in a.iter_mut().enumerate() {
                    let lo = &s_acc[mt][2 * kk];
                    let hi = &s_acc[mt][2 * kk + 1];
                    *frag = [
                        T::pack(lo[0], lo[1]),
                        T::pack(lo[2], lo[3]),
                        T::pack(hi[0], hi[1]),
                        T::pack(hi[2], hi[3]),
                    ];
                }
                for dp in 0..D_TILES / 2 {
                    let key_row = sub_row + (16 * kk) as u32 + lane % 8 + ((lane / 8) % 2) * 8;
                    let col = (16 * dp) as u32 + (lane / 16) * 8;
                    let b = arch::ldmatrix_x4_trans(v_tile(stage) + key_row * stride + col * 2);
                    for mt in 0..ROW_TILES {
                        T::mma(&mut o_acc[mt][2 * dp], a[mt], [b[0], b[1]]);
                        T::mma(&mut o_acc[mt][2 * dp + 1], a[mt], [b[2], b[3]]);
                    }
                }
            }
        }
        sync::<P, COUNT>(SyncPoint::BeforeSmemReuse);
    }
    arch::cp_async_wait::<0>();

    for mt in 0..ROW_TILES {
        for h in 0..2 {
            state[mt][h].row_sum = arch::quad_sum(state[mt][h].row_sum);
            let row = row_of(mt, h);
            if row < problem.seq_q {
                if pair == 0 {
                    problem.write_lse(head, row, &state[mt][h]);
                }
                let norm = state[mt][h].normaliser();
                let o = problem.out_row::<D>(out, head, row) as *mut u32;
                for (j, acc) in o_acc[mt].iter().enumerate() {
                    let packed = T::pack(acc[2 * h] * norm, acc[2 * h + 1] * norm);
                    arch::st_global_u32(o.add(4 * j + pair as usize), packed);
                }
            }
        }
    }
    if COUNT {
        record_barriers(barrier_log, tiles, loop_start);
    }
}
