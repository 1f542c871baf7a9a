//! The backward's main kernel: one block per `BLOCK_N` keys of one KV head. K and V stay in
//! shared memory while the block walks every query tile of every query head that reads them
//! (the group's heads one after another under grouped-query attention), `STAGES` tiles of Q, dO
//! and their rows' statistics in flight. Per query tile, eight warps in three phases:
//!
//! 1. S^T = K Q^T and dP^T = V dO^T (each warp 16 keys x 32 queries); P^T = exp2(S^T scale -
//!    lse) from the forward's log-sum-exp, masked; dS^T = P^T (dP^T - delta); both stored to
//!    shared memory in the input type.
//! 2. dV += P^T dO and dK += dS^T Q (each warp 16 keys x half the head dim), accumulated in
//!    registers over the whole walk.
//! 3. dQ += dS K (each warp 16 queries x half the head dim, in column chunks), added into the
//!    workspace's fp32 accumulator with `red.add`; under the deterministic order the key blocks
//!    of a query tile take turns, lowest key block first.
//!
//! At the end dK (times the softmax scale) and dV are written in the input type.

use super::gemm::{product, SharedMatrix};
use super::walk::Walk;
use super::Grads;
use crate::arch;
use crate::attention::Problem;
use crate::backward_launch::{smem, BLOCK_M, BLOCK_N, THREADS};
use crate::tile::{self, Element};

/// Column tiles (8 wide) of a warp's phase-1 products: 32 queries.
const SCORE_TILES: usize = 4;
/// `mma` k-steps over a query tile (phase 2) or a key block (phase 3).
const TILE_STEPS: usize = BLOCK_M as usize / 16;
const _: () = assert!(BLOCK_M == BLOCK_N && THREADS == 256);

/// The main kernel's shared memory for head dim `D` and `STAGES` query tiles in flight
/// (`backward_launch::smem`), as matrices the products read.
#[derive(Clone, Copy)]
struct Layout<const D: usize, const STAGES: usize> {
    base: arch::SharedAddr,
}

impl<const D: usize, const STAGES: usize> Layout<D, STAGES> {
    #[inline(always)]
    fn tile(self, offset: u32) -> SharedMatrix {
        SharedMatrix {
            base: self.base + offset,
            row_bytes: smem::row_bytes(D as u32),
        }
    }
    #[inline(always)]
    fn scores(self, offset: u32) -> SharedMatrix {
        SharedMatrix {
            base: self.base + offset,
            row_bytes: smem::scores_row_bytes(),
        }
    }
    #[inline(always)]
    fn k(self) -> SharedMatrix {
        self.tile(0)
    }
    #[inline(always)]
    fn v(self) -> SharedMatrix {
        self.tile(smem::v(D as u32))
    }
    #[inline(always)]
    fn q(self, stage: u32) -> SharedMatrix {
        self.tile(smem::q(D as u32, stage))
    }
    #[inline(always)]
    fn d_out(self, stage: u32) -> SharedMatrix {
        self.tile(smem::d_out(D as u32, stage))
    }
    #[inline(always)]
    fn probs(self) -> SharedMatrix {
        self.scores(smem::probs(D as u32, STAGES as u32))
    }
    #[inline(always)]
    fn d_scores(self) -> SharedMatrix {
        self.scores(smem::d_scores(D as u32, STAGES as u32))
    }
    #[inline(always)]
    fn lse2(self, stage: u32) -> arch::SharedAddr {
        self.base + smem::lse2(D as u32, STAGES as u32, stage)
    }
    #[inline(always)]
    fn delta(self, stage: u32) -> arch::SharedAddr {
        self.base + smem::delta(D as u32, STAGES as u32, stage)
    }
}

