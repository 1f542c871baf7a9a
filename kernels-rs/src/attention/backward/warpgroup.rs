//! The backward's main kernel on Hopper's warpgroup tensor cores (`wgmma`, sm_90a), at head dims
//! 64 and 128. The walk is `kv_block`'s (`walk::Walk`): one block per `BLOCK_N` = 128 keys of a
//! KV head, K and V resident in shared memory, every query tile that sees those keys streamed
//! through two stages by `cp.async` into the 128-byte swizzle layout. Each of the two warpgroups
//! owns 64 of the keys; per query tile of 64 rows:
//!
//! 1. S^T = K Q^T and dP^T = V dO^T (64 keys x 64 queries a warpgroup; K, V, Q and dO all
//!    K-major from shared memory), then P^T = exp2(S^T scale - lse) and dS^T = P^T (dP^T - delta)
//!    in place, in the accumulator layout.
//! 2. dV += P^T dO and dK += dS^T Q: the accumulator layout of P^T and dS^T is that of `wgmma`'s
//!    A fragments, so they go in from registers; dO and Q are MN-major B operands (the head dim
//!    contiguous), the whole head dim per product. dK and dV stay in registers for the walk.
//! 3. dS^T to shared memory, then dQ = dS K with both operands MN-major, as they are stored: at
//!    head dim 128 each warpgroup takes half the head dim over all 128 keys, at 64 each takes its
//!    own 64 keys over the whole head dim (the second then adds its sums to the first's). The
//!    block goes to shared memory in the accumulators' order (`backward_launch::warpgroup::
//!    dq_index`) and into the workspace's fp32 accumulator by one bulk reduction of the copy
//!    engine: per-element `red.add`s from every thread were the kernel's bottleneck (L2's atomic
//!    throughput: head dim 64 took as long as 128). Under the deterministic order the key blocks
//!    of a tile take turns, as in `kv_block`.
//!
//! Three block barriers per tile: the stage has landed (which also says every warpgroup is done
//! with the tile before, its stage and dS^T), dS^T is whole, and the dQ block is whole.

use super::walk::Walk;
use super::Grads;
use crate::arch::{self, barrier_id, SharedAddr, SmemDescriptor};
use crate::attention::Problem;
use crate::backward_launch::warpgroup::{self as layout, BLOCK_N, STAGES};
use crate::backward_launch::{BLOCK_M, THREADS};
use crate::tile::swizzled::{self, ATOM_BYTES, ROW_BYTES};
use crate::tile::Element;

/// Keys of a warpgroup: the M extent of its products.
const WARPGROUP_KEYS: u32 = 64;
/// A tile's queries in 16-row k-steps (dV += P^T dO, dK += dS^T Q).
const QUERY_STEPS: usize = BLOCK_M as usize / 16;
/// A 64 x 64 accumulator's registers per thread: S^T, dP^T and a warpgroup's part of dQ.
const SQUARE_REGS: usize = 32;

/// Exports the main kernel for one element type and head dim as `$main`, and as `$capped` for
/// problems with a logit softcap (a compile-time choice, so that the plain kernel keeps its
/// registers); the host launches one of them in place of `flash_backward_d<D>_<dtype>` on sm_90
/// (`src/backward.rs`).
macro_rules! flash_backward_wgmma {
    ($main:ident $capped:ident, $t:ty, d = $d:literal) => {
        with_backward_params!(backward_entry!($main, |a|
            $crate::attention::backward::warpgroup::kv_block_wgmma::<$t, $d, { $d / 2 }, false>(
                a.grads($d), a.problem(), a.deterministic != 0);));
        with_backward_params!(backward_entry!($capped, |a|
            $crate::attention::backward::warpgroup::kv_block_wgmma::<$t, $d, { $d / 2 }, true>(
                a.grads($d), a.problem(), a.deterministic != 0);));
    };
}

/// The kernel's shared memory (`backward_launch::warpgroup`), as addresses.
#[derive(Clone, Copy)]
struct Smem<const D: usize> {
    base: SharedAddr,
}

