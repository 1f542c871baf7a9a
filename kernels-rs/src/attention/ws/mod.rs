//! `flash_ws`: warp-specialised FlashAttention for Hopper (sm_90a), in the manner of
//! FlashAttention-3.
//!
//! The block is one *producer* warpgroup and `CONSUMERS` *consumer* warpgroups (64 query rows
//! each, `BLOCK_M = 64 * CONSUMERS`: two, or three where rows are 128 bytes (16-bit head dim 64,
//! e4m3 head dim 128), where the softmax outweighs the products and a third warpgroup hides more
//! of it; four at 16-bit head dim 64, with 64-key tiles, so that a problem's blocks make one full
//! round on the SMs). They never meet at a block barrier
//! inside the KV loop:
//!
//! - The producer (one thread of warpgroup 0, its registers cut by `setmaxnreg`) copies Q once
//!   and then K and V tile by tile with the tensor memory accelerator, into a ring of `STAGES`
//!   slots. Each slot has four mbarriers: K full, V full
//!   (the copy's bytes landed), K empty, V empty (every consumer warp is done reading).
//! - The consumers (registers raised: `split_registers`) wait for "full", multiply with `wgmma`
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

// First: its `for_each_item!` is in scope in the modules declared after it.
#[macro_use]
mod schedule;

mod consumer;
mod epilogue;
mod merge;
mod output;
mod producer;
mod smem;

use super::shape::WarpgroupShape;
use super::varlen::Varlen;
use super::{item_marks, longest_first_block, record_barriers, start_counting, Buffers, Problem};
use super::{FP8_K_BOX_ROWS, MAP_BYTES, MAP_O};
use crate::arch;
use crate::launch::record;
use crate::tile::{Element, Operand};
use consumer::{Consumer, Item, Turns};
use output::OutputPath;
use producer::producer_warpgroup;
use schedule::{Schedule, Work};
use smem::Plan;

pub use smem::SmemShape;

/// Gives the producer warpgroup, which only issues copies, few registers and each of `consumers`
/// consumer warpgroups many, out of the 64K register file: 24 and 240 with two consumers
/// (128 x 24 + 256 x 240), 32 and 160 with three (128 x 32 + 384 x 160), FlashAttention-3's
/// splits. `warpgroup` 0 is the producer. A `busy` producer (one that walks the persistent item
/// loop, whose state did not fit in 24 registers: ptxas spilled 32 bytes of it at head dim 128,
/// or whose warps transpose V) gets 40, its two consumers 232 (128 x 40 + 256 x 232, the same
/// 64,512), which their KV loop fits in.
/// With four consumers, 640 threads start at 96 registers (65,536 / 640, rounded down to 8) and
/// `setmaxnreg.inc` takes only what the producer gave back to the block, not the rest of the
/// file: 24 and 112 (128 x 72 = 512 x 18, rounded down; 120 waited forever); a persistent
/// producer keeps 32 (its item loop at head dim 64 fits), which still leaves the consumers 112.
#[inline(always)]
fn split_registers(warpgroup: u32, consumers: usize, busy: bool) {
    match (warpgroup, consumers, busy) {
        (0, 2 | 4, false) => arch::setmaxnreg_dec::<24>(),
        (0, 2, true) => arch::setmaxnreg_dec::<40>(),
        (0, _, _) => arch::setmaxnreg_dec::<32>(),
        (_, 2, false) => arch::setmaxnreg_inc::<240>(),
        (_, 2, true) => arch::setmaxnreg_inc::<232>(),
        (_, 3, _) => arch::setmaxnreg_inc::<160>(),
        _ => arch::setmaxnreg_inc::<112>(),
    }
}

/// The last of a warpgroup's set-up, in its role's branch: its registers (`split_registers`), then
/// the wait for the launch before this one (programmatic dependent launch, `arch::grid`). The
/// block's set-up before it (its barriers, its one block barrier) and the split touch only shared
/// memory and registers, so they run while that launch may still be finishing; global memory
/// waits for it (docs/kernels/flash_ws.md, programmatic dependent launch).
#[inline(always)]
fn set_up_roles(warpgroup: u32, consumers: usize, busy: bool) {
    split_registers(warpgroup, consumers, busy);
    arch::wait_for_prerequisite_grids();
}

/// Named barrier of consumer warpgroup `c`'s epilogue (after the ping-pong turns' ids).
#[inline(always)]
fn epilogue_barrier(consumer: u32) -> u32 {
    const FIRST: u32 = arch::barrier_id::WARP_SPECIALISED_FIRST + MAX_CONSUMERS;
    const _: () = assert!(FIRST + MAX_CONSUMERS - 1 <= arch::barrier_id::WARP_SPECIALISED_LAST);
    FIRST + consumer
}

