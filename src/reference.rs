//! The float64 CPU reference for attention forward, multithreaded over query rows, and the
//! comparison that turns a kernel's output into a verdict.

use rayon::prelude::*;
use serde::Serialize;

/// Q is `[batch, heads, seq_q, head_dim]`, K and V `[batch, heads_kv, seq_k, head_dim]`;
/// `heads_kv` divides `heads` (grouped-query attention when smaller).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Dims {
    pub batch: usize,
    pub heads: usize,
    pub heads_kv: usize,
    pub seq_q: usize,
    pub seq_k: usize,
    pub head_dim: usize,
}

/// Attention in float64 over inputs given as f32 (already rounded to the kernel's input type by
/// the caller, so the reference sees exactly what the kernel sees). Causal masks are aligned
/// bottom-right: query `i` sees key `j` iff `j <= i + seq_k - seq_q`; a row that sees no key is 0.
pub fn attention_f64(q: &[f32], k: &[f32], v: &[f32], dims: Dims, causal: bool, scale: f64) -> Vec<f64> {
    check_lengths(q, k, v, dims);
    let mut out = vec![0.0; dims.batch * dims.heads * dims.seq_q * dims.head_dim];
    out.par_chunks_mut(dims.head_dim)
        .enumerate()
        .for_each(|(row, o)| {
            attend_row(
                q,
                k,
                v,
                dims,
                causal,
                scale,
                row / dims.seq_q,
                row % dims.seq_q,
                o,
            )
        });
    out
}

/// The reference for selected `(batch * heads index, query row)` pairs only, concatenated in
/// order: spot checks for problems too big to compute whole.
pub fn attention_rows_f64(
    q: &[f32],
    k: &[f32],
    v: &[f32],
    dims: Dims,
    causal: bool,
    scale: f64,
    rows: &[(usize, usize)],
) -> Vec<f64> {
    check_lengths(q, k, v, dims);
    let mut out = vec![0.0; rows.len() * dims.head_dim];
    out.par_chunks_mut(dims.head_dim)
        .zip(rows)
        .for_each(|(o, &(head, row))| attend_row(q, k, v, dims, causal, scale, head, row, o));
    out
}

/// Natural-log log-sum-exp of every query row's scaled scores (`[B, H, S_q]`), `-inf` for a row
/// that sees no key: what the kernels' optional LSE output must match.
pub fn log_sum_exp_f64(q: &[f32], k: &[f32], dims: Dims, causal: bool, scale: f64) -> Vec<f64> {
    check_lengths(q, k, k, dims);
    (0..dims.batch * dims.heads * dims.seq_q)
        .into_par_iter()
        .map(|r| {
            let scores = row_scores(q, k, dims, causal, scale, r / dims.seq_q, r % dims.seq_q);
            let max = scores.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            if scores.is_empty() {
                f64::NEG_INFINITY
            } else {
                max + scores.iter().map(|s| (s - max).exp()).sum::<f64>().ln()
            }
        })
        .collect()
}

fn check_lengths(q: &[f32], k: &[f32], v: &[f32], dims: Dims) {
    assert!(
        dims.heads_kv > 0 && dims.heads.is_multiple_of(dims.heads_kv),
        "heads_kv must divide heads: {dims:?}"
    );
    let d = dims.head_dim;
    assert_eq!(
        q.len(),
        dims.batch * dims.heads * dims.seq_q * d,
        "q length does not match {dims:?}"
    );
    assert_eq!(
        k.len(),
        dims.batch * dims.heads_kv * dims.seq_k * d,
        "k length does not match {dims:?}"
    );
    assert_eq!(
        v.len(),
        dims.batch * dims.heads_kv * dims.seq_k * d,
        "v length does not match {dims:?}"
    );
}

/// The scaled scores of query `row` of `head` (= b * heads + h) against the keys it may see.
fn row_scores(
    q: &[f32],
    k: &[f32],
    dims: Dims,
    causal: bool,
    scale: f64,
    head: usize,
    row: usize,
) -> Vec<f64> {
    let d = dims.head_dim;
    let query = &q[(head * dims.seq_q + row) * d..][..d];
    let keys = if causal {
        (row as i64 + 1 + dims.seq_k as i64 - dims.seq_q as i64).clamp(0, dims.seq_k as i64) as usize
    } else {
        dims.seq_k
    };
    // Query heads of one batch are contiguous, so `head / group` is `b * heads_kv + h / group`.
    let kv_head = head / (dims.heads / dims.heads_kv);
    (0..keys)
        .map(|j| {
            let key = &k[(kv_head * dims.seq_k + j) * d..][..d];
            query
                .iter()
                .zip(key)
                .map(|(a, b)| *a as f64 * *b as f64)
                .sum::<f64>()
                * scale
        })
        .collect()
}

