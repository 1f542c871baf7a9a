//! The float64 CPU reference for the backward pass: dQ, dK and dV of `O = softmax(scale Q K^T) V`
//! for a given dO, the chain rule written out row by row, multithreaded over key/value heads.
//! Masks, softcap, layouts and grouped-query attention are the forward reference's ([`Dims`],
//! [`Mask`]).

use rayon::prelude::*;

use crate::reference::{Dims, Mask};

/// The three gradients, each shaped like its input (`[batch, heads, seq_q, D]` for dQ,
/// `[batch, heads_kv, seq_k, D]` for dK and dV), contiguous.
#[derive(Clone, Debug, PartialEq)]
pub struct GradientsF64 {
    /// The gradient of the loss by Q.
    pub d_q: Vec<f64>,
    /// The gradient of the loss by K.
    pub d_k: Vec<f64>,
    /// The gradient of the loss by V.
    pub d_v: Vec<f64>,
}

/// The gradients of `sum(d_out * attention(q, k, v))` by q, k and v, in float64 from f32 inputs
/// (already rounded to the kernel's type by the caller), the attention of
/// [`attention_f64`](crate::reference::attention_f64) under `mask` (a [`Mask`] or a `bool`,
/// causal or not). For query row `i` with raw scaled scores `x_ij = scale Q_i . K_j` and
/// probabilities `P_ij = softmax_j(cap(x_ij))` over its visible keys: `dP_ij = dO_i . V_j`,
/// `delta_i = sum_j P_ij dP_ij`, `dS_ij = P_ij (dP_ij - delta_i) cap'(x_ij)` (the softcap's
/// derivative `1 - tanh(x_ij / cap)^2`, or 1 without one); then `dQ_i = scale sum_j dS_ij K_j`,
/// `dK_j = scale sum_i dS_ij Q_i` and `dV_j = sum_i P_ij dO_i`, the sums over every query head of
/// K's group. A row that sees no key contributes nothing and gets a zero dQ.
///
/// Panics (with a message naming the tensor) if a slice's length does not match `dims`.
pub fn attention_backward_f64(
    (q, k, v): (&[f32], &[f32], &[f32]),
    d_out: &[f32],
    dims: Dims,
    mask: impl Into<Mask>,
    scale: f64,
) -> GradientsF64 {
    let mask = mask.into();
    let d = dims.head_dim;
    let q_len = dims.batch * dims.heads * dims.seq_q * d;
    let kv_len = dims.batch * dims.heads_kv * dims.seq_k * d;
    for (what, len, expected) in [
        ("q", q.len(), q_len),
        ("k", k.len(), kv_len),
        ("v", v.len(), kv_len),
        ("d_out", d_out.len(), q_len),
    ] {
        assert_eq!(
            len, expected,
            "{what} has {len} elements; {dims:?} needs {expected}"
        );
    }
    let group = dims.heads / dims.heads_kv;
    let head_len = dims.seq_q * d;
    let kv_head_len = dims.seq_k * d;
    // One task per key/value head: dK and dV of its keys, dQ of its group's query heads.
    let parts: Vec<(Vec<f64>, Vec<f64>, Vec<f64>)> = (0..dims.batch * dims.heads_kv)
        .into_par_iter()
        .map(|kv_head| {
            let keys = &k[kv_head * kv_head_len..][..kv_head_len];
            let values = &v[kv_head * kv_head_len..][..kv_head_len];
            let (mut d_q, mut d_k, mut d_v) = (
                vec![0.0; group * head_len],
                vec![0.0; kv_head_len],
                vec![0.0; kv_head_len],
            );
            let (mut x, mut p, mut dp) = (Vec::new(), Vec::new(), Vec::new());
            for g in 0..group {
                let head = kv_head * group + g;
                let queries = &q[head * head_len..][..head_len];
                let grads = &d_out[head * head_len..][..head_len];
                for row in 0..dims.seq_q {
                    let visible = mask.keys(&dims, row);
                    if visible.is_empty() {
                        continue;
                    }
                    let (qi, doi) = (&queries[row * d..][..d], &grads[row * d..][..d]);
                    // `x`, `p` and `dp` are indexed by `j - visible.start`.
                    x.clear();
                    x.extend(visible.clone().map(|j| scale * dot(qi, &keys[j * d..][..d])));
                    p.clear();
                    p.extend(x.iter().map(|&x| mask.capped(x)));
                    let max = p.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                    p.iter_mut().for_each(|s| *s = (*s - max).exp());
                    let sum: f64 = p.iter().sum();
                    p.iter_mut().for_each(|s| *s /= sum);
                    dp.clear();
                    dp.extend(visible.clone().map(|j| dot(doi, &values[j * d..][..d])));
                    let delta: f64 = p.iter().zip(&dp).map(|(p, dp)| p * dp).sum();
                    let dqi = &mut d_q[g * head_len + row * d..][..d];
                    for (n, j) in visible.enumerate() {
                        // The gradient by the capped score, then through the cap to the raw one.
                        let ds = p[n] * (dp[n] - delta) * mask.capped_slope(x[n]);
                        let (kj, dkj) = (&keys[j * d..][..d], &mut d_k[j * d..][..d]);
                        for c in 0..d {
                            dqi[c] += scale * ds * kj[c] as f64;
                            dkj[c] += scale * ds * qi[c] as f64;
                        }
                        let dvj = &mut d_v[j * d..][..d];
                        for c in 0..d {
                            dvj[c] += p[n] * doi[c] as f64;
                        }
                    }
                }
            }
            (d_q, d_k, d_v)
        })
        .collect();
    let mut grads = GradientsF64 {
        d_q: Vec::with_capacity(q_len),
        d_k: Vec::with_capacity(kv_len),
        d_v: Vec::with_capacity(kv_len),
    };
    // Query heads of one batch are contiguous and a group's are adjacent: the parts concatenate.
    for (d_q, d_k, d_v) in parts {
        grads.d_q.extend(d_q);
        grads.d_k.extend(d_k);
        grads.d_v.extend(d_v);
    }
    grads
}