/// Consumer warpgroups a block may have (named barrier ids are set aside for this many).
const MAX_CONSUMERS: u32 = 4;

/// The shapes `flash_ws` is built for, checked when an entry point is compiled (no code).
#[inline(always)]
fn accepted_shape<
    const D: usize,
    const BLOCK_N: usize,
    const CONSUMERS: usize,
    const STAGES: usize,
    const VARLEN: bool,
    G: WarpgroupShape,
>() {
    const {
        assert!(G::KEYS == BLOCK_N && G::D == D);
        assert!(D.is_multiple_of(64) && BLOCK_N.is_multiple_of(16) && STAGES >= 1);
        // Three consumers have 160 registers each, four 112 (`split_registers`): room beside O
        // for a tile's scores with 128-byte rows only (16-bit head dim 64, e4m3 128).
        assert!(CONSUMERS == 2 || ((CONSUMERS == 3 || CONSUMERS == 4) && D * G::Input::BYTES == 128));
        // 8-bit inputs: whole 128-byte rows of Q and K, key tiles of whole boxes of K's rows
        // (`FP8_K_BOX_ROWS`; `FP8_Q_BOX_ROWS` divides 64 * CONSUMERS), dense (the descales are
        // per head of a batch, not per packed sequence).
        let bytes = G::Input::BYTES;
        assert!(
            bytes == 2
                || ((D * bytes).is_multiple_of(128) && BLOCK_N.is_multiple_of(FP8_K_BOX_ROWS as usize))
        );
        assert!(bytes == 2 || !VARLEN);
    };
}

/// `flash_ws`'s consumer warpgroup on one item, with (`true`) or without the code of the masks
/// (`FragmentSoftmax`'s `MASKS`): `Consumer::new`, then `run`, in the caller's generic parameters;
/// `$args` is `(plan, problem, item, consumer, out, output path, split_of_item, marks)`.
macro_rules! consume {
    ($masks:literal, $args:expr) => {{
        let (plan, problem, item, consumer, out, path, split, marks) = $args;
        Consumer::<G, STAGES, PINGPONG, $masks>::new(
            plan,
            problem,
            consumer,
            CONSUMERS as u32,
            item,
            PERSISTENT,
        )
        .run::<T, D>(
            problem,
            out,
            item,
            consumer,
            CONSUMERS as u32,
            OVERLAP,
            path,
            split,
            marks,
        )
    }};
}

/// The kernel body (see the module's documentation).
///
/// # Safety
/// Launched with `128 * (CONSUMERS + 1)` threads, `SmemShape::bytes` of dynamic shared memory, the
/// grid of `attention`'s convention (with `PERSISTENT`: any number of blocks along x, one y and z
/// slice), an output buffer of the shape `problem` describes and `maps` pointing at the encoded
/// tensor maps of Q, K, V and the output (`src/tma.rs`) for this shape and tiles. With `VARLEN`:
/// the tensors packed as `attention::varlen` says, the maps of a batch of one of `total_q`
/// (`total_k`) rows from the packed rows' start, `cu_q`/`cu_k` checked by the host, and grid x
/// the row blocks of the longest sequence, or, with `PERSISTENT`, the walk's table the host's
/// `varlen_item_table` for this grid (no split). With `PERSISTENT` and `kv_splits > 1`: the
/// workspace and zeroed slice counters of `launch::tail_split` for this grid and `kv_splits`.
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
    const PERSISTENT: bool,
    // Packed sequences of their own lengths (`attention::varlen`): the varlen entry points.
    const VARLEN: bool,
    // A consumer warpgroup's registers for a tile (`shape::Warpgroup`), and what Q, K and V hold:
    // `T` itself, or `E4m3` (then V arrives transposed, `attention::fp8`).
    G: WarpgroupShape,
