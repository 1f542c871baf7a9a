//! `flash_ws`: warp-specialised FlashAttention for Hopper (sm_90a), in the manner of
//! FlashAttention-3.
//!
//! The block is one *producer* warpgroup and `CONSUMERS` *consumer* warpgroups (64 query rows
//! each, `BLOCK_M = 64 * CONSUMERS`). They never meet at a block barrier inside the KV loop:
//!
//! - The producer (one thread of warpgroup 0, its registers cut to `PRODUCER_REGS` by
//!   `setmaxnreg`) copies Q once and then K and V tile by tile with the tensor memory
//!   accelerator, into a ring of `STAGES` slots. Each slot has four mbarriers: K full, V full
//!   (the copy's bytes landed), K empty, V empty (every consumer warp is done reading).
//! - The consumers (registers raised to `CONSUMER_REGS`) wait for "full", multiply with `wgmma`
//!   straight from the 128-byte-swizzled tiles the copy engine wrote, and arrive on "empty" as
//!   soon as their products have read a tile, so the producer refills it while they compute.
//!   K and V have barriers of their own, so S = Q K^T starts before V has landed.
//! - `PINGPONG`: the consumer warpgroups take turns at the tensor cores (named barriers in a
//!   ring), so one warpgroup's softmax runs under another's products.
//! - `OVERLAP`: inside a warpgroup, the next tile's S = Q K^T and this tile's O += P V are issued
//!   together and left running; the softmax of the new S runs while O += P V is still in the
//!   tensor cores (two chains in flight, `wgmma.wait_group 1`).
//!
//! Tails need no care: the copy engine fills rows past the end of a sequence with zeros, and
//! masking sends their scores to -inf.

use super::{record_barriers, start_counting, Problem};
use crate::arch::{self, SharedAddr};
use crate::softmax::{self, RowState};
use crate::tile::swizzled::{self, ATOM_BYTES, ROW_BYTES};
use crate::tile::Element;

/// Registers per thread of the producer warpgroup, which only issues copies.
const PRODUCER_REGS: u32 = 24;
/// Registers per thread of a consumer warpgroup with two consumers: 128 x 24 + 256 x 240 fits the
/// 64K register file.
const CONSUMER_REGS: u32 = 240;

/// The tensor maps the host encodes for each call, in this order, 128 bytes apart.
const MAP_Q: usize = 0;
const MAP_K: usize = 1;
const MAP_V: usize = 2;
const MAP_BYTES: usize = 128;

/// Shared memory the kernel needs: slack to align the tiles to 1024 bytes, the Q tile, `STAGES`
/// K and V tiles, and the mbarriers (Q full, then K full, V full, K empty, V empty per stage).
pub const fn smem_bytes(d: usize, block_m: usize, block_n: usize, stages: usize) -> u32 {
    ATOM_BYTES
        + swizzled::tile_bytes(block_m, d)
        + 2 * stages as u32 * swizzled::tile_bytes(block_n, d)
        + 8 * (1 + 4 * stages as u32)
}

/// Where the tiles and the barriers live in shared memory.
#[derive(Clone, Copy)]
struct Plan<const D: usize, const BLOCK_N: usize, const STAGES: usize> {
    q: SharedAddr,
    kv: SharedAddr,
    barriers: SharedAddr,
}

impl<const D: usize, const BLOCK_N: usize, const STAGES: usize> Plan<D, BLOCK_N, STAGES> {
    const KV_TILE: u32 = swizzled::tile_bytes(BLOCK_N, D);

