//! The backward's main kernel on Hopper's warpgroup tensor cores (`wgmma`, sm_90a), at head dims
//! 64 and 128. The walk is `kv_block`'s (`walk::Walk`): one block per `BLOCK_N` = 128 keys of a
//! KV head, K and V resident in shared memory, every query tile that sees those keys streamed
//! through two stages by `cp.async` into the 128-byte swizzle layout. Each of the two warpgroups
//! owns 64 of the keys; per query tile of 64 rows (`tile_step`), each product left running under
//! the work that does not need it:
//!
//! 1. S^T = K Q^T and dP^T = V dO^T (64 keys x 64 queries a warpgroup; K, V, Q and dO all
//!    K-major from shared memory), issued together; P^T = exp2(S^T scale - lse) while dP^T
//!    runs, then dS^T = P^T (dP^T - delta), in the accumulator layout.
//! 2. dV += P^T dO: the accumulator layout of P^T is that of `wgmma`'s A fragments, so it goes in
//!    from registers, dO as an MN-major B operand (the head dim contiguous). Under it dS^T goes
//!    to shared memory, and the warpgroups meet (the one barrier between them in the tile but
//!    the stage's).
//! 3. dQ = dS K, both operands MN-major as they are stored: at head dim 128 each warpgroup takes
//!    half the head dim over all 128 keys, at 64 the whole head dim over its own keys. Once dV
//!    is done, dK += dS^T Q from registers like dV; once dQ is done, the warpgroup's part goes to
//!    its own staging block in the accumulators' order (`backward_launch::warpgroup::dq_index`)
//!    and into the workspace's fp32 accumulator by one bulk reduction of the copy engine, all
//!    under dK. Per-element `red.add`s from every thread were the kernel's bottleneck (L2's
//!    atomic throughput: head dim 64 took as long as 128). Under the deterministic order the
//!    parts of a tile go in one after another, key block by key block, warpgroup by warpgroup.
//!
//! dK and dV stay in registers for the walk. Block barriers per tile: the stage has landed
//! (which also says both warpgroups are done with the tile before, its stage and dS^T) and dS^T
//! is whole; each warpgroup's dQ part is staged behind a barrier of its own.

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
/// Floats of a warpgroup's part of a tile's dQ (`layout::WARPGROUP_DQ_BYTES`).
const WARPGROUP_DQ_FLOATS: usize = layout::WARPGROUP_DQ_BYTES as usize / 4;

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
    fn d_q(self, warpgroup: u32) -> SharedAddr {
        self.base + layout::d_q(D as u32, warpgroup)
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

/// Visits this thread's elements of a 64 x 64 accumulator, keys as rows, with their query rows'
/// statistic from `stat` (the stage's log-sum-exps or deltas, one float per query):
/// `f(e, query, half, value)` for register `e`, which holds key `key + 8 half` and query column
/// `query` of the tile. One 8-byte load reads a column pair's statistics.
///
/// # Safety
/// `stat` holds the stage's `BLOCK_M` statistics, landed.
#[inline(always)]
unsafe fn for_each_element(stat: SharedAddr, mut f: impl FnMut(usize, u32, usize, f32)) {
    let quad = arch::lane_id() % 4;
    for j in 0..SQUARE_REGS / 4 {
        let query = 8 * j as u32 + 2 * quad;
        // Safety: inside the stage's statistics (the caller's contract).
        let values = unsafe { arch::ld_shared_v2_u32(stat + 4 * query) }.map(f32::from_bits);
        for (pair, &value) in values.iter().enumerate() {
            for half in 0..2 {
                f(4 * j + 2 * half + pair, query + pair as u32, half, value);
            }
        }
    }
}

/// Step 1's exponentials, in place: S^T becomes P^T = exp2(S^T scale - lse) for this thread's keys
/// (`key`, `key + 8` of the head, whose rows `rows` says) and the tile's queries from `row0`, 0
/// where the mask hides the pair. `whole`: every row of the tile sees both keys. `SOFTCAP`: the
/// scores go through the problem's softcap first, and `slope` gets each element's derivative
/// of it (1 - tanh^2; it stays 1 otherwise).
///
/// # Safety
/// `lse2` is the stage's log-sum-exps, landed.
#[inline(always)]
unsafe fn exponentials<const SOFTCAP: bool>(
    problem: &Problem,
    (s, slope): (&mut [f32; SQUARE_REGS], &mut [f32; SQUARE_REGS]),
    lse2: SharedAddr,
    (row0, rows, whole): (u32, KeyRows, bool),
) {
    // Safety: the caller's contract.
    unsafe {
        for_each_element(lse2, |e, query, half, lse2| {
            let score = if SOFTCAP {
                // The capped score is softcap tanh(s / softcap); its slope in s is 1 - tanh^2.
                let tanh = problem.softcap_tanh(s[e]);
                slope[e] = 1.0 - tanh * tanh;
                problem.softcap * tanh
            } else {
                s[e]
            };
            let row = row0 + query;
            s[e] = if whole || (row >= rows.first[half] && row < rows.end[half]) {
                arch::exp2(arch::fma(score, problem.scale_log2, -lse2))
            } else {
                0.0
            };
        })
    };
}

/// Step 1's gradients, in place: dP^T becomes dS^T = P^T slope (dP^T - delta).
///
/// # Safety
/// `delta` is the stage's deltas, landed.
#[inline(always)]
unsafe fn score_gradients(
    dp: &mut [f32; SQUARE_REGS],
    (p, slope): (&[f32; SQUARE_REGS], &[f32; SQUARE_REGS]),
    delta: SharedAddr,
) {
    // Safety: the caller's contract.
    unsafe { for_each_element(delta, |e, _, _, delta| dp[e] = p[e] * slope[e] * (dp[e] - delta)) };
}

/// Packs a 64 x 64 accumulator (P^T or dS^T) as `wgmma` A fragments, each register pinned so
/// that all of them exist before the first product that reads them.
#[inline(always)]
fn pack<T: Element>(x: &[f32; SQUARE_REGS]) -> [[u32; 4]; QUERY_STEPS] {
    let mut frags = [[0u32; 4]; QUERY_STEPS];
    for kk in 0..QUERY_STEPS {
        frags[kk] = T::pack_probabilities(x, kk);
    }
    pin(&mut frags);
    frags
}

/// Pins each register of A fragments, so that they stay live (unchanged) up to this point: after
/// the wait of the chain that reads them.
#[inline(always)]
fn pin(frags: &mut [[u32; 4]; QUERY_STEPS]) {
    for kk in 0..QUERY_STEPS {
        for i in 0..4 {
            arch::fence_operand(&mut frags[kk][i]);
        }
    }
}

/// dS^T's A fragments to shared memory, where dQ's product reads them: register i of step kk
/// holds key row `key_row + 8 (i % 2)`, queries `16 kk + 8 (i / 2) + 2 quad` and the next.
///
/// # Safety
/// dS^T is free (no product of the tile before still reads it).
#[inline(always)]
unsafe fn store_d_scores<const D: usize>(smem: Smem<D>, key_row: u32, frags: &[[u32; 4]; QUERY_STEPS]) {
    let quad = arch::lane_id() % 4;
    for (kk, frag) in frags.iter().enumerate() {
        for (i, &word) in frag.iter().enumerate() {
            let (row, chunk) = (key_row + 8 * (i as u32 % 2), 2 * kk as u32 + i as u32 / 2);
            let at = smem.d_scores() + swizzled::chunk_offset(row, chunk, BLOCK_N) + 4 * quad;
            // Safety: inside dS^T (the caller's contract).
            unsafe { arch::st_shared_u32(at, word) };
        }
    }
}

/// Issues `acc = A B^T` over the head dim, A this warpgroup's 64 keys of a key tile (K or V, rows
/// `key0 ..`) and B the stage's query tile (Q or dO), both K-major from shared memory: S^T or
/// dP^T. Left running.
///
/// # Safety
/// The whole warpgroup; both tiles landed.
#[inline(always)]
unsafe fn square_product<T: Element, const D: usize>(
    acc: &mut [f32; SQUARE_REGS],
    (a, key0): (SharedAddr, u32),
    b: SharedAddr,
) {
    let steps = D / 16;
    // Safety: the caller's contract.
    unsafe {
        for ks in 0..steps {
            chained!(ks, steps, true, |C| T::wgmma_ss::<C, SQUARE_REGS>(
                acc,
                k_major(a, BLOCK_N, key0, ks),
                k_major(b, BLOCK_M, 0, ks),
                ks > 0
            ));
        }
    }
}

/// Issues `acc (+)= frags B` with A from registers, one k-step per 16 queries of the tile, and B
/// (dO or Q of the stage) MN-major: dV += P^T dO or dK += dS^T Q. Left running.
///
/// # Safety
/// The whole warpgroup; `b` is a landed `BLOCK_M x D` tile of the stage.
#[inline(always)]
unsafe fn gradient_product<T: Element, const O_REGS: usize>(
    acc: &mut [f32; O_REGS],
    frags: &[[u32; 4]; QUERY_STEPS],
    b: SharedAddr,
) {
    // Safety: the caller's contract.
    unsafe {
        for kk in 0..QUERY_STEPS {
            chained!(kk, QUERY_STEPS, true, |C| T::wgmma_rs::<C, O_REGS>(
                acc,
                frags[kk],
                mn_major(b, BLOCK_M, kk),
                true
            ));
        }
    }
}

/// Issues step 3's product, dQ = dS K, this warpgroup's part: at head dim 128 half the head
/// dim (one column block of K) over all the keys, at 64 the whole head dim over its own keys.
/// Left running.
///
/// # Safety
/// The whole warpgroup; dS^T is whole in shared memory and visible to the async proxy.
#[inline(always)]
unsafe fn issue_d_q<T: Element, const D: usize>(smem: Smem<D>, warpgroup: u32, d_q: &mut [f32; SQUARE_REGS]) {
    let (keys, d_scores, k) = if D == 128 {
        let column_block = warpgroup * swizzled::column_block_bytes(BLOCK_N);
        (BLOCK_N, smem.d_scores(), smem.k() + column_block)
    } else {
        let rows = WARPGROUP_KEYS * warpgroup * ROW_BYTES;
        (WARPGROUP_KEYS, smem.d_scores() + rows, smem.k() + rows)
    };
    let steps = (keys / 16) as usize;
    // Safety: the whole warpgroup, on dS^T and K of this block's shared memory (the contract).
    unsafe {
        for kk in 0..steps {
            chained!(kk, steps, true, |C| T::wgmma_ss_mn::<C, SQUARE_REGS>(
                d_q,
                mn_major(d_scores, BLOCK_N, kk),
                mn_major(k, BLOCK_N, kk),
                kk > 0
            ));
        }
    }
}

/// Step 3's end: this warpgroup's part of dQ for the tile `(head, tile)` to its staging block in
/// `dq_index` order (register pair e of thread t at 256 e + 2 t), then added into the
/// workspace's accumulator by one bulk reduction that the warpgroup's first thread issues. In
/// the deterministic order (when given the problem) the parts of a tile go in one after another:
/// warpgroup w of the key block whose step is `Walk::turn` adds its part as the tile's
/// `2 turn + w`, once the one before has landed.
///
/// # Safety
/// The whole warpgroup; the staging block is free (its last reduction has read it).
#[inline(always)]
unsafe fn add_d_q<const D: usize>(
    g: &Grads,
    (smem, walk): (Smem<D>, Walk),
    (head, tile): (usize, u32),
    warpgroup: u32,
    deterministic: Option<&Problem>,
    d_q: &[f32; SQUARE_REGS],
) {
    let t = arch::thread_idx_x() % 128;
    let staged = smem.d_q(warpgroup);
    // Safety: the staging block, free (the caller's contract).
    unsafe {
        for pair in 0..SQUARE_REGS / 2 {
            let value = [d_q[2 * pair].to_bits(), d_q[2 * pair + 1].to_bits()];
            arch::st_shared_v2_u32(staged + 4 * (256 * pair as u32 + 2 * t), value);
        }
    }
    arch::fence_proxy_async_shared(); // the block, for the copy engine's reads
    arch::named_barrier_sync(barrier_id::BACKWARD_DQ_STAGED + warpgroup, 128);
    if t != 0 {
        return;
    }
    // Safety: the turn and accumulator block of a tile of the launch's workspace.
    unsafe {
        let turn = g.turns.add(head * walk.q_tiles as usize + tile as usize);
        // This part's place in the deterministic order (computed by the issuing thread only).
        let order = deterministic.map(|problem| 2 * walk.turn(problem, tile, BLOCK_N) + warpgroup);
        if let Some(order) = order {
            // The parts before this one in the order have landed.
            while arch::ld_acquire_u32(turn) != order {}
        }
        // Head dim 128: this warpgroup's columns are the block's `warpgroup`-th 4096 floats; 64:
        // both add into the whole block.
        let part = if D == 128 {
            WARPGROUP_DQ_FLOATS * warpgroup as usize
        } else {
            0
        };
        let accumulator = g
            .dq_accum
            .add((head * walk.padded_rows() as usize + (tile * BLOCK_M) as usize) * D + part);
        arch::bulk_reduce_add_f32(accumulator, staged, layout::WARPGROUP_DQ_BYTES);
        arch::bulk_commit_group();
        if let Some(order) = order {
            arch::bulk_wait_group_all();
            arch::fence_acq_rel_gpu(); // the reduction before the turn passes on
            arch::st_release_u32(turn, order + 1);
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
        // The tiles' descriptors, derived afresh in each iteration: hoisted out of the loop they
        // would hold some 50 registers across it, and head dim 128 would spill.
        let smem = Smem::<D> {
            base: smem.base.opaque(),
        };
        // Safety: the whole warpgroup, on this stage's landed tiles (the barrier above), the
        // block's K and V, and dS^T, free since that barrier.
        unsafe {
            tile_step::<T, D, O_REGS, SOFTCAP>(
                (&g, &problem, walk),
                (smem, stage, warpgroup),
                (head, tile, key, key_rows),
                (&mut d_v, &mut d_k),
                deterministic,
            )
        };
    }
    arch::cp_async_wait::<0>();
    if thread.is_multiple_of(128) {
        arch::bulk_wait_group_all(); // the warpgroup's last reduction done before the block ends
    }
    // Safety: this block's keys of the launch's dK and dV.
    unsafe { write_d_k_d_v::<T, D, O_REGS>(&g, &problem, walk, key, [&d_k, &d_v]) };
}

/// One query tile of the walk, for this thread's warpgroup: the five products, each left
/// running under the work that does not need it.
///
/// 1. S^T and dP^T issued together; P^T from S^T while dP^T runs, then dS^T.
/// 2. dV += P^T dO issued; dS^T to shared memory under it; the warpgroups meet (dS^T whole).
/// 3. dQ = dS K issued; once dV is done, dK += dS^T Q issued; once dQ is done, its part goes to
///    shared memory and into the workspace under dK, which is waited for last.
///
/// # Safety
/// The whole block calls it at the same walk position; the stage's tiles and statistics have
/// landed and are visible; dS^T is free.
#[inline(always)]
unsafe fn tile_step<T: Element, const D: usize, const O_REGS: usize, const SOFTCAP: bool>(
    (g, problem, walk): (&Grads, &Problem, Walk),
    (smem, stage, warpgroup): (Smem<D>, u32, u32),
    (head, tile, key, key_rows): (usize, u32, u32, KeyRows),
    (d_v, d_k): (&mut [f32; O_REGS], &mut [f32; O_REGS]),
    deterministic: bool,
) {
    let warpgroup_key0 = WARPGROUP_KEYS * warpgroup;
    let row0 = tile * BLOCK_M;
    // 1. S^T = K Q^T and dP^T = V dO^T.
    let mut s = [0f32; SQUARE_REGS];
    let mut dp = [0f32; SQUARE_REGS];
    // Safety: the whole warpgroup, on this stage's tiles and the block's K and V.
    unsafe {
        square_product::<T, D>(&mut s, (smem.k(), warpgroup_key0), smem.q(stage));
        square_product::<T, D>(&mut dp, (smem.v(), warpgroup_key0), smem.d_out(stage));
    }
    let mut slope = [1f32; SQUARE_REGS];
    arch::wgmma_wait::<1>(&mut s);
    // Safety: the stage's statistics landed with its tiles.
    unsafe {
        let whole = key_rows.whole(row0);
        exponentials::<SOFTCAP>(
            problem,
            (&mut s, &mut slope),
            smem.lse2(stage),
            (row0, key_rows, whole),
        );
    }
    arch::wgmma_wait::<0>(&mut dp);
    // Safety: as above.
    unsafe { score_gradients(&mut dp, (&s, &slope), smem.delta(stage)) };

    // 2. dV += P^T dO under dS^T's stores.
    let mut p_frags = pack::<T>(&s);
    let mut ds_frags = pack::<T>(&dp);
    let first_thread = arch::thread_idx_x().is_multiple_of(128);
    // Safety: the whole warpgroup; dO landed; dS^T free (the contract).
    unsafe {
        gradient_product::<T, O_REGS>(d_v, &p_frags, smem.d_out(stage));
        store_d_scores(smem, key - walk.key0, &ds_frags);
    }
    if first_thread {
        // The warpgroup's last reduction has read its dQ staging block (issued a tile ago).
        arch::bulk_wait_group_read_all();
    }
    arch::fence_proxy_async_shared(); // dS^T's writes, for the async proxy
    arch::named_barrier_sync(barrier_id::BACKWARD_DS_WHOLE, THREADS);

    // 3. dQ = dS K, then dK += dS^T Q once dV's A registers are free.
    let mut d_q = [0f32; SQUARE_REGS];
    // Safety: the whole warpgroup; dS^T whole and visible; Q landed.
    unsafe {
        issue_d_q::<T, D>(smem, warpgroup, &mut d_q);
        arch::wgmma_wait::<1>(d_v);
        pin(&mut p_frags);
        gradient_product::<T, O_REGS>(d_k, &ds_frags, smem.q(stage));
    }
    arch::wgmma_wait::<1>(&mut d_q);
    // Safety: the whole warpgroup; the staging block was freed before the barrier above.
    unsafe {
        add_d_q::<D>(
            g,
            (smem, walk),
            (head, tile),
            warpgroup,
            deterministic.then_some(problem),
            &d_q,
        )
    };
    arch::wgmma_wait::<0>(d_k);
    pin(&mut ds_frags);
}