>(
    io: Buffers,
    problem: Problem,
) {
    accepted_shape::<D, BLOCK_N, CONSUMERS, STAGES, VARLEN, G>();
    let block_m = 64 * CONSUMERS as u32;
    let thread = arch::thread_idx_x();
    let smem = SmemShape {
        d: D,
        block_m: block_m as usize,
        block_n: BLOCK_N,
        stages: STAGES,
        input_bytes: G::Input::BYTES,
        persistent: PERSISTENT,
        transposes_v: G::Input::TRANSPOSES_V,
    };
    let output_buffer = smem.output_buffer();
    // A persistent grid has no block without work (the host launches at most one per item).
    let head = if PERSISTENT { None } else { problem.head() };
    if !PERSISTENT && head.is_none() {
        return; // past the last head (the grid's z slices round B*H up): before any barrier
    }
    // Varlen: the block's sequence as a batch of one, its head the in-sequence one (persistent: per item).
    let (io, problem, head) = if VARLEN && !PERSISTENT {
        // The sequence's bounds are in global memory, which the kernel before may still write.
        arch::wait_for_prerequisite_grids();
        // Safety: not persistent (the branch's condition), so the block has a head.
        let block_head = unsafe { head.unwrap_unchecked() };
        let heads = problem.heads as usize;
        let first_row = arch::block_idx_x() * block_m;
        match Varlen::sequence::<D>(io, &problem, block_head / heads, first_row, 1) {
            Some((io, sequence)) => (io, sequence, Some(block_head % heads)),
            None => return, // past the sequence's last row block: before any barrier
        }
    } else {
        (io, problem, head)
    };
    // Q, K and V are read through the tensor maps.
    let (barrier_log, maps) = (io.barrier_log, io.tensor_maps);
    let plan = Plan::<G, STAGES>::new(block_m, smem);

    if thread == 0 {
        plan.init_barriers(4 * CONSUMERS as u32, PERSISTENT);
    }
    // The one block barrier: the mbarriers exist before anyone waits on them.
    arch::sync_threads();
    // The instrumented twin's clock and record belong to the first consumer thread: the producer
    // finishes issuing long before the block is done, and a block barrier at the end to wait for
    // the consumers is what the warp-specialised kernel must not have (the producer thread's warp
    // has parted ways; such a barrier hung the counted twin on the H100).
    const RECORDER: u32 = 128;
    let loop_start = start_counting::<COUNT>(RECORDER);

    // Causal blocks run longest first (`launch::causal_order`); varlen ones in the grid's order,
    // their sequences' lengths being the host's to know.
    let longest_first = !PERSISTENT && !VARLEN && problem.causal;
    let single_tiles = single_tiles::<D, PERSISTENT>(&problem, block_m, BLOCK_N as u32, longest_first);
    let schedule = || {
        Schedule::<PERSISTENT, VARLEN>::new::<D>(
            &problem,
            block_m,
            BLOCK_N as u32,
            single_tiles,
            head,
            longest_first,
        )
    };
    // Lane 0's, so that ptxas knows it is warp-uniform: the consumers' descriptors, derived
    // from it, then stay in uniform registers (docs/kernels/flash_ws.md, the products).
    let warpgroup = arch::warp_uniform(arch::warp_id() / 4);
    let busy_producer = PERSISTENT || G::Input::TRANSPOSES_V;
    let mut tiles = 0;
    if warpgroup == 0 {
        set_up_roles(warpgroup, CONSUMERS, busy_producer);
        producer_warpgroup::<G, STAGES, PERSISTENT, VARLEN>(&plan, &problem, maps, &schedule());
    } else {
        set_up_roles(warpgroup, CONSUMERS, busy_producer);
        let (schedule, consumer) = (schedule(), warpgroup - 1);
        let staged_output = OutputPath::of::<PERSISTENT, VARLEN>(output_buffer, maps.add(MAP_O * MAP_BYTES));
        let mut items = 0u32;
        // A left window bound or a softcap takes the consumer instance that has their code; every
        // other launch (causal, right bounds and sequence ends included) the one without it, whose
        // KV loop is the plain kernel's (docs/kernels/masks.md, the plain instance).
        let masked = problem.window_left != 0 || problem.softcap != 0.0;
        tiles = for_each_item!(&schedule, |i, work, ring| {
            items += 1;
            // The instrumented twin's timelines of the item and of its tiles (no code otherwise).
            // Safety: the instrumented twin's log has a record per block (the launch's contract).
            let (mark, mark_tile) = unsafe { item_marks::<COUNT>(barrier_log, i, consumer, RECORDER) };
            mark(record::START);
            // Safety: a varlen item's bounds were checked inside the packed tensors.
            let (sequence, out, staged_output) =
                unsafe { item_output::<PERSISTENT, VARLEN, D>(io, &problem, &work, consumer, staged_output) };
            // Safety: `work.head` is one of the problem's heads.
            let (item_problem, value_scale) = unsafe { descaled::<G::Input>(&sequence, work.head) };
            let item = Item::of(&schedule, &sequence, i, &work, ring, value_scale);
            // Worked out again after the KV loop rather than kept through it: the persistent
            // consumers at head dim 64 have no register to spare there.
            let split = || schedule.split_of(i);
            let args = (
                &plan,
                &item_problem,
                &item,
                consumer,
                out,
                staged_output,
                split,
                (mark, mark_tile),
            );
            let tiles = if masked {
                consume!(true, args)
            } else {
                consume!(false, args)
            };
            mark(record::DONE);
            tiles
        });
        // A persistent block's last item's final hand-over of the turn (leave no barrier
        // half-arrived), here rather than in the item, which would have to look up whether another
        // follows (a table entry's round trip per item on a listed walk: docs/history/perf-notes.md,
        // the persistent item's lookups).
        if PERSISTENT && PINGPONG && consumer == 0 && items > 0 {
            Turns::<PINGPONG>::new(consumer, CONSUMERS as u32).wait();
        }
        // The copy engine's reads of the last item's O out of the block's own tile, which the
        // block's shared memory must outlive (after the item loop, as the final hand-over).
        if staged_output.own_tile() && thread.is_multiple_of(128) {
            arch::bulk_wait_group_read_all();
        }
    }
    if COUNT {
        record_barriers(barrier_log, tiles, loop_start, RECORDER);
    }
}