impl<const D: usize> Smem<D> {
    #[inline(always)]
    fn k(self) -> SharedAddr {
        self.base
    }
    #[inline(always)]
    fn v(self) -> SharedAddr {
        self.base + layout::v(D as u32)
    }
    #[inline(always)]
    fn q(self, stage: u32) -> SharedAddr {
        self.base + layout::q(D as u32, stage)
    }
    #[inline(always)]
    fn d_out(self, stage: u32) -> SharedAddr {
        self.base + layout::d_out(D as u32, stage)
    }
    #[inline(always)]
    fn d_scores(self) -> SharedAddr {
        self.base + layout::d_scores(D as u32)
    }
    #[inline(always)]
    fn d_q(self) -> SharedAddr {
        self.base + layout::d_q(D as u32)
    }
    #[inline(always)]
    fn lse2(self, stage: u32) -> SharedAddr {
        self.base + layout::lse2(D as u32, stage)
    }
    #[inline(always)]
    fn delta(self, stage: u32) -> SharedAddr {
        self.base + layout::delta(D as u32, stage)
    }
}

/// The descriptor of k-step `ks` of a K-major operand (the head dim contiguous): rows
/// `row0 ..` of a swizzled tile of `rows` rows, head-dim columns `16 ks ..` (32 bytes of a
/// 128-byte row, four per column block).
#[inline(always)]
fn k_major(tile: SharedAddr, rows: u32, row0: u32, ks: usize) -> u64 {
    let ks = ks as u32;
    let column = (ks / 4) * swizzled::column_block_bytes(rows) + (ks % 4) * 32;
    SmemDescriptor::sw128(tile, 16, ATOM_BYTES)
        .offset(row0 * ROW_BYTES + column)
        .get()
}

/// The descriptor of k-step `kk` of an MN-major operand (its M or N dimension contiguous, 64 per
/// column block of a swizzled tile of `rows` rows): rows `16 kk ..`, two atoms per step; the
/// column blocks are the leading dimension.
#[inline(always)]
fn mn_major(tile: SharedAddr, rows: u32, kk: usize) -> u64 {
    SmemDescriptor::sw128(tile, swizzled::column_block_bytes(rows), ATOM_BYTES)
        .offset(kk as u32 * 2 * ATOM_BYTES)
        .get()
}

/// Issues the copies of walk position `t`'s Q and dO tiles and statistics into its stage.
///
/// # Safety
/// The stage is free (the barrier of the position before it has passed); the buffers those of
/// the launch.
#[inline(always)]
unsafe fn issue<const D: usize>(g: &Grads, problem: &Problem, smem: Smem<D>, walk: Walk, t: u32) {
    let thread = arch::thread_idx_x();
    let (head, tile) = walk.position(t);
    let stage = t % STAGES;
    let row0 = tile * BLOCK_M;
    // Safety: rows of a head of the problem into this stage's tiles (the caller's contract).
    unsafe {
        let q = problem.q_rows::<D>(g.q, head);
        swizzled::load_async::<D>(smem.q(stage), q, row0, BLOCK_M, thread, THREADS);
        let d_out = problem.q_rows::<D>(g.d_out, head);
        swizzled::load_async::<D>(smem.d_out(stage), d_out, row0, BLOCK_M, thread, THREADS);
        walk.copy_statistics(g, (head, tile), (smem.lse2(stage), smem.delta(stage)), thread);
    }
}

/// The query rows that see this thread's two keys (`key`, `key + 8`): `Problem::rows_seeing`.
#[derive(Clone, Copy)]
struct KeyRows {
    first: [u32; 2],
    end: [u32; 2],
}

impl KeyRows {
    #[inline(always)]
    fn new(problem: &Problem, key: u32) -> Self {
        let (first0, end0) = problem.rows_seeing(key);
        let (first1, end1) = problem.rows_seeing(key + 8);
        KeyRows {
            first: [first0, first1],
            end: [end0, end1],
        }
    }

    /// Whether every row of the tile from `row0` sees both keys.
    #[inline(always)]
    fn whole(&self, row0: u32) -> bool {
        let first = self.first[0].max(self.first[1]);
        let end = self.end[0].min(self.end[1]);
        first <= row0 && row0 + BLOCK_M <= end
    }
}

