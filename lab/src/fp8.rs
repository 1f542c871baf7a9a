//! The float64 check of the FP8 (e4m3) kernel: the reference on the *dequantised* inputs (so
//! that the quantisation of Q, K and V, which the caller chose, is not counted against the
//! kernel), and the tolerance that the kernel's own arithmetic earns.
//!
//! # Where a correct FP8 kernel departs from float64 on its own inputs
//!
//! Write `p_j = exp(s_j - m) / l` for the exact softmax weights of one query row (`l` the row
//! sum, `m` the row maximum), `v_j` for the value rows, `o = sum_j p_j v_j` for the reference.
//!
//! 1. **Scores.** Every product of two e4m3 values is exact in fp32 (4 + 4 significand bits).
//!    Their sum over the head dim is exact in fp32 too in exact arithmetic terms, but Hopper's
//!    FP8 `wgmma` is reported to keep only about 14 significand bits while it accumulates (the
//!    DeepSeek-V3 report's measurement); the score allowance `score_relative` (2^-10 of
//!    `scale * sum_d |q_d k_d|`, eight times that rounding) covers it. A score error `e` moves a
//!    weight by a factor within `exp(±2e)` (numerator and row sum), so the row's weights get a
//!    relative error `c_s = exp(2 e_max) - 1`. At standard-normal inputs this is ~1e-3, small
//!    next to item 2; at large logits (`verify --logit-scale`) it grows with the scores.
//! 2. **P to e4m3 before P V.** The kernel quantises the probabilities `P_j = exp(s_j - m_run)`
//!    (times a fixed factor `p_scale`, at most 1 before scaling) to e4m3 with round to nearest:
//!    `|P~_j - P_j| <= 2^-4 P_j` in e4m3's normal range, and at most half the smallest subnormal,
//!    `eta = 2^-10 / p_scale`, below it. The row sum `l` is accumulated in fp32 from the
//!    unquantised `P` (the kernel's online rescaling), and rescaling by `exp(m_run - m) <= 1`
//!    only shrinks these errors, so element `d` of the output moves by at most
//!    `u * A_d + eta * B_d` with `u = 2^-4`, `A_d = sum_j p_j |v_jd|` and
//!    `B_d = sum_j |v_jd| / l` (both computed here in float64).
//! 3. **The P V accumulation** (fp32 accumulators fed by `wgmma` chunks of 32 keys at the same
//!    ~14-bit accumulation): at most `(2^-12 + N * 2^-24) * A_d` for `N` visible keys.
//! 4. **The output's rounding** to bf16 (2^-9 relative) or fp16 (2^-12): `out_relative * |o_d|`.
//!
//! So each element must satisfy
//! `|out - o| <= (u + c_s + 2^-12 + N 2^-24) A_d + eta B_d + out_relative (|o_d| + u A_d + eta B_d) + 1e-6`
//! (the last term for fp32's last bits on near-zero outputs). This is a worst case for every
//! element, so it can never fail a correct kernel, but it is loose where many keys average out:
//! a row over thousands of keys has `|o|` far below `A`, and an all-zero output can pass it.
//!
//! The second criterion is statistical: the relative L2 error over the tensor. Rounding errors
//! of different probabilities are independent and their signs random, so with value rows that
//! are not correlated with the rounding `||out - o|| / ||o||` is about the rms relative error of
//! one rounded probability: uniform within half an ulp, at most `2^-4 / sqrt(3) = 0.036` (a
//! mantissa of 1.0 everywhere; ~0.026 averaged over mantissas), plus the output's rounding (bf16:
//! 0.001). The bound `rel_l2 <= 2^-4` leaves 1.7x over the worst rms and 2.4x over the typical.
//!
//! A wrong kernel fails one of the two: a zeroed output has relative L2 error 1, rows written to
//! the wrong place about 1.4, a descale factor applied twice or forgotten a factor-sized error
//! (these are tested below on a CPU emulation of the kernel's arithmetic); a single element
//! corrupted by more than its bound fails the first. NaN never passes, nor does an unwritten
//! element of a NaN-poisoned output, nor a length mismatch.

use rayon::prelude::*;
use serde::Serialize;

use crate::reference::{attention_f64, compare, Comparison, Dims};

/// The fixed factor the FP8 kernel multiplies the probabilities by before converting them to
/// e4m3, as this check assumes it: 1 (probabilities in `[0, 1]` converted as they are) is the
/// largest subnormal error `eta` any such factor `>= 1` can give, hence the safe assumption.
pub const P_SCALE: f64 = 1.0;