/// Without `PERSISTENT`, the KV tiles of the block's one item, counted before the warpgroups part
/// (see `Schedule::new`); 0 with it. `longest_first`: the block's item is `longest_first_block`'s.
#[inline(always)]
fn single_tiles<const D: usize, const PERSISTENT: bool>(
    problem: &Problem,
    block_m: u32,
    block_n: u32,
    longest_first: bool,
) -> u32 {
    if PERSISTENT {
        return 0;
    }
    let first_row = if longest_first {
        // (`None` only past the last head, where the block returned before.)
        longest_first_block(problem.batch_heads, problem.causal_group::<D>())
            .map_or(0, |(_, rb)| rb * block_m)
    } else {
        arch::block_idx_x() * block_m
    };
    problem.kv_tile_range(first_row, block_m, block_n).1
}

/// The problem of `work`: with `PERSISTENT` and `VARLEN`, its sequence's (`Varlen::problem`,
/// from the host's table); otherwise the launch's `problem` itself.
///
/// # Safety
/// A varlen item's bounds lie inside the packed tensors (`Schedule::item` checked them).
#[inline(always)]
unsafe fn item_problem<const PERSISTENT: bool, const VARLEN: bool>(
    problem: &Problem,
    work: &Work,
) -> Problem {
    if PERSISTENT && VARLEN {
        // Safety: the caller's contract.
        unsafe { Varlen::problem(problem, work.sequence) }
    } else {
        *problem
    }
}

/// `work`'s problem (`item_problem`) and output, and the path of consumer `consumer`'s 64 rows
/// out of `path`: with `PERSISTENT` and `VARLEN`, the sequence's output rows, by row stores where
/// the warpgroup's rows pass the sequence's end (`OutputPath::of_rows`); otherwise the launch's.
///
/// # Safety
/// As `item_problem`; `io` are the launch's buffers.
#[inline(always)]
unsafe fn item_output<const PERSISTENT: bool, const VARLEN: bool, const D: usize>(
    io: Buffers,
    problem: &Problem,
    work: &Work,
    consumer: u32,
    path: OutputPath,
) -> (Problem, *mut u16, OutputPath) {
    // Safety: the caller's contract.
    let sequence = unsafe { item_problem::<PERSISTENT, VARLEN>(problem, work) };
    if !(PERSISTENT && VARLEN) {
        return (sequence, io.out, path);
    }
    // Safety: the caller's contract.
    let out = unsafe { Varlen::buffers::<D>(io, problem, work.sequence).out };
    let path = path.of_rows(work.first_row + 64 * consumer, sequence.seq_q);
    (sequence, out, path)
}

/// The problem as the consumers of query head `head` see it, and the factor of its output. With
/// 8-bit inputs the scores and values are their e4m3 values times the head's descales: Q's and
/// K's fold into the softmax scale (the scores, the masking and the log-sum-exp are then the true
/// ones), V's into the output's normaliser.
///
/// # Safety
/// With 8-bit inputs, as `Problem::descales`.
#[inline(always)]
unsafe fn descaled<I: Operand>(problem: &Problem, head: usize) -> (Problem, f32) {
    if I::BYTES == 2 {
        return (*problem, 1.0);
    }
    // Safety: the caller's contract.
    let [q, k, v] = unsafe { problem.descales(head) };
    // (The host refuses a softcap for e4m3 inputs: in their raw units it would differ per head.)
    let scaled = Problem {
        scale_log2: problem.scale_log2 * q * k,
        ..*problem
    };
    (scaled, v)
}