/// Step 1's second half, in place: S^T becomes P^T and dP^T becomes dS^T for this thread's keys
/// (`key`, `key + 8` of the head, whose rows `rows` says) and the tile's queries from `row0`.
/// `whole`: every row of the tile sees both keys, so no mask is needed. `SOFTCAP`: the scores go
/// through the problem's softcap, and dS takes its slope.
///
/// # Safety
/// The stage's statistics have landed.
#[inline(always)]
unsafe fn probabilities<const SOFTCAP: bool>(
    problem: &Problem,
    (s, dp): (&mut [f32; SQUARE_REGS], &mut [f32; SQUARE_REGS]),
    (lse2, delta): (SharedAddr, SharedAddr),
    (row0, rows, whole): (u32, KeyRows, bool),
) {
    if SOFTCAP {
        // tanh(S^T / softcap) in place: the capped score and the slope are then a multiply each.
        for x in s.iter_mut() {
            *x = problem.softcap_tanh(*x);
        }
    }
    let quad = arch::lane_id() % 4;
    for j in 0..SQUARE_REGS / 4 {
        // Columns 8j + 2 quad and the next: one 8-byte load of each statistic.
        let query = 8 * j as u32 + 2 * quad;
        // Safety: inside the stage's statistics (the caller's contract).
        let (lse2, delta) = unsafe {
            (
                arch::ld_shared_v2_u32(lse2 + 4 * query).map(f32::from_bits),
                arch::ld_shared_v2_u32(delta + 4 * query).map(f32::from_bits),
            )
        };
        for pair in 0..2 {
            let row = row0 + query + pair as u32;
            for half in 0..2 {
                let e = 4 * j + 2 * half + pair;
                // With a softcap, s holds tanh: the score is softcap tanh, and the derivative of
                // softcap tanh(x / softcap) in x is 1 - tanh^2.
                let (score, slope) = match SOFTCAP {
                    true => (problem.softcap * s[e], 1.0 - s[e] * s[e]),
                    false => (s[e], 1.0),
                };
                let p = if whole || (row >= rows.first[half] && row < rows.end[half]) {
                    arch::exp2(arch::fma(score, problem.scale_log2, -lse2[pair]))
                } else {
                    0.0
                };
                s[e] = p;
                dp[e] = p * slope * (dp[e] - delta[pair]);
            }
        }
    }
}

/// P^T and dS^T packed as A fragments, dS^T also to shared memory, then dV += P^T dO and
/// dK += dS^T Q; dK's chain is waited for (and with it dV's, issued first).
///
/// # Safety
/// The whole warpgroup; stage `stage`'s tiles have landed and are visible; dS^T is free.
#[inline(always)]
unsafe fn gradient_products<T: Element, const D: usize, const O_REGS: usize>(
    smem: Smem<D>,
    (stage, key_row): (u32, u32),
    (s, dp): (&[f32; SQUARE_REGS], &[f32; SQUARE_REGS]),
    (d_v, d_k): (&mut [f32; O_REGS], &mut [f32; O_REGS]),
) {
    // P^T and dS^T as A fragments, all packed before the products that read them (so the
    // chains run without a fence); dS^T also to shared memory for dQ: register i of step kk
    // holds key row + 8 (i % 2), queries 16 kk + 8 (i / 2) + 2 quad and the next.
    let mut p_frags = [[0u32; 4]; QUERY_STEPS];
    let mut ds_frags = [[0u32; 4]; QUERY_STEPS];
    let quad = arch::lane_id() % 4;
    for kk in 0..QUERY_STEPS {
        p_frags[kk] = T::pack_probabilities(s, kk);
        ds_frags[kk] = T::pack_probabilities(dp, kk);
        for i in 0..4 {
            arch::fence_operand(&mut p_frags[kk][i]);
            arch::fence_operand(&mut ds_frags[kk][i]);
            let (row, chunk) = (key_row + 8 * (i as u32 % 2), 2 * kk as u32 + i as u32 / 2);
            let at = smem.d_scores() + swizzled::chunk_offset(row, chunk, BLOCK_N) + 4 * quad;
            // Safety: inside dS^T, which nobody reads until the barrier below.
            unsafe { arch::st_shared_u32(at, ds_frags[kk][i]) };
        }
    }

    // 2. dV += P^T dO, dK += dS^T Q. Waited for here: left running under step 3, their A
    // registers would stay live beside dQ's accumulators, which spills at head dim 128.
    // Safety: the whole warpgroup, on this stage's tiles.
    unsafe {
        for kk in 0..QUERY_STEPS {
            chained!(kk, QUERY_STEPS, true, |C| T::wgmma_rs::<C, O_REGS>(
                d_v,
                p_frags[kk],
                mn_major(smem.d_out(stage), BLOCK_M, kk),
                true
            ));
        }
        for kk in 0..QUERY_STEPS {
            chained!(kk, QUERY_STEPS, false, |C| T::wgmma_rs::<C, O_REGS>(
                d_k,
                ds_frags[kk],
                mn_major(smem.q(stage), BLOCK_M, kk),
                true
            ));
        }
    }
}

