//! `flash_ws`'s split-KV merge: a consumer's slice of a split item through the workspace.

use super::consumer::Consumer;
use super::epilogue_barrier;
use super::schedule::Split;
use crate::arch;
use crate::attention::fragment::Fragment;
use crate::attention::shape::{Accumulator, WarpgroupShape};
use crate::attention::Problem;
use crate::launch::tail_split;
use crate::softmax::RowState;

/// Slots a split item's merge reads at once (`Consumer::merge_slices`): as many as the
/// consumer's registers hold beside the merged result, at `D / 2 + 4` floats each.
const fn merge_batch_slots(d: usize) -> usize {
    match d {
        0..=64 => MAX_MERGE_BATCH,
        65..=128 => 2,
        _ => 1,
    }
}

/// The most slots `merge_batch_slots` gives.
const MAX_MERGE_BATCH: usize = 3;

impl<'a, G: WarpgroupShape, const STAGES: usize, const PINGPONG: bool, const MASKS: bool>
    Consumer<'a, G, STAGES, PINGPONG, MASKS>
{
    /// A slice of a split item (`launch::tail_split`). Thread 0 first counts the slice done on
    /// the item's counter, whose low half counts the slices done and whose high half
    /// (`PUBLISHED`) those whose partial result is in the workspace. Every slice writes this
    /// warpgroup's partial O and row states to its slot, except the last done when it is part 0,
    /// whose result comes first in the merge's order and enters from its registers. One that is
    /// not the last done then counts its slot published and returns false. The last done waits
    /// until every other slice has published, sets the counter back to 0 for the next launch,
    /// reads the slots (`merge_batch_slots` at a time) and merges them, in the slices' order,
    /// into its accumulators and row states, and returns true: it writes the item's output.
    /// (Where the last to finish published and counted first and then read one slot after
    /// another, its merge waited for about six round trips to memory, now about two: 1.5% at
    /// (2,8,2048,64); the rest measured as bytes, not round trips: docs/kernels/flash_ws.md, the
    /// split-KV merge.)
    ///
    /// The wait cannot hang: the slices it waits for counted done before it, so they are
    /// running, and they publish without waiting on anything. Each thread writes and reads only
    /// the accumulators it holds (a slot is laid out by register, then thread, so that a warp's
    /// accesses are whole lines), so the merge needs no shared memory; the slices' row maxima and
    /// sums of one row meet in the same thread.
    ///
    /// # Safety
    /// `problem.workspace` holds `launch::tail_split::workspace_floats` floats and
    /// `problem.split_counters` its `counters` for this grid and `split.parts`, the counters 0
    /// before the launch's first slice counted; every thread of the warpgroup calls it.
    #[inline(always)]
    pub(super) unsafe fn merge_slices<const D: usize>(
        &mut self,
        problem: &Problem,
        split: Split,
        consumer: u32,
        consumers: u32,
    ) -> bool {
        const PUBLISHED: u32 = 1 << 16;
        const { assert!(tail_split::MAX_SLICES < PUBLISHED) };
        let thread = arch::thread_idx_x() % 128;
        let parts = split.parts();
        let regs = G::Output::REGS;
        // Slot `part` of this warpgroup, at this thread's first float.
        let slot = |part: u32| {
            let index = (split.tail() * parts + part) * consumers + consumer;
            problem
                .workspace
                .add(index as usize * tail_split::slot_floats(D as u32) as usize + thread as usize)
        };
        // (maximum, sum) of the thread's row `half`, after its accumulators.
        let state_at = |at: *mut f32, half: usize| {
            (
                at.add((regs + 2 * half) * 128),
                at.add((regs + 2 * half + 1) * 128),
            )
        };
        let counter = problem
            .split_counters
            .add((split.tail() * consumers + consumer) as usize);
        let barrier = epilogue_barrier(consumer);
        let mut seen = 0;
        if thread == 0 {
            // Acquire only: nothing of this slice is published yet, so there is nothing to release
            // (which would cost a `MEMBAR.GPU` before the atomic).
            seen = arch::atomic_add_acquire_u32(counter, 1);
        }
        let last = thread == 0 && seen % PUBLISHED + 1 == parts;
        // Part 0 comes first in the merge's order and has the most tiles, so it usually merges:
        // then its partial result enters from its registers and never goes through its slot (a
        // third of the merge's bytes at three slices). The other parts write theirs at once,
        // under the count's round trip (after the broadcast below, their counts came ~0.6k
        // cycles later: docs/kernels/flash_ws.md, the split-KV merge); part 0 only once it knows
        // it is not merging.
        let write_slot = || {
            let mine = slot(split.part());
            for (r, &o) in self.o_acc.registers().iter().enumerate() {
                *mine.add(r * 128) = o;
            }
            for (half, state) in self.softmax.states()[0].iter().enumerate() {
                let (max, sum) = state_at(mine, half);
                (*max, *sum) = (state.row_max, state.row_sum);
            }
        };
        let part_zero = split.part() == 0;
        if !part_zero {
            write_slot();
        }
        // The same in every thread; made provably warp-uniform, so that the epilogue after it
        // (its quad sums' shuffles) stays on the converged path.
        let last_done = arch::warp_uniform(arch::named_barrier_any(barrier, 128, last) as u32) != 0;
        let own_first = last_done && part_zero;
        if part_zero && !last_done {
            write_slot();
        }
        if !last_done {
            // Every thread's slot before thread 0's fence (the barrier), which releases them all
            // (a release is cumulative) before the count: one `MEMBAR.GPU` for the warpgroup, not
            // one per thread.
            arch::named_barrier_sync(barrier, 128);
            if thread == 0 {
                arch::fence_acq_rel_gpu();
                arch::atomic_add_u32(counter, PUBLISHED);
            }
            return false;
        }
        if thread == 0 {
            // Acquires the other slots, written before their counts; then nobody adds any more.
            while seen / PUBLISHED + 1 < parts {
                seen = arch::ld_acquire_u32(counter);
            }
            arch::st_global_u32(counter, 0);
        }
        // Thread 0's acquire before every thread's reads. Every slot, this one's too (the
        // thread's own writes), is merged from memory in the slices' order: the output is then
        // the same whichever slice finished last (`verify --repeat` wants it bit-identical).
        arch::named_barrier_sync(barrier, 128);
        // Slots in batches: each batch's reads all in flight before its merges.
        let batch = merge_batch_slots(D) as u32;
        let scale_log2 = problem.scale_log2;
        let mut merged = [RowState::EMPTY; 2];
        let mut first = 0;
        while first < parts {
            let (slot, counted) = (
                |b: u32| slot((first + b).min(parts - 1)),
                |b: u32| first + b < parts,
            );
            if first > 0 {
                self.merge_batch::<false, false>(&mut merged, batch, slot, counted, state_at, scale_log2);
            } else if own_first {
                self.merge_batch::<true, true>(&mut merged, batch, slot, counted, state_at, scale_log2);
            } else {
                self.merge_batch::<true, false>(&mut merged, batch, slot, counted, state_at, scale_log2);
            }
            first += batch;
        }
        self.softmax.states_mut()[0] = merged;
        true
    }

    /// One batch of `merge_slices`' merge (`FIRST`: the first one): `batch` slots, `slot(b)`
    /// being the `b`-th's at this thread's first float and `state_at(slot, half)` where its row
    /// `half`'s (maximum, sum) are, those that are not `counted(b)` weighing 0; with `OWN_FIRST`
    /// the first slot's result is the one in this consumer's registers, not read. Merges them, in
    /// order, into the accumulators and the row states `merged` of the slots before. Every read
    /// comes before the merges that use it, so that ptxas may have all of them in flight; the
    /// merged row maxima cover the whole batch, so that the accumulators are scaled once per
    /// batch.
    ///
    /// # Safety
    /// Every slot `slot` gives holds a slice's partial result, written before this thread's reads.
    #[inline(always)]
    unsafe fn merge_batch<const FIRST: bool, const OWN_FIRST: bool>(
        &mut self,
        merged: &mut [RowState; 2],
        batch: u32,
        slot: impl Fn(u32) -> *mut f32,
        counted: impl Fn(u32) -> bool,
        state_at: impl Fn(*mut f32, usize) -> (*mut f32, *mut f32),
        scale_log2: f32,
    ) {
        const { assert!(FIRST || !OWN_FIRST) };
        let own_states = self.softmax.states()[0];
        let mut scales = [0.0; 2];
        let mut weights = [[0.0; 2]; MAX_MERGE_BATCH];
        for (half, state) in merged.iter_mut().enumerate() {
            let part = |b: u32| {
                if OWN_FIRST && b == 0 {
                    return own_states[half];
                }
                let (max, sum) = state_at(slot(b), half);
                let max = if counted(b) { *max } else { f32::NEG_INFINITY };
                RowState {
                    row_max: max,
                    row_sum: *sum,
                }
            };
            let max = (0..batch).fold(state.row_max, |max, b| arch::max(max, part(b).row_max));
            scales[half] = state.weight(max, scale_log2);
            state.row_sum *= scales[half];
            for b in 0..batch {
                let part = part(b);
                weights[b as usize][half] = part.weight(max, scale_log2);
                state.row_sum = arch::fma(weights[b as usize][half], part.row_sum, state.row_sum);
            }
            state.row_max = max;
        }
        // Row `half`'s accumulators are registers 4j + 2 half and the one after. (Looped over as
        // here, LLVM unrolls the loops at head dim 256 too; one loop over all registers it left
        // rolled, and the consumer's arrays went to local memory.)
        let o = self.o_acc.registers_mut();
        for half in 0..2 {
            for j in 0..G::Output::REGS / 4 {
                for r in [4 * j + 2 * half, 4 * j + 2 * half + 1] {
                    // The first batch's accumulators start at 0 (the item's are in its slot,
                    // or with `OWN_FIRST` are slot 0's value): the same operations whichever
                    // slice merges, so the output is bit-identical.
                    let own = o[r];
                    o[r] = if FIRST { 0.0 } else { o[r] * scales[half] };
                    for b in 0..batch {
                        let value = if OWN_FIRST && b == 0 {
                            own
                        } else {
                            *slot(b).add(r * 128)
                        };
                        o[r] = arch::fma(weights[b as usize][half], value, o[r]);
                    }
                }
            }
        }
    }
}
