//! Variable-length batches in the CLI: problems (per-sequence query and key lengths, 0 and 1
//! included), their float64 verdicts for `verify` (every element of every packed row, and guard
//! regions around the output and log-sum-exp that must stay untouched), and `bench`'s case.

use flashrs::{DType, Gpu, Params, VariantSpec, VarlenBatch, VarlenTensors};
use flashrs_lab::reference::{self, DTypeTolerance, Dims};
use rand::rngs::StdRng;
use rand::seq::IndexedRandom;
use rand::{Rng, SeedableRng};
use serde::Serialize;

/// `--varlen`'s default seed of its lengths.
pub(crate) const VARLEN_SEED: u64 = 2026;

/// `--varlen`'s batch: sequences, longest length, heads, head dim.
pub(crate) const VARLEN_CASE: (usize, usize, usize, usize) = (16, 4096, 16, 128);

use crate::Failure;

/// One varlen problem: packed sequences of these query and key lengths.
#[derive(Clone, Debug)]
pub struct Problem {
    pub heads: usize,
    pub heads_kv: usize,
    pub head_dim: usize,
    pub lens_q: Vec<usize>,
    pub lens_k: Vec<usize>,
    pub causal: bool,
    pub dtype: DType,
}

impl Problem {
    /// Heads and lengths, for messages and reports.
    pub fn describe(&self) -> String {
        format!(
            "B={} H={} H_kv={} D={} lens_q={:?} lens_k={:?}",
            self.lens_q.len(),
            self.heads,
            self.heads_kv,
            self.head_dim,
            self.lens_q,
            self.lens_k
        )
    }

    /// The prefix sums of the lengths.
    pub fn batch(&self) -> Result<VarlenBatch, Failure> {
        Ok(VarlenBatch::from_lengths(&self.lens_q, &self.lens_k)?)
    }
}

/// Host data of one problem: the prefix sums and packed Q, K, V (dtype bits).
pub struct Data {
    pub batch: VarlenBatch,
    pub q: Vec<u16>,
    pub k: Vec<u16>,
    pub v: Vec<u16>,
}

/// Random inputs (normal draws; with `timing`, a cheap hash instead).
pub fn data(problem: &Problem, seed: u64, timing: bool) -> Result<Data, Failure> {
    let batch = problem.batch()?;
    let (q_len, kv_len, _) = batch.lens(problem.heads, problem.heads_kv, problem.head_dim);
    let mut rng = StdRng::seed_from_u64(seed);
    let dtype = problem.dtype;
    let mut draw = |n: usize| crate::inputs::draw_bits(&mut rng, dtype, n, timing);
    Ok(Data {
        q: draw(q_len),
        k: draw(kv_len),
        v: draw(kv_len),
        batch,
    })
}

/// The problem's tensors on the GPU, with guard regions around the output and log-sum-exp.
pub fn upload(gpu: &Gpu, problem: &Problem, data: &Data) -> Result<VarlenTensors, Failure> {
    let heads = (problem.heads, problem.heads_kv, problem.head_dim);
    let mut tensors = gpu.varlen_tensors_guarded(
        data.batch.clone(),
        heads,
        problem.dtype,
        (&data.q, &data.k, &data.v),
        true,
    )?;
    gpu.request_varlen_lse(&mut tensors)?;
    Ok(tensors)
}

/// One varlen kernel run against float64.
#[derive(Serialize)]
pub struct Case {
    pub kernel: &'static str,
    pub problem: String,
    pub causal: bool,
    pub dtype: &'static str,
    pub max_abs_err: f64,
    pub rel_l2_err: f64,
    pub non_finite: usize,
    pub lse_max_abs_err: f64,
    /// Elements of the guard regions around the output and log-sum-exp that a launch changed.
    pub guard_writes: usize,
    pub pass: bool,
}