/// Step 3: dQ += dS K for the tile `(head, tile)`, this warpgroup's part, added into the
/// workspace's accumulator (in the deterministic order when asked).
///
/// # Safety
/// dS^T is whole in shared memory and visible to the async proxy; the whole block calls it.
#[inline(always)]
unsafe fn add_d_q<T: Element, const D: usize>(
    g: &Grads,
    smem: Smem<D>,
    walk: Walk,
    (head, tile): (usize, u32),
    warpgroup: u32,
    deterministic: bool,
) {
    // Head dim 128: half the head dim (one column block of K) over all the keys; 64: the whole
    // head dim over this warpgroup's keys.
    let split_head_dim = D == 128;
    let (keys, d_scores, k) = if split_head_dim {
        let column_block = warpgroup * swizzled::column_block_bytes(BLOCK_N);
        (BLOCK_N, smem.d_scores(), smem.k() + column_block)
    } else {
        let rows = WARPGROUP_KEYS * warpgroup * ROW_BYTES;
        (WARPGROUP_KEYS, smem.d_scores() + rows, smem.k() + rows)
    };
    let steps = (keys / 16) as usize;
    let mut d_q = [0f32; SQUARE_REGS];
    // Safety: the whole warpgroup, on dS^T and K of this block's shared memory (the contract).
    unsafe {
        for kk in 0..steps {
            chained!(kk, steps, false, |C| T::wgmma_ss_mn::<C, SQUARE_REGS>(
                &mut d_q,
                mn_major(d_scores, BLOCK_N, kk),
                mn_major(k, BLOCK_N, kk),
                kk > 0
            ));
        }
    }
    arch::wgmma_wait::<0>(&mut d_q);

    // The part to shared memory in `dq_index` order: this thread's register pair e at
    // 256 e + 2 t of its warpgroup's 4096 floats. At head dim 64 both warpgroups hold the whole
    // block: the second adds its part to the first's.
    let thread = arch::thread_idx_x();
    let (t, region) = (thread % 128, if split_head_dim { warpgroup * 4096 } else { 0 });
    let at = |pair: usize| smem.d_q() + 4 * (region + 256 * pair as u32 + 2 * t);
    // Safety: the staging block, free since the last bulk reduction read it (the caller's
    // contract); the named barrier orders the second warpgroup's reads after the first's writes.
    unsafe {
        if split_head_dim || warpgroup == 0 {
            for pair in 0..SQUARE_REGS / 2 {
                let value = [d_q[2 * pair].to_bits(), d_q[2 * pair + 1].to_bits()];
                arch::st_shared_v2_u32(at(pair), value);
            }
        }
        if !split_head_dim {
            if warpgroup == 0 {
                arch::named_barrier_arrive(barrier_id::BACKWARD_DQ_SUM, THREADS);
            } else {
                arch::named_barrier_sync(barrier_id::BACKWARD_DQ_SUM, THREADS);
                for pair in 0..SQUARE_REGS / 2 {
                    let [a, b] = arch::ld_shared_v2_u32(at(pair)).map(f32::from_bits);
                    let value = [(a + d_q[2 * pair]).to_bits(), (b + d_q[2 * pair + 1]).to_bits()];
                    arch::st_shared_v2_u32(at(pair), value);
                }
            }
        }
    }
    arch::fence_proxy_async_shared(); // the block, for the copy engine's reads
    arch::sync_threads();

    // One bulk reduction adds the block into the tile's accumulator, in the deterministic order
    // when asked: the key blocks of a tile take turns, each waiting for its reduction to land.
    if thread == 0 {
        // Safety: the turn and accumulator block of a tile of the launch's workspace.
        unsafe {
            let turn = g.turns.add(head * walk.q_tiles as usize + tile as usize);
            if deterministic {
                // The key blocks before this one in the order have added theirs.
                while arch::ld_acquire_u32(turn) != arch::block_idx_x() {}
            }
            let accumulator = g
                .dq_accum
                .add((head * walk.padded_rows() as usize + (tile * BLOCK_M) as usize) * D);
            arch::bulk_reduce_add_f32(accumulator, smem.d_q(), 4 * BLOCK_M * D as u32);
            arch::bulk_commit_group();
            if deterministic {
                arch::bulk_wait_group_all();
                arch::fence_acq_rel_gpu(); // the reduction before the turn passes on
                arch::st_release_u32(turn, arch::block_idx_x() + 1);
            }
        }
    }
}