fn dot(a: &[f32], b: &[f32]) -> f64 {
    a.iter().zip(b).map(|(&x, &y)| x as f64 * y as f64).sum()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reference::attention_f64;

    /// Inputs in [-1, 1) from a fixed linear congruential sequence: repeatable, not zeros.
    fn inputs(len: usize, seed: u64) -> Vec<f32> {
        let mut state = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (0..len)
            .map(|_| {
                state = state
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                // A multiple of 2^-20: a perturbation of 2^-10 stays exact in f32.
                ((state >> 44) as f32 / (1u64 << 19) as f32) - 1.0
            })
            .collect()
    }

    /// Every gradient against central differences of `sum(dO * O)` at sampled elements, for
    /// grouped-query attention, causal with S_q > S_k (rows that see no key) and not, sliding
    /// windows (one that leaves rows without keys, one whose left edge moves past key 0) and
    /// softcaps strong enough that a missing `1 - tanh^2` factor would be far off.
    #[test]
    fn gradients_match_central_differences_of_the_forward() {
        let grouped = Dims {
            batch: 2,
            heads: 4,
            heads_kv: 2,
            seq_q: 5,
            seq_k: 7,
            head_dim: 8,
        };
        let tall = Dims {
            batch: 1,
            heads: 2,
            heads_kv: 1,
            seq_q: 9,
            seq_k: 6,
            head_dim: 4,
        };
        let wide = Dims {
            batch: 1,
            heads: 2,
            heads_kv: 2,
            seq_q: 4,
            seq_k: 9,
            head_dim: 4,
        };
        let mask = |causal, left, right, softcap| Mask {
            causal,
            left,
            right,
            softcap,
        };
        for (mask, dims, rows_without_keys) in [
            (Mask::from(false), grouped, false),
            (Mask::from(true), tall, true),
            (mask(false, Some(2), Some(1), None), tall, true),
            (mask(false, Some(1), None, None), wide, false),
            (mask(false, None, None, Some(0.5)), grouped, false),
            (mask(true, Some(3), None, Some(1.0)), tall, true),
            (mask(false, Some(2), Some(2), Some(0.3)), wide, false),
        ] {
            let (q_len, kv_len) = (
                dims.batch * dims.heads * dims.seq_q * dims.head_dim,
                dims.batch * dims.heads_kv * dims.seq_k * dims.head_dim,
            );
            let (q, k, v, d_out) = (
                inputs(q_len, 1),
                inputs(kv_len, 2),
                inputs(kv_len, 3),
                inputs(q_len, 4),
            );
            let scale = 0.7;
            let grads = attention_backward_f64((&q, &k, &v), &d_out, dims, mask, scale);
            let loss = |q: &[f32], k: &[f32], v: &[f32]| -> f64 {
                let out = attention_f64(q, k, v, dims, mask, scale);
                out.iter().zip(&d_out).map(|(o, g)| o * *g as f64).sum()
            };
            let h = 1.0 / 1024.0;
            let mut checked = 0;
            for which in 0..3 {
                let (len, grad) = match which {
                    0 => (q_len, &grads.d_q),
                    1 => (kv_len, &grads.d_k),
                    _ => (kv_len, &grads.d_v),
                };
                for i in (0..len).step_by(3) {
                    let mut tensors = [q.clone(), k.clone(), v.clone()];
                    tensors[which][i] += h;
                    let plus = loss(&tensors[0], &tensors[1], &tensors[2]);
                    tensors[which][i] -= 2.0 * h;
                    let minus = loss(&tensors[0], &tensors[1], &tensors[2]);
                    let numeric = (plus - minus) / (2.0 * h as f64);
                    assert!(
                        (numeric - grad[i]).abs() < 1e-5 + 1e-4 * grad[i].abs(),
                        "{dims:?} {mask:?}: tensor {which} element {i}: {} analytic, {numeric} numeric",
                        grad[i]
                    );
                    checked += 1;
                }
            }
            assert!(checked > 20);
            // Rows that see no key have a zero dQ, and some gradient is not zero.
            let d = dims.head_dim;
            let mut empty_rows = 0;
            for (r, dq) in grads.d_q.chunks_exact(d).enumerate() {
                if mask.keys(&dims, r % dims.seq_q).is_empty() {
                    assert!(dq.iter().all(|&g| g == 0.0), "{dims:?} {mask:?} row {r}");
                    empty_rows += 1;
                }
            }
            assert_eq!(empty_rows > 0, rows_without_keys, "{dims:?} {mask:?}");
            assert!(grads.d_q.iter().any(|&g| g.abs() > 1e-3));
        }
    }
}
