//! `flash_scalar`: tiled FlashAttention with an online softmax on the CUDA cores (no tensor cores).
//!
//! A block owns `BLOCK_M` query rows, `ROWS = BLOCK_M / NUM_WARPS` per warp, and walks the keys in
//! tiles of `BLOCK_N`, streamed into shared memory `STAGES` deep with `cp.async`. Inside a tile:
//! - scores: lane `l` computes the scores of keys `l, l + 32, ..` (`KEYS = BLOCK_N / 32`) for each
//!   of its warp's rows, reading K `VEC` elements at a time and Q (kept as f32) by broadcast;
//! - softmax: row max and row sum are warp reductions (`warp_max`, `warp_sum`), so every lane holds
//!   every row's state;
//! - P V: the warp stages its probabilities in its own slice of shared memory, then lane `l` owns
//!   output dims `l * DIMS ..` (`DIMS = D / 32`) and accumulates `P[row, key] * V[key, dims]`.
//!
//! The barrier policy `P` decides what each `SyncPoint` costs; see `policy.rs`.

use super::pipeline::KvPipeline;
use super::{finish_row, record_barriers, start_counting, Buffers, Problem};
use crate::arch::{self, SharedAddr};
use crate::policy::{sync, BarrierPolicy, SyncPoint};
use crate::softmax::{self, RowState};
use crate::tile::{self, Element, Padded};

/// Shared memory the kernel needs, in bytes: Q as f32, `STAGES` K and V tiles, and P as f32.
pub const fn smem_bytes(d: usize, block_m: usize, block_n: usize, stages: usize) -> u32 {
    (block_m * d * 4) as u32
        + 2 * stages as u32 * tile::tile_bytes(block_n, d)
        + (block_m * block_n * 4) as u32
}