/// The epilogue: dK (times the scale) and dV of this thread's keys, the whole head dim.
///
/// # Safety
/// The launch's dK and dV buffers.
#[inline(always)]
unsafe fn write_d_k_d_v<T: Element, const D: usize, const O_REGS: usize>(
    g: &Grads,
    problem: &Problem,
    walk: Walk,
    key: u32,
    [d_k, d_v]: [&[f32; O_REGS]; 2],
) {
    let quad = arch::lane_id() % 4;
    // Safety: rows of keys below S_k of the block's KV head (the caller's contract).
    unsafe {
        let d_k_rows = problem.kv_rows::<D>(g.d_k, walk.first_head);
        let d_v_rows = problem.kv_rows::<D>(g.d_v, walk.first_head);
        for half in 0..2 {
            let key = key + 8 * half as u32;
            if key >= problem.seq_k {
                continue;
            }
            let offset = key as usize * d_k_rows.stride as usize;
            for j in 0..O_REGS / 4 {
                let col = 8 * j + 2 * quad as usize;
                let e = 4 * j + 2 * half;
                let dk = T::pack(d_k[e] * g.scale, d_k[e + 1] * g.scale);
                let dv = T::pack(d_v[e], d_v[e + 1]);
                arch::st_global_u32(d_k_rows.base.add(offset + col) as *mut u32, dk);
                arch::st_global_u32(d_v_rows.base.add(offset + col) as *mut u32, dv);
            }
        }
    }
}