/// The pass bounds of an FP8 output against [`Fp8Reference`] (see the module's derivation).
#[derive(Debug, Clone, Copy, Serialize, PartialEq)]
pub struct Fp8Tolerance {
    /// Most relative L2 error that passes: 2^-4.
    pub rel_l2: f64,
    /// Relative error of one rounded probability in e4m3's normal range: 2^-4.
    pub p_relative: f64,
    /// Absolute error of one rounded probability below it: half e4m3's smallest subnormal over
    /// the kernel's factor (`2^-10 / p_scale`).
    pub p_absolute: f64,
    /// The scores' accumulation error relative to `scale * sum_d |q_d k_d|`: 2^-10.
    pub score_relative: f64,
    /// The output type's rounding: 2^-9 (bf16) or 2^-12 (fp16).
    pub out_relative: f64,
}

impl Fp8Tolerance {
    /// The bounds for an output of `out` (bf16 or fp16) from a kernel that scales the
    /// probabilities by `p_scale` before converting them.
    pub fn new(out: flashrs::DType, p_scale: f64) -> Fp8Tolerance {
        Fp8Tolerance {
            rel_l2: 1.0 / 16.0,
            p_relative: 1.0 / 16.0,
            p_absolute: 2f64.powi(-10) / p_scale,
            score_relative: 2f64.powi(-10),
            out_relative: match out {
                flashrs::DType::Bf16 => 2f64.powi(-9),
                flashrs::DType::F16 => 2f64.powi(-12),
            },
        }
    }
}

/// The float64 output on the dequantised inputs and each element's error bound.
#[derive(Debug, Clone)]
pub struct Fp8Reference {
    /// [`attention_f64`] on the dequantised inputs, `[B, H, S_q, D]`.
    pub out: Vec<f64>,
    /// Each element's largest error a correct kernel can make (the module's first criterion).
    pub bound: Vec<f64>,
    /// Each row's largest log-sum-exp error: the 16-bit kernels' 1e-3 (fp32 arithmetic on the
    /// same inputs) plus the largest score error of item 1, which moves the LSE by as much.
    pub lse_bound: Vec<f64>,
}

/// The reference and bounds for dequantised `q`, `k`, `v` (`[B, H, S, D]`, f32: what the kernel
/// computes with, up to the product by the descale factor). Panics on lengths that do not match
/// `dims`, as [`attention_f64`] does.
pub fn fp8_reference(
    (q, k, v): (&[f32], &[f32], &[f32]),
    dims: Dims,
    causal: bool,
    scale: f64,
    tolerance: Fp8Tolerance,
) -> Fp8Reference {
    let out = attention_f64(q, k, v, dims, causal, scale);
    let d = dims.head_dim;
    let mut bound = vec![0.0; out.len()];
    let mut lse_bound = Vec::new();
    if d > 0 {
        lse_bound = bound
            .par_chunks_mut(d)
            .zip(out.par_chunks(d))
            .enumerate()
            .map(|(r, (b, o))| {
                row_bound(
                    (q, k, v),
                    dims,
                    causal,
                    scale,
                    (r / dims.seq_q, r % dims.seq_q),
                    tolerance,
                    o,
                    b,
                )
            })
            .collect();
    }
    Fp8Reference {
        out,
        bound,
        lse_bound,
    }
}

/// The bound of each element of one output row (see the module's derivation), and the row's
/// log-sum-exp bound.
#[allow(clippy::too_many_arguments)]
fn row_bound(
    (q, k, v): (&[f32], &[f32], &[f32]),
    dims: Dims,
    causal: bool,
    scale: f64,
    (head, row): (usize, usize),
    t: Fp8Tolerance,
    o: &[f64],
    bound: &mut [f64],
) -> f64 {
    let d = dims.head_dim;
    let query = &q[(head * dims.seq_q + row) * d..][..d];
    let base = dims.kv_head(head) * dims.seq_k * d;
    let visible = dims.visible_keys(causal, row);
    if visible == 0 {
        bound.fill(1e-6); // A row that sees no key is exactly zero, its LSE -inf.
        return LSE_TOLERANCE;
    }
    let (keys, values) = (&k[base..][..visible * d], &v[base..][..visible * d]);
    let mut scores = Vec::with_capacity(visible);
    let mut magnitude = 0.0f64;
    for key in keys.chunks_exact(d) {
        let (dot, abs) = query.iter().zip(key).fold((0.0, 0.0), |(dot, abs), (&a, &b)| {
            let p = a as f64 * b as f64;
            (dot + p, abs + p.abs())
        });
        scores.push(dot * scale);
        magnitude = magnitude.max(abs * scale);
    }
    let max = scores.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let weights: Vec<f64> = scores.iter().map(|s| (s - max).exp()).collect();
    let l: f64 = weights.iter().sum();
    let (mut a, mut b) = (vec![0.0; d], vec![0.0; d]);
    for (w, value) in weights.iter().zip(values.chunks_exact(d)) {
        for ((a, b), &x) in a.iter_mut().zip(&mut b).zip(value) {
            *a += w * (x as f64).abs();
            *b += (x as f64).abs();
        }
    }
    let c_s = (2.0 * t.score_relative * magnitude).exp() - 1.0;
    let accumulation = 2f64.powi(-12) + visible as f64 * 2f64.powi(-24);
    let relative = t.p_relative + c_s + accumulation;
    for ((bound, &o), (a, b)) in bound.iter_mut().zip(o).zip(a.iter().zip(&b)) {
        let core = relative * a / l + t.p_absolute * b / l;
        *bound = core + t.out_relative * (o.abs() + core) + 1e-6;
    }
    LSE_TOLERANCE + t.score_relative * magnitude
}

