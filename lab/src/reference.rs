//! The float64 CPU reference for attention forward, multithreaded over query rows, and the
//! comparison that turns a kernel's output into a verdict.
//!
//! Everything is computed in f64 from the f32 inputs, so the reference's own rounding (~1e-16
//! relative) is negligible next to a half-precision kernel's (~1e-3).

use rayon::prelude::*;
use serde::Serialize;

/// Q is `[batch, heads, seq_q, head_dim]`, K and V `[batch, heads_kv, seq_k, head_dim]`, all
/// contiguous row-major; `heads_kv` divides `heads` (grouped-query attention when smaller,
/// multi-query when 1). Query head `h` reads key/value head `h / (heads / heads_kv)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Dims {
    /// Independent sequences in the batch.
    pub batch: usize,
    /// Query heads.
    pub heads: usize,
    /// Key/value heads; divides `heads`.
    pub heads_kv: usize,
    /// Query rows per head.
    pub seq_q: usize,
    /// Key/value rows per head.
    pub seq_k: usize,
    /// Elements per head vector, the same for Q, K and V.
    pub head_dim: usize,
}

impl Dims {
    /// Query rows in all: `batch * heads * seq_q`.
    pub(crate) fn query_rows(&self) -> usize {
        self.batch * self.heads * self.seq_q
    }

    /// How many keys query `row` (< `seq_q`) may attend: all of them, or with a causal mask
    /// aligned bottom-right like FlashAttention-2, keys `0..=row + seq_k - seq_q`: the last query
    /// sees every key and each earlier one one key fewer, down to none when `seq_q > seq_k`.
    /// Without a window the visible keys are a prefix, so their count says which they are.
    pub(crate) fn visible_keys(&self, causal: bool, row: usize) -> usize {
        Mask::from(causal).keys(self, row).len()
    }

    /// The key/value head that query head `head` (a `batch * heads` index) reads. Query heads of
    /// one batch are contiguous, so `head / group` is `b * heads_kv + h / group`.
    pub(crate) fn kv_head(&self, head: usize) -> usize {
        head / (self.heads / self.heads_kv)
    }
}

/// Which keys each query row sees and how its scores are modified, with FlashAttention's
/// semantics. Every public function of this module that takes a mask takes `impl Into<Mask>`, so
/// a plain `bool` still means "causal or not".
///
/// Query row `i` of `seq_q` has the diagonal key `i + seq_k - seq_q` (bottom-right alignment, as
/// the causal mask). It sees the keys `j` with `diagonal - left <= j <= diagonal + right`,
/// clamped to `0..seq_k`; `None` leaves a side unbounded, and `causal` sets the right side to 0
/// whatever `right` says. A row may see no key: its output is zeros, its log-sum-exp `-inf` and
/// its dQ zero.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Mask {
    /// Causal: no key after the row's diagonal (overrides `right`).
    pub causal: bool,
    /// Keys a row sees before its diagonal; `None` for all of them.
    pub left: Option<usize>,
    /// Keys a row sees after its diagonal; `None` for all of them.
    pub right: Option<usize>,
    /// Logit softcap `cap`: each scaled score `x` becomes `cap * tanh(x / cap)` before the
    /// softmax; `None` for none. Must be positive and finite when set.
    pub softcap: Option<f64>,
}

impl From<bool> for Mask {
    /// The causal mask (`true`) or none (`false`): no window, no softcap.
    fn from(causal: bool) -> Mask {
        Mask {
            causal,
            ..Mask::default()
        }
    }
}

impl From<flashrs::Params> for Mask {
    /// The mask of a library call's parameters: its causal flag, window and softcap (widened to
    /// f64 exactly, so the reference caps with the very value the kernels were given).
    fn from(params: flashrs::Params) -> Mask {
        Mask {
            causal: params.causal,
            left: params.window.left.map(|l| l as usize),
            right: params.window.right.map(|r| r as usize),
            softcap: params.softcap.map(f64::from),
        }
    }
}

impl Mask {
    /// The keys `start..end` that query `row` (< `dims.seq_q`) sees; an empty range (not
    /// necessarily `0..0`) when it sees none. The same rule as the library's
    /// [`Window::keys`](flashrs::Window::keys), which mirrors the kernels'.
    pub fn keys(&self, dims: &Dims, row: usize) -> std::ops::Range<usize> {
        // i128: the diagonal is negative when seq_q > seq_k, and `usize::MAX` sized windows must
        // not overflow when added to or subtracted from it.
        let seq_k = dims.seq_k as i128;
        let diagonal = row as i128 + seq_k - dims.seq_q as i128;
        let right = if self.causal { Some(0) } else { self.right };
        let end = right.map_or(seq_k, |r| (diagonal + 1 + r as i128).clamp(0, seq_k));
        let start = self.left.map_or(0, |l| (diagonal - l as i128).clamp(0, seq_k));
        start as usize..end.max(start) as usize
    }

    /// A scaled score `x` after the softcap: `cap * tanh(x / cap)`, or `x` without one.
    pub fn capped(&self, x: f64) -> f64 {
        match self.softcap {
            Some(cap) => cap * (x / cap).tanh(),
            None => x,
        }
    }

    /// The derivative of [`Self::capped`] at `x`: `1 - tanh(x / cap)^2`, or 1 without a softcap.
    /// The backward multiplies the gradient of a capped score by it to reach the raw one.
    pub fn capped_slope(&self, x: f64) -> f64 {
        match self.softcap {
            Some(cap) => 1.0 - (x / cap).tanh().powi(2),
            None => 1.0,
        }
    }
}

/// Attention in float64 over inputs given as f32 (already rounded to the kernel's input type by
/// the caller, so the reference sees exactly what the kernel sees): `softmax(cap(scale * Q K^T)) V`
/// over the keys each row sees, shaped like Q. `mask` is a [`Mask`] or a `bool` (causal or not);
/// masks are aligned bottom-right: causally, query `i` sees key `j` iff `j <= i + seq_k - seq_q`.
/// A row that sees no key is all zeros.
///
/// Panics (with a message naming the tensor) if a slice's length does not match `dims`.
pub fn attention_f64(
    q: &[f32],
    k: &[f32],
    v: &[f32],
    dims: Dims,
    mask: impl Into<Mask>,
    scale: f64,
) -> Vec<f64> {
    let mask = mask.into();
    check_lengths(q, k, v, dims);
    let d = dims.head_dim;
    let mut out = vec![0.0; q.len()];
    if d == 0 {
        return out; // Nothing to compute, and chunks of length 0 are not a thing.
    }
    out.par_chunks_mut(d)
        .enumerate()
        .for_each_init(Vec::new, |scores, (r, o)| {
            attend_row(
                q,
                k,
                v,
                dims,
                mask,
                scale,
                (r / dims.seq_q, r % dims.seq_q),
                scores,
                o,
            )
        });
    out
}