    #[inline(always)]
    fn new(block_m: u32) -> Self {
        let q = (arch::dynamic_smem_base() + ATOM_BYTES - 1) & !(ATOM_BYTES - 1);
        let kv = q + swizzled::tile_bytes(block_m as usize, D);
        let barriers = kv + 2 * STAGES as u32 * Self::KV_TILE;
        Plan { q, kv, barriers }
    }
    #[inline(always)]
    fn k(&self, stage: u32) -> SharedAddr {
        self.kv + stage * 2 * Self::KV_TILE
    }
    #[inline(always)]
    fn v(&self, stage: u32) -> SharedAddr {
        self.k(stage) + Self::KV_TILE
    }
    #[inline(always)]
    fn q_full(&self) -> SharedAddr {
        self.barriers
    }
    /// Barrier `kind` (0 K full, 1 V full, 2 K empty, 3 V empty) of `stage`.
    #[inline(always)]
    fn barrier(&self, kind: u32, stage: u32) -> SharedAddr {
        self.barriers + 8 * (1 + kind * STAGES as u32 + stage)
    }
}

const K_FULL: u32 = 0;
const V_FULL: u32 = 1;
const K_EMPTY: u32 = 2;
const V_EMPTY: u32 = 3;

/// Tile `t`'s slot in the ring and the parity of its round (the phase its barriers complete).
#[inline(always)]
fn slot<const STAGES: usize>(t: u32) -> (u32, u32) {
    (t % STAGES as u32, (t / STAGES as u32) & 1)
}

/// The kernel body (see the module's documentation).
///
/// # Safety
/// Launched with `128 * (CONSUMERS + 1)` threads, `smem_bytes(..)` of dynamic shared memory, the
/// grid of `attention`'s convention, an output buffer of the shape `problem` describes and `maps`
/// pointing at the encoded tensor maps of Q, K and V (`src/tma.rs`) for this shape and tiles.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
pub unsafe fn flash_ws<
    T: Element,
    const COUNT: bool,
    const D: usize,
    const BLOCK_N: usize,
    const CONSUMERS: usize,
    const STAGES: usize,
    const PINGPONG: bool,
    const OVERLAP: bool,
    // Derived sizes, spelled out because stable Rust cannot compute array lengths from generics.
    const S_REGS: usize,
    const O_REGS: usize,
    const PV_STEPS: usize,
>(
    q: *const u16,
    k: *const u16,
    v: *const u16,
    out: *mut u16,
    problem: Problem,
    barrier_log: *mut u32,
    maps: *const u8,
) {
    const {
        assert!(S_REGS * 2 == BLOCK_N && O_REGS * 2 == D && PV_STEPS * 16 == BLOCK_N);
        assert!(D.is_multiple_of(64) && BLOCK_N.is_multiple_of(16) && STAGES >= 1 && CONSUMERS == 2);
    };
    let _ = (q, k, v); // read through the tensor maps
    let block_m = 64 * CONSUMERS as u32;
    let thread = arch::thread_idx_x();
    let Some(head) = problem.head() else {
        return; // past the last head (the grid's z slices round B*H up): before any barrier
    };
    let first_row = arch::block_idx_x() * block_m;
    let tiles = problem.kv_tiles(first_row, block_m, BLOCK_N as u32);
    let plan = Plan::<D, BLOCK_N, STAGES>::new(block_m);

    if thread == 0 {
        arch::mbarrier_init(plan.q_full(), 1);
        for stage in 0..STAGES as u32 {
            arch::mbarrier_init(plan.barrier(K_FULL, stage), 1);
            arch::mbarrier_init(plan.barrier(V_FULL, stage), 1);
            // Every consumer warp arrives once it has read the tile.
            arch::mbarrier_init(plan.barrier(K_EMPTY, stage), 4 * CONSUMERS as u32);
            arch::mbarrier_init(plan.barrier(V_EMPTY, stage), 4 * CONSUMERS as u32);
        }
        arch::fence_mbarrier_init();
    }
    // The one block barrier: the mbarriers exist before anyone waits on them.
    arch::sync_threads();
    // The instrumented twin's clock and record belong to the first consumer thread: the producer
    // finishes issuing long before the block is done, and a block barrier at the end to wait for
    // the consumers is what the warp-specialised kernel must not have (the producer thread's warp
    // has parted ways; such a barrier hung the counted twin on the H100).
    const RECORDER: u32 = 128;
    let loop_start = start_counting::<COUNT>(RECORDER);

    let warpgroup = arch::warp_id() / 4;
    if warpgroup == 0 {
        arch::setmaxnreg_dec::<PRODUCER_REGS>();
        if thread == 0 {
            produce::<D, BLOCK_N, STAGES>(&plan, &problem, maps, head, first_row, block_m, tiles);
        }
    } else {
        arch::setmaxnreg_inc::<CONSUMER_REGS>();
        consume::<T, D, BLOCK_N, CONSUMERS, STAGES, PINGPONG, OVERLAP, S_REGS, O_REGS, PV_STEPS>(
            &plan,
            &problem,
            out,
            head,
            first_row,
            tiles,
            warpgroup - 1,
        );
    }
    if COUNT {
        record_barriers(barrier_log, tiles, loop_start, RECORDER);
    }
}

