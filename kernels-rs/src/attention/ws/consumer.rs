//! `flash_ws`'s consumer warpgroups: an item as they see it, their `wgmma` operands, the
//! ping-pong turns, and the KV loops.

use super::output::OutputPath;
use super::schedule::{Schedule, Split, Work};
use super::smem::{slot, Plan, K_EMPTY, K_FULL, V_EMPTY, V_FULL};
use crate::arch::{self, SharedAddr, SmemDescriptor};
use crate::attention::fragment::{self, Fragment, FragmentSoftmax};
use crate::attention::shape::{Accumulator, Tiles, WarpgroupShape};
use crate::attention::Problem;
use crate::launch::record;
use crate::schedule::{exponentials_before_wait, speculative_exponentials};
use crate::softmax::KeptFactor;
use crate::tile::swizzled::{self, ATOM_BYTES, ROW_BYTES};
use crate::tile::{Element, Operand};

impl Item {
    /// The block's `i`-th item `work`, its tiles starting at `ring` in the ring, its output
    /// scaled by `value_scale`.
    #[inline(always)]
    pub(super) fn of<const PERSISTENT: bool, const VARLEN: bool>(
        schedule: &Schedule<PERSISTENT, VARLEN>,
        problem: &Problem,
        i: u32,
        work: &Work,
        ring: u32,
        value_scale: f32,
    ) -> Self {
        let (first_tile, tiles) = schedule.tiles(problem, work);
        Item {
            index: i,
            head: work.head,
            first_row: work.first_row,
            ring,
            first_tile,
            tiles,
            value_scale,
        }
    }
}

/// One work item as a consumer warpgroup sees it.
pub(super) struct Item {
    /// The item's place in the block's list (0, 1, ...): the parity of Q's barriers.
    index: u32,
    pub(super) head: usize,
    pub(super) first_row: u32,
    /// KV tiles of the block's items before this one: where its tiles start in the ring.
    ring: u32,
    /// The item's KV tiles `first_tile ..` (all of them unless it is a slice of a split item).
    first_tile: u32,
    tiles: u32,
    /// The factor of the item's output (V's descale; 1 for 16-bit inputs).
    pub(super) value_scale: f32,
}

/// The `wgmma` descriptors of one consumer warpgroup's operands: its 64 rows of Q, and the K and
/// V tiles of ring slot 0, all in the 128-byte swizzle layout the copy engine wrote. The operand of
/// each product is one of them moved by a constant and a slot's stride: one add, where building
/// the descriptor per `wgmma` cost ten instructions (docs/kernels/flash_ws.md, the products).
struct Operands<G: WarpgroupShape, const STAGES: usize> {
    q: SmemDescriptor,
    k: SmemDescriptor,
    v: SmemDescriptor,
    /// Bytes of one 128-byte column block of Q (K-major: `block_m` rows of 128 bytes).
    q_column_block: u32,
    _shape: core::marker::PhantomData<G>,
}

impl<G: WarpgroupShape, const STAGES: usize> Operands<G, STAGES> {
    /// Bytes from one ring slot to the next (its K tile and its V tile).
    const SLOT_BYTES: u32 = Plan::<G, STAGES>::SLOT;

    #[inline(always)]
    fn new(plan: &Plan<G, STAGES>, q: SharedAddr, block_m: u32, group_row0: u32) -> Self {
        // V as it sits: transposed, K-major like K (column blocks of D rows); or its own rows,
        // read MN-major (column blocks of BLOCK_N rows).
        let v = if G::Input::V_TRANSPOSED {
            SmemDescriptor::sw128(plan.v(0), 16, ATOM_BYTES)
        } else {
            SmemDescriptor::sw128(
                plan.v(0),
                swizzled::column_block_bytes(G::KEYS as u32),
                ATOM_BYTES,
            )
        };
        Operands {
            q: SmemDescriptor::sw128(q + group_row0 * ROW_BYTES, 16, ATOM_BYTES),
            k: SmemDescriptor::sw128(plan.k(0), 16, ATOM_BYTES),
            v,
            q_column_block: swizzled::column_block_bytes(block_m),
            _shape: core::marker::PhantomData,
        }
    }