#[allow(clippy::too_many_arguments)]
fn attend_row(
    q: &[f32],
    k: &[f32],
    v: &[f32],
    dims: Dims,
    causal: bool,
    scale: f64,
    head: usize,
    row: usize,
    out: &mut [f64],
) {
    let d = dims.head_dim;
    out.fill(0.0);
    let scores = row_scores(q, k, dims, causal, scale, head, row);
    if scores.is_empty() {
        return;
    }
    let kv_head = head / (dims.heads / dims.heads_kv);
    // Subtracting the row maximum keeps exp() in range; the result is unchanged.
    let max = scores.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let weights: Vec<f64> = scores.iter().map(|s| (s - max).exp()).collect();
    let total: f64 = weights.iter().sum();
    for (j, w) in weights.iter().enumerate() {
        let value = &v[(kv_head * dims.seq_k + j) * d..][..d];
        for (o, x) in out.iter_mut().zip(value) {
            *o += w / total * *x as f64;
        }
    }
}

/// How far a kernel's output is from the reference.
#[derive(Debug, Clone, Copy, Serialize, PartialEq)]
pub struct Comparison {
    pub max_abs_err: f64,
    /// `||actual - reference|| / ||reference||` (2-norms).
    pub rel_l2_err: f64,
    /// NaN or infinite outputs (an unwritten element of a NaN-poisoned buffer counts here).
    pub non_finite: usize,
    pub elements: usize,
}

