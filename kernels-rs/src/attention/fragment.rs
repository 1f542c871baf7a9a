//! Masking, online softmax and the epilogue on register fragments in the `mma.sync.m16n8`
//! accumulator layout, which `wgmma` shares per warp (FlashAttention-2's `softmax.h` idea).
//!
//! A row tile is 16 rows of a warp. Lane `4g + c` holds rows `g` and `g + 8` (row halves 0 and 1)
//! and columns `2c, 2c + 1` of every 8 columns: its register `4j + e` is column `8j + 2c + e % 2`
//! of row half `e / 2`. The four lanes of a quad share their rows, so row statistics are quad
//! shuffles. Scores and outputs are handed over as `Fragment`s, whatever array shape the tensor
//! core wrappers want them in.

use super::Problem;
use crate::arch;
use crate::policy::{sync, BarrierPolicy, Mbarrier, SyncPoint};
use crate::softmax::{self, KeptFactor, RowState};
use crate::tile::Element;
use core::ops::Range;

/// `exponentiate`'s range for every register of a fragment.
const EVERY_REGISTER: Range<usize> = 0..usize::MAX;

/// One row tile's accumulators of one thread, in the layout above.
pub trait Fragment {
    /// The registers, register `4j + e` at index `4j + e`.
    fn registers(&self) -> &[f32];
    /// The same, to write.
    fn registers_mut(&mut self) -> &mut [f32];
}

/// `mma.sync` accumulators: one `[f32; 4]` per 8-column tile.
impl<const TILES: usize> Fragment for [[f32; 4]; TILES] {
    #[inline(always)]
    fn registers(&self) -> &[f32] {
        self.as_flattened()
    }
    #[inline(always)]
    fn registers_mut(&mut self) -> &mut [f32] {
        self.as_flattened_mut()
    }
}

/// `wgmma` accumulators: the registers of a whole 64 x N product in one array.
impl<const REGS: usize> Fragment for [f32; REGS] {
    #[inline(always)]
    fn registers(&self) -> &[f32] {
        self
    }
    #[inline(always)]
    fn registers_mut(&mut self) -> &mut [f32] {
        self
    }
}

/// The row half (0: row `g`, 1: row `g + 8`) that register `r` belongs to.
#[inline(always)]
const fn half_of(r: usize) -> usize {
    (r % 4) / 2
}

/// Independent `max` chains per row half in `raise_maxima`.
const MAX_CHAINS: usize = 4;

/// The chain register `r` goes to: the two registers of its row half in one 8-column tile go to
/// different chains, and so do neighbouring tiles.
#[inline(always)]
const fn max_chain(r: usize) -> usize {
    (r % 2) + 2 * ((r / 4) % 2)
}

/// The online softmax of the `2 * ROW_TILES` query rows one thread holds: ROW_TILES row tiles of
/// 16 rows each, consecutive in the warp's slice of the block. Without `MASKS` (a compile-time
/// choice, `flash_ws`'s plain instance) the rows have no left bound and no softcap: the masking
/// tests only each row's `key_end` (causal, a right window, the sequence's end), and the code of
/// the softcap and of the left bound is not in the loop at all.
pub struct FragmentSoftmax<const ROW_TILES: usize, const MASKS: bool = true> {
    state: [[RowState; 2]; ROW_TILES],
    /// One past the last key each row may see (`Problem::key_end`).
    key_end: [[u32; 2]; ROW_TILES],
    /// The warp's first row's `key_end`: it grows with the row, so no tile before it needs a mask.
    warp_key_end: u32,
    /// The first key each row may see (`Problem::key_start`; 0 without a sliding window).
    key_start: [[u32; 2]; ROW_TILES],
    /// The warp's last row's `key_start`, the largest: no tile from there on needs a mask for it.
    warp_key_start: u32,
    warp_first_row: u32,
    scale_log2: f32,
    /// The problem's softcap and its inverse (`Problem::soft_capped`; 0s for none).
    softcap: (f32, f32),
}

impl<const ROW_TILES: usize, const MASKS: bool> FragmentSoftmax<ROW_TILES, MASKS> {
    /// The empty state of the rows of a warp whose first query row is `warp_first_row`.
    #[inline(always)]
    pub fn new(problem: &Problem, warp_first_row: u32) -> Self {
        let last_row = warp_first_row + 16 * ROW_TILES as u32 - 1;
        let key_start = |row| if MASKS { problem.key_start(row) } else { 0 };
        Self::with_key_bounds(problem, warp_first_row, |row| {
            (key_start(row), problem.key_end(row))
        })
        .warp_bounds(key_start(last_row), problem.key_end(warp_first_row))
    }

