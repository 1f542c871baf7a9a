//! Online softmax in base 2, one running state per query row.
//!
//! Scores arrive tile by tile. For each row we keep a running maximum of the raw scores seen
//! (`row_max`: the largest, or with `rescale_lazily` one at most `MAX_SLACK_LOG2` below it once
//! scaled) and the sum of `2^(score*scale_log2 - row_max*scale_log2)` over the keys seen
//! (`row_sum`). When a tile raises the maximum, everything accumulated so far is multiplied by
//! `2^(old - new)`: the correction factor returned by `rescale`. `log2(e)` is folded into `scale_log2` by the host, so
//! `exp2` (one `ex2.approx`) is the only transcendental and each probability costs one FMA.
//!
//! Masked scores are `-inf`. A row that has seen only masked keys keeps `row_max = -inf`; the
//! offsets below are then taken as 0 so that no `-inf - -inf` (NaN) ever appears, and the row ends
//! with `row_sum = 0` and an output of zeros.

use crate::arch;

/// How far (in log2 units of the scaled scores) a tile's maximum may exceed the row's kept
/// maximum before the row takes it (`rescale_lazily`). Below that the old maximum stays, the
/// probabilities reach at most 2^8 (well inside f16, bf16 and e4m3, whose largest is 448; sums
/// and outputs are f32), and the output needs no correction: after the first tiles almost no
/// tile moves a maximum that far, so a warp skips the multiplies of its whole output rows
/// (`fragment::rescale`) instead of doing them for a small growth (docs/kernels/flash_ws.md, the
/// softmax).
pub const MAX_SLACK_LOG2: f32 = 8.0;

/// How [`RowState::rescale_lazily`] gets the factor of a row that keeps its maximum (exactly 1
/// either way): a choice of schedule per kernel, not of result.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum KeptFactor {
    /// Through the same `ex2` as a moved maximum, of the selected maximum: no branch.
    Computed,
    /// 1 without the `ex2`: a branch, which ptxas turns into a predicated `ex2`.
    Skipped,
}

#[derive(Clone, Copy)]
pub struct RowState {
    pub row_max: f32,
    pub row_sum: f32,
}

impl RowState {
    pub const EMPTY: RowState = RowState {
        row_max: f32::NEG_INFINITY,
        row_sum: 0.0,
    };

    /// Raises the running maximum to include `tile_max` and returns the factor by which the
    /// row's sum (already applied here) and its output accumulator must be scaled.
    #[inline(always)]
    pub fn rescale(&mut self, tile_max: f32, scale_log2: f32) -> f32 {
        let new_max = arch::max(self.row_max, tile_max);
        let correction = arch::exp2((self.row_max - new_max) * scale_log2);
        // (-inf) - (-inf) is NaN: a row with nothing but masked keys so far has nothing to correct.
        let correction = if new_max == f32::NEG_INFINITY {
            1.0
        } else {
            correction
        };
        self.row_max = new_max;
        self.row_sum *= correction;
        correction
    }

    /// `rescale`, except that the row keeps its maximum (and the factor is 1) while the tile's
    /// exceeds it by at most `MAX_SLACK_LOG2` once scaled. `kept_factor`: how the factor 1 of a
    /// kept maximum comes about. Computed (a select) was faster for the 16-bit kernels, skipped
    /// (a predicated `ex2`) for e4m3 at head dim 256 (docs/history/perf-notes.md: the lazy rescale,
    /// and FP8's kept factor per head dim).
    #[inline(always)]
    pub fn rescale_lazily(&mut self, tile_max: f32, scale_log2: f32, kept_factor: KeptFactor) -> f32 {
        let kept = self.keeps(tile_max, scale_log2);
        if kept && kept_factor == KeptFactor::Skipped {
            return 1.0;
        }
        self.rescale(if kept { self.row_max } else { tile_max }, scale_log2)
    }

