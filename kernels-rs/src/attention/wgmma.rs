//! `flash_wgmma`: FlashAttention on Hopper's warpgroup tensor cores (`wgmma.mma_async`, sm_90a).
//!
//! The block is `WARPGROUPS` warpgroups of four warps; each warpgroup owns 64 query rows
//! (`BLOCK_M = 64 * WARPGROUPS`) and walks the keys in tiles of `BLOCK_N`, streamed `STAGES` deep
//! through shared memory by `cp.async` into the 128-byte swizzle layout (`tile::swizzled`), which
//! the tensor cores read directly: no `ldmatrix`, no padding. Per KV tile and warpgroup:
//! - S = Q K^T: `D / 16` chained `wgmma`s, Q and K both from shared memory (both K-major: the
//!   head dim is contiguous in each), S lands in registers, `BLOCK_N / 2` per thread.
//! - softmax on the accumulators, whose per-warp layout is that of `mma.sync.m16n8`: lane `4g + c`
//!   holds rows `g` and `g + 8` of its warp's 16, columns `2c, 2c + 1` of every 8 keys; row
//!   statistics are quad shuffles, as in `flash_mma`.
//! - O += P V: `BLOCK_N / 16` chained `wgmma`s with P packed from the accumulators into A
//!   registers and V from shared memory as a transposed (MN-major) B operand.
//!
//! The warpgroups share the K/V tiles; the two block barriers per tile of the light policy are
//! the only synchronisation of memory. Those barriers also line the warpgroups up at every tile,
//! so left alone they all multiply at once and then all compute softmax at once, the tensor
//! cores idle meanwhile. With `PINGPONG` the warpgroups take turns at the tensor cores (named
//! barriers in a ring, one per warpgroup): warpgroup g issues a product only after g - 1 issued
//! its own, so each softmax runs under another warpgroup's products.

use super::fragment::{Fragment, FragmentSoftmax};
use super::pipeline::KvPipeline;
use super::shape::{Accumulator, Tiles, WarpgroupShape};
use super::{record_barriers, start_counting, Buffers, Problem};
use crate::arch::{self, barrier_id, SmemDescriptor};
use crate::policy::{sync, BarrierPolicy, SyncPoint};
use crate::tile::swizzled::{self, ATOM_BYTES, ROW_BYTES};
use crate::tile::{Element, Swizzled128};

/// Shared memory the kernel needs, in bytes: one Q tile, `STAGES` K and V tiles, and slack to
/// align the first tile to 1024 bytes (the swizzle atom).
pub const fn smem_bytes(d: usize, block_m: usize, block_n: usize, stages: usize) -> u32 {
    ATOM_BYTES + swizzled::tile_bytes(block_m, d) + 2 * stages as u32 * swizzled::tile_bytes(block_n, d)
}

/// Exports one `flash_wgmma` variant of `kernels.toml`: the invocation `build.rs` writes for it
/// (symbol names, then `Spec::kernel_args`), expanded through `kernel!` in `lib.rs`.
macro_rules! flash_wgmma {
    ($name:ident $counted:ident $smem:ident $barriers:ident,
     $t:ty, $policy:ty, d = $d:literal, m = $bm:literal, n = $bn:literal, stages = $stages:literal,
     pingpong = $pp:literal) => {
        kernel!(@export $name, $counted, $smem,
            $crate::attention::wgmma::smem_bytes($d, $bm, $bn, $stages), $barriers,
            <$policy as $crate::policy::BarrierPolicy>::BARRIERS_PER_TILE, wait_at_entry = true,
            |io, p, COUNT| $crate::attention::wgmma::flash_wgmma::<
                $t, $policy, COUNT, $d, $bn, { $bm / 64 }, $stages, $pp,
                $crate::attention::shape::Warpgroup<$t, { $bn / 2 }, { $d / 2 }, { $bn / 16 }>,
            >(io, p));
    };
}