/// Issues the copies of position `t`'s Q, dO and statistics into its stage.
///
/// # Safety
/// The stage's tiles are free (the barrier ending the position before last), the buffers those
/// of the launch.
#[inline(always)]
unsafe fn issue<const D: usize, const STAGES: usize>(
    g: &Grads,
    problem: &Problem,
    smem: Layout<D, STAGES>,
    walk: Walk,
    t: u32,
) {
    let thread = arch::thread_idx_x();
    let (head, tile) = walk.position(t);
    let stage = t % STAGES as u32;
    let row0 = tile * BLOCK_M;
    // Safety: the rows of a head of the problem, into this stage's tiles (the caller's contract).
    unsafe {
        let q = problem.q_rows::<D>(g.q, head);
        tile::load_async::<D>(smem.q(stage).base, q, row0, BLOCK_M, thread, THREADS);
        let d_out = problem.q_rows::<D>(g.d_out, head);
        tile::load_async::<D>(smem.d_out(stage).base, d_out, row0, BLOCK_M, thread, THREADS);
        walk.copy_statistics(g, (head, tile), (smem.lse2(stage), smem.delta(stage)), thread);
    }
}

/// Phase 1 for keys `16 band ..` and queries `32 half ..` of the tile at `row0`: S^T and dP^T,
/// then P^T and dS^T into shared memory in the input type.
///
/// # Safety
/// The stage's tiles are loaded and visible; P^T and dS^T are free; the whole warp calls it.
#[inline(always)]
unsafe fn scores<T: Element, const D: usize, const STAGES: usize, const HALF_TILES: usize>(
    problem: &Problem,
    smem: Layout<D, STAGES>,
    (stage, row0, key0): (u32, u32, u32),
    (band, half): (u32, u32),
) {
    let lane = arch::lane_id();
    let (group, quad) = (lane / 4, lane % 4);
    let mut s = [[0f32; 4]; SCORE_TILES];
    let mut dp = [[0f32; 4]; SCORE_TILES];
    // Safety: inside the tiles (the caller's contract).
    unsafe {
        product::<T, false, false, SCORE_TILES, HALF_TILES>(
            &mut s,
            smem.k(),
            16 * band,
            smem.q(stage),
            32 * half,
            0,
        );
        product::<T, false, false, SCORE_TILES, HALF_TILES>(
            &mut dp,
            smem.v(),
            16 * band,
            smem.d_out(stage),
            32 * half,
            0,
        );
    }
    for j in 0..SCORE_TILES {
        for pair in 0..2 {
            let query = 32 * half + 8 * j as u32 + 2 * quad + pair as u32;
            let lse2 = arch::ld_shared_f32(smem.lse2(stage) + 4 * query);
            let delta = arch::ld_shared_f32(smem.delta(stage) + 4 * query);
            let keys = problem.key_start(row0 + query)..problem.key_end(row0 + query);
            for row_half in 0..2 {
                let e = 2 * row_half + pair;
                let key = key0 + 16 * band + group + 8 * row_half as u32;
                let (score, slope) = problem.capped_with_slope(s[j][e]);
                let p = if keys.contains(&key) {
                    arch::exp2(arch::fma(score, problem.scale_log2, -lse2))
                } else {
                    0.0
                };
                s[j][e] = p;
                dp[j][e] = p * slope * (dp[j][e] - delta);
            }
        }
        for row_half in 0..2 {
            let key = 16 * band + group + 8 * row_half as u32;
            let query = 32 * half + 8 * j as u32 + 2 * quad;
            let e = 2 * row_half;
            arch::st_shared_u32(smem.probs().at(key, query), T::pack(s[j][e], s[j][e + 1]));
            arch::st_shared_u32(smem.d_scores().at(key, query), T::pack(dp[j][e], dp[j][e + 1]));
        }
    }
}

/// Phase 3 for queries `16 band ..` and columns `col0 ..` (half the head dim): dQ += dS K, added
/// into the accumulator rows of `head`'s tile `tile`; in the deterministic order (this block's
/// step `Walk::turn` of the tile) when given the problem.
///
/// # Safety
/// dS^T is whole and visible; the workspace is the launch's; the whole block calls it.
#[inline(always)]
unsafe fn add_d_q<
    T: Element,
    const D: usize,
    const STAGES: usize,
    const HALF_TILES: usize,
    const CHUNK_TILES: usize,