/// The 16-bit kernels' log-sum-exp tolerance (`host verify`): fp32 arithmetic on the same inputs.
const LSE_TOLERANCE: f64 = 1e-3;

/// The largest `|lse - reference| / bound` over the rows (rows that see no key must be `-inf`
/// on both sides); infinite for NaN, a row `-inf` on one side only, or a length mismatch.
pub fn lse_bound_ratio(lse: &[f32], reference: &[f64], bound: &[f64]) -> f64 {
    if lse.len() != reference.len() || lse.len() != bound.len() {
        return f64::INFINITY;
    }
    let mut worst = 0.0f64;
    for ((&a, &r), &b) in lse.iter().zip(reference).zip(bound) {
        let a = a as f64;
        let ratio = if a == r {
            0.0
        } else if a.is_finite() && r.is_finite() {
            (a - r).abs() / b
        } else {
            f64::INFINITY
        };
        worst = worst.max(ratio);
    }
    worst
}

/// How an FP8 output compares with its [`Fp8Reference`].
#[derive(Debug, Clone, Copy, Serialize, PartialEq)]
pub struct Fp8Comparison {
    /// Maximum absolute and relative L2 errors, non-finite count (NaN-safe: see [`compare`]).
    #[serde(flatten)]
    pub errors: Comparison,
    /// `max |out - o| / bound` over the elements: at most 1 for a correct kernel; infinite when
    /// anything is non-finite or the lengths differ.
    pub bound_ratio: f64,
    /// The element where that maximum is reached (flat `[B, H, S_q, D]` index).
    pub worst_element: usize,
}

impl Fp8Comparison {
    /// Within both criteria, no non-finite value.
    pub fn passes(&self, tolerance: Fp8Tolerance) -> bool {
        self.errors.non_finite == 0 && self.bound_ratio <= 1.0 && self.errors.rel_l2_err <= tolerance.rel_l2
    }
}

/// Compares an FP8 kernel's output (`[B, H, S_q, D]`, as f32) with its reference.
pub fn compare_fp8(out: &[f32], reference: &Fp8Reference) -> Fp8Comparison {
    let errors = compare(out, &reference.out);
    let (mut bound_ratio, mut worst_element) = (0.0f64, 0);
    for (i, ((&x, &r), &b)) in out.iter().zip(&reference.out).zip(&reference.bound).enumerate() {
        // A NaN ratio (NaN output) counts as infinite, so it is taken and stays the worst.
        let ratio = match (x as f64 - r).abs() / b {
            nan if nan.is_nan() => f64::INFINITY,
            ratio => ratio,
        };
        if ratio > bound_ratio {
            bound_ratio = ratio;
            worst_element = i;
        }
    }
    if errors.non_finite > 0 || out.len() != reference.out.len() || !errors.max_abs_err.is_finite() {
        bound_ratio = f64::INFINITY;
    }
    Fp8Comparison {
        errors,
        bound_ratio,
        worst_element,
    }
}