    /// The state with each row's key range `bounds(row)` (of the warp's row `row`, as `row`
    /// numbers them), and the warp's bounds left to the caller (`warp_bounds`).
    #[inline(always)]
    fn with_key_bounds(problem: &Problem, warp_first_row: u32, bounds: impl Fn(u32) -> (u32, u32)) -> Self {
        let mut softmax = FragmentSoftmax {
            state: [[RowState::EMPTY; 2]; ROW_TILES],
            key_end: [[0; 2]; ROW_TILES],
            warp_key_end: 0,
            key_start: [[0; 2]; ROW_TILES],
            warp_key_start: 0,
            warp_first_row,
            scale_log2: problem.scale_log2,
            softcap: match MASKS {
                true => (problem.softcap, problem.softcap_inverse),
                false => (0.0, 0.0),
            },
        };
        for mt in 0..ROW_TILES {
            for half in 0..2 {
                let (start, end) = bounds(softmax.row(mt, half));
                softmax.key_start[mt][half] = start;
                softmax.key_end[mt][half] = end;
            }
        }
        softmax
    }

    /// The same state with the warp's bounds: `start`, the largest `key_start` of its rows, and
    /// `end`, the smallest `key_end`; keys in between need no mask for any of its rows.
    #[inline(always)]
    fn warp_bounds(mut self, start: u32, end: u32) -> Self {
        self.warp_key_start = start;
        self.warp_key_end = end;
        self
    }

    /// The same rows with their keys counted from key `first`: a slice of a split key range
    /// then numbers its tiles from 0, and its loop carries no offset.
    #[inline(always)]
    pub fn keys_from(mut self, first: u32) -> Self {
        for key_end in self.key_end.as_flattened_mut() {
            *key_end = key_end.saturating_sub(first);
        }
        for key_start in self.key_start.as_flattened_mut() {
            *key_start = key_start.saturating_sub(first);
        }
        self.warp_key_end = self.warp_key_end.saturating_sub(first);
        self.warp_key_start = self.warp_key_start.saturating_sub(first);
        self
    }

    /// As `new`, for a warp whose rows are not consecutive query positions (`flash_decode` packs
    /// the query heads that share a KV head into one tile): `bounds(row)` is the warp's row
    /// `row`'s `(key_start, key_end)` (counted from `warp_first_row`, as `row` returns them).
    /// Masking is then skipped only between the largest key start and the smallest key end of any
    /// of the warp's rows.
    #[inline(always)]
    pub fn with_key_ranges(
        problem: &Problem,
        warp_first_row: u32,
        bounds: impl Fn(u32) -> (u32, u32),
    ) -> Self {
        let (mut start, mut end) = (0, u32::MAX);
        for row in 0..16 * ROW_TILES as u32 {
            let (row_start, row_end) = bounds(warp_first_row + row);
            start = start.max(row_start);
            end = end.min(row_end);
        }
        Self::with_key_bounds(problem, warp_first_row, bounds).warp_bounds(start, end)
    }

    /// The query row that this thread holds as half `half` of row tile `mt`.
    #[inline]
    pub fn row(&self, mt: usize, half: usize) -> u32 {
        self.warp_first_row + (16 * mt + 8 * half) as u32 + arch::lane_id() / 4
    }

    /// One KV step of `keys` scores from `first_key` on (the policy's sync points in between):
    /// masks the scores past each row's `key_end`, raises the running maxima (rescaling `out`, the
    /// output accumulators, only when some row of the warp needs it) and turns the scores into
    /// probabilities, whose partial row sums this thread keeps (`finish` adds up the quad's).
    #[inline(always)]
    pub fn step<P: BarrierPolicy, const COUNT: bool, S: Fragment, O: Fragment>(
        &mut self,
        scores: &mut [S; ROW_TILES],
        out: &mut [O; ROW_TILES],
        first_key: u32,
    ) {
        sync::<P, COUNT>(SyncPoint::ScoresComputed);
        self.mask(scores, first_key);
        let correction = self.raise_maxima::<P, COUNT, S>(scores, KeptFactor::Computed);
        rescale(out, correction);
        self.exponentiate::<S, false>(scores, EVERY_REGISTER);
        sync::<P, COUNT>(SyncPoint::RowSumExchanged);
        sync::<P, COUNT>(SyncPoint::ProbsStaged);
    }