/// The producer: one thread issues every copy of the block.
#[inline(always)]
unsafe fn produce<const D: usize, const BLOCK_N: usize, const STAGES: usize>(
    plan: &Plan<D, BLOCK_N, STAGES>,
    problem: &Problem,
    maps: *const u8,
    head: usize,
    first_row: u32,
    block_m: u32,
    tiles: u32,
) {
    let map = |i: usize| maps.add(i * MAP_BYTES);
    for i in [MAP_Q, MAP_K, MAP_V] {
        arch::prefetch_tensormap(map(i));
    }
    // The maps are 4-d, innermost first: (head dim, sequence, head, batch), in either layout.
    let heads = problem.heads as usize;
    let (batch, q_head) = ((head / heads) as i32, (head % heads) as i32);
    let kv_head = q_head / problem.kv_group as i32;
    // A tile is D / 64 boxes of 64 columns (128 bytes, the swizzle span), one column block each.
    let load = |dst: SharedAddr, rows: u32, m: usize, bar: SharedAddr, row: u32, head: i32| {
        for block in 0..D as u32 / 64 {
            let at = [64 * block as i32, row as i32, head, batch];
            arch::tma_load_4d(dst + block * swizzled::column_block_bytes(rows), map(m), bar, at);
        }
    };

    arch::mbarrier_arrive_expect_tx(plan.q_full(), swizzled::tile_bytes(block_m as usize, D));
    load(plan.q, block_m, MAP_Q, plan.q_full(), first_row, q_head);
    let kv_bytes = swizzled::tile_bytes(BLOCK_N, D);
    for t in 0..tiles {
        let (stage, parity) = slot::<STAGES>(t);
        let first_key = t * BLOCK_N as u32;
        // Parity flipped: the first round finds every slot free.
        arch::mbarrier_wait(plan.barrier(K_EMPTY, stage), parity ^ 1);
        arch::mbarrier_arrive_expect_tx(plan.barrier(K_FULL, stage), kv_bytes);
        load(
            plan.k(stage),
            BLOCK_N as u32,
            MAP_K,
            plan.barrier(K_FULL, stage),
            first_key,
            kv_head,
        );
        arch::mbarrier_wait(plan.barrier(V_EMPTY, stage), parity ^ 1);
        arch::mbarrier_arrive_expect_tx(plan.barrier(V_FULL, stage), kv_bytes);
        load(
            plan.v(stage),
            BLOCK_N as u32,
            MAP_V,
            plan.barrier(V_FULL, stage),
            first_key,
            kv_head,
        );
    }
}

/// A consumer warpgroup: 64 query rows, all of the block's KV tiles.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
unsafe fn consume<
    T: Element,
    const D: usize,
    const BLOCK_N: usize,
    const CONSUMERS: usize,
    const STAGES: usize,
    const PINGPONG: bool,
    const OVERLAP: bool,
    const S_REGS: usize,
    const O_REGS: usize,
    const PV_STEPS: usize,