>(
    g: &Grads,
    smem: Layout<D, STAGES>,
    walk: Walk,
    (head, tile): (usize, u32),
    (band, col0): (u32, u32),
    deterministic: Option<&Problem>,
) {
    let thread = arch::thread_idx_x();
    let lane = arch::lane_id();
    let (group, quad) = (lane / 4, lane % 4);
    let d = D as u32;
    // Safety: all of the block is the turn and accumulator rows of a tile of the launch's workspace.
    unsafe {
        let turn = g.turns.add(head * walk.q_tiles as usize + tile as usize);
        if let Some(problem) = deterministic {
            if thread == 0 {
                // The key blocks before this one in the order have added theirs.
                while arch::ld_acquire_u32(turn) != walk.turn(problem, tile, BLOCK_N) {}
            }
            arch::sync_threads();
        }
        let row0 = tile * BLOCK_M;
        let accumulator = g
            .dq_accum
            .add((head * walk.padded_rows() as usize + row0 as usize) * D);
        for chunk in 0..HALF_TILES / CHUNK_TILES {
            let chunk0 = col0 + (8 * CHUNK_TILES * chunk) as u32;
            let mut d_q = [[0f32; 4]; CHUNK_TILES];
            product::<T, true, true, CHUNK_TILES, TILE_STEPS>(
                &mut d_q,
                smem.d_scores(),
                16 * band,
                smem.k(),
                chunk0,
                0,
            );
            for (j, acc) in d_q.iter().enumerate() {
                for row_half in 0..2 {
                    let row = 16 * band + group + 8 * row_half as u32;
                    let col = chunk0 + 8 * j as u32 + 2 * quad;
                    let at = accumulator.add((row * d + col) as usize);
                    arch::red_add_f32x2(at, [acc[2 * row_half], acc[2 * row_half + 1]]);
                }
            }
        }
        if let Some(problem) = deterministic {
            arch::fence_acq_rel_gpu(); // this thread's additions before the turn passes on
            arch::sync_threads();
            if thread == 0 {
                arch::st_release_u32(turn, walk.turn(problem, tile, BLOCK_N) + 1);
            }
        }
    }
}

/// The epilogue: dK (times the scale) and dV of keys `16 band ..`, columns `D/2 half ..`.
///
/// # Safety
/// The launch's dK and dV buffers.
#[inline(always)]
unsafe fn write_d_k_d_v<T: Element, const D: usize, const HALF_TILES: usize>(
    g: &Grads,
    problem: &Problem,
    walk: Walk,
    (band, half): (u32, u32),
    [d_k, d_v]: [&[[f32; 4]; HALF_TILES]; 2],
) {
    let lane = arch::lane_id();
    let (group, quad) = (lane / 4, lane % 4);
    let d = D as u32;
    // Safety: rows of keys below S_k of the block's KV head (the caller's contract).
    unsafe {
        let d_k_rows = problem.kv_rows::<D>(g.d_k, walk.first_head);
        let d_v_rows = problem.kv_rows::<D>(g.d_v, walk.first_head);
        for row_half in 0..2 {
            let key = walk.key0 + 16 * band + group + 8 * row_half as u32;
            if key >= problem.seq_k {
                continue;
            }
            let offset = key as usize * d_k_rows.stride as usize;
            for j in 0..HALF_TILES {
                let col = (half * d / 2 + 8 * j as u32 + 2 * quad) as usize;
                let e = 2 * row_half;
                let dk = T::pack(d_k[j][e] * g.scale, d_k[j][e + 1] * g.scale);
                let dv = T::pack(d_v[j][e], d_v[j][e + 1]);
                arch::st_global_u32(d_k_rows.base.add(offset + col) as *mut u32, dk);
                arch::st_global_u32(d_v_rows.base.add(offset + col) as *mut u32, dv);
            }
        }
    }
}