    /// `step` without its rescale of the output and without barriers, for a kernel whose output
    /// product is still running: returns the corrections to apply once it has completed (of a
    /// kept maximum: `kept_factor`, `RowState::rescale_lazily`).
    #[inline(always)]
    pub fn probabilities<S: Fragment>(
        &mut self,
        scores: &mut [S; ROW_TILES],
        first_key: u32,
        kept_factor: KeptFactor,
    ) -> [[f32; 2]; ROW_TILES] {
        self.probabilities_of::<S, false>(scores, first_key, EVERY_REGISTER, kept_factor)
    }

    /// `probabilities` in two parts, for a caller that waits for something in between: the
    /// first part ends with the exponentials of each fragment's first `head` registers, which
    /// are pinned there (LLVM would otherwise sink them into the second part's basic block);
    /// `probabilities_tail` computes the rest.
    #[inline(always)]
    pub fn probabilities_head<S: Fragment>(
        &mut self,
        scores: &mut [S; ROW_TILES],
        first_key: u32,
        head: usize,
        kept_factor: KeptFactor,
    ) -> [[f32; 2]; ROW_TILES] {
        self.probabilities_of::<S, true>(scores, first_key, 0..head, kept_factor)
    }

    /// Masks, raises the maxima, and exponentiates registers `regs` (`exponentiate`).
    #[inline(always)]
    fn probabilities_of<S: Fragment, const PIN: bool>(
        &mut self,
        scores: &mut [S; ROW_TILES],
        first_key: u32,
        regs: Range<usize>,
        kept_factor: KeptFactor,
    ) -> [[f32; 2]; ROW_TILES] {
        self.mask(scores, first_key);
        let correction = self.raise_maxima_lazily(scores, kept_factor);
        self.exponentiate::<S, PIN>(scores, regs);
        correction
    }

    /// `probabilities_head` with its exponentials started before the tile's row maxima are
    /// known: they take the rows' kept maxima, which `RowState::rescale_lazily` keeps for almost
    /// every tile after the first, so the `ex2`s and the test of the maxima (chains of `max`es
    /// and a warp vote, `some_row_moves`) share the pipes instead of running one after the other. A warp
    /// where some row moves its maximum computes the head again from the scores, which are kept
    /// for that. Either way the results are those of `probabilities_head`, bit for bit: a kept
    /// row's factor is exactly 1, and `x * 1` is `x`.
    #[inline(always)]
    pub fn probabilities_speculatively<S: Fragment + Copy>(
        &mut self,
        scores: &mut [S; ROW_TILES],
        first_key: u32,
        head: usize,
        kept_factor: KeptFactor,
    ) -> [[f32; 2]; ROW_TILES] {
        self.mask(scores, first_key);
        let before = self.state;
        let mut probs = *scores;
        self.exponentiate::<S, true>(&mut probs, 0..head);
        let correction = self.raise_maxima_lazily(scores, kept_factor);
        // A row's offset changes exactly when its factor is not 1 (`rescale_lazily`).
        if needs_rescale(&correction) {
            for (rows, (was, factor)) in self.state.iter_mut().zip(before.iter().zip(correction.iter())) {
                // Indexed: the same loop over the flattened arrays put the block's state in
                // local memory (800 bytes in the e4m3 kernel: docs/history/perf-notes.md, the
                // speculative softmax with 48 or 64 registers).
                for half in 0..2 {
                    rows[half].row_sum = was[half].row_sum * factor[half];
                }
            }
            probs = *scores;
            self.exponentiate::<S, true>(&mut probs, 0..head);
        }
        *scores = probs;
        correction
    }

    /// The exponentials of `probabilities_head` past its first `head` registers.
    #[inline(always)]
    pub fn probabilities_tail<S: Fragment>(&mut self, scores: &mut [S; ROW_TILES], head: usize) {
        self.exponentiate::<S, false>(scores, head..usize::MAX);
    }