>(
    plan: &Plan<D, BLOCK_N, STAGES>,
    problem: &Problem,
    out: *mut u16,
    head: usize,
    first_row: u32,
    tiles: u32,
    consumer: u32,
) {
    let k_steps = D / 16;
    let block_m = 64 * CONSUMERS as u32;
    let lane = arch::lane_id();
    let warp = arch::warp_id() % 4;
    let group_row0 = 64 * consumer;
    let warp_row0 = group_row0 + 16 * warp;
    let (group, pair) = (lane / 4, lane % 4);
    let row_of = |half: u32| first_row + warp_row0 + 8 * half + group;
    let key_end = [problem.key_end(row_of(0)), problem.key_end(row_of(1))];
    let warp_key_end = problem.key_end(first_row + warp_row0);
    let group_key_end = problem.key_end(first_row + group_row0 + 63);
    // A warpgroup-uniform test (wgmma needs all four warps): does tile `t` have a key for us?
    let active = |t: u32| t * (BLOCK_N as u32) < group_key_end;

    let q_desc = |ks: usize| {
        let ks = ks as u32;
        let addr = plan.q + (ks / 4) * swizzled::column_block_bytes(block_m) + group_row0 * ROW_BYTES;
        arch::smem_descriptor_sw128(addr + (ks % 4) * 32, 16, ATOM_BYTES)
    };
    let k_desc = |stage: u32, ks: usize| {
        let ks = ks as u32;
        let addr = plan.k(stage) + (ks / 4) * swizzled::column_block_bytes(BLOCK_N as u32);
        arch::smem_descriptor_sw128(addr + (ks % 4) * 32, 16, ATOM_BYTES)
    };
    let v_desc = |stage: u32, kk: usize| {
        let addr = plan.v(stage) + (kk as u32) * 2 * ATOM_BYTES;
        arch::smem_descriptor_sw128(addr, swizzled::column_block_bytes(BLOCK_N as u32), ATOM_BYTES)
    };

    // Named barrier `WARP_SPECIALISED_FIRST + c` is consumer c's turn at the tensor cores; a
    // hand-over counts the waiting and the arriving warpgroup, 256 threads.
    let turn = |c: u32| arch::barrier_id::WARP_SPECIALISED_FIRST + c;
    let my_turn = turn(consumer);
    let next_turn = turn((consumer + 1) % CONSUMERS as u32);
    let wait_turn = || {
        if PINGPONG {
            arch::named_barrier_sync(my_turn, 256);
        }
    };
    let pass_turn = || {
        if PINGPONG {
            arch::named_barrier_arrive(next_turn, 256);
        }
    };
    if PINGPONG && consumer + 1 == CONSUMERS as u32 {
        pass_turn(); // consumer 0 goes first
    }
    // One arrival per warp on an "empty" barrier, once this warp's products have read the tile.
    let release = |kind: u32, stage: u32| {
        if lane == 0 {
            arch::mbarrier_arrive(plan.barrier(kind, stage));
        }
    };

    let mut state = [RowState::EMPTY; 2];
    let mut o_acc = [0.0f32; O_REGS];
    let mut p_frag = [[0u32; 4]; PV_STEPS];
    let scores = |s_acc: &mut [f32; S_REGS], stage: u32, leave_running: bool| {
        for ks in 0..k_steps {
            // Two expansions with constant ends, so that each call site is one straight chain.
            if leave_running {
                chained!(
                    ks,
                    k_steps,
                    true,
                    T::wgmma_ss::<S_REGS>(s_acc, q_desc(ks), k_desc(stage, ks), ks > 0)
                );
            } else {
                chained!(
                    ks,
                    k_steps,
                    false,
                    T::wgmma_ss::<S_REGS>(s_acc, q_desc(ks), k_desc(stage, ks), ks > 0)
                );
            }
        }
    };
    let attend =
        |o_acc: &mut [f32; O_REGS], p_frag: &[[u32; 4]; PV_STEPS], stage: u32, leave_running: bool| {
            for (kk, &a) in p_frag.iter().enumerate() {
                if leave_running {
                    chained!(
                        kk,
                        PV_STEPS,
                        true,
                        T::wgmma_rs::<O_REGS>(o_acc, a, v_desc(stage, kk), true)
                    );
                } else {
                    chained!(
                        kk,
                        PV_STEPS,
                        false,
                        T::wgmma_rs::<O_REGS>(o_acc, a, v_desc(stage, kk), true)
                    );
                }
            }
        };

    // S is never zeroed: the first product of a chain overwrites it (`accumulate` false), and
    // reusing one array keeps non-wgmma writes out of the chains that ptxas would have to fence.
    let mut s_acc = [0.0f32; S_REGS];
    arch::mbarrier_wait(plan.q_full(), 0);
    if OVERLAP {
        // Tile 0's scores alone; then every step issues tile t's scores with tile t - 1's P V.
        if tiles > 0 {
            arch::mbarrier_wait(plan.barrier(K_FULL, 0), 0);
            wait_turn();
            if active(0) {
                scores(&mut s_acc, 0, false);
            }
            pass_turn();
            release(K_EMPTY, 0);
            if active(0) {
                // Nothing is accumulated yet, so the correction has nothing to scale.
                let _ = softmax_tile(&mut s_acc, &mut state, 0, warp_key_end, key_end, pair, problem);
                pack::<T, S_REGS, PV_STEPS>(&s_acc, &mut p_frag);
            }
        }
        for t in 1..tiles {
            let (stage, parity) = slot::<STAGES>(t);
            let (prev_stage, prev_parity) = slot::<STAGES>(t - 1);
            arch::mbarrier_wait(plan.barrier(K_FULL, stage), parity);
            arch::mbarrier_wait(plan.barrier(V_FULL, prev_stage), prev_parity);
            if active(t) {
                // Tile t - 1 is active too: a warpgroup's active tiles are a prefix.
                wait_turn();
                scores(&mut s_acc, stage, true);
                attend(&mut o_acc, &p_frag, prev_stage, true);
                pass_turn();
                arch::wgmma_wait::<1, S_REGS>(&mut s_acc);
                release(K_EMPTY, stage);
                let correction =
                    softmax_tile(&mut s_acc, &mut state, t, warp_key_end, key_end, pair, problem);
                rescale_after_wait(&mut o_acc, correction);
                release(V_EMPTY, prev_stage);
                pack::<T, S_REGS, PV_STEPS>(&s_acc, &mut p_frag);
            } else {
                wait_turn();
                if active(t - 1) {
                    attend(&mut o_acc, &p_frag, prev_stage, false);
                }
                pass_turn();
                release(K_EMPTY, stage);
                release(V_EMPTY, prev_stage);
            }
        }
        if tiles > 0 {
            let (stage, parity) = slot::<STAGES>(tiles - 1);
            arch::mbarrier_wait(plan.barrier(V_FULL, stage), parity);
            wait_turn();
            if active(tiles - 1) {
                attend(&mut o_acc, &p_frag, stage, false);
            }
            pass_turn();
            release(V_EMPTY, stage);
        }
    } else {
        for t in 0..tiles {
            let (stage, parity) = slot::<STAGES>(t);
            arch::mbarrier_wait(plan.barrier(K_FULL, stage), parity);
            wait_turn();
            if active(t) {
                scores(&mut s_acc, stage, false);
            }
            pass_turn();
            release(K_EMPTY, stage);
            if active(t) {
                let correction =
                    softmax_tile(&mut s_acc, &mut state, t, warp_key_end, key_end, pair, problem);
                rescale(&mut o_acc, correction);
                pack::<T, S_REGS, PV_STEPS>(&s_acc, &mut p_frag);
            }
            arch::mbarrier_wait(plan.barrier(V_FULL, stage), parity);
            wait_turn();
            if active(t) {
                attend(&mut o_acc, &p_frag, stage, false);
            }
            pass_turn();
            release(V_EMPTY, stage);
        }
    }
    if PINGPONG && consumer == 0 {
        wait_turn(); // the last warpgroup's final hand-over: leave no barrier half-arrived
    }

    for h in 0..2 {
        state[h].row_sum = arch::quad_sum(state[h].row_sum);
        let row = row_of(h as u32);
        if row < problem.seq_q {
            if pair == 0 {
                problem.write_lse(head, row, &state[h]);
            }
            let norm = state[h].normaliser();
            let o = problem.out_row::<D>(out, head, row) as *mut u32;
            for j in 0..D / 8 {
                let packed = T::pack(o_acc[4 * j + 2 * h] * norm, o_acc[4 * j + 2 * h + 1] * norm);
                arch::st_global_u32(o.add(4 * j + pair as usize), packed);
            }
        }
    }
}