/// Root-mean-square difference between `out` and `reference` (infinite on any non-finite value
/// or a length mismatch): the accuracy study's measure.
pub fn rmse(out: &[f32], reference: &[f64]) -> f64 {
    if out.len() != reference.len() || out.is_empty() {
        return f64::INFINITY;
    }
    let sum: f64 = out
        .iter()
        .zip(reference)
        .map(|(&x, &r)| (x as f64 - r).powi(2))
        .sum();
    let rmse = (sum / out.len() as f64).sqrt();
    if rmse.is_finite() {
        rmse
    } else {
        f64::INFINITY
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use flashrs::fp8::quantize::{e4m3_decode, e4m3_encode, Fp8Inputs};
    use flashrs::{DType, Layout, Shape};
    use rand::{Rng, SeedableRng};
    use rand_chacha::ChaCha8Rng;

    fn gaussian(rng: &mut ChaCha8Rng, n: usize) -> Vec<f32> {
        // Box-Muller: the lab has no rand_distr, and these need not be fast.
        (0..n)
            .map(|_| {
                let (u, w): (f64, f64) = (rng.random::<f64>().max(1e-300), rng.random());
                ((-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * w).cos()) as f32
            })
            .collect()
    }

    fn dims(shape: Shape) -> Dims {
        Dims {
            batch: shape.batch,
            heads: shape.heads,
            heads_kv: shape.heads_kv,
            seq_q: shape.seq_q,
            seq_k: shape.seq_k,
            head_dim: shape.head_dim,
        }
    }

    /// The FP8 kernel's arithmetic on the CPU: fp32 scores of the e4m3 inputs, the online
    /// softmax over tiles of 128 keys with P (times `p_scale`) rounded to e4m3 before P V and the
    /// row sum kept from the unrounded P, the output rounded to `out`.
    fn emulate(
        (q, k, v): (&[f32], &[f32], &[f32]),
        d: Dims,
        causal: bool,
        scale: f32,
        p_scale: f32,
        out: DType,
    ) -> Vec<f32> {
        let h = d.head_dim;
        let mut result = vec![0.0f32; q.len()];
        for (r, o) in result.chunks_mut(h).enumerate() {
            let (head, row) = (r / d.seq_q, r % d.seq_q);
            let query = &q[(head * d.seq_q + row) * h..][..h];
            let base = d.kv_head(head) * d.seq_k * h;
            let visible = d.visible_keys(causal, row);
            let (mut m, mut l, mut acc) = (f32::NEG_INFINITY, 0.0f32, vec![0.0f32; h]);
            for tile in (0..visible).collect::<Vec<_>>().chunks(128) {
                let s: Vec<f32> = tile
                    .iter()
                    .map(|&j| {
                        let key = &k[base + j * h..][..h];
                        query.iter().zip(key).map(|(a, b)| a * b).sum::<f32>() * scale
                    })
                    .collect();
                let m_new = s.iter().copied().fold(m, f32::max);
                let rescale = (m - m_new).exp();
                l *= rescale;
                acc.iter_mut().for_each(|x| *x *= rescale);
                m = m_new;
                for (&j, &s) in tile.iter().zip(&s) {
                    let p = (s - m).exp();
                    l += p;
                    let p8 = e4m3_decode(e4m3_encode(p * p_scale)) / p_scale;
                    for (a, &x) in acc.iter_mut().zip(&v[base + j * h..][..h]) {
                        *a += p8 * x;
                    }
                }
            }
            for (o, a) in o.iter_mut().zip(&acc) {
                let x = if visible == 0 { 0.0 } else { a / l };
                *o = out.decode(out.encode(x));
            }
        }
        result
    }

    struct Case {
        q: Vec<f32>,
        k: Vec<f32>,
        v: Vec<f32>,
    }

    /// Gaussian inputs quantised to e4m3 and dequantised: what the kernel computes with.
    fn case(shape: Shape, seed: u64) -> Case {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let q = gaussian(&mut rng, shape.q_len());
        let k = gaussian(&mut rng, shape.kv_len());
        let v = gaussian(&mut rng, shape.kv_len());
        let fp8 = Fp8Inputs::quantize(shape, Layout::Bhsd, &q, &k, &v).unwrap();
        let (q, k, v) = fp8.dequantize(shape, Layout::Bhsd).unwrap();
        Case { q, k, v }
    }

    fn shapes() -> Vec<(Shape, bool)> {
        vec![
            (Shape::new(1, 2, 200, 128), false),
            (Shape::new(1, 2, 200, 128), true),
            (Shape::new(1, 4, 64, 256).with_heads_kv(1), true),
            (
                Shape {
                    seq_k: 1500,
                    ..Shape::new(1, 2, 40, 128).with_heads_kv(1)
                },
                false,
            ),
            (
                Shape {
                    seq_k: 30,
                    ..Shape::new(1, 1, 90, 128)
                },
                true,
            ),
        ]
    }

    #[test]
    fn an_emulated_correct_kernel_passes_with_room() {
        for (i, (shape, causal)) in shapes().into_iter().enumerate() {
            let c = case(shape, i as u64);
            let scale = 1.0 / (shape.head_dim as f32).sqrt();
            for out in DType::ALL {
                let tolerance = Fp8Tolerance::new(out, P_SCALE);
                let reference =
                    fp8_reference((&c.q, &c.k, &c.v), dims(shape), causal, scale as f64, tolerance);
                // The kernel's factor may be larger than the one assumed (smaller subnormal
                // errors); each passes the bounds derived for a factor of 1.
                for p_scale in [1.0, 448.0] {
                    let got = emulate((&c.q, &c.k, &c.v), dims(shape), causal, scale, p_scale, out);
                    let cmp = compare_fp8(&got, &reference);
                    assert!(
                        cmp.passes(tolerance),
                        "{shape} causal={causal} {out} x{p_scale}: {cmp:?}"
                    );
                    assert!(cmp.bound_ratio < 0.8, "{shape} {out} x{p_scale}: {cmp:?}");
                    assert!(
                        cmp.errors.rel_l2_err < tolerance.rel_l2 / 1.5,
                        "{shape} {out} x{p_scale}: {cmp:?}"
                    );
                }
            }
        }
    }

    #[test]
    fn wrong_kernels_fail() {
        let (shape, causal) = (Shape::new(1, 2, 200, 128).with_heads_kv(1), true);
        let c = case(shape, 7);
        let scale = 1.0 / (shape.head_dim as f32).sqrt();
        let tolerance = Fp8Tolerance::new(DType::Bf16, P_SCALE);
        let reference = fp8_reference((&c.q, &c.k, &c.v), dims(shape), causal, scale as f64, tolerance);
        let good = emulate((&c.q, &c.k, &c.v), dims(shape), causal, scale, 1.0, DType::Bf16);
        assert!(compare_fp8(&good, &reference).passes(tolerance));
        let d = shape.head_dim;
        let wrong: Vec<(&str, Vec<f32>)> = vec![
            ("zeroed", vec![0.0; good.len()]),
            ("rows rotated by one", {
                let mut x = good.clone();
                x.rotate_left(d);
                x
            }),
            ("heads swapped", {
                let half = good.len() / 2;
                [&good[half..], &good[..half]].concat()
            }),
            (
                "a descale factor 1.5x off",
                good.iter().map(|x| x * 1.5).collect(),
            ),
            (
                "the mask ignored",
                emulate((&c.q, &c.k, &c.v), dims(shape), false, scale, 1.0, DType::Bf16),
            ),
            (
                "the softmax scale forgotten",
                emulate((&c.q, &c.k, &c.v), dims(shape), causal, 1.0, 1.0, DType::Bf16),
            ),
            ("a NaN", {
                let mut x = good.clone();
                x[777] = f32::NAN;
                x
            }),
            ("one element off by 0.5", {
                let mut x = good.clone();
                x[5 * d + 3] += 0.5;
                x
            }),
            ("one element short", good[1..].to_vec()),
        ];
        for (name, out) in wrong {
            let cmp = compare_fp8(&out, &reference);
            assert!(!cmp.passes(tolerance), "{name} passed: {cmp:?}");
        }
    }

    #[test]
    fn nan_and_lengths_never_pass() {
        let reference = Fp8Reference {
            out: vec![0.5, -0.25],
            bound: vec![0.1, 0.1],
            lse_bound: vec![1e-3],
        };
        let (lse, bound) = ([1.0, f64::NEG_INFINITY], [1e-3, 1e-3]);
        assert!(lse_bound_ratio(&[1.0005, f32::NEG_INFINITY], &lse, &bound) <= 1.0);
        assert!(lse_bound_ratio(&[1.002, f32::NEG_INFINITY], &lse, &bound) > 1.0);
        for bad in [[f32::NAN, f32::NEG_INFINITY], [1.0, 0.0]] {
            assert!(lse_bound_ratio(&bad, &lse, &bound).is_infinite(), "{bad:?}");
        }
        assert!(lse_bound_ratio(&[1.0], &lse, &bound).is_infinite());
        let t = Fp8Tolerance::new(DType::F16, 1.0);
        assert!(compare_fp8(&[0.5, -0.25], &reference).passes(t));
        for bad in [vec![f32::NAN, -0.25], vec![0.5, f32::INFINITY], vec![0.5]] {
            let cmp = compare_fp8(&bad, &reference);
            assert!(
                !cmp.passes(t) && cmp.bound_ratio.is_infinite(),
                "{bad:?}: {cmp:?}"
            );
        }
        assert_eq!(rmse(&[1.0, 1.0], &[0.0, 0.0]), 1.0);
        assert!(rmse(&[f32::NAN], &[0.0]).is_infinite() && rmse(&[], &[]).is_infinite());
    }
}