/// # Safety
/// Launched as `attention`'s calling convention says: `q`, `k`, `v` and `out` hold the tensors
/// `problem` describes (and `problem.lse`, when not null, `[B, H, S_q]` fp32), the grid covers
/// `problem`, the block has `128 * WARPGROUPS` threads and the `smem_bytes` of dynamic shared memory, and with
/// `COUNT` `barrier_log` holds `launch::record::WORDS` `u32` per block.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
pub unsafe fn flash_wgmma<
    T: Element,
    P: BarrierPolicy,
    const COUNT: bool,
    const D: usize,
    const BLOCK_N: usize,
    const WARPGROUPS: usize,
    const STAGES: usize,
    const PINGPONG: bool,
    // A warpgroup's registers for a tile (`shape::Warpgroup`).
    G: WarpgroupShape<Input = T>,
>(
    io: Buffers,
    problem: Problem,
) {
    const {
        assert!(G::KEYS == BLOCK_N && G::D == D);
        assert!(D.is_multiple_of(64) && BLOCK_N.is_multiple_of(64) && STAGES >= 1 && WARPGROUPS >= 1);
    };
    let k_steps = D / 16; // S = Q K^T: one product per 16 head-dim columns
    let block_m = 64 * WARPGROUPS as u32;
    let threads = 128 * WARPGROUPS as u32;
    let thread = arch::thread_idx_x();
    let warp = arch::warp_id();
    let Some(head) = problem.head() else {
        return; // past the last head (the grid's z slices round B*H up): before any barrier
    };
    let first_row = arch::block_idx_x() * block_m;

    let (q_rows, k_rows, v_rows) = io.rows::<D>(&problem, head);

    // Shared memory: [Q tile][STAGES x (K tile, V tile)], the first 1024-byte aligned.
    let q_smem = swizzled::atom_aligned(arch::dynamic_smem_base());
    let kv_smem = q_smem + swizzled::tile_bytes(block_m as usize, D);
    let tiles = problem.kv_tiles(first_row, block_m, BLOCK_N as u32);
    let kv =
        KvPipeline::<Swizzled128, D, BLOCK_N, STAGES>::new(kv_smem, k_rows, v_rows, tiles, thread, threads);

    swizzled::load_async::<D>(q_smem, q_rows, first_row, block_m, thread, threads);
    arch::cp_async_commit();
    kv.start();

    // This thread's rows: warp `w` of warpgroup `g` holds rows 64g + 16w + (lane / 4) (+ 8).
    // Lane 0's, so that ptxas knows it is warp-uniform and keeps the descriptors in uniform registers.
    let warpgroup = arch::warp_uniform(warp / 4);
    let group_row0 = 64 * warpgroup;
    let warp_row0 = group_row0 + 16 * (warp % 4);
    let mut softmax = FragmentSoftmax::<1>::new(&problem, first_row + warp_row0);
    // key_end grows with the row: the warpgroup's last row bounds where its work ends (a causal
    // block's later tiles are the other warpgroup's alone).
    let group_key_end = problem.key_end(first_row + group_row0 + 63);

    // The operands' descriptors are built once and moved by an add per product
    // (docs/kernels/sm80-families.md, flash_wgmma).
    // Q (A operand, K-major) for k-step `ks`: 16 columns = 32 bytes inside a 128-byte row.
    let q_base = SmemDescriptor::sw128(q_smem + group_row0 * ROW_BYTES, 16, ATOM_BYTES);
    let q_desc = |ks: usize| {
        let ks = ks as u32;
        q_base
            .offset((ks / 4) * swizzled::column_block_bytes(block_m) + (ks % 4) * 32)
            .get()
    };
    // K (B operand of S, K-major): the same walk over the head dim.
    let k_base = SmemDescriptor::sw128(kv.k_tile(0), 16, ATOM_BYTES);
    let k_desc = |stage: u32, ks: usize| {
        let ks = ks as u32;
        let column = (ks / 4) * swizzled::column_block_bytes(BLOCK_N as u32) + (ks % 4) * 32;
        k_base
            .offset(kv.k_tile(stage).get() - kv.k_tile(0).get() + column)
            .get()
    };
    // V (B operand of O, MN-major): k-step `kk` is keys 16kk .. 16kk + 15, two atoms down; the
    // head dim runs across column blocks (the leading-dimension stride).
    let v_leading = swizzled::column_block_bytes(BLOCK_N as u32);
    let v_base = SmemDescriptor::sw128(kv.v_tile(0), v_leading, ATOM_BYTES);
    let v_desc = |stage: u32, kk: usize| {
        v_base
            .offset(kv.v_tile(stage).get() - kv.v_tile(0).get() + (kk as u32) * 2 * ATOM_BYTES)
            .get()
    };

    let turns = Turns::<PINGPONG, WARPGROUPS>::new(warpgroup);
    let mut o_acc = G::Output::zero();
    let loop_start = start_counting::<COUNT>(0);

    for t in 0..tiles {
        let stage = kv.advance(t);
        // The copies (Q's too, the first time) were ordinary writes; wgmma reads through the
        // async proxy.
        arch::fence_proxy_async_shared();
        sync::<P, COUNT>(SyncPoint::KvLoaded);
        let first_key = t * BLOCK_N as u32;

        // A warpgroup-uniform branch: wgmma needs all four warps. The turns are taken either way,
        // so that a warpgroup past its keys never stalls the ring.
        let active = first_key < group_key_end;
        let mut s_acc = G::Scores::zero();
        turns.wait();
        if active {
            for ks in 0..k_steps {
                chained!(
                    ks,
                    k_steps,
                    false,
                    G::scores(&mut s_acc, q_desc(ks), k_desc(stage, ks), ks > 0)
                );
            }
        }
        turns.pass();
        if active {
            let (scores, acc) = (
                core::array::from_mut(&mut s_acc),
                core::array::from_mut(&mut o_acc),
            );
            softmax.step::<P, COUNT, _, _>(scores, acc, first_key);
        }

        // Keys 16kk .. 16kk + 15 are registers 8kk .. 8kk + 7: exactly an A fragment. All of P is
        // packed before the first product, so that the chain runs without a fence.
        let mut p_frag = G::Packed::zero();
        for (kk, frag) in p_frag.tiles_mut().iter_mut().enumerate() {
            for (i, half2) in frag.iter_mut().enumerate() {
                let s = s_acc.registers();
                *half2 = T::pack(s[8 * kk + 2 * i], s[8 * kk + 2 * i + 1]);
                arch::fence_operand(half2);
            }
        }
        turns.wait();
        if active {
            for (kk, &a) in p_frag.tiles().iter().enumerate() {
                chained!(
                    kk,
                    G::PV_STEPS,
                    false,
                    G::attend(&mut o_acc, a, v_desc(stage, kk), true)
                );
            }
        }
        turns.pass();
        sync::<P, COUNT>(SyncPoint::BeforeSmemReuse);
    }
    turns.finish();
    kv.finish();
    softmax.finish::<T, D, _>(core::array::from_ref(&o_acc), &problem, io.out, head);
    if COUNT {
        record_barriers(io.barrier_log, tiles, loop_start, 0);
    }
}