/// [`attention_f64`] for the listed `(batch * heads index, query row)` pairs only, their output
/// rows in order (each `head_dim` long): spot checks of problems too big for the full reference.
///
/// Panics (with a clear message) on mismatched lengths or a pair outside `dims`.
pub fn attention_rows_f64(
    q: &[f32],
    k: &[f32],
    v: &[f32],
    dims: Dims,
    mask: impl Into<Mask>,
    scale: f64,
    rows: &[(usize, usize)],
) -> Vec<f64> {
    let mask = mask.into();
    check_lengths(q, k, v, dims);
    let heads = dims.batch * dims.heads;
    for &(head, row) in rows {
        assert!(
            head < heads && row < dims.seq_q,
            "row ({head}, {row}) is outside {heads} heads of {} rows ({dims:?})",
            dims.seq_q
        );
    }
    let d = dims.head_dim;
    let mut out = vec![0.0; rows.len() * d];
    if d == 0 {
        return out;
    }
    out.par_chunks_mut(d)
        .zip(rows)
        .for_each_init(Vec::new, |scores, (o, &pair)| {
            attend_row(q, k, v, dims, mask, scale, pair, scores, o)
        });
    out
}

/// Natural-log log-sum-exp of every query row's scaled (and, with a softcap, capped) scores over
/// the keys it sees (`[batch, heads, seq_q]`), `-inf` for a row that sees no key: what the
/// kernels' optional LSE output must match. `mask` is a [`Mask`] or a `bool` (causal or not).
///
/// Panics (with a message naming the tensor) if a slice's length does not match `dims`.
pub fn log_sum_exp_f64(q: &[f32], k: &[f32], dims: Dims, mask: impl Into<Mask>, scale: f64) -> Vec<f64> {
    let mask = mask.into();
    check_lengths(q, k, k, dims);
    if dims.head_dim == 0 {
        // Every score is an empty dot product, 0, and stays 0 under a softcap: the LSE is
        // ln(visible keys), -inf for none.
        return (0..dims.query_rows())
            .map(|r| (mask.keys(&dims, r % dims.seq_q).len() as f64).ln())
            .collect();
    }
    (0..dims.query_rows())
        .into_par_iter()
        .map_init(Vec::new, |scores, r| {
            row_scores(q, k, dims, mask, scale, (r / dims.seq_q, r % dims.seq_q), scores);
            let max = scores.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            if scores.is_empty() {
                f64::NEG_INFINITY
            } else {
                max + scores.iter().map(|s| (s - max).exp()).sum::<f64>().ln()
            }
        })
        .collect()
}

/// Attention over a paged KV cache in float64, one sequence at a time: sequence `b`'s keys and
/// values are gathered through `cache`'s block table from `k_cache` and `v_cache` (`[num_blocks,
/// block_size, heads_kv, D]`), then attended as [`attention_f64`] does with `seq_k` its own
/// length (masks aligned bottom-right per sequence). `q` is `[batch, heads, seq_q, D]`
/// (`dims.seq_k` is not used). Returns the output, shaped like Q, and each row's log-sum-exp
/// (natural log, `-inf` for a row that sees no key).
pub fn paged_attention_f64(
    q: &[f32],
    (k_cache, v_cache): (&[f32], &[f32]),
    cache: &flashrs::PagedKv,
    dims: Dims,
    mask: impl Into<Mask>,
    scale: f64,
) -> (Vec<f64>, Vec<f64>) {
    let mask = mask.into();
    let per_sequence = dims.heads * dims.seq_q * dims.head_dim;
    assert_eq!(q.len(), dims.batch * per_sequence, "q for {dims:?}");
    assert_eq!(cache.batch(), dims.batch, "the cache's batch for {dims:?}");
    let (mut out, mut lse) = (Vec::with_capacity(q.len()), Vec::new());
    for b in 0..dims.batch {
        let k = cache.gather(k_cache, b, dims.heads_kv, dims.head_dim);
        let v = cache.gather(v_cache, b, dims.heads_kv, dims.head_dim);
        let one = Dims {
            batch: 1,
            seq_k: cache.seqlens_k()[b] as usize,
            ..dims
        };
        let q = &q[b * per_sequence..][..per_sequence];
        out.extend(attention_f64(q, &k, &v, one, mask, scale));
        lse.extend(log_sum_exp_f64(q, &k, one, mask, scale));
    }
    (out, lse)
}