    /// Puts the scores through the softcap (when the problem has one) and sends those of keys
    /// outside each row's `key_start..key_end` to -inf.
    #[inline(always)]
    fn mask<S: Fragment>(&self, scores: &mut [S; ROW_TILES], first_key: u32) {
        let (softcap, softcap_inverse) = self.softcap;
        // A uniform branch on a launch parameter (the plain kernels run past it), and none at all
        // in a plain instance.
        if MASKS && softcap != 0.0 {
            for fragment in scores.iter_mut() {
                for s in fragment.registers_mut() {
                    // `Problem::softcap_tanh`.
                    *s = softcap * arch::tanh_approx(*s * softcap_inverse);
                }
            }
        }
        let pair = arch::lane_id() % 4;
        // A warp-uniform branch: only steps that reach past the sequence end or the causal
        // diagonal, or start before a sliding window, for some row of the warp mask anything.
        let keys = 2 * scores[0].registers().len() as u32;
        if first_key + keys > self.warp_key_end || (MASKS && first_key < self.warp_key_start) {
            // Indexed: iterators zipped over the bound arrays put them in local memory.
            for mt in 0..ROW_TILES {
                for (r, s) in scores[mt].registers_mut().iter_mut().enumerate() {
                    let key = first_key + (8 * (r / 4)) as u32 + 2 * pair + (r % 2) as u32;
                    let half = half_of(r);
                    if key >= self.key_end[mt][half] || (MASKS && key < self.key_start[mt][half]) {
                        *s = f32::NEG_INFINITY;
                    }
                }
            }
        }
    }

    /// Raises each row's running maximum to the tile's; returns the factor that corrects what
    /// was accumulated under the old maximum.
    #[inline(always)]
    fn raise_maxima<P: BarrierPolicy, const COUNT: bool, S: Fragment>(
        &mut self,
        scores: &[S; ROW_TILES],
        kept_factor: KeptFactor,
    ) -> [[f32; 2]; ROW_TILES] {
        let own_max = self.own_maxima(scores);
        self.raise_to::<P, COUNT>(own_max, kept_factor)
    }

    /// `raise_maxima` kept lazily: the quad's exchange and the factors only in a warp where some
    /// row moves its maximum (`some_row_moves`); elsewhere every factor is 1 and the state stays.
    #[inline(always)]
    fn raise_maxima_lazily<S: Fragment>(
        &mut self,
        scores: &[S; ROW_TILES],
        kept_factor: KeptFactor,
    ) -> [[f32; 2]; ROW_TILES] {
        let own_max = self.own_maxima(scores);
        let mut correction = [[1.0f32; 2]; ROW_TILES];
        if self.some_row_moves(&own_max) {
            correction = self.raise_to::<Mbarrier, false>(own_max, kept_factor);
        }
        correction
    }

    /// The maxima of this thread's share of each row half of the tile (a quarter of its keys).
    #[inline(always)]
    fn own_maxima<S: Fragment>(&self, scores: &[S; ROW_TILES]) -> [[f32; 2]; ROW_TILES] {
        let mut own_max = [[f32::NEG_INFINITY; 2]; ROW_TILES];
        for (fragment, max) in scores.iter().zip(own_max.iter_mut()) {
            // Four chains per row half, folded at the end: one chain through all of a row's
            // registers (44 at 176 keys) is a run of dependent `max`es that the softmax waits
            // out every tile (docs/kernels/flash_ws.md, the softmax). `max` is exact, so the order
            // is free.
            let mut chains = [[f32::NEG_INFINITY; MAX_CHAINS]; 2];
            for (r, s) in fragment.registers().iter().enumerate() {
                let chain = &mut chains[half_of(r)][max_chain(r)];
                *chain = arch::max(*chain, *s);
            }
            // Indexed, not zipped with the array by value: its `IntoIter` kept the chains in
            // local memory (a loop over a stack copy in the PTX).
            for half in 0..2 {
                let chain = &chains[half];
                max[half] = arch::max(arch::max(chain[0], chain[1]), arch::max(chain[2], chain[3]));
            }
        }
        own_max
    }