/// Exports one `flash_scalar` variant of `kernels.toml`: the invocation `build.rs` writes for it
/// (symbol names, then `Spec::kernel_args`), expanded through `kernel!` in `lib.rs`.
macro_rules! flash_scalar {
    ($name:ident $counted:ident $smem:ident $barriers:ident,
     $t:ty, $policy:ty, d = $d:literal, m = $bm:literal, n = $bn:literal, w = $w:literal,
     vec = $vec:literal, stages = $stages:literal) => {
        kernel!(@export $name, $counted, $smem,
            $crate::attention::scalar::smem_bytes($d, $bm, $bn, $stages), $barriers,
            <$policy as $crate::policy::BarrierPolicy>::BARRIERS_PER_TILE, wait_at_entry = true,
            |io, p, COUNT| $crate::attention::scalar::flash_scalar::<
                $t, $policy, COUNT, $d, $bm, $bn, $w, $vec, $stages,
                { $bm / $w }, { $bn / 32 }, { $d / 32 },
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
pub unsafe fn flash_scalar<
    T: Element,
    P: BarrierPolicy,
    const COUNT: bool,
    const D: usize,
    const BLOCK_M: usize,
    const BLOCK_N: usize,
    const NUM_WARPS: usize,
    const VEC: usize,
    const STAGES: usize,
    // Derived sizes, spelled out because stable Rust cannot compute array lengths from generics.
    const ROWS: usize,
    const KEYS: usize,
    const DIMS: usize,
>(
    io: Buffers,
    problem: Problem,
) {
    const {
        assert!(ROWS * NUM_WARPS == BLOCK_M);
        assert!(KEYS * 32 == BLOCK_N);
        assert!(DIMS * 32 == D);
        assert!(D.is_multiple_of(VEC) && (VEC == 4 || VEC == 8));
        assert!(STAGES >= 1);
    };
    let Some(head) = problem.head() else {
        return; // past the last head (the grid's z slices round B*H up): before any barrier
    };
    let threads = (NUM_WARPS * 32) as u32;
    let (thread, lane, warp) = (arch::thread_idx_x(), arch::lane_id(), arch::warp_id());
    let first_row = arch::block_idx_x() * BLOCK_M as u32;

    let (q_rows, k_rows, v_rows) = io.rows::<D>(&problem, head);

    // Shared memory: [Q f32: BLOCK_M x D][STAGES x (K tile, V tile)][P f32: BLOCK_M x BLOCK_N]
    let q_smem = arch::dynamic_smem_base();
    let kv_smem = q_smem + (BLOCK_M * D * 4) as u32;
    let p_smem = kv_smem + 2 * STAGES as u32 * tile::tile_bytes(BLOCK_N, D);
    let tiles = problem.kv_tiles(first_row, BLOCK_M as u32, BLOCK_N as u32);
    let kv = KvPipeline::<Padded, D, BLOCK_N, STAGES>::new(kv_smem, k_rows, v_rows, tiles, thread, threads);

    // Start the K/V pipeline, then widen Q to f32 in shared memory while the copies fly.
    kv.start();
    let mut i = thread as usize;
    while i < BLOCK_M * D {
        let row = first_row + (i / D) as u32;
        let x = if row < problem.seq_q {
            T::to_f32(*q_rows.base.add(row as usize * q_rows.stride as usize + i % D))
        } else {
            0.0
        };
        arch::st_shared_f32(q_smem + (i * 4) as u32, x);
        i += threads as usize;
    }
    arch::sync_threads(); // Q visible to every warp (once, outside the tile loop)

    let my_first_row = first_row + warp * ROWS as u32;
    let mut state = [RowState::EMPTY; ROWS];
    let mut acc = [[0.0f32; DIMS]; ROWS];
    let loop_start = start_counting::<COUNT>(0);

    for t in 0..tiles {
        let stage = kv.advance(t);
        sync::<P, COUNT>(SyncPoint::KvLoaded);
        let first_key = t * BLOCK_N as u32;

        let mut scores = tile_scores::<T, D, VEC, ROWS, KEYS>(q_smem, warp, kv.k_tile(stage));
        for (r, row_scores) in scores.iter_mut().enumerate() {
            let row = my_first_row + r as u32;
            let keys = problem.key_start(row)..problem.key_end(row);
            for (j, s) in row_scores.iter_mut().enumerate() {
                if problem.has_softcap() {
                    *s = problem.soft_capped(*s);
                }
                if !keys.contains(&(first_key + lane + 32 * j as u32)) {
                    *s = f32::NEG_INFINITY;
                }
            }
        }
        sync::<P, COUNT>(SyncPoint::ScoresComputed);

        // Online softmax, one row at a time; every lane ends with every row's statistics.
        let mut tile_max = [f32::NEG_INFINITY; ROWS];
        for (m, row_scores) in tile_max.iter_mut().zip(scores.iter()) {
            for s in row_scores {
                *m = arch::max(*m, *s);
            }
            *m = arch::warp_max(*m);
        }
        sync::<P, COUNT>(SyncPoint::RowMaxExchanged);
        let mut tile_sum = [0.0f32; ROWS];
        for r in 0..ROWS {
            let correction = state[r].rescale(tile_max[r], problem.scale_log2);
            for a in acc[r].iter_mut() {
                *a *= correction;
            }
            let offset = state[r].offset(problem.scale_log2);
            for s in scores[r].iter_mut() {
                *s = softmax::probability(*s, problem.scale_log2, offset);
                tile_sum[r] += *s;
            }
            tile_sum[r] = arch::warp_sum(tile_sum[r]);
        }
        sync::<P, COUNT>(SyncPoint::RowSumExchanged);
        for r in 0..ROWS {
            state[r].row_sum += tile_sum[r];
        }

        // Stage P in this warp's rows of the P buffer, then O += P V.
        let p_rows = p_smem + (warp as usize * ROWS * BLOCK_N * 4) as u32;
        for (r, row_p) in scores.iter().enumerate() {
            for (j, p) in row_p.iter().enumerate() {
                arch::st_shared_f32(p_rows + ((r * BLOCK_N + lane as usize + 32 * j) * 4) as u32, *p);
            }
        }
        sync::<P, COUNT>(SyncPoint::ProbsStaged);
        accumulate_pv::<T, D, BLOCK_N, ROWS, DIMS>(&mut acc, p_rows, kv.v_tile(stage));
        sync::<P, COUNT>(SyncPoint::BeforeSmemReuse);
    }
    kv.finish();

    for (r, (row_state, row_acc)) in state.iter().zip(acc.iter()).enumerate() {
        let row = my_first_row + r as u32;
        if let Some((o, norm)) = finish_row::<D>(&problem, io.out, head, row, row_state, lane == 0) {
            for pair in 0..DIMS / 2 {
                let packed = T::pack(row_acc[2 * pair] * norm, row_acc[2 * pair + 1] * norm);
                arch::st_global_u32(o.add(lane as usize * DIMS / 2 + pair), packed);
            }
        }
    }
    if COUNT {
        record_barriers(io.barrier_log, tiles, loop_start, 0);
    }
}

/// S = Q K^T for warp `warp`'s `ROWS` query rows (f32, in the Q buffer at `q`) and this lane's
/// keys `lane, lane + 32, ..` of the K tile at `k_tile`.
///
/// # Safety
/// `q` and `k_tile` must be the block's Q buffer and a landed K tile.
#[inline(always)]
unsafe fn tile_scores<T: Element, const D: usize, const VEC: usize, const ROWS: usize, const KEYS: usize>(
    q: SharedAddr,
    warp: u32,
    k_tile: SharedAddr,
) -> [[f32; KEYS]; ROWS] {
    let lane = arch::lane_id();
    let mut scores = [[0.0f32; KEYS]; ROWS];
    let mut d = 0;
    while d < D {
        let mut keys = [[0.0f32; VEC]; KEYS];
        for (j, key) in keys.iter_mut().enumerate() {
            let row = lane + 32 * j as u32;
            *key = tile::read_f32::<T, VEC>(k_tile + row * tile::row_stride_bytes(D) + (d * 2) as u32);
        }
        for (r, row_scores) in scores.iter_mut().enumerate() {
            let query = read_q::<VEC>(q + (((warp as usize * ROWS + r) * D + d) * 4) as u32);
            for (s, key) in row_scores.iter_mut().zip(keys.iter()) {
                for e in 0..VEC {
                    *s = arch::fma(query[e], key[e], *s);
                }
            }
        }
        d += VEC;
    }
    scores
}

/// O += P V for one warp's `ROWS` rows: the warp's probabilities (f32 rows of `BLOCK_N`, staged at
/// `p_rows`) times this lane's `DIMS` output dims of the V tile at `v_tile`.
///
/// # Safety
/// `p_rows` must be the warp's staged probabilities and `v_tile` a landed V tile.
#[inline(always)]
unsafe fn accumulate_pv<
    T: Element,
    const D: usize,
    const BLOCK_N: usize,
    const ROWS: usize,
    const DIMS: usize,
>(
    acc: &mut [[f32; DIMS]; ROWS],
    p_rows: SharedAddr,
    v_tile: SharedAddr,
) {
    let v_lane = v_tile + arch::lane_id() * (DIMS * 2) as u32;
    let mut key = 0;
    while key < BLOCK_N {
        let mut values = [[0.0f32; DIMS]; 4];
        for (i, value) in values.iter_mut().enumerate() {
            *value = read_v::<T, DIMS>(v_lane + (key + i) as u32 * tile::row_stride_bytes(D));
        }
        for (r, row_acc) in acc.iter_mut().enumerate() {
            let p4 = arch::ld_shared_v4_u32(p_rows + ((r * BLOCK_N + key) * 4) as u32);
            for (i, value) in values.iter().enumerate() {
                let p = f32::from_bits(p4[i]);
                for (a, x) in row_acc.iter_mut().zip(value.iter()) {
                    *a = arch::fma(p, *x, *a);
                }
            }
        }
        key += 4;
    }
}

/// `VEC` f32 of Q at `addr` (broadcast to the warp), as one or two 16-byte loads.
///
/// # Safety
/// `addr` must be `4 * VEC` bytes of the Q buffer, 16-byte aligned.
#[inline(always)]
unsafe fn read_q<const VEC: usize>(addr: SharedAddr) -> [f32; VEC] {
    let mut out = [0.0f32; VEC];
    let mut i = 0;
    while i < VEC {
        let w = arch::ld_shared_v4_u32(addr + (i * 4) as u32);
        for e in 0..4 {
            out[i + e] = f32::from_bits(w[e]);
        }
        i += 4;
    }
    out
}

/// This lane's `DIMS` (2 or 4) elements of one V row, widened.
///
/// # Safety
/// `addr` must be `2 * DIMS` bytes of a landed V tile, aligned to them.
#[inline(always)]
unsafe fn read_v<T: Element, const DIMS: usize>(addr: SharedAddr) -> [f32; DIMS] {
    let mut out = [0.0f32; DIMS];
    let (w0, w1) = if DIMS == 4 {
        let w = arch::ld_shared_v2_u32(addr);
        (w[0], w[1])
    } else {
        (arch::ld_shared_u32(addr), 0)
    };
    let (a, b) = T::unpack(w0);
    out[0] = a;
    out[1] = b;
    if DIMS == 4 {
        let (c, d) = T::unpack(w1);
        out[2] = c;
        out[3] = d;
    }
    out
}