/// Attention over a variable-length batch in float64, one sequence at a time: `q` packed as
/// `[total_q, heads, D]`, `k` and `v` as `[total_k, heads_kv, D]`, sequence `b` owning the rows
/// `batch.q_range(b)` and `batch.k_range(b)`; each is attended as [`attention_f64`] does with its
/// own lengths (masks aligned bottom-right per sequence). `dims` gives the heads and head
/// dim (its batch and lengths are not used). Returns the output, packed like Q, and the
/// log-sum-exp as `[heads, total_q]` (natural log, `-inf` for a row that sees no key).
pub fn varlen_attention_f64(
    (q, k, v): (&[f32], &[f32], &[f32]),
    batch: &flashrs::varlen::VarlenBatch,
    dims: Dims,
    mask: impl Into<Mask>,
    scale: f64,
) -> (Vec<f64>, Vec<f64>) {
    let mask = mask.into();
    let (h, h_kv, d) = (dims.heads, dims.heads_kv, dims.head_dim);
    let (total_q, total_k) = (batch.total_q(), batch.total_k());
    assert_eq!(q.len(), total_q * h * d, "packed q for {dims:?}");
    assert_eq!(k.len(), total_k * h_kv * d, "packed k for {dims:?}");
    assert_eq!(v.len(), k.len(), "packed v for {dims:?}");
    // Packed rows `rows` of a `[rows, heads, D]` tensor as `[1, heads, rows.len(), D]`.
    let gather = |x: &[f32], rows: std::ops::Range<usize>, heads: usize| -> Vec<f32> {
        let mut out = Vec::with_capacity(rows.len() * heads * d);
        for head in 0..heads {
            for row in rows.clone() {
                out.extend_from_slice(&x[(row * heads + head) * d..][..d]);
            }
        }
        out
    };
    let mut out = vec![0.0; q.len()];
    let mut lse = vec![0.0; h * total_q];
    for b in 0..batch.batch() {
        let (rows_q, rows_k) = (batch.q_range(b), batch.k_range(b));
        if rows_q.is_empty() {
            continue;
        }
        let one = Dims {
            batch: 1,
            seq_q: rows_q.len(),
            seq_k: rows_k.len(),
            ..dims
        };
        let qb = gather(q, rows_q.clone(), h);
        let (kb, vb) = (gather(k, rows_k.clone(), h_kv), gather(v, rows_k, h_kv));
        let o = attention_f64(&qb, &kb, &vb, one, mask, scale);
        let l = log_sum_exp_f64(&qb, &kb, one, mask, scale);
        for head in 0..h {
            for (i, row) in rows_q.clone().enumerate() {
                let src = (head * one.seq_q + i) * d;
                out[(row * h + head) * d..][..d].copy_from_slice(&o[src..][..d]);
                lse[head * total_q + row] = l[head * one.seq_q + i];
            }
        }
    }
    (out, lse)
}

/// The internal-API contract: lengths must match `dims`. A mismatch is a caller's bug, reported
/// with a message rather than an out-of-bounds index deep in a worker thread.
fn check_lengths(q: &[f32], k: &[f32], v: &[f32], dims: Dims) {
    assert!(
        dims.heads_kv > 0 && dims.heads.is_multiple_of(dims.heads_kv),
        "heads_kv must be positive and divide heads: {dims:?}"
    );
    let elements = |parts: [usize; 4]| parts.iter().try_fold(1usize, |acc, &x| acc.checked_mul(x));
    let q_len = elements([dims.batch, dims.heads, dims.seq_q, dims.head_dim]);
    let kv_len = elements([dims.batch, dims.heads_kv, dims.seq_k, dims.head_dim]);
    for (name, slice, expected) in [("q", q, q_len), ("k", k, kv_len), ("v", v, kv_len)] {
        assert!(
            Some(slice.len()) == expected,
            "{name} has {} elements, {dims:?} needs {}",
            slice.len(),
            expected.map_or("more than usize::MAX".to_string(), |n| n.to_string())
        );
    }
}

/// Fills `scores` with the scaled, capped scores of query `row` of `head` (a `batch * heads`
/// index) against the keys it sees, `mask.keys(dims, row)` in order, and returns the first of
/// those keys. `head_dim` must be positive.
fn row_scores(
    q: &[f32],
    k: &[f32],
    dims: Dims,
    mask: Mask,
    scale: f64,
    (head, row): (usize, usize),
    scores: &mut Vec<f64>,
) -> usize {
    let d = dims.head_dim;
    let query = &q[(head * dims.seq_q + row) * d..][..d];
    let keys = mask.keys(&dims, row);
    let head_keys = &k[dims.kv_head(head) * dims.seq_k * d..][..dims.seq_k * d];
    scores.clear();
    scores.extend(
        head_keys[keys.start * d..keys.end * d]
            .chunks_exact(d)
            .map(|key| {
                let dot: f64 = query.iter().zip(key).map(|(a, b)| *a as f64 * *b as f64).sum();
                mask.capped(dot * scale)
            }),
    );
    keys.start
}

/// Writes one output row: the softmax-weighted mean of the value rows the query sees.
#[allow(clippy::too_many_arguments)]
fn attend_row(
    q: &[f32],
    k: &[f32],
    v: &[f32],
    dims: Dims,
    mask: Mask,
    scale: f64,
    (head, row): (usize, usize),
    scores: &mut Vec<f64>,
    out: &mut [f64],
) {
    let d = dims.head_dim;
    out.fill(0.0);
    let first = row_scores(q, k, dims, mask, scale, (head, row), scores);
    if scores.is_empty() {
        return; // Fully masked: zeros, as FlashAttention-2 writes.
    }
    // Subtracting the row maximum keeps exp() in range (scores of 1e3 would overflow to inf);
    // the softmax is unchanged since the factor exp(-max) cancels.
    let max = scores.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    // `scores[0]` belongs to key `first`, so the values start there too (a window's left edge
    // leaves earlier keys out).
    let values = v[(dims.kv_head(head) * dims.seq_k + first) * d..].chunks_exact(d);
    let mut total = 0.0;
    for (score, value) in scores.iter().zip(values) {
        let weight = (score - max).exp();
        total += weight;
        for (o, x) in out.iter_mut().zip(value) {
            *o += weight * *x as f64;
        }
    }
    // `total >= 1`: the maximal score contributes exp(0).
    out.iter_mut().for_each(|o| *o /= total);
}

/// How far a kernel's output is from the reference.
#[derive(Debug, Clone, Copy, Serialize, PartialEq)]
pub struct Comparison {
    /// `max |actual - reference|`.
    pub max_abs_err: f64,
    /// `||actual - reference|| / ||reference||` (2-norms).
    pub rel_l2_err: f64,
    /// NaN or infinite outputs (an unwritten element of a NaN-poisoned buffer counts here).
    pub non_finite: usize,
    /// Elements of `actual`.
    pub elements: usize,
}

/// One row of a result without attention sinks turned into the result with its sink (GPT-OSS's:
/// one more logit in the row's softmax denominator, with no value): the output scaled by
/// `e^lse / (e^lse + e^sink)` and the log-sum-exp `ln(e^lse + e^sink)`. A row that saw no key
/// ends with zeros and the sink; a sink of `-inf` changes nothing. Computed from the finished
/// row, apart from how any kernel folds the sink into its running softmax.
pub fn join_sink(out_row: &mut [f64], lse: &mut f64, sink: f64) {
    let merged = match (*lse == f64::NEG_INFINITY, sink == f64::NEG_INFINITY) {
        (true, _) => sink,
        (false, true) => *lse,
        (false, false) => {
            let top = lse.max(sink);
            top + ((*lse - top).exp() + (sink - top).exp()).ln()
        }
    };
    let factor = match *lse == f64::NEG_INFINITY {
        true => 0.0,
        false => (*lse - merged).exp(),
    };
    out_row.iter_mut().for_each(|x| *x *= factor);
    *lse = merged;
}