/// # Safety
/// Launched as `backward_launch.rs` says for this kernel: every buffer as long as the shape makes
/// it (the workspace prepared by `prepare` earlier in the stream), grid `(ceil(S_k / BLOCK_N),
/// B*H_kv over y and z)`, `THREADS` threads, `warpgroup::bytes(D)` bytes of dynamic shared memory,
/// an sm_90a device. `O_REGS` is `D / 2`; `SOFTCAP` says whether the problem has a softcap.
#[inline(always)]
pub unsafe fn kv_block_wgmma<T: Element, const D: usize, const O_REGS: usize, const SOFTCAP: bool>(
    g: Grads,
    problem: Problem,
    deterministic: bool,
) {
    const {
        assert!(2 * O_REGS == D && (D == 64 || D == 128));
        assert!(THREADS == 256 && BLOCK_M == 64 && STAGES == 2 && BLOCK_N == 2 * WARPGROUP_KEYS);
    };
    let thread = arch::thread_idx_x();
    let warp = arch::warp_id();
    let Some(walk) = Walk::of_block(&problem, BLOCK_N) else {
        return; // past the last KV head: before any barrier
    };
    let tiles = walk.positions(problem.kv_group);
    let smem = Smem::<D> {
        base: swizzled::atom_aligned(arch::dynamic_smem_base()),
    };
    // Lane 0's, so that ptxas knows it is warp-uniform (the descriptors stay uniform).
    let warpgroup = arch::warp_uniform(warp / 4);
    let warpgroup_key0 = WARPGROUP_KEYS * warpgroup;
    // This thread's rows of S^T, dK and dV: keys `key` and `key + 8` of the head.
    let key = walk.key0 + warpgroup_key0 + 16 * (warp % 4) + arch::lane_id() / 4;
    let key_rows = KeyRows::new(&problem, key);

    // K and V of the block's keys (rows past S_k are zeros), with the first tile.
    // Safety: rows of the block's KV head into the K and V tiles, nobody reading them yet.
    unsafe {
        let k_rows = problem.kv_rows::<D>(g.k, walk.first_head);
        let v_rows = problem.kv_rows::<D>(g.v, walk.first_head);
        swizzled::load_async::<D>(smem.k(), k_rows, walk.key0, BLOCK_N, thread, THREADS);
        swizzled::load_async::<D>(smem.v(), v_rows, walk.key0, BLOCK_N, thread, THREADS);
        if tiles > 0 {
            issue(&g, &problem, smem, walk, 0);
        }
    }
    arch::cp_async_commit();

    let steps = D / 16;
    let mut d_v = [0f32; O_REGS];
    let mut d_k = [0f32; O_REGS];
    for t in 0..tiles {
        arch::cp_async_wait::<0>();
        // The copies were ordinary writes; wgmma reads through the async proxy.
        arch::fence_proxy_async_shared();
        arch::sync_threads(); // position t landed; everyone is done with t - 1 (its stage, dS^T)
        if t + 1 < tiles {
            // Safety: stage (t + 1) % 2 was t - 1's, done with (the barrier above).
            unsafe { issue(&g, &problem, smem, walk, t + 1) };
        }
        arch::cp_async_commit();
        let stage = t % STAGES;
        let (head, tile) = walk.position(t);
        let row0 = tile * BLOCK_M;
        // The tiles' descriptors, derived afresh in each iteration: hoisted out of the loop they
        // would hold some 50 registers across it, and head dim 128 would spill.
        let smem = Smem::<D> {
            base: smem.base.opaque(),
        };

        // 1. S^T = K Q^T and dP^T = V dO^T, one wait for both chains.
        let mut s = [0f32; SQUARE_REGS];
        let mut dp = [0f32; SQUARE_REGS];
        // Safety: the whole warpgroup, on this stage's tiles and the block's K and V.
        unsafe {
            for ks in 0..steps {
                chained!(ks, steps, true, |C| T::wgmma_ss::<C, SQUARE_REGS>(
                    &mut s,
                    k_major(smem.k(), BLOCK_N, warpgroup_key0, ks),
                    k_major(smem.q(stage), BLOCK_M, 0, ks),
                    ks > 0
                ));
            }
            for ks in 0..steps {
                chained!(ks, steps, true, |C| T::wgmma_ss::<C, SQUARE_REGS>(
                    &mut dp,
                    k_major(smem.v(), BLOCK_N, warpgroup_key0, ks),
                    k_major(smem.d_out(stage), BLOCK_M, 0, ks),
                    ks > 0
                ));
            }
        }
        arch::wgmma_wait::<0>(&mut s);
        arch::wgmma_wait::<0>(&mut dp);
        let whole = key_rows.whole(row0);
        // Safety: the stage's statistics landed with its tiles.
        unsafe {
            let statistics = (smem.lse2(stage), smem.delta(stage));
            probabilities::<SOFTCAP>(&problem, (&mut s, &mut dp), statistics, (row0, key_rows, whole));
        }

        // Safety: the whole warpgroup; the stage's tiles landed; dS^T is free.
        unsafe {
            gradient_products::<T, D, O_REGS>(smem, (stage, key - walk.key0), (&s, &dp), (&mut d_v, &mut d_k))
        };
        arch::wgmma_wait::<0>(&mut d_v);
        if thread == 0 {
            // The last tile's bulk reduction has read the dQ block (long done: a tile ago).
            arch::bulk_wait_group_read_all();
        }
        arch::fence_proxy_async_shared(); // dS^T's writes, for the async proxy
        arch::sync_threads(); // dS^T whole; the dQ block free

        // 3. dQ += dS K.
        // Safety: dS^T whole and visible; every thread of the block calls it.
        unsafe { add_d_q::<T, D>(&g, smem, walk, (head, tile), warpgroup, deterministic) };
    }
    arch::cp_async_wait::<0>();
    if thread == 0 {
        arch::bulk_wait_group_all(); // the last reduction done before the block ends
    }
    // Safety: this block's keys of the launch's dK and dV.
    unsafe { write_d_k_d_v::<T, D, O_REGS>(&g, &problem, walk, key, [&d_k, &d_v]) };
}