/// The ping-pong ring of `flash_wgmma` (a no-op without `PINGPONG`): warpgroup `g` waits for its
/// turn at named barrier `PINGPONG_RING + g` and hands it on to the next warpgroup's; a hand-over
/// counts the 256 threads of the two warpgroups.
struct Turns<const PINGPONG: bool, const WARPGROUPS: usize> {
    warpgroup: u32,
}

impl<const PINGPONG: bool, const WARPGROUPS: usize> Turns<PINGPONG, WARPGROUPS> {
    /// Joins the ring; the last warpgroup hands the first turn to warpgroup 0.
    #[inline]
    fn new(warpgroup: u32) -> Self {
        const { assert!(!PINGPONG || WARPGROUPS as u32 <= barrier_id::PINGPONG_RING_LEN) };
        let turns = Turns { warpgroup };
        if warpgroup + 1 == WARPGROUPS as u32 {
            turns.pass();
        }
        turns
    }

    /// Waits until it is this warpgroup's turn at the tensor cores.
    #[inline]
    fn wait(&self) {
        if PINGPONG {
            arch::named_barrier_sync(barrier_id::PINGPONG_RING + self.warpgroup, 256);
        }
    }

    /// Hands the turn to the next warpgroup, without waiting.
    #[inline]
    fn pass(&self) {
        if PINGPONG {
            let next = (self.warpgroup + 1) % WARPGROUPS as u32;
            arch::named_barrier_arrive(barrier_id::PINGPONG_RING + next, 256);
        }
    }

    /// Takes the last warpgroup's final hand-over, so that no barrier is left half-arrived.
    #[inline]
    fn finish(&self) {
        if self.warpgroup == 0 {
            self.wait();
        }
    }
}