/// Compares `actual` with `reference`. Any non-finite value on either side, or a length mismatch,
/// makes both errors infinite, so NaN can never pass. `rel_l2_err` divides by
/// `max(||reference||, f64::MIN_POSITIVE)`, so an all-zero reference gives 0 for an exact match
/// and a huge error otherwise instead of 0/0.
pub fn compare(actual: &[f32], reference: &[f64]) -> Comparison {
    let mut max_abs_err = 0.0f64;
    let (mut diff2, mut ref2) = (0.0f64, 0.0f64);
    let mut non_finite = 0;
    let mut reference_broken = false;
    for (a, r) in actual.iter().zip(reference) {
        if !a.is_finite() {
            non_finite += 1;
            continue;
        }
        reference_broken |= !r.is_finite();
        let e = (*a as f64 - r).abs();
        max_abs_err = max_abs_err.max(e);
        diff2 += e * e;
        ref2 += r * r;
    }
    let mut rel_l2_err = diff2.sqrt() / ref2.sqrt().max(f64::MIN_POSITIVE);
    if non_finite > 0 || reference_broken || actual.len() != reference.len() {
        max_abs_err = f64::INFINITY;
        rel_l2_err = f64::INFINITY;
    }
    Comparison {
        max_abs_err,
        rel_l2_err,
        non_finite,
        elements: actual.len(),
    }
}

/// Pass bounds for a comparison: both must hold.
#[derive(Debug, Clone, Copy, Serialize, PartialEq)]
pub struct Tolerance {
    /// Most `max_abs_err` that passes.
    pub max_abs: f64,
    /// Most `rel_l2_err` that passes.
    pub rel_l2: f64,
}

impl Tolerance {
    /// fp16 inputs, fp32 accumulation, fp16 output, for inputs of the usual scale (standard
    /// normal Q, K, V). Outputs are convex combinations of V rows, so |o| stays below ~3. The
    /// errors a correct kernel makes: rounding the output to fp16 (half an ulp, 2^-11 relative,
    /// ~1e-3 absolute at |o| ~ 2), and P rounded to fp16 before P V on tensor cores (2^-11
    /// relative per weight, mostly averaging out); fp32 dot products and exp2 approximations add
    /// ~1e-6. The worst case recorded in `evidence/reliability/verify_h100.json.xz` is 1.6e-3 absolute and 3e-4
    /// relative L2, so these bounds leave ~6x and ~17x headroom while still catching any indexing
    /// or masking bug, which moves outputs by O(0.1..1).
    pub const FP16: Tolerance = Tolerance {
        max_abs: 1e-2,
        rel_l2: 5e-3,
    };
    /// bf16 keeps 8 significand bits instead of fp16's 11: 8x the rounding of every step above
    /// (half an ulp of bf16 at |o| ~ 2 is already 7.8e-3), hence 6x the bounds of [`Self::FP16`].
    /// The recorded worst case is 1.2e-2 absolute and 2.4e-3 relative L2 (~5x and ~13x headroom).
    pub const BF16: Tolerance = Tolerance {
        max_abs: 6e-2,
        rel_l2: 3e-2,
    };
}

impl Comparison {
    /// Within `tolerance` on both measures and no non-finite output. NaN errors fail too, since
    /// every comparison with NaN is false.
    pub fn passes(&self, tolerance: Tolerance) -> bool {
        self.non_finite == 0 && self.max_abs_err <= tolerance.max_abs && self.rel_l2_err <= tolerance.rel_l2
    }
}

/// The reference's dims of a library [`Shape`](flashrs::Shape): `shape.reference_dims()`.
pub trait ReferenceDims {
    /// The same dims as the CPU reference's [`Dims`].
    fn reference_dims(&self) -> Dims;
}

impl ReferenceDims for flashrs::Shape {
    fn reference_dims(&self) -> Dims {
        Dims {
            batch: self.batch,
            heads: self.heads,
            heads_kv: self.heads_kv,
            seq_q: self.seq_q,
            seq_k: self.seq_k,
            head_dim: self.head_dim,
        }
    }
}

/// The pass bounds of a library [`DType`](flashrs::DType): `dtype.tolerance()`.
pub trait DTypeTolerance {
    /// Pass bounds against the float64 reference for outputs of this type.
    fn tolerance(self) -> Tolerance;
}