    /// Whether some row of the warp moves its maximum (`RowState::rescale_lazily`), decided
    /// without the quad's exchange: each thread tests its own share (`RowState::keeps`), and one
    /// vote of the warp settles it. Almost every tile after the first keeps every maximum, and
    /// then the factors are 1 and the state stays as it is, exactly as `raise_to` would leave
    /// them (docs/kernels/flash_ws.md, the softmax: one warp vote).
    #[inline(always)]
    fn some_row_moves(&self, own_max: &[[f32; 2]; ROW_TILES]) -> bool {
        let mut moves = false;
        for (rows, own_max) in self.state.iter().zip(own_max.iter()) {
            for half in 0..2 {
                moves |= !rows[half].keeps(own_max[half], self.scale_log2);
            }
        }
        arch::warp_any(moves)
    }

    /// `raise_maxima` from each thread's `own_maxima`: exchanges them over the quad first.
    #[inline(always)]
    fn raise_to<P: BarrierPolicy, const COUNT: bool>(
        &mut self,
        own_max: [[f32; 2]; ROW_TILES],
        kept_factor: KeptFactor,
    ) -> [[f32; 2]; ROW_TILES] {
        let mut tile_max = own_max;
        for max in tile_max.iter_mut() {
            for half in 0..2 {
                max[half] = arch::quad_max(max[half]);
            }
        }
        sync::<P, COUNT>(SyncPoint::RowMaxExchanged);
        let mut correction = [[1.0f32; 2]; ROW_TILES];
        for mt in 0..ROW_TILES {
            for half in 0..2 {
                correction[mt][half] =
                    self.state[mt][half].rescale_lazily(tile_max[mt][half], self.scale_log2, kept_factor);
            }
        }
        correction
    }

    /// Turns the scores of registers `regs` (whole pairs) into probabilities in place and adds
    /// them to this thread's row sums; with `PIN`, each probability is pinned where it is
    /// computed.
    #[inline(always)]
    fn exponentiate<S: Fragment, const PIN: bool>(
        &mut self,
        scores: &mut [S; ROW_TILES],
        regs: Range<usize>,
    ) {
        for (fragment, state) in scores.iter_mut().zip(self.state.iter_mut()) {
            let offset = [state[0].offset(self.scale_log2), state[1].offset(self.scale_log2)];
            // Two chains per row (the first and the second register of each pair) halve the
            // serial run of dependent adds; see docs/kernels/flash_ws.md, the softmax.
            let (mut first, mut second) = ([0.0f32; 2], [0.0f32; 2]);
            let registers = fragment.registers_mut();
            for p in regs.start / 2..regs.end.min(registers.len()) / 2 {
                let half = p % 2;
                for value in &mut registers[2 * p..2 * p + 2] {
                    *value = softmax::probability(*value, self.scale_log2, offset[half]);
                    if PIN {
                        let mut bits = value.to_bits();
                        arch::fence_operand(&mut bits);
                        *value = f32::from_bits(bits);
                    }
                }
                first[half] += registers[2 * p];
                second[half] += registers[2 * p + 1];
            }
            for (half, row) in state.iter_mut().enumerate() {
                // Pinned here, beside the exponentials they add up: unpinned, LLVM sank these adds
                // past the wait loop that follows in `flash_ws` (a poll ends the basic block), and
                // ptxas, which schedules within a block, ran them as a separate run after all the
                // `ex2`s instead of in their shadow (docs/kernels/flash_ws.md, the softmax).
                let mut bits = (row.row_sum + first[half] + second[half]).to_bits();
                arch::fence_operand(&mut bits);
                row.row_sum = f32::from_bits(bits);
            }
        }
    }

    /// The running state of this thread's rows (`[row tile][half]`), its row sums still this
    /// thread's share until the epilogue adds up each quad's: for merging partial results of
    /// the same rows over other keys (`RowState::weight`).
    #[inline(always)]
    pub fn states_mut(&mut self) -> &mut [[RowState; 2]; ROW_TILES] {
        &mut self.state
    }

    /// As `states_mut`, to read.
    #[inline(always)]
    pub fn states(&self) -> &[[RowState; 2]; ROW_TILES] {
        &self.state
    }

    /// The epilogue for kernels that place their rows themselves: completes each row's sum over
    /// its quad, then hands every row this thread holds to `emit(mt, half, row, state)`.
    #[inline(always)]
    pub fn finish_with(mut self, mut emit: impl FnMut(usize, usize, u32, &RowState)) {
        for mt in 0..ROW_TILES {
            for half in 0..2 {
                let row = self.row(mt, half);
                let state = &mut self.state[mt][half];
                state.row_sum = arch::quad_sum(state.row_sum);
                emit(mt, half, row, state);
            }
        }
    }