    /// Whether `rescale_lazily` keeps the row's maximum against a tile whose maximum is
    /// `tile_max`. The test is monotone in `tile_max` (a rounded difference and product), so a row
    /// split over several threads keeps its maximum exactly when every thread's share keeps it.
    #[inline(always)]
    pub fn keeps(&self, tile_max: f32, scale_log2: f32) -> bool {
        // (-inf) - (-inf) is NaN, which fails the test: an empty row takes its first maximum.
        (tile_max - self.row_max) * scale_log2 <= MAX_SLACK_LOG2
    }

    /// The subtrahend for `probability`: `row_max * scale_log2`, or 0 while the row is all masked.
    #[inline(always)]
    pub fn offset(&self, scale_log2: f32) -> f32 {
        if self.row_max == f32::NEG_INFINITY {
            0.0
        } else {
            self.row_max * scale_log2
        }
    }

    /// The row's log-sum-exp in natural log, `ln(sum_j exp(score_j * scale))`: the statistic a
    /// backward pass needs. `-inf` for a row that saw no unmasked key.
    #[inline(always)]
    pub fn log_sum_exp(&self, scale_log2: f32) -> f32 {
        if self.row_sum > 0.0 {
            (self.offset(scale_log2) + arch::log2(self.row_sum)) * core::f32::consts::LN_2
        } else {
            f32::NEG_INFINITY
        }
    }

    /// The factor by which the output accumulator of this state, one of several over disjoint
    /// key ranges of the row (the slices of a split item), enters their merged one, whose
    /// maximum is `max`: 0 for a range that saw no key.
    #[inline(always)]
    pub fn weight(&self, max: f32, scale_log2: f32) -> f32 {
        if self.row_max == f32::NEG_INFINITY {
            0.0
        } else {
            arch::exp2((self.row_max - max) * scale_log2)
        }
    }

    /// This row with an attention sink in its denominator: one more logit, `sink_log2` in the
    /// base-2 units of the scaled scores, that adds no value. Returns the row's new state and the
    /// factor by which its output accumulator (summed against this state's maximum) enters the
    /// new one. A row that saw no key ends with the sink alone (output 0, log-sum-exp the sink's).
    #[inline(always)]
    pub fn with_sink(&self, sink_log2: f32, scale_log2: f32) -> (RowState, f32) {
        let (max2, sum, kept) = with_sink(self.row_max * scale_log2, self.row_sum, sink_log2);
        // A reciprocal, not a division: `div.rn.f32` has a subroutine for its slow path in SASS.
        let state = RowState {
            row_max: max2 * arch::recip(scale_log2),
            row_sum: sum,
        };
        (state, kept)
    }

    /// The factor that turns the accumulated output into the softmax average (0 for a row that
    /// saw no unmasked key).
    #[inline(always)]
    pub fn normaliser(&self) -> f32 {
        if self.row_sum > 0.0 {
            arch::recip(self.row_sum)
        } else {
            0.0
        }
    }
}

/// `2^(score*scale_log2 - offset)` in one FMA and one `ex2`; a masked score (-inf) gives 0.
#[inline(always)]
pub fn probability(score: f32, scale_log2: f32, offset: f32) -> f32 {
    arch::exp2(arch::fma(score, scale_log2, -offset))
}

/// A row's softmax denominator with an attention sink joined, in base 2: the row's maximum `max2`
/// (scaled, `-inf` for a row that saw no key) and its sum against it, and the sink's logit
/// `sink_log2` (`-inf`: none). Returns the new maximum, the new sum against it, and the factor
/// that takes what was summed against `max2` to the new maximum (1 when neither is finite).
#[inline(always)]
pub fn with_sink(max2: f32, sum: f32, sink_log2: f32) -> (f32, f32, f32) {
    let top = arch::max(max2, sink_log2);
    if top == f32::NEG_INFINITY {
        return (max2, sum, 1.0);
    }
    // exp2(-inf) is 0: an empty row keeps nothing, a missing sink adds nothing.
    let kept = arch::exp2(max2 - top);
    (top, arch::fma(sum, kept, arch::exp2(sink_log2 - top)), kept)
}