    /// Q's 32 bytes of each row `32 ks ..` (K-major: column block `ks / 4`, 32 bytes per step
    /// inside it).
    #[inline(always)]
    fn q(&self, ks: usize) -> u64 {
        let ks = ks as u32;
        self.q
            .offset((ks / 4) * self.q_column_block + (ks % 4) * 32)
            .get()
    }

    /// K's 32 bytes of each row `32 ks ..` of slot `stage`.
    #[inline(always)]
    fn k(&self, stage: u32, ks: usize) -> u64 {
        let ks = ks as u32;
        let column = (ks / 4) * swizzled::column_block_bytes(G::KEYS as u32) + (ks % 4) * 32;
        self.k.offset(stage * Self::SLOT_BYTES + column).get()
    }

    /// V's keys `K_STEP kk ..` of slot `stage`. Transposed V is K-major like K (column block
    /// `kk / 4` of D rows, 32 bytes per step inside it); V's own rows are read MN-major, 16 keys
    /// being two 8-row atoms.
    #[inline(always)]
    fn v(&self, stage: u32, kk: usize) -> u64 {
        let kk = kk as u32;
        let step = if G::Input::V_TRANSPOSED {
            (kk / 4) * swizzled::column_block_bytes(G::D as u32) + (kk % 4) * 32
        } else {
            kk * 2 * ATOM_BYTES
        };
        self.v.offset(stage * Self::SLOT_BYTES + step).get()
    }
}

/// Ping-pong between the consumer warpgroups: named barrier `WARP_SPECIALISED_FIRST + c` is
/// consumer c's turn at the tensor cores; a hand-over counts the waiting and the arriving
/// warpgroup, 256 threads. Without `PINGPONG` both calls are nothing.
pub(super) struct Turns<const PINGPONG: bool> {
    mine: u32,
    next: u32,
}

impl<const PINGPONG: bool> Turns<PINGPONG> {
    #[inline(always)]
    pub(super) fn new(consumer: u32, consumers: u32) -> Self {
        let turn = |c: u32| arch::barrier_id::WARP_SPECIALISED_FIRST + c;
        Turns {
            mine: turn(consumer),
            next: turn((consumer + 1) % consumers),
        }
    }
    #[inline(always)]
    pub(super) fn wait(&self) {
        if PINGPONG {
            arch::named_barrier_sync(self.mine, 256);
        }
    }
    #[inline(always)]
    fn pass(&self) {
        if PINGPONG {
            arch::named_barrier_arrive(self.next, 256);
        }
    }
}

/// One consumer warpgroup's state through the KV loop, for tiles of shape `G`. The output's
/// element type and row length are the epilogue's alone (`run`).
pub(super) struct Consumer<
    'a,
    G: WarpgroupShape,
    const STAGES: usize,
    const PINGPONG: bool,
    const MASKS: bool,
> {
    pub(super) plan: &'a Plan<G, STAGES>,
    operands: Operands<G, STAGES>,
    turns: Turns<PINGPONG>,
    pub(super) softmax: FragmentSoftmax<1, MASKS>,
    /// `key_end` of the group's last row, the largest: tiles from there on have no key for it.
    group_key_end: u32,
    pub(super) lane: u32,
    /// KV tiles of the block's earlier work items: where this item's tiles start in the ring.
    ring: u32,
    /// Q's buffer takes another item's Q after this one (persistent): release it when done.
    reuses_q: bool,
    /// The item's Q buffer and the parity of its round (`Plan::q_slot`).
    pub(super) q_buffer: u32,
    q_parity: u32,
    pub(super) o_acc: G::Output,
    s_acc: G::Scores,
    p_frag: G::Packed,
}