    /// The epilogue: completes the row sums over each quad, then writes every row this thread
    /// holds that is inside the problem: its output, normalised and in `T`, and (from the quad's
    /// first lane) its log-sum-exp.
    ///
    /// # Safety
    /// `out` must be the problem's output tensor, `head` a query head inside it.
    #[inline(always)]
    pub unsafe fn finish<T: Element, const D: usize, O: Fragment>(
        self,
        acc: &[O; ROW_TILES],
        problem: &Problem,
        out: *mut u16,
        head: usize,
    ) {
        // Safety: the caller's contract; `out_row` is where a row of `head` starts in `out`.
        unsafe {
            self.finish_at::<T, O>(
                acc,
                problem,
                head,
                |row| problem.out_row::<D>(out, head, row),
                D as u32,
            )
        }
    }

    /// As `finish`, each row's output starting at `row_start(row)` and holding `columns` of the
    /// accumulators' columns (fewer than `D` for `flash_ws` on a padded head dim:
    /// `Problem::columns`). A caller that loops over work items works out its head's rows before
    /// this, outside the per-row branches (`flash_ws`'s persistent kernel: docs/kernels/flash_ws.md,
    /// persistence, the warp-converged item loop).
    ///
    /// # Safety
    /// `head` must be a query head of the problem and `row_start(row)`, for each row inside the
    /// problem, the start of that row of `head` in its output tensor, which has `columns` elements.
    #[inline(always)]
    pub unsafe fn finish_at<T: Element, O: Fragment>(
        mut self,
        acc: &[O; ROW_TILES],
        problem: &Problem,
        head: usize,
        row_start: impl Fn(u32) -> *mut u16,
        columns: u32,
    ) {
        let pair = arch::lane_id() % 4;
        for (mt, fragment) in acc.iter().enumerate() {
            for half in 0..2 {
                let state = &mut self.state[mt][half];
                state.row_sum = arch::quad_sum(state.row_sum);
                let row = self.warp_first_row + (16 * mt + 8 * half) as u32 + arch::lane_id() / 4;
                let registers = fragment.registers();
                // Safety: the caller's contract.
                let finished =
                    unsafe { super::finish_row_at(problem, head, row, state, pair == 0, &row_start) };
                if let Some((o, norm)) = finished {
                    for j in 0..registers.len() / 4 {
                        let (lo, hi) = (registers[4 * j + 2 * half], registers[4 * j + 2 * half + 1]);
                        // Columns `8j + 2 pair` and the next: always inside a row of `D` (the
                        // test folds away), inside a padded row only where below `columns`.
                        if (8 * j) as u32 + 2 * pair < columns {
                            // Safety: a column pair of the row (the caller's contract).
                            unsafe {
                                arch::st_global_u32(
                                    o.add(4 * j + pair as usize),
                                    T::pack(lo * norm, hi * norm),
                                )
                            };
                        }
                    }
                }
            }
        }
    }
}

/// Scales the output accumulators by the row halves' corrections, unless no row of the warp moved
/// its maximum: with the kept maxima of `RowState::rescale_lazily` almost no tile after the first
/// moves one, and the branch (warp-uniform) skips the D-wide multiply.
#[inline(always)]
pub fn rescale<O: Fragment, const ROW_TILES: usize>(
    out: &mut [O; ROW_TILES],
    correction: [[f32; 2]; ROW_TILES],
) {
    if needs_rescale(&correction) {
        scale(out, correction);
    }
}

/// Whether some row of the warp moved its maximum (the same answer in every lane).
#[inline(always)]
pub fn needs_rescale<const ROW_TILES: usize>(correction: &[[f32; 2]; ROW_TILES]) -> bool {
    arch::warp_any(correction.iter().flatten().any(|&c| c != 1.0))
}

/// Multiplies each output accumulator by its row half's correction.
#[inline(always)]
fn scale<O: Fragment, const ROW_TILES: usize>(out: &mut [O; ROW_TILES], correction: [[f32; 2]; ROW_TILES]) {
    for (fragment, factor) in out.iter_mut().zip(correction.iter()) {
        for (r, x) in fragment.registers_mut().iter_mut().enumerate() {
            *x *= factor[half_of(r)];
        }
    }
}