/// # Safety
/// Launched as `backward_launch.rs` says: every buffer as long as the shape makes it (the
/// workspace prepared by `prepare` earlier in the stream), grid `(ceil(S_k / BLOCK_N), B*H_kv
/// over y and z)`, `THREADS` threads, `smem::bytes(D, STAGES)` bytes of dynamic shared memory.
/// `HALF_TILES` is `D / 16` (8-column tiles in half the head dim), `CHUNK_TILES` the tiles of
/// one phase-3 chunk (dividing `HALF_TILES`).
#[inline(always)]
pub unsafe fn kv_block<
    T: Element,
    const D: usize,
    const STAGES: usize,
    const HALF_TILES: usize,
    const CHUNK_TILES: usize,
>(
    g: Grads,
    problem: Problem,
    deterministic: bool,
) {
    const {
        assert!(HALF_TILES * 16 == D && HALF_TILES.is_multiple_of(CHUNK_TILES));
        assert!(STAGES == smem::stages(D as u32) as usize);
    };
    let d = D as u32;
    let thread = arch::thread_idx_x();
    let warp = arch::warp_id();
    let Some(walk) = Walk::of_block(&problem, BLOCK_N) else {
        return; // past the last KV head: before any barrier
    };
    let (key0, first_head) = (walk.key0, walk.first_head);
    let tiles = walk.positions(problem.kv_group);
    let smem = Layout::<D, STAGES> {
        base: arch::dynamic_smem_base(),
    };
    let stages = STAGES as u32;

    // K and V of the block's keys (rows past S_k are zeros), then the first tiles.
    let (k_rows, v_rows) = (
        problem.kv_rows::<D>(g.k, first_head),
        problem.kv_rows::<D>(g.v, first_head),
    );
    tile::load_async::<D>(smem.k().base, k_rows, key0, BLOCK_N, thread, THREADS);
    tile::load_async::<D>(smem.v().base, v_rows, key0, BLOCK_N, thread, THREADS);
    arch::cp_async_commit();
    for t in 0..stages - 1 {
        if t < tiles {
            issue(&g, &problem, smem, walk, t);
        }
        arch::cp_async_commit();
    }

    // Phase 1's place: 16 keys x 32 queries; phases 2 and 3: 16 rows x half the head dim.
    let (band, half) = (warp % 4, warp / 4);
    let col0 = half * d / 2;
    let mut d_v = [[0f32; 4]; HALF_TILES];
    let mut d_k = [[0f32; 4]; HALF_TILES];
    for t in 0..tiles {
        if t + stages - 1 < tiles {
            issue(&g, &problem, smem, walk, t + stages - 1);
        }
        arch::cp_async_commit();
        arch::cp_async_wait_stage::<STAGES>();
        arch::sync_threads(); // this position's tiles, and the last one's P^T and dS^T consumed
        let stage = t % stages;
        let (head, tile) = walk.position(t);
        scores::<T, D, STAGES, HALF_TILES>(&problem, smem, (stage, tile * BLOCK_M, key0), (band, half));
        arch::sync_threads(); // P^T and dS^T whole
                              // Phase 2: dV += P^T dO, dK += dS^T Q for keys 16 band .., columns D/2 half ...
        product::<T, false, true, HALF_TILES, TILE_STEPS>(
            &mut d_v,
            smem.probs(),
            16 * band,
            smem.d_out(stage),
            col0,
            0,
        );
        product::<T, false, true, HALF_TILES, TILE_STEPS>(
            &mut d_k,
            smem.d_scores(),
            16 * band,
            smem.q(stage),
            col0,
            0,
        );
        add_d_q::<T, D, STAGES, HALF_TILES, CHUNK_TILES>(
            &g,
            smem,
            walk,
            (head, tile),
            (band, col0),
            deterministic.then_some(&problem),
        );
        arch::sync_threads(); // everyone is done with this stage and with P^T and dS^T
    }
    arch::cp_async_wait::<0>();
    write_d_k_d_v::<T, D, HALF_TILES>(&g, &problem, walk, (band, half), [&d_k, &d_v]);
}