/// The online softmax of one tile of scores held in `wgmma` accumulators (per warp the layout of
/// `mma.sync.m16n8`: register `4j + e` is key `8j + 2 * pair + e % 2` of row half `e / 2`):
/// masks keys past each row's end, raises the row maxima, turns the scores into probabilities in
/// place and adds them to this lane's partial row sums. Returns each row half's correction factor
/// for the output accumulated so far.
#[inline(always)]
fn softmax_tile<const S_REGS: usize>(
    s_acc: &mut [f32; S_REGS],
    state: &mut [RowState; 2],
    tile: u32,
    warp_key_end: u32,
    key_end: [u32; 2],
    pair: u32,
    problem: &Problem,
) -> [f32; 2] {
    let first_key = tile * (2 * S_REGS) as u32;
    if first_key + (2 * S_REGS) as u32 > warp_key_end {
        for (r, s) in s_acc.iter_mut().enumerate() {
            let key = first_key + (8 * (r / 4)) as u32 + 2 * pair + (r % 2) as u32;
            if key >= key_end[(r % 4) / 2] {
                *s = f32::NEG_INFINITY;
            }
        }
    }
    let mut tile_max = [f32::NEG_INFINITY; 2];
    for (r, s) in s_acc.iter().enumerate() {
        tile_max[(r % 4) / 2] = arch::max(tile_max[(r % 4) / 2], *s);
    }
    let correction = [0, 1].map(|h| state[h].rescale(arch::quad_max(tile_max[h]), problem.scale_log2));
    let offset = [0, 1].map(|h| state[h].offset(problem.scale_log2));
    for (r, s) in s_acc.iter_mut().enumerate() {
        *s = softmax::probability(*s, problem.scale_log2, offset[(r % 4) / 2]);
        state[(r % 4) / 2].row_sum += *s;
    }
    correction
}