impl DTypeTolerance for flashrs::DType {
    fn tolerance(self) -> Tolerance {
        match self {
            flashrs::DType::F16 => Tolerance::FP16,
            flashrs::DType::Bf16 => Tolerance::BF16,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dims(seq_q: usize, seq_k: usize, head_dim: usize) -> Dims {
        Dims {
            batch: 1,
            heads: 1,
            heads_kv: 1,
            seq_q,
            seq_k,
            head_dim,
        }
    }

    /// Deterministic inputs in [-1, 1] that differ by `salt`.
    fn wave(n: usize, salt: f32) -> Vec<f32> {
        (0..n).map(|i| (i as f32 * 0.37 + salt).sin()).collect()
    }

    fn assert_close(actual: &[f64], expected: &[f64]) {
        assert_eq!(actual.len(), expected.len());
        for (a, e) in actual.iter().zip(expected) {
            assert!((a - e).abs() < 1e-12, "{actual:?} vs {expected:?}");
        }
    }

    /// `join_sink` equals the softmax written out with the sink as one more term of the
    /// denominator, for a sink below, near and above the row's scores, none, and an empty row.
    #[test]
    fn a_joined_sink_is_one_more_term_of_the_denominator() {
        let (q, k, v) = (wave(4, 0.1), wave(12, 0.7), wave(12, 1.3));
        let d = dims(1, 3, 4);
        let scores: Vec<f64> = (0..3)
            .map(|j| 0.5 * (0..4).map(|i| q[i] as f64 * k[4 * j + i] as f64).sum::<f64>())
            .collect();
        for sink in [-30.0, -0.2, 0.4, 3.0, f64::NEG_INFINITY] {
            let mut out = attention_f64(&q, &k, &v, d, false, 0.5);
            let mut lse = log_sum_exp_f64(&q, &k, d, false, 0.5)[0];
            join_sink(&mut out, &mut lse, sink);
            let total = sink.exp() + scores.iter().map(|s| s.exp()).sum::<f64>();
            let expected: Vec<f64> = (0..4)
                .map(|i| (0..3).map(|j| scores[j].exp() * v[4 * j + i] as f64).sum::<f64>() / total)
                .collect();
            assert_close(&out, &expected);
            assert!(
                (lse - total.ln()).abs() < 1e-12,
                "sink {sink}: {lse} vs {}",
                total.ln()
            );
        }
        let (mut empty, mut lse) = (vec![0.0; 4], f64::NEG_INFINITY);
        join_sink(&mut empty, &mut lse, 1.5);
        assert_eq!((empty, lse), (vec![0.0; 4], 1.5));
    }

    #[test]
    fn hand_computed_case() {
        // Two queries, two keys, head_dim 2, scale 1/2.
        //   q0 = [2, 0], q1 = [0, 2]; k0 = [1, 0], k1 = [0, 1]; v0 = [2, 0], v1 = [0, 4].
        //   Scaled scores: q0 -> [1, 0], q1 -> [0, 1].
        //   Weights: row 0 [e/(e+1), 1/(e+1)] = [0.7311, 0.2689], row 1 the reverse.
        //   out0 = 0.7311 v0 + 0.2689 v1 = [1.4621, 1.0758]; out1 = [0.5379, 2.9242].
        let (q, k, v) = ([2.0, 0.0, 0.0, 2.0], [1.0, 0.0, 0.0, 1.0], [2.0, 0.0, 0.0, 4.0]);
        let out = attention_f64(&q, &k, &v, dims(2, 2, 2), false, 0.5);
        let (big, small) = (
            std::f64::consts::E / (std::f64::consts::E + 1.0),
            1.0 / (std::f64::consts::E + 1.0),
        );
        assert_close(&out, &[2.0 * big, 4.0 * small, 2.0 * small, 4.0 * big]);
        assert!((out[0] - 1.4621).abs() < 1e-4 && (out[3] - 2.9242).abs() < 1e-4);
        // Causal (seq_q == seq_k): row 0 sees only k0, so out0 = v0; row 1 is unchanged.
        let out = attention_f64(&q, &k, &v, dims(2, 2, 2), true, 0.5);
        assert_close(&out, &[2.0, 0.0, 2.0 * small, 4.0 * big]);
    }

    #[test]
    fn uniform_keys_average_the_values() {
        let v = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0];
        let out = attention_f64(&[0.3, -0.7], &[0.5; 6], &v, dims(1, 3, 2), false, 0.9);
        assert_close(&out, &[3.0, 4.0]);
    }

    #[test]
    fn causal_masks_align_bottom_right() {
        // seq_q = 2, seq_k = 3, equal keys: row 0 sees keys 0..=1, row 1 sees 0..=2.
        let v = [1.0, 0.0, 3.0, 0.0, 8.0, 0.0];
        let out = attention_f64(&[0.0; 4], &[1.0; 6], &v, dims(2, 3, 2), true, 1.0);
        assert_close(&out, &[2.0, 0.0, 4.0, 0.0]);
        // The same query without the mask sees all three keys.
        let out = attention_f64(&[0.0; 4], &[1.0; 6], &v, dims(2, 3, 2), false, 1.0);
        assert_close(&out, &[4.0, 0.0, 4.0, 0.0]);
    }

    /// Whether query `i` may see key `j` under `mask`, written from its definition in signed
    /// arithmetic (as the FlashAttention docs state it) rather than through [`Mask::keys`].
    fn allowed(mask: Mask, d: Dims, i: usize, j: usize) -> bool {
        let (i, j) = (i as i64, j as i64);
        let diagonal = i + d.seq_k as i64 - d.seq_q as i64;
        (!mask.causal || j <= diagonal)
            && mask.left.is_none_or(|l| j >= diagonal - l as i64)
            && mask.right.is_none_or(|r| j <= diagonal + r as i64)
    }

    /// The textbook formula, one output element at a time, and each row's log-sum-exp, both
    /// straight from the definitions: the mask as [`allowed`], the softcap as `cap * tanh(x /
    /// cap)`, no max subtraction. A fully masked row is 0/0 = NaN here (and -inf for the LSE).
    fn textbook(q: &[f32], k: &[f32], v: &[f32], d: Dims, mask: Mask, scale: f64) -> (Vec<f64>, Vec<f64>) {
        let group = d.heads / d.heads_kv;
        let mut out = vec![0.0; q.len()];
        let mut lse = vec![0.0; d.batch * d.heads * d.seq_q];
        for bh in 0..d.batch * d.heads {
            let kvh = (bh / d.heads) * d.heads_kv + (bh % d.heads) / group;
            for i in 0..d.seq_q {
                let score = |j: usize| -> f64 {
                    let x = (0..d.head_dim)
                        .map(|c| {
                            q[(bh * d.seq_q + i) * d.head_dim + c] as f64
                                * k[(kvh * d.seq_k + j) * d.head_dim + c] as f64
                        })
                        .sum::<f64>()
                        * scale;
                    mask.softcap.map_or(x, |cap| cap * (x / cap).tanh())
                };
                let visible = || (0..d.seq_k).filter(|&j| allowed(mask, d, i, j));
                let total: f64 = visible().map(|j| score(j).exp()).sum();
                lse[bh * d.seq_q + i] = total.ln();
                for c in 0..d.head_dim {
                    out[(bh * d.seq_q + i) * d.head_dim + c] = visible()
                        .map(|j| score(j).exp() / total * v[(kvh * d.seq_k + j) * d.head_dim + c] as f64)
                        .sum();
                }
            }
        }
        (out, lse)
    }

    /// Masks worth checking: none, causal, windows on one side, on both, with causal (and a
    /// `right` that causal overrides), a softcap alone and with a window.
    fn masks() -> Vec<Mask> {
        let window = |left, right| Mask {
            left,
            right,
            ..Mask::default()
        };
        let capped = |mask: Mask| Mask {
            softcap: Some(1.5),
            ..mask
        };
        vec![
            Mask::from(false),
            Mask::from(true),
            window(Some(1), None),
            window(None, Some(1)),
            window(Some(2), Some(1)),
            window(Some(0), Some(0)),
            Mask {
                causal: true,
                ..window(Some(2), Some(3))
            },
            capped(Mask::from(false)),
            capped(Mask {
                causal: true,
                ..window(Some(1), None)
            }),
            capped(window(Some(3), Some(2))),
        ]
    }

    #[test]
    fn matches_the_textbook_formula_on_random_problems() {
        use rand::{rngs::StdRng, Rng, SeedableRng};
        let mut rng = StdRng::seed_from_u64(7);
        let mut masked_rows = 0;
        for (seq_q, seq_k, heads_kv) in [(5, 5, 2), (3, 8, 1), (8, 3, 4), (1, 6, 2), (6, 1, 4)] {
            let d = Dims {
                batch: 2,
                heads: 4,
                heads_kv,
                seq_q,
                seq_k,
                head_dim: 3,
            };
            let mut random = |n: usize| (0..n).map(|_| rng.random_range(-2.0f32..2.0)).collect::<Vec<_>>();
            let q = random(2 * 4 * seq_q * 3);
            let (k, v) = (random(2 * heads_kv * seq_k * 3), random(2 * heads_kv * seq_k * 3));
            for mask in masks() {
                let ours = attention_f64(&q, &k, &v, d, mask, 0.6);
                let ours_lse = log_sum_exp_f64(&q, &k, d, mask, 0.6);
                let (theirs, theirs_lse) = textbook(&q, &k, &v, d, mask, 0.6);
                // A fully masked row is 0/0 = NaN in the textbook formula and 0 by convention here.
                for (a, b) in ours.iter().zip(&theirs) {
                    assert!(
                        if b.is_nan() {
                            *a == 0.0
                        } else {
                            (a - b).abs() < 1e-12
                        },
                        "{d:?} {mask:?}"
                    );
                }
                for (a, b) in ours_lse.iter().zip(&theirs_lse) {
                    assert!(a == b || (a - b).abs() < 1e-12, "{d:?} {mask:?}: LSE {a} vs {b}");
                    masked_rows += (*b == f64::NEG_INFINITY) as usize;
                }
            }
        }
        // The problems include rows that see no key, so that convention was exercised.
        assert!(masked_rows > 0);
    }

    #[test]
    fn mask_keys_by_hand() {
        let window = |left, right| Mask {
            left,
            right,
            ..Mask::default()
        };
        let keys = |mask: Mask, d: Dims| (0..d.seq_q).map(|i| mask.keys(&d, i)).collect::<Vec<_>>();
        // seq_q 4 < seq_k 6: row i's diagonal is key i + 2.
        let short = dims(4, 6, 1);
        assert_eq!(keys(window(Some(1), Some(1)), short), [1..4, 2..5, 3..6, 4..6]);
        assert_eq!(keys(window(Some(1), None), short), [1..6, 2..6, 3..6, 4..6]);
        assert_eq!(keys(window(None, Some(0)), short), [0..3, 0..4, 0..5, 0..6]);
        assert_eq!(keys(Mask::from(true), short), keys(window(None, Some(0)), short));
        // seq_q 5 > seq_k 2: row i's diagonal is key i - 3, before the first key for rows 0..3.
        let tall = dims(5, 2, 1);
        let empty = |r: std::ops::Range<usize>| r.is_empty();
        let causal = keys(Mask::from(true), tall);
        assert!(causal[..3].iter().cloned().all(empty));
        assert_eq!(causal[3..], [0..1, 0..2]);
        let right = keys(window(None, Some(1)), tall);
        assert!(right[..2].iter().cloned().all(empty));
        assert_eq!(right[2..], [0..1, 0..2, 0..2]);
        let narrow = keys(window(Some(0), Some(0)), tall);
        assert!(narrow[..3].iter().cloned().all(empty));
        assert_eq!(narrow[3..], [0..1, 1..2]);
        // A left bound at or before the first key leaves the row every key (rows 0..=3).
        assert_eq!(keys(window(Some(0), None), tall), [0..2, 0..2, 0..2, 0..2, 1..2]);
        // Causal overrides `right`, keeps `left`; enormous sizes do not overflow.
        let causal_window = Mask {
            causal: true,
            ..window(Some(1), Some(5))
        };
        assert_eq!(keys(causal_window, short), [1..3, 2..4, 3..5, 4..6]);
        let huge = window(Some(usize::MAX), Some(usize::MAX));
        assert_eq!(keys(huge, tall), vec![0..2; 5]);
        assert_eq!(
            Mask::from(true),
            Mask {
                causal: true,
                ..Mask::default()
            }
        );
    }

    #[test]
    fn mask_keys_agree_with_the_library_window() {
        // The library's `Window::keys` is the host's copy of the kernels' rule.
        let sizes = [None, Some(0), Some(1), Some(3), Some(9)];
        for (seq_q, seq_k) in [(5, 5), (3, 8), (8, 3), (1, 6), (6, 1), (4, 0)] {
            let d = dims(seq_q, seq_k, 1);
            let shape = flashrs::Shape {
                batch: 1,
                heads: 1,
                heads_kv: 1,
                seq_q,
                seq_k,
                head_dim: 1,
                head_dim_v: 1,
            };
            for (left, right, causal) in sizes
                .iter()
                .flat_map(|&l| sizes.iter().flat_map(move |&r| [(l, r, false), (l, r, true)]))
            {
                let params = flashrs::Params {
                    causal,
                    window: flashrs::Window {
                        left: left.map(|l: u32| l),
                        right,
                    },
                    ..flashrs::Params::default()
                };
                let mask = Mask::from(params);
                for row in 0..seq_q {
                    let theirs = params.window.keys(&shape, causal, row as u32);
                    let ours = mask.keys(&d, row);
                    assert_eq!(
                        (ours.start as u32..ours.end as u32, ours.is_empty()),
                        (theirs.clone(), theirs.is_empty()),
                        "{mask:?} {d:?} row {row}"
                    );
                }
            }
        }
    }

    #[test]
    fn softcap_by_hand() {
        let mask = Mask {
            softcap: Some(2.0),
            ..Mask::default()
        };
        assert!((mask.capped(1.0) - 2.0 * 0.5f64.tanh()).abs() < 1e-15);
        assert!((mask.capped(1e6) - 2.0).abs() < 1e-15 && (mask.capped(-1e6) + 2.0).abs() < 1e-15);
        assert!((mask.capped_slope(1.0) - (1.0 - 0.5f64.tanh().powi(2))).abs() < 1e-15);
        assert_eq!(
            (Mask::default().capped(3.5), Mask::default().capped_slope(3.5)),
            (3.5, 1.0)
        );
        // Capping changes the weights: scores 1 and 0 become 2 tanh(1/2) and 0.
        let out = attention_f64(&[1.0], &[1.0, 0.0], &[1.0, 0.0], dims(1, 2, 1), mask, 1.0);
        let top = mask.capped(1.0).exp();
        assert!((out[0] - top / (top + 1.0)).abs() < 1e-12, "{out:?}");
    }

    #[test]
    fn log_sum_exp_applies_the_softcap() {
        // Scores 1024 and 0 capped at 5: ln(e^(5 tanh(204.8)) + 1) = ln(e^5 + 1), not ~1024.
        let mask = Mask {
            softcap: Some(5.0),
            ..Mask::default()
        };
        let lse = log_sum_exp_f64(&[1024.0], &[1.0, 0.0], dims(1, 2, 1), mask, 1.0);
        assert!((lse[0] - (5.0f64.exp() + 1.0).ln()).abs() < 1e-12, "{lse:?}");
        // Against log-sum-exp of the capped scores, computed here, with a window too.
        let d = dims(4, 6, 3);
        let (q, k) = (wave(4 * 3, 0.4), wave(6 * 3, 1.3));
        let scale = 2.5;
        for mask in [
            mask,
            Mask {
                softcap: Some(0.8),
                left: Some(1),
                right: Some(1),
                ..Mask::default()
            },
        ] {
            let lse = log_sum_exp_f64(&q, &k, d, mask, scale);
            let uncapped = log_sum_exp_f64(
                &q,
                &k,
                d,
                Mask {
                    softcap: None,
                    ..mask
                },
                scale,
            );
            for i in 0..4 {
                let expected = mask
                    .keys(&d, i)
                    .map(|j| {
                        let x: f64 = (0..3).map(|c| q[i * 3 + c] as f64 * k[j * 3 + c] as f64).sum();
                        let cap = mask.softcap.unwrap();
                        (cap * (x * scale / cap).tanh()).exp()
                    })
                    .sum::<f64>()
                    .ln();
                assert!((lse[i] - expected).abs() < 1e-12, "{mask:?} row {i}: {lse:?}");
                // The cap matters at this scale, so a reference that ignored it would fail.
                assert!((lse[i] - uncapped[i]).abs() > 1e-3, "{mask:?} row {i}");
            }
        }
    }

    #[test]
    fn rows_that_see_no_key_are_zero() {
        // seq_q = 3 > seq_k = 1: rows 0 and 1 see nothing (zeros), row 2 sees key 0.
        let out = attention_f64(&[1.0; 6], &[1.0; 2], &[5.0, 7.0], dims(3, 1, 2), true, 1.0);
        assert_eq!(out, vec![0.0, 0.0, 0.0, 0.0, 5.0, 7.0]);
        // No keys at all, masked or not.
        let out = attention_f64(&[1.0; 4], &[], &[], dims(2, 0, 2), false, 1.0);
        assert_eq!(out, vec![0.0; 4]);
    }

    #[test]
    fn huge_scores_do_not_overflow() {
        // Scores of 1024 and 1023 (exact in f32): exp(1024) is inf in f64, but the
        // max-subtracted softmax gives weights 1/(1+e^-1) and e^-1/(1+e^-1).
        let keys = [1.0, 1.0 - 1.0 / 1024.0];
        let out = attention_f64(&[1024.0], &keys, &[1.0, 0.0], dims(1, 2, 1), false, 1.0);
        let expected = 1.0 / (1.0 + (-1.0f64).exp());
        assert!((out[0] - expected).abs() < 1e-12, "{out:?}");
        let lse = log_sum_exp_f64(&[1024.0], &keys, dims(1, 2, 1), false, 1.0);
        assert!(
            (lse[0] - (1024.0 + (1.0 + (-1.0f64).exp()).ln())).abs() < 1e-12,
            "{lse:?}"
        );
    }

    #[test]
    fn degenerate_dims_do_not_panic() {
        // head_dim 0: empty tensors however long the sequences are.
        assert!(attention_f64(&[], &[], &[], dims(4, 4, 0), true, 1.0).is_empty());
        assert!(attention_rows_f64(&[], &[], &[], dims(4, 4, 0), true, 1.0, &[(0, 3)]).is_empty());
        // No query rows.
        assert!(attention_f64(&[], &[1.0; 4], &[1.0; 4], dims(0, 2, 2), true, 1.0).is_empty());
        assert!(log_sum_exp_f64(&[], &[1.0; 4], dims(0, 2, 2), true, 1.0).is_empty());
        // head_dim 0 scores are all 0: the LSE counts the visible keys (rows see 0, 1, 2 keys).
        let lse = log_sum_exp_f64(&[], &[], dims(3, 2, 0), true, 1.0);
        assert_eq!(lse, vec![f64::NEG_INFINITY, 0.0, 2f64.ln()]);
        // With a window (diagonals 1, 2, 3; one key either side, clamped): 3, 3 and 2 keys, and a
        // softcap leaves the zero scores zero.
        let window = Mask {
            left: Some(1),
            right: Some(1),
            softcap: Some(0.5),
            ..Mask::default()
        };
        let lse = log_sum_exp_f64(&[], &[], dims(3, 4, 0), window, 1.0);
        assert_eq!(lse, vec![3f64.ln(), 3f64.ln(), 2f64.ln()]);
        let no_heads = Dims {
            heads: 0,
            ..dims(3, 3, 2)
        };
        assert!(attention_f64(&[], &[1.0; 6], &[1.0; 6], no_heads, false, 1.0).is_empty());
    }

    #[test]
    #[should_panic(expected = "k has 3 elements")]
    fn mismatched_lengths_panic_with_a_message() {
        attention_f64(&[0.0; 2], &[0.0; 3], &[0.0; 4], dims(1, 2, 2), false, 1.0);
    }

    #[test]
    #[should_panic(expected = "outside")]
    fn rows_outside_the_problem_panic_with_a_message() {
        attention_rows_f64(
            &[0.0; 2],
            &[0.0; 4],
            &[0.0; 4],
            dims(1, 2, 2),
            false,
            1.0,
            &[(0, 1)],
        );
    }

    #[test]
    fn row_spot_checks_equal_the_full_computation() {
        let d = Dims {
            batch: 2,
            heads: 3,
            heads_kv: 3,
            seq_q: 7,
            seq_k: 5,
            head_dim: 4,
        };
        let (q, k, v) = (
            wave(2 * 3 * 7 * 4, 0.1),
            wave(2 * 3 * 5 * 4, 0.2),
            wave(2 * 3 * 5 * 4, 0.3),
        );
        for mask in masks() {
            let full = attention_f64(&q, &k, &v, d, mask, 0.5);
            let rows = [(4, 3), (0, 0), (5, 6), (4, 1), (2, 2)];
            let some = attention_rows_f64(&q, &k, &v, d, mask, 0.5, &rows);
            for (i, &(head, row)) in rows.iter().enumerate() {
                assert_eq!(&some[i * 4..][..4], &full[(head * 7 + row) * 4..][..4]);
            }
            // (4, 1) is fully masked when its diagonal, key -1, is past the right edge: causal, or
            // a right size of 0.
            let masked = mask.causal || mask.right == Some(0);
            assert_eq!(mask.keys(&d, 1).is_empty(), masked, "{mask:?}");
            assert_eq!(some[12..16] == [0.0; 4], masked, "{mask:?}");
        }
    }

    #[test]
    fn grouped_query_heads_share_their_key_value_head() {
        // 4 query heads over 2 key/value heads: heads 0,1 read kv head 0, heads 2,3 kv head 1.
        let gqa = Dims {
            batch: 1,
            heads: 4,
            heads_kv: 2,
            seq_q: 3,
            seq_k: 5,
            head_dim: 2,
        };
        let (q, k, v) = (wave(4 * 3 * 2, 0.3), wave(2 * 5 * 2, 0.1), wave(2 * 5 * 2, 0.9));
        let out = attention_f64(&q, &k, &v, gqa, true, 0.7);
        // The same as ordinary attention with each kv head repeated for its query heads.
        let repeat = |x: &[f32]| -> Vec<f32> { [&x[..10], &x[..10], &x[10..], &x[10..]].concat() };
        let mha = Dims { heads_kv: 4, ..gqa };
        assert_eq!(out, attention_f64(&q, &repeat(&k), &repeat(&v), mha, true, 0.7));
        let lse = log_sum_exp_f64(&q, &k, gqa, true, 0.7);
        assert_eq!(lse, log_sum_exp_f64(&q, &repeat(&k), mha, true, 0.7));
    }

    #[test]
    fn log_sum_exp_by_hand() {
        // scores 1 and 0 (scale 1): ln(e + 1); a row that sees no key: -inf.
        let lse = log_sum_exp_f64(&[1.0, 0.0], &[1.0, 0.0, 0.0, 1.0], dims(1, 2, 2), false, 1.0);
        assert!((lse[0] - (std::f64::consts::E + 1.0).ln()).abs() < 1e-12);
        let masked = log_sum_exp_f64(&[1.0; 6], &[1.0; 2], dims(3, 1, 2), true, 1.0);
        assert_eq!(masked[..2], [f64::NEG_INFINITY; 2]);
        assert!((masked[2] - 2.0).abs() < 1e-12);
    }

    #[test]
    fn comparison_measures_errors() {
        let reference = vec![3.0, -4.0, 0.0];
        let exact = compare(&[3.0, -4.0, 0.0], &reference);
        assert_eq!(
            exact,
            Comparison {
                max_abs_err: 0.0,
                rel_l2_err: 0.0,
                non_finite: 0,
                elements: 3
            }
        );
        // One element off by 0.5: ||diff|| = 0.5, ||reference|| = 5.
        let off = compare(&[3.0, -4.0, 0.5], &reference);
        assert_eq!((off.max_abs_err, off.rel_l2_err), (0.5, 0.1));
        // An all-zero reference: exact is a pass, anything else a huge relative error.
        assert!(compare(&[0.0; 2], &[0.0; 2]).passes(Tolerance::FP16));
        assert!(compare(&[0.0, 1e-3], &[0.0; 2]).rel_l2_err > 1e100);
    }

    #[test]
    fn comparison_catches_nan_and_single_errors() {
        let reference = vec![1.0, -2.0, 0.5];
        let anything = Tolerance {
            max_abs: f64::MAX,
            rel_l2: f64::MAX,
        };
        assert!(compare(&[1.0, -2.0, 0.5], &reference).passes(Tolerance::FP16));
        assert!(compare(&[1.001, -2.0, 0.5], &reference).passes(Tolerance::FP16));
        for bad in [f32::NAN, f32::INFINITY, f32::NEG_INFINITY] {
            let cmp = compare(&[1.0, bad, 0.5], &reference);
            assert_eq!(cmp.non_finite, 1);
            assert_eq!((cmp.max_abs_err, cmp.rel_l2_err), (f64::INFINITY, f64::INFINITY));
            assert!(!cmp.passes(anything));
        }
        assert!(!compare(&[f32::NAN; 3], &reference).passes(anything));
        assert!(!compare(&[1.0, -2.0, 0.5], &[1.0, f64::NAN, 0.5]).passes(anything));
        // A single wrong element among many fails on max_abs even though rel_l2 is small.
        let many = vec![1.0; 10_000];
        let mut actual = vec![1.0f32; 10_000];
        actual[1234] = 1.1;
        let cmp = compare(&actual, &many);
        assert!(cmp.rel_l2_err < Tolerance::FP16.rel_l2);
        assert!(!cmp.passes(Tolerance::FP16));
        assert!(!compare(&[1.0, -2.0], &reference).passes(anything));
        assert!(!compare(&[1.0, -2.0, 0.5, 0.0], &reference).passes(anything));
    }

    #[test]
    fn tolerances_are_ordered() {
        let (h, b) = (Tolerance::FP16, Tolerance::BF16);
        assert!(h.max_abs < b.max_abs && h.rel_l2 < b.rel_l2);
    }
}
