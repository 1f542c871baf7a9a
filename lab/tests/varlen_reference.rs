//! The float64 reference on packed variable-length batches (`flashrs::varlen`): each sequence
//! of a batch against the dense reference run on that sequence alone.

use flashrs::varlen::*;
use flashrs_lab::reference::{self, Dims};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// Values in [-1, 1] from a seeded generator.
struct Values(ChaCha8Rng);
impl Values {
    fn new(seed: u64) -> Self {
        Values(ChaCha8Rng::seed_from_u64(seed))
    }
    fn value(&mut self) -> f32 {
        self.0.random_range(-1.0..=1.0)
    }
}

/// The varlen reference, sequence by sequence, equals the dense reference on that sequence
/// alone: tensors made per sequence as `[1, H, L, D]`, packed by hand into `[total, H, D]`.
/// Lengths 0 and 1 included, causal with `S_q` above, below and equal to `S_k`, GQA.
#[test]
fn each_sequence_equals_the_dense_reference_on_it_alone() {
    let mut rng = Values::new(11);
    let (heads, heads_kv, d) = (4, 2, 8);
    let lens_q = [3, 0, 1, 9, 5, 2];
    let lens_k = [7, 4, 1, 9, 0, 2];
    let batch = VarlenBatch::from_lengths(&lens_q, &lens_k).unwrap();
    let make = |rng: &mut Values, heads: usize, len: usize| -> Vec<f32> {
        (0..heads * len * d).map(|_| rng.value()).collect()
    };
    let per_seq: Vec<_> = (0..lens_q.len())
        .map(|b| {
            (
                make(&mut rng, heads, lens_q[b]),
                make(&mut rng, heads_kv, lens_k[b]),
                make(&mut rng, heads_kv, lens_k[b]),
            )
        })
        .collect();
    // Pack [1, H, L, D] into rows of [total, H, D].
    let pack = |parts: Vec<(&Vec<f32>, usize)>, heads: usize| -> Vec<f32> {
        let mut out = Vec::new();
        for (x, len) in parts {
            for row in 0..len {
                for h in 0..heads {
                    out.extend_from_slice(&x[(h * len + row) * d..][..d]);
                }
            }
        }
        out
    };
    let q = pack(
        per_seq.iter().zip(lens_q).map(|(s, l)| (&s.0, l)).collect(),
        heads,
    );
    let k = pack(
        per_seq.iter().zip(lens_k).map(|(s, l)| (&s.1, l)).collect(),
        heads_kv,
    );
    let v = pack(
        per_seq.iter().zip(lens_k).map(|(s, l)| (&s.2, l)).collect(),
        heads_kv,
    );
    let dims = Dims {
        batch: 1,
        heads,
        heads_kv,
        seq_q: 0,
        seq_k: 0,
        head_dim: d,
    };
    for causal in [false, true] {
        let (out, lse) = reference::varlen_attention_f64((&q, &k, &v), &batch, dims, causal, 0.3);
        let total_q = batch.total_q();
        for (b, (qb, kb, vb)) in per_seq.iter().enumerate() {
            let one = Dims {
                seq_q: lens_q[b],
                seq_k: lens_k[b],
                ..dims
            };
            let expected = reference::attention_f64(qb, kb, vb, one, causal, 0.3);
            let expected_lse = reference::log_sum_exp_f64(qb, kb, one, causal, 0.3);
            for (i, row) in batch.q_range(b).enumerate() {
                for h in 0..heads {
                    let got = &out[(row * heads + h) * d..][..d];
                    let want = &expected[(h * lens_q[b] + i) * d..][..d];
                    assert_eq!(got, want, "sequence {b} row {i} head {h} causal {causal}");
                    assert_eq!(lse[h * total_q + row], expected_lse[h * lens_q[b] + i]);
                }
            }
            if lens_k[b] == 0 && lens_q[b] > 0 {
                let row = batch.q_range(b).start;
                assert!(out[row * heads * d..][..heads * d].iter().all(|&x| x == 0.0));
                assert_eq!(lse[row], f64::NEG_INFINITY);
            }
        }
    }
}

/// Sequences of equal lengths are a dense batch in the `[B, S, H, D]` layout: the varlen
/// reference equals the dense one on the same memory read as `[B, H, S, D]` after a transpose.
#[test]
fn equal_lengths_equal_the_dense_batch() {
    let mut rng = Values::new(5);
    let (b_count, heads, heads_kv, sq, sk, d) = (3, 4, 1, 5, 7, 8);
    let q: Vec<f32> = (0..b_count * sq * heads * d).map(|_| rng.value()).collect();
    let k: Vec<f32> = (0..b_count * sk * heads_kv * d).map(|_| rng.value()).collect();
    let v: Vec<f32> = (0..k.len()).map(|_| rng.value()).collect();
    let to_bhsd = |x: &[f32], s: usize, h_count: usize| -> Vec<f32> {
        let mut out = vec![0.0; x.len()];
        for b in 0..b_count {
            for si in 0..s {
                for h in 0..h_count {
                    let src = ((b * s + si) * h_count + h) * d;
                    let dst = ((b * h_count + h) * s + si) * d;
                    out[dst..dst + d].copy_from_slice(&x[src..src + d]);
                }
            }
        }
        out
    };
    let dims = Dims {
        batch: b_count,
        heads,
        heads_kv,
        seq_q: sq,
        seq_k: sk,
        head_dim: d,
    };
    let batch = VarlenBatch::from_lengths(&[sq; 3], &[sk; 3]).unwrap();
    for causal in [false, true] {
        let (out, _) = reference::varlen_attention_f64((&q, &k, &v), &batch, dims, causal, 0.5);
        let dense = reference::attention_f64(
            &to_bhsd(&q, sq, heads),
            &to_bhsd(&k, sk, heads_kv),
            &to_bhsd(&v, sk, heads_kv),
            dims,
            causal,
            0.5,
        );
        let out32: Vec<f32> = out.iter().map(|&x| x as f32).collect();
        let back: Vec<f64> = to_bhsd(&out32, sq, heads).iter().map(|&x| x as f64).collect();
        let dense32: Vec<f64> = dense.iter().map(|&x| x as f32 as f64).collect();
        assert_eq!(back, dense32, "causal {causal}");
    }
}