/// Scales the output accumulator by the row halves' correction factors, unless no row of the
/// warp moved its maximum.
#[inline(always)]
fn rescale<const O_REGS: usize>(o_acc: &mut [f32; O_REGS], correction: [f32; 2]) {
    if arch::warp_any(correction[0] != 1.0 || correction[1] != 1.0) {
        for (r, x) in o_acc.iter_mut().enumerate() {
            *x *= correction[(r % 4) / 2];
        }
    }
}

#[inline(always)]
fn rescale_after_wait<const O_REGS: usize>(o_acc: &mut [f32; O_REGS], correction: [f32; 2]) {
    if arch::warp_any(correction[0] != 1.0 || correction[1] != 1.0) {
        arch::wgmma_wait::<0, O_REGS>(o_acc);
        for (r, x) in o_acc.iter_mut().enumerate() {
            *x *= correction[(r % 4) / 2];
        }
    } else {
        arch::wgmma_wait_tagged::<0, O_REGS, 1>(o_acc);
    }
}

/// Packs the probabilities into `wgmma` A fragments: keys 16kk .. 16kk + 15 are registers
/// 8kk .. 8kk + 7. Each packed register is pinned, so that all of P exists before the first
/// product that reads it and the chain runs without a fence.
#[inline(always)]
fn pack<T: Element, const S_REGS: usize, const PV_STEPS: usize>(
    s_acc: &[f32; S_REGS],
    p_frag: &mut [[u32; 4]; PV_STEPS],
) {
    for (kk, frag) in p_frag.iter_mut().enumerate() {
        for (i, half2) in frag.iter_mut().enumerate() {
            *half2 = T::pack(s_acc[8 * kk + 2 * i], s_acc[8 * kk + 2 * i + 1]);
            arch::fence_operand(half2);
        }
    }
}