/// Compares `actual` with `reference`. Any non-finite output, or a length mismatch, makes both
/// errors infinite: NaN can never pass.
pub fn compare(actual: &[f32], reference: &[f64]) -> Comparison {
    let mut max_abs_err = 0.0f64;
    let (mut diff2, mut ref2) = (0.0f64, 0.0f64);
    let mut non_finite = 0;
    for (a, r) in actual.iter().zip(reference) {
        if !a.is_finite() {
            non_finite += 1;
            continue;
        }
        let e = (*a as f64 - r).abs();
        max_abs_err = max_abs_err.max(e);
        diff2 += e * e;
        ref2 += r * r;
    }
    let mut rel_l2_err = diff2.sqrt() / ref2.sqrt().max(f64::MIN_POSITIVE);
    if non_finite > 0 || actual.len() != reference.len() {
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

/// Pass bounds for a comparison.
#[derive(Debug, Clone, Copy, Serialize, PartialEq)]
pub struct Tolerance {
    pub max_abs: f64,
    pub rel_l2: f64,
}

impl Tolerance {
    /// fp16 inputs, fp32 accumulation, fp16 output. Outputs are convex combinations of V rows
    /// (|o| <~ 3 for normal inputs); rounding the output to fp16 alone costs up to 2^-11 relative
    /// (~1e-3 absolute at |o| ~ 2), and P is rounded to fp16 before P V on tensor cores
    /// (relative 2^-11 per weight, mostly averaging out). 1e-2 absolute and 5e-3 relative L2 leave
    /// ~5x headroom over what the kernels show while still catching any indexing or masking bug,
    /// which produces O(0.1..1) errors.
    pub const FP16: Tolerance = Tolerance {
        max_abs: 1e-2,
        rel_l2: 5e-3,
    };
    /// bf16 keeps 8 mantissa bits instead of 11: 8x the rounding of fp16.
    pub const BF16: Tolerance = Tolerance {
        max_abs: 6e-2,
        rel_l2: 3e-2,
    };
}

impl Comparison {
    pub fn passes(&self, tolerance: Tolerance) -> bool {
        self.non_finite == 0 && self.max_abs_err <= tolerance.max_abs && self.rel_l2_err <= tolerance.rel_l2
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

    #[test]
    fn hand_computed_case() {
        // q = [1, 0]; keys [1, 0] and [0, 1]; scale 1: scores 1 and 0, weights e/(e+1) and
        // 1/(e+1); values [2, 0] and [0, 4]: out = [2e/(e+1), 4/(e+1)] = [1.4621, 1.0758].
        let out = attention_f64(
            &[1.0, 0.0],
            &[1.0, 0.0, 0.0, 1.0],
            &[2.0, 0.0, 0.0, 4.0],
            dims(1, 2, 2),
            false,
            1.0,
        );
        let e = std::f64::consts::E;
        assert!((out[0] - 2.0 * e / (e + 1.0)).abs() < 1e-12);
        assert!((out[1] - 4.0 / (e + 1.0)).abs() < 1e-12);
    }

    #[test]
    fn uniform_keys_average_the_values() {
        let v = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0];
        let out = attention_f64(
            &[0.3, -0.7],
            &[0.5, 0.5, 0.5, 0.5, 0.5, 0.5],
            &v,
            dims(1, 3, 2),
            false,
            0.9,
        );
        assert!((out[0] - 3.0).abs() < 1e-12 && (out[1] - 4.0).abs() < 1e-12);
    }

    #[test]
    fn causal_masks_align_bottom_right() {
        // seq_q = 2, seq_k = 3, equal keys: row 0 sees keys 0..=1, row 1 sees 0..=2.
        let v = [1.0, 0.0, 3.0, 0.0, 8.0, 0.0];
        let out = attention_f64(&[0.0; 4], &[1.0; 6], &v, dims(2, 3, 2), true, 1.0);
        assert!((out[0] - 2.0).abs() < 1e-12, "{out:?}");
        assert!((out[2] - 4.0).abs() < 1e-12, "{out:?}");
        // seq_q = 3 > seq_k = 1: row 0 and 1 see nothing (zeros), row 2 sees key 0.
        let out = attention_f64(&[1.0; 6], &[1.0; 2], &[5.0, 7.0], dims(3, 1, 2), true, 1.0);
        assert_eq!(out, vec![0.0, 0.0, 0.0, 0.0, 5.0, 7.0]);
    }

    #[test]
    fn row_spot_checks_equal_the_full_computation() {
        let d = Dims {
            batch: 2,
            heads: 3,
            heads_kv: 3,
            seq_q: 5,
            seq_k: 7,
            head_dim: 4,
        };
        let gen = |n: usize, salt: f32| {
            (0..n)
                .map(|i| (i as f32 * 0.37 + salt).sin())
                .collect::<Vec<f32>>()
        };
        let (q, k, v) = (
            gen(2 * 3 * 5 * 4, 0.1),
            gen(2 * 3 * 7 * 4, 0.2),
            gen(2 * 3 * 7 * 4, 0.3),
        );
        let full = attention_f64(&q, &k, &v, d, true, 0.5);
        let rows = [(4, 3), (0, 0), (5, 4)];
        let some = attention_rows_f64(&q, &k, &v, d, true, 0.5, &rows);
        for (i, &(head, row)) in rows.iter().enumerate() {
            assert_eq!(&some[i * 4..][..4], &full[(head * 5 + row) * 4..][..4]);
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
        let gen = |n: usize, salt: f32| {
            (0..n)
                .map(|i| (i as f32 * 0.71 + salt).cos())
                .collect::<Vec<f32>>()
        };
        let (q, k, v) = (gen(4 * 3 * 2, 0.3), gen(2 * 5 * 2, 0.1), gen(2 * 5 * 2, 0.9));
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
        assert_eq!(masked[0], f64::NEG_INFINITY);
        assert!((masked[2] - 2.0).abs() < 1e-12);
    }

    #[test]
    fn comparison_catches_nan_and_single_errors() {
        let reference = vec![1.0, -2.0, 0.5];
        assert!(compare(&[1.0, -2.0, 0.5], &reference).passes(Tolerance::FP16));
        let nan = compare(&[1.0, f32::NAN, 0.5], &reference);
        assert_eq!(nan.non_finite, 1);
        assert!(!nan.passes(Tolerance {
            max_abs: f64::MAX,
            rel_l2: f64::MAX
        }));
        assert!(!compare(&[1.0, -2.0, 0.6], &reference).passes(Tolerance::FP16));
        assert!(!compare(&[1.0, -2.0], &reference).passes(Tolerance::FP16));
    }
}