/// Runs every runnable variant's varlen entry point on `problem` (fresh inputs from `seed`):
/// output and LSE poisoned with NaN first, every element of every packed row compared with the
/// float64 per-sequence reference, and the guards around both buffers checked untouched.
pub fn check(
    gpu: &Gpu,
    variants: &[&'static VariantSpec],
    problem: &Problem,
    seed: u64,
    lse_tolerance: f64,
    lse_error: impl Fn(&[f32], &[f64]) -> f64,
) -> Result<Vec<Case>, Failure> {
    let data = data(problem, seed, false)?;
    let decode = |x: &[u16]| flashrs::gpu::decode(problem.dtype, x);
    let params = Params {
        causal: problem.causal,
        scale: None,
        ..Params::default()
    };
    let dims = Dims {
        batch: 1,
        heads: problem.heads,
        heads_kv: problem.heads_kv,
        seq_q: 0,
        seq_k: 0,
        head_dim: problem.head_dim,
    };
    let scale = params.scale_for(problem.head_dim) as f64;
    let (reference, reference_lse) = reference::varlen_attention_f64(
        (&decode(&data.q), &decode(&data.k), &decode(&data.v)),
        &data.batch,
        dims,
        problem.causal,
        scale,
    );
    let mut cases = Vec::new();
    for &variant in variants.iter().filter(|v| runnable(gpu, v, problem.head_dim)) {
        let kernel = gpu.varlen_kernel(variant, problem.head_dim, problem.dtype, false)?;
        let mut tensors = upload(gpu, problem, &data)?;
        gpu.launch_varlen(&kernel, &mut tensors, params, None)?;
        let (out_guard, lse_guard) = tensors.guards();
        let out_all = gpu.download(tensors.out())?;
        let lse_all = gpu.download(tensors.lse().expect("requested at upload"))?;
        let out_len = out_all.len() - 2 * out_guard;
        let lse_len = lse_all.len() - 2 * lse_guard;
        let poison = flashrs::gpu::nan(problem.dtype);
        let guard_writes = out_all[..out_guard]
            .iter()
            .chain(&out_all[out_guard + out_len..])
            .filter(|&&x| x != poison)
            .count()
            + lse_all[..lse_guard]
                .iter()
                .chain(&lse_all[lse_guard + lse_len..])
                .filter(|x| x.to_bits() != f32::NAN.to_bits())
                .count();
        // An empty batch keeps a one-element placeholder: nothing to compare there.
        let out = decode(&out_all[out_guard..][..reference.len().min(out_len)]);
        let lse = &lse_all[lse_guard..][..reference_lse.len().min(lse_len)];
        let cmp = reference::compare(&out, &reference);
        let lse_err = lse_error(lse, &reference_lse);
        cases.push(Case {
            kernel: variant.name,
            problem: problem.describe(),
            causal: problem.causal,
            dtype: problem.dtype.name(),
            max_abs_err: cmp.max_abs_err,
            rel_l2_err: cmp.rel_l2_err,
            non_finite: cmp.non_finite,
            lse_max_abs_err: lse_err,
            guard_writes,
            pass: cmp.passes(problem.dtype.tolerance()) && lse_err <= lse_tolerance && guard_writes == 0,
        });
    }
    Ok(cases)
}

/// Whether `variant` has a varlen entry point this GPU runs at `head_dim`.
pub fn runnable(gpu: &Gpu, variant: &VariantSpec, head_dim: usize) -> bool {
    variant.has_varlen_at(head_dim) && variant.min_arch <= gpu.arch && variant.head_dims.contains(&head_dim)
}

/// `verify`'s varlen set: lengths 0 and 1 among longer ones (several row blocks, tails),
/// queries longer and shorter than their keys (causal alignment per sequence), a decode-like
/// batch (one or two queries per sequence: flash_decode's packing and split), grouped and
/// multi-query heads, both head dims.
pub fn problems(dtypes: &[DType], masks: &[bool]) -> Vec<Problem> {
    type Lens = (&'static [usize], &'static [usize]);
    let shapes: [(usize, usize, usize, Lens); 6] = [
        (8, 8, 128, (&[0, 1, 300, 129, 7], &[5, 1, 300, 129, 0])),
        (8, 2, 64, (&[1000, 1, 0, 255], &[1000, 2, 3, 256])),
        (4, 1, 128, (&[64, 200, 513], &[700, 100, 513])),
        (16, 4, 128, (&[1, 1, 2, 1], &[4000, 17, 3000, 0])),
        (8, 2, 128, (&[2048, 77], &[2048, 77])),
        (4, 4, 64, (&[3, 1, 1], &[9000, 1, 128])),
    ];
    let mut out = Vec::new();
    for &(heads, heads_kv, head_dim, (lens_q, lens_k)) in &shapes {
        for &causal in masks {
            for &dtype in dtypes {
                out.push(Problem {
                    heads,
                    heads_kv,
                    head_dim,
                    lens_q: lens_q.to_vec(),
                    lens_k: lens_k.to_vec(),
                    causal,
                    dtype,
                });
            }
        }
    }
    out
}

/// `verify --quick`'s varlen set, small enough for compute-sanitizer.
pub fn quick_problems(dtypes: &[DType], masks: &[bool]) -> Vec<Problem> {
    let mut out = Vec::new();
    for &causal in masks {
        for &dtype in dtypes {
            out.push(Problem {
                heads: 4,
                heads_kv: 2,
                head_dim: 64,
                lens_q: vec![0, 1, 200, 3],
                lens_k: vec![2, 1, 150, 400],
                causal,
                dtype,
            });
        }
    }
    out
}

/// A random varlen problem: 1-8 sequences, query and key lengths 0 to 3000 (0 and 1 often,
/// equal lengths often), sometimes decode-like (1-4 queries), grouped heads, causal or not.
pub fn random_problem(rng: &mut StdRng) -> Problem {
    let head_dim = if rng.random_bool(0.5) { 64 } else { 128 };
    let heads_kv = *[1usize, 2, 4].choose(rng).expect("non-empty");
    let group = *[1usize, 2, 4, 8].choose(rng).expect("non-empty");
    let decode_like = rng.random_bool(0.3);
    let len = |rng: &mut StdRng, most: usize| match rng.random_range(0..6) {
        0 => 0,
        1 => 1,
        _ => rng.random_range(0..=most),
    };
    let count = rng.random_range(1..=8);
    let mut lens_q = Vec::with_capacity(count);
    let mut lens_k = Vec::with_capacity(count);
    for _ in 0..count {
        // Up to 600 keys: the float64 reference of a batch of 8 sequences of 3,000 took seconds
        // each on the GPU machine, so `--random 1000` ran past 200 s (the long varlen case is
        // in the `varlen` set and the bench).
        let k = len(rng, 600);
        let q = if decode_like {
            rng.random_range(1..=4)
        } else if rng.random_bool(0.4) {
            k
        } else {
            len(rng, 600)
        };
        lens_q.push(q);
        lens_k.push(k);
    }
    // A batch with queries needs a key somewhere (`VarlenBatch::packed_shape`).
    if lens_k.iter().all(|&k| k == 0) {
        lens_k[0] = 1;
    }
    Problem {
        heads: heads_kv * group,
        heads_kv,
        head_dim,
        lens_q,
        lens_k,
        causal: rng.random_bool(0.5),
        dtype: if rng.random_bool(0.5) {
            DType::F16
        } else {
            DType::Bf16
        },
    }
}

/// `bench`'s varlen case: `count` sequences of lengths drawn uniformly from 1 to `max` (queries
/// and keys the same), from `seed`.
pub fn bench_lengths(count: usize, max: usize, seed: u64) -> Vec<usize> {
    let mut rng = StdRng::seed_from_u64(seed);
    (0..count).map(|_| rng.random_range(1..=max)).collect()
}

/// `bench --varlen`'s batch (`bench::VARLEN_CASE`) with the lengths of `seed` and `heads_kv`
/// key/value heads (all of them by default), on the GPU with fresh random inputs: its lengths
/// and tensors. `bench` and `trace --varlen` run the same batch.
pub fn bench_case(
    gpu: &Gpu,
    seed: u64,
    heads_kv: Option<usize>,
    causal: bool,
    dtype: DType,
) -> Result<(Vec<usize>, VarlenTensors), Failure> {
    let (count, max, heads, head_dim) = VARLEN_CASE;
    let lens = bench_lengths(count, max, seed);
    let problem = Problem {
        heads,
        heads_kv: heads_kv.unwrap_or(heads),
        head_dim,
        lens_q: lens.clone(),
        lens_k: lens.clone(),
        causal,
        dtype,
    };
    let data = data(&problem, crate::inputs::fresh_seed(), true)?;
    let tensors = gpu.varlen_tensors(
        data.batch,
        (heads, problem.heads_kv, head_dim),
        dtype,
        (&data.q, &data.k, &data.v),
    )?;
    Ok((lens, tensors))
}

/// The dense sequence length with the same useful work as `lens` (queries and keys the same
/// lengths): `S` with `S^2 = sum L^2` (non-causal; with the causal mask the dense convention
/// halves `S^2` as the useful count halves each `L^2`, up to the diagonal's `L/2` per sequence).
pub fn dense_equivalent(lens: &[usize]) -> usize {
    let squares: f64 = lens.iter().map(|&l| (l * l) as f64).sum();
    squares.sqrt().round().max(1.0) as usize
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `p`'s lengths and heads make a batch the launches take.
    fn assert_valid(p: &Problem) {
        let batch = p.batch().unwrap();
        assert!(
            batch.grid_shape(p.heads, p.heads_kv, p.head_dim).is_ok(),
            "{}",
            p.describe()
        );
    }

    #[test]
    fn random_problems_are_valid_batches() {
        for seed in 0..200 {
            assert_valid(&random_problem(&mut StdRng::seed_from_u64(seed)));
        }
    }

    #[test]
    fn the_sets_are_valid_batches_with_empty_and_single_rows() {
        let all = problems(&[DType::F16], &[false, true]);
        assert!(all.iter().any(|p| p.lens_q.contains(&0)) && all.iter().any(|p| p.lens_q.contains(&1)));
        all.iter()
            .chain(&quick_problems(&[DType::F16], &[true]))
            .for_each(assert_valid);
    }

    #[test]
    fn bench_lengths_are_reproducible_and_in_range() {
        let a = bench_lengths(16, 4096, 7);
        assert_eq!(a, bench_lengths(16, 4096, 7));
        assert!(a.iter().all(|&l| (1..=4096).contains(&l)));
        assert_eq!(dense_equivalent(&[3, 4]), 5);
    }
}