impl<'a, G: WarpgroupShape, const STAGES: usize, const PINGPONG: bool, const MASKS: bool>
    Consumer<'a, G, STAGES, PINGPONG, MASKS>
{
    /// Consumer warpgroup `consumer` of `consumers` at the start of `item`. With `reuses_q` (the
    /// persistent kernel) it releases Q's buffer once its last S = Q K^T of the item is done.
    #[inline(always)]
    pub(super) fn new(
        plan: &'a Plan<G, STAGES>,
        problem: &Problem,
        consumer: u32,
        consumers: u32,
        item: &Item,
        reuses_q: bool,
    ) -> Self {
        let group_row0 = 64 * consumer;
        // A slice of a split item counts its keys from its first tile's (so that its loop's tile
        // numbers start at 0, as a whole item's).
        let first_key = item.first_tile * G::KEYS as u32;
        let warp_first_row = item.first_row + group_row0 + 16 * (arch::warp_id() % 4);
        let (q_buffer, q_parity) = plan.q_slot(item.index);
        Consumer {
            plan,
            operands: Operands::new(plan, plan.q(q_buffer), 64 * consumers, group_row0),
            q_buffer,
            q_parity,
            turns: Turns::new(consumer, consumers),
            softmax: FragmentSoftmax::new(problem, warp_first_row).keys_from(first_key),
            group_key_end: problem
                .key_end(item.first_row + group_row0 + 63)
                .saturating_sub(first_key),
            lane: arch::lane_id(),
            ring: item.ring,
            reuses_q,
            o_acc: G::Output::zero(),
            // S is never zeroed: the first product of a chain overwrites it (`accumulate` false),
            // and reusing one array keeps non-wgmma writes out of the chains that ptxas would have
            // to fence.
            s_acc: G::Scores::zero(),
            p_frag: G::Packed::zero(),
        }
    }

    /// The item's KV loop (`overlap`: the overlapped one) and epilogue, for consumer `consumer` of
    /// `consumers`; returns the item's KV tiles. Unless `staged_output` is `Registers`, O goes out
    /// through Q's buffer, which the block's item must be the last to use. `marks`: `mark(event)`
    /// at the points of the item's timeline and `mark_tile(tile, event)` at those of each KV tile
    /// in the overlapped loop (`launch::record`; the instrumented twin's, no code otherwise).
    ///
    /// # Safety
    /// `out` is the problem's output and `item.head` one of its heads; the plan's barriers exist;
    /// a `TensorStore`'s map is the encoded map of `out` in boxes of 64 rows; where
    /// `split_of_item` says the item is a slice of a split one, as `merge_slices`. `D` is the
    /// shape's head dim, `G::D`, as the const parameter that `finish` needs (stable Rust cannot
    /// pass an associated constant as one).
    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    pub(super) unsafe fn run<T: Element, const D: usize>(
        mut self,
        problem: &Problem,
        out: *mut u16,
        item: &Item,
        consumer: u32,
        consumers: u32,
        overlap: bool,
        staged_output: OutputPath,
        split_of_item: impl Fn() -> Split,
        (mark, mark_tile): (impl Fn(u32), impl Fn(u32, u32)),
    ) -> u32 {
        const { assert!(D == G::D) };
        if PINGPONG && item.index == 0 && consumer + 1 == consumers {
            self.turns.pass(); // consumer 0 goes first
        }
        arch::mbarrier_wait(self.plan.q_full(self.q_buffer), self.q_parity);
        mark(record::READY);
        let tiles = item.tiles;
        if overlap {
            self.overlapped(tiles, mark_tile);
        } else {
            self.serial(tiles);
        }
        mark(record::LOOP_END);
        if PINGPONG && consumer == 0 && !self.reuses_q {
            // A grid block's one item is its last: the last warpgroup's final hand-over (leave no
            // barrier half-arrived). A persistent block takes it after its item loop.
            self.turns.wait();
        }
        let split = split_of_item();
        let writes_output = !split.is_split()
            // Safety: a split item's workspace slots and counters are the launch's (the
            // caller's contract).
            || unsafe { self.merge_slices::<D>(problem, split, consumer, consumers) };
        mark(record::MERGED);
        if !writes_output {
            // Another slice writes the item's output.
            return item.tiles;
        }
        match staged_output {
            OutputPath::Registers => {
                // V's descale, which `store_staged` folds into its normaliser (1 for 16-bit
                // inputs, where this is no code).
                if G::Input::BYTES == 1 {
                    for o in self.o_acc.registers_mut() {
                        *o *= item.value_scale;
                    }
                }
                // The head's rows worked out by every thread, before the per-row branches (a
                // division: see `store_staged`'s coordinates; this path is the persistent
                // kernel's).
                let columns = problem.columns::<D>();
                let rows = problem.q_rows_of(out, item.head, columns as usize);
                let row_start = |row: u32| rows.base.add(row as usize * rows.stride as usize) as *mut u16;
                let acc = core::array::from_ref(&self.o_acc);
                self.softmax
                    .finish_at::<T, _>(acc, problem, item.head, row_start, columns)
            }
            path => self.store_staged::<T, D>(problem, out, item, (consumer, consumers), path),
        }
        item.tiles
    }

    /// Whether tile `t` has a key for some row of the group: a warpgroup-uniform test, as `wgmma`
    /// needs all four warps. A group's active tiles are a prefix of the loop.
    #[inline(always)]
    fn active(&self, t: u32) -> bool {
        t * (G::KEYS as u32) < self.group_key_end
    }

    /// The ring slot of this item's tile `t` and the parity of its round.
    #[inline(always)]
    fn slot(&self, t: u32) -> (u32, u32) {
        slot::<STAGES>(self.ring + t)
    }

    /// One arrival per warp on an "empty" barrier, once this warp's products have read the tile.
    #[inline(always)]
    fn release(&self, kind: u32, stage: u32) {
        self.arrive(self.plan.barrier(kind, stage));
    }

    /// One arrival per warp on Q's "empty" barrier, once its last S = Q K^T of the item is done:
    /// the producer then copies the next item's Q while this one's last P V and epilogue run.
    #[inline(always)]
    fn release_q(&self) {
        if self.reuses_q {
            self.arrive(self.plan.q_empty(self.q_buffer));
        }
    }

    #[inline(always)]
    fn arrive(&self, barrier: SharedAddr) {
        if self.lane == 0 {
            // Safety: the plan's mbarriers were initialised before the kernel's one block barrier.
            unsafe { arch::mbarrier_arrive(barrier) };
        }
    }

    /// Issues S = Q K^T on slot `stage`; with `LEAVE_RUNNING` the chain is committed, not waited
    /// for (`wgmma_wait` collects it).
    #[inline(always)]
    unsafe fn scores<const LEAVE_RUNNING: bool>(&mut self, stage: u32) {
        let (s_acc, ops) = (&mut self.s_acc, &self.operands);
        let steps = G::D * G::Input::BYTES / 32;
        for ks in 0..steps {
            chained!(
                ks,
                steps,
                LEAVE_RUNNING,
                G::scores(s_acc, ops.q(ks), ops.k(stage, ks), ks > 0)
            );
        }
    }

    /// Issues O += P V on slot `stage`, P from registers.
    #[inline(always)]
    unsafe fn attend<const LEAVE_RUNNING: bool>(&mut self, stage: u32) {
        let (o_acc, ops) = (&mut self.o_acc, &self.operands);
        for (kk, &a) in self.p_frag.tiles().iter().enumerate() {
            chained!(
                kk,
                G::PV_STEPS,
                LEAVE_RUNNING,
                G::attend(o_acc, a, ops.v(stage, kk), true)
            );
        }
    }

    /// The softmax of tile `t`'s scores, in place; returns the corrections of O.
    #[inline(always)]
    fn probabilities(&mut self, t: u32) -> [[f32; 2]; 1] {
        let scores = core::array::from_mut(&mut self.s_acc);
        self.softmax
            .probabilities(scores, t * G::KEYS as u32, Self::kept_factor())
    }

    /// How a kept row maximum's factor comes about (`RowState::rescale_lazily`): the branch
    /// around its `ex2` measured 4-5% faster for e4m3 at head dim 256 and within the noise at
    /// 128; the select for 16-bit inputs (docs/history/perf-notes.md: the lazy rescale, and FP8's
    /// kept factor per head dim).
    #[inline(always)]
    fn kept_factor() -> KeptFactor {
        if G::Input::BYTES == 1 && G::D == 256 {
            KeptFactor::Skipped
        } else {
            KeptFactor::Computed
        }
    }

    /// `probabilities` up to the exponentials of the first `head` registers of S
    /// (`FragmentSoftmax::probabilities_head`).
    #[inline(always)]
    fn probabilities_head(&mut self, t: u32, head: usize) -> [[f32; 2]; 1] {
        let scores = core::array::from_mut(&mut self.s_acc);
        self.softmax
            .probabilities_head(scores, t * G::KEYS as u32, head, Self::kept_factor())
    }

    /// `probabilities_head` with the head's exponentials taken from the kept row maxima, beside
    /// the search for the tile's own (`FragmentSoftmax::probabilities_speculatively`).
    #[inline(always)]
    fn probabilities_speculatively(&mut self, t: u32, head: usize) -> [[f32; 2]; 1] {
        let scores = core::array::from_mut(&mut self.s_acc);
        self.softmax
            .probabilities_speculatively(scores, t * G::KEYS as u32, head, Self::kept_factor())
    }

    /// Packs the probabilities into `wgmma` A fragments, one per `K_STEP` keys
    /// (`Operand::pack_probabilities`). Each packed register is pinned, so that all of P exists
    /// before the first product that reads it and the chain runs without a fence.
    #[inline(always)]
    fn pack(&mut self) {
        for (kk, frag) in self.p_frag.tiles_mut().iter_mut().enumerate() {
            *frag = G::pack(&self.s_acc, kk);
            for word in frag.iter_mut() {
                arch::fence_operand(word);
            }
        }
    }

    /// In the overlapped loop's tile t: waits for tile t's V (slot `stage`, `parity`) and for tile
    /// t - 1's P V, then releases tile t - 1's V (slot `prev_stage`).
    ///
    /// # Safety
    /// `stage` and `parity` are tile t's slot in the plan's ring.
    #[inline(always)]
    unsafe fn retire_previous(&mut self, stage: u32, parity: u32, prev_stage: u32) {
        arch::mbarrier_wait(self.plan.barrier(V_FULL, stage), parity);
        arch::wgmma_wait::<0>(self.o_acc.registers_mut());
        self.release(V_EMPTY, prev_stage);
    }

    /// The KV loop one product at a time: S, its softmax, then P V. With ping-pong the turns
    /// go round the exponentials, not the products: the warpgroups take the exponential unit in
    /// turn while the others' products run (docs/history/perf-notes.md, the serial loop's
    /// ping-pong turns round the exponentials).
    #[inline(always)]
    unsafe fn serial(&mut self, tiles: u32) {
        if tiles == 0 {
            self.release_q();
        }
        for t in 0..tiles {
            let (stage, parity) = self.slot(t);
            arch::mbarrier_wait(self.plan.barrier(K_FULL, stage), parity);
            if self.active(t) {
                self.scores::<false>(stage);
            }
            if t + 1 == tiles {
                self.release_q();
            }
            self.release(K_EMPTY, stage);
            let active = self.active(t);
            // The row maxima before the turn (a chain of shuffles): only the exponentials take it.
            // The turn's wait and hand-over stay outside the branches: inside them (one pair in
            // each arm) the loop measured 15-22% slower (docs/history/perf-notes.md, the serial
            // loop's ping-pong turns).
            let correction = if active {
                self.probabilities_head(t, 0)
            } else {
                [[1.0f32; 2]; 1]
            };
            self.turns.wait();
            if active {
                self.softmax
                    .probabilities_tail(core::array::from_mut(&mut self.s_acc), 0);
                fragment::rescale(core::array::from_mut(&mut self.o_acc), correction);
                self.pack();
            }
            self.turns.pass();
            arch::mbarrier_wait(self.plan.barrier(V_FULL, stage), parity);
            if self.active(t) {
                self.attend::<false>(stage);
            }
            self.release(V_EMPTY, stage);
        }
    }

    /// The KV loop with two chains in flight: tile t's S = Q K^T is issued with tile t - 1's
    /// O += P V, and the softmax of the new S runs while P V is still in the tensor cores.
    ///
    /// Tile t's V is waited for right after its softmax (at head dim 128, after its first
    /// exponentials: `schedule::exponentials_before_wait`) rather than before its product: the
    /// mbarrier wait is a loop, so it ends the basic block that holds those exponentials, and
    /// ptxas, which schedules within a basic block, can no longer hoist the `wait_group 0` that
    /// follows above them (it did: docs/kernels/flash_ws.md, overlap; `tests/sass_schedule.rs`
    /// checks).
    /// The exponentials after the wait share their block with the packing of P.
    /// Every warp of the warpgroup reaches that one `wait_group` at the same instruction, as
    /// `.aligned` requires (an earlier fix that put a wait in each arm of the rescale branch
    /// broke that: compute-sanitizer's synccheck).
    #[inline(always)]
    unsafe fn overlapped(&mut self, tiles: u32, mark_tile: impl Fn(u32, u32)) {
        if tiles == 0 {
            self.release_q();
            return;
        }
        // Tile 0's scores alone.
        let (first_stage, first_parity) = self.slot(0);
        arch::mbarrier_wait(self.plan.barrier(K_FULL, first_stage), first_parity);
        // The turn is held for the issue only, here and after the loop as inside it: one rule
        // for every turn (waiting inside it measured the same: docs/history/perf-notes.md, the
        // item's first S and last P V waited for after the turn).
        self.turns.wait();
        mark_tile(0, record::TILE_TURN);
        if self.active(0) {
            self.scores::<true>(first_stage);
        }
        self.turns.pass();
        mark_tile(0, record::TILE_ISSUED);
        arch::wgmma_wait::<0>(self.s_acc.registers_mut());
        mark_tile(0, record::TILE_SCORES);
        self.release(K_EMPTY, first_stage);
        if self.active(0) {
            // Nothing is accumulated yet, so the correction has nothing to scale.
            let _ = self.probabilities(0);
            // No P V to wait for: the whole softmax is the head, the tail only the packing.
            mark_tile(0, record::TILE_HEAD);
            mark_tile(0, record::TILE_RETIRED);
            self.pack();
        }
        mark_tile(0, record::TILE_PACKED);
        arch::mbarrier_wait(self.plan.barrier(V_FULL, first_stage), first_parity);
        // The correction of O that the last softmax asked for, applied just before that tile's
        // P V is issued (tile 0's: nothing is accumulated yet).
        let mut correction = [[1.0f32; 2]; 1];
        for t in 1..tiles {
            let (stage, parity) = self.slot(t);
            let prev_stage = self.slot(t - 1).0;
            arch::mbarrier_wait(self.plan.barrier(K_FULL, stage), parity);
            self.turns.wait();
            mark_tile(t, record::TILE_TURN);
            if self.active(t) {
                // Tile t - 1 is active too: active tiles are a prefix.
                self.scores::<true>(stage);
                // Here, under the product just issued, rather than at the end of the last
                // iteration: there the multiplies sat between the softmax and the next turn at
                // the tensor cores (docs/kernels/flash_ws.md, overlap).
                fragment::rescale(core::array::from_mut(&mut self.o_acc), correction);
                self.attend::<true>(prev_stage);
                self.turns.pass();
                mark_tile(t, record::TILE_ISSUED);
                arch::wgmma_wait::<1>(self.s_acc.registers_mut());
                mark_tile(t, record::TILE_SCORES);
                self.release(K_EMPTY, stage);
                let speculative = const { speculative_exponentials(G::D, G::Input::BYTES, G::KEYS) };
                correction = match exponentials_before_wait(G::D) {
                    Some(head) => {
                        let head = speculative.unwrap_or(head);
                        let correction = if speculative.is_some() {
                            self.probabilities_speculatively(t, head)
                        } else {
                            self.probabilities_head(t, head)
                        };
                        mark_tile(t, record::TILE_HEAD);
                        self.retire_previous(stage, parity, prev_stage);
                        mark_tile(t, record::TILE_RETIRED);
                        self.softmax
                            .probabilities_tail(core::array::from_mut(&mut self.s_acc), head);
                        correction
                    }
                    None => {
                        let correction = self.probabilities(t);
                        mark_tile(t, record::TILE_HEAD);
                        self.retire_previous(stage, parity, prev_stage);
                        mark_tile(t, record::TILE_RETIRED);
                        correction
                    }
                };
                self.pack();
                mark_tile(t, record::TILE_PACKED);
            } else {
                if self.active(t - 1) {
                    fragment::rescale(core::array::from_mut(&mut self.o_acc), correction);
                    self.attend::<false>(prev_stage);
                }
                self.turns.pass();
                self.release(K_EMPTY, stage);
                self.release(V_EMPTY, prev_stage);
                arch::mbarrier_wait(self.plan.barrier(V_FULL, stage), parity);
            }
        }
        // Every S = Q K^T of the item has completed (waited for in its iteration, or not issued).
        self.release_q();
        let stage = self.slot(tiles - 1).0;
        self.turns.wait();
        if self.active(tiles - 1) {
            fragment::rescale(core::array::from_mut(&mut self.o_acc), correction);
            self.attend::<true>(stage);
        }
        self.turns.pass();
        arch::wgmma_wait::<0>(self.o_acc.registers_mut());
        self.release(V_EMPTY, stage);
    }
}
