//! The stress modes of `verify`: `--repeat N` (bit-identical outputs over N runs of every kernel)
//! and `--random N` (N random valid problems, every kernel against the float64 reference).

use flashrs::{DType, Gpu, Layout, Params, Shape, VariantSpec};
use flashrs_lab::reference::{self, DTypeTolerance, ReferenceDims};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::Serialize;

use crate::harness::{run_kernel, runnable};
use crate::inputs::{self, Inputs};
use crate::Failure;

/// One kernel's determinism check on one problem.
#[derive(Serialize)]
pub struct RepeatCase {
    pub kernel: &'static str,
    pub shape: String,
    pub causal: bool,
    pub dtype: &'static str,
    pub runs: usize,
    /// Runs whose output (and log-sum-exp) differed from the first run in any bit.
    pub differing_runs: usize,
    pub pass: bool,
}

/// Runs every variant `runs` times on the same inputs (output poisoned before each run) and
/// compares the bits of every output and log-sum-exp with the first run's.
pub fn repeat(
    gpu: &Gpu,
    variants: &[&'static VariantSpec],
    problems: &[(Shape, bool, DType)],
    runs: usize,
    seed: u64,
) -> Result<Vec<RepeatCase>, Failure> {
    let mut out = Vec::new();
    let bar = inputs::progress(problems.len(), "repeat");
    for (index, &(shape, causal, dtype)) in problems.iter().enumerate() {
        bar.set_message(format!("{shape} causal={causal} {dtype}"));
        let inputs = Inputs::random(shape, dtype, seed.wrapping_add(index as u64));
        let params = Params {
            causal,
            scale: None,
            ..Params::default()
        };
        for &variant in runnable(gpu, variants, shape) {
            // One run's output and log-sum-exp, as bits.
            let run_bits = || -> Result<Vec<u32>, Failure> {
                let (out, lse) = run_kernel(gpu, variant, shape, params, &inputs, true, Layout::Bhsd)?;
                Ok(out
                    .iter()
                    .chain(lse.iter().flatten())
                    .map(|x| x.to_bits())
                    .collect())
            };
            let first = run_bits()?;
            let mut differing = 0;
            for _ in 1..runs {
                differing += (run_bits()? != first) as usize;
            }
            out.push(RepeatCase {
                kernel: variant.name,
                shape: shape.to_string(),
                causal,
                dtype: dtype.long_name(),
                runs,
                differing_runs: differing,
                pass: differing == 0,
            });
        }
        bar.inc(1);
    }
    bar.finish_and_clear();
    Ok(out)
}

/// One random problem's verdict over every kernel.
#[derive(Serialize)]
pub struct RandomCase {
    /// Replays this problem alone: `verify --random 1 --seed <seed>`.
    pub seed: u64,
    pub shape: String,
    pub heads_kv: usize,
    pub causal: bool,
    pub dtype: &'static str,
    pub layout: Layout,
    pub scale: f32,
    pub kernels: usize,
    /// Kernels that failed, with their largest error.
    pub failures: Vec<(String, f64)>,
    pub pass: bool,
}

/// A random problem: shape, causal, element type, layout, softmax scale.
pub type RandomProblem = (Shape, bool, DType, Layout, f32);

/// A random valid problem: sizes small enough for the float64 reference, one of `head_dims` (those
/// of the kernels under test, so that no problem goes untested), grouped heads, unequal lengths,
/// both masks, layouts and element types, and a random scale. One problem in four is decode-like
/// (a few queries against up to 6,000 keys), which the library's dispatch sends to `flash_decode`
/// and its key slices.
pub fn random_problem(seed: u64, head_dims: &[usize]) -> RandomProblem {
    let mut rng = StdRng::seed_from_u64(seed);
    let head_dim = head_dims[rng.random_range(0..head_dims.len())];
    if rng.random_bool(0.25) {
        let heads_kv = rng.random_range(1..=2);
        let shape = Shape {
            batch: rng.random_range(1..=2),
            heads: heads_kv * rng.random_range(1..=4),
            heads_kv,
            seq_q: rng.random_range(1..=4),
            seq_k: rng.random_range(1..=6000),
            head_dim,
            head_dim_v: head_dim,
        };
        return finish_problem(&mut rng, shape);
    }
    let heads_kv = rng.random_range(1..=3);
    let group = rng.random_range(1..=3);
    let shape = Shape {
        batch: rng.random_range(1..=3),
        heads: heads_kv * group,
        heads_kv,
        seq_q: rng.random_range(1..=300),
        seq_k: if rng.random_bool(0.5) {
            rng.random_range(1..=300)
        } else {
            0 // equal lengths, set below
        },
        head_dim,
        head_dim_v: head_dim,
    };
    let shape = Shape {
        seq_k: if shape.seq_k == 0 {
            shape.seq_q
        } else {
            shape.seq_k
        },
        ..shape
    };
    finish_problem(&mut rng, shape)
}

/// The mask, element type, layout and scale of a random problem on `shape`.
fn finish_problem(rng: &mut StdRng, shape: Shape) -> RandomProblem {
    let head_dim = shape.head_dim;
    let causal = rng.random_bool(0.5);
    let dtype = if rng.random_bool(0.5) {
        DType::F16
    } else {
        DType::Bf16
    };
    let layout = if rng.random_bool(0.5) {
        Layout::Bhsd
    } else {
        Layout::Bshd
    };
    let scale = (rng.random_range(0.25f32..2.0)) / (head_dim as f32).sqrt();
    (shape, causal, dtype, layout, scale)
}

/// `count` random problems from `seed` (problem i uses seed + i), each run by every variant.
pub fn random(
    gpu: &Gpu,
    variants: &[&'static VariantSpec],
    count: usize,
    seed: u64,
) -> Result<Vec<RandomCase>, Failure> {
    let head_dims: Vec<usize> = flashrs::variants::HEAD_DIMS
        .iter()
        .copied()
        .filter(|&d| runnable(gpu, variants, Shape::new(1, 1, 1, d)).next().is_some())
        .collect();
    if head_dims.is_empty() {
        return Err(Failure::Usage(
            "none of the chosen kernels runs on this GPU".into(),
        ));
    }
    let mut out = Vec::new();
    let bar = inputs::progress(count, "random");
    for i in 0..count {
        let problem_seed = seed.wrapping_add(i as u64);
        let (shape, causal, dtype, layout, scale) = random_problem(problem_seed, &head_dims);
        shape.validate()?;
        bar.set_message(format!("{shape} causal={causal} {dtype} {layout}"));
        let params = Params {
            causal,
            scale: Some(scale),
            ..Params::default()
        };
        let inputs = Inputs::random(shape, dtype, problem_seed);
        let (q, k, v) = inputs.as_f32();
        let expected = reference::attention_f64(&q, &k, &v, shape.reference_dims(), causal, scale as f64);
        let mut failures = Vec::new();
        let mut kernels = 0;
        for &variant in runnable(gpu, variants, shape) {
            let (actual, _) = run_kernel(gpu, variant, shape, params, &inputs, false, layout)?;
            let cmp = reference::compare(&actual, &expected);
            kernels += 1;
            if !cmp.passes(dtype.tolerance()) {
                failures.push((variant.name.to_string(), cmp.max_abs_err));
            }
        }
        if !failures.is_empty() {
            bar.println(format!(
                "FAIL problem seed {problem_seed} ({shape} causal={causal} {dtype} {layout} scale={scale}): {failures:?}; \
                 replay with --random 1 --seed {problem_seed}"
            ));
        }
        out.push(RandomCase {
            seed: problem_seed,
            shape: shape.to_string(),
            heads_kv: shape.heads_kv,
            causal,
            dtype: dtype.long_name(),
            layout,
            scale,
            kernels,
            pass: failures.is_empty(),
            failures,
        });
        bar.inc(1);
    }
    bar.finish_and_clear();
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn random_problems_are_valid_varied_and_replayable() {
        let dims = flashrs::variants::HEAD_DIMS;
        let problems: Vec<_> = (0..500).map(|seed| random_problem(seed, dims)).collect();
        for (shape, ..) in &problems {
            shape.validate().unwrap();
        }
        assert_eq!(
            random_problem(42, dims).0,
            random_problem(42, dims).0,
            "a seed replays its problem"
        );
        let any = |f: &dyn Fn(&RandomProblem) -> bool| problems.iter().any(f);
        assert!(any(&|p| p.0.seq_q != p.0.seq_k) && any(&|p| p.0.seq_q == p.0.seq_k));
        assert!(any(&|p| p.0.heads_kv != p.0.heads) && any(&|p| p.1) && any(&|p| !p.1));
        assert!(any(&|p| p.2 == DType::Bf16) && any(&|p| p.3 == Layout::Bshd));
        for &d in dims {
            assert!(any(&|p| p.0.head_dim == d), "head dim {d} never drawn");
        }
        assert!(
            (0..100).all(|seed| random_problem(seed, &[128]).0.head_dim == 128),
            "only the head dims asked for"
        );
        // Decode-like problems that the dispatch sends to flash_decode, some of them split over
        // the keys (planned as on an H100: 132 SMs, two blocks each).
        let split = |p: &RandomProblem| {
            flashrs::decode::decode_variant(p.0, 90, 132).is_some_and(|v| {
                flashrs::decode::Plan::new(p.0, v.block_m, v.block_n, 264).is_ok_and(|plan| plan.splits > 1)
            })
        };
        assert!(
            problems.iter().filter(|p| split(p)).count() >= 50,
            "too few split-KV problems"
        );
    }
}
