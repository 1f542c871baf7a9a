//! `verify --backward`: the backward pass (dQ, dK, dV) against float64 gradients on fresh random
//! inputs, each gradient's relative L2 error within the type's bound and every element finite;
//! with `--repeat N` also the deterministic mode bit-identical over N runs of each problem.

use std::path::PathBuf;

use flashrs::api::{bf16, f16};
use flashrs::{DType, Gpu, Layout, Shape};
use flashrs_lab::backward_check::{bit_identical, maskings, passes, shapes, Case, Half, Masking};
use flashrs_lab::reference::Comparison;
use rand::rngs::StdRng;
use rand::SeedableRng;
use serde::Serialize;

use crate::inputs;
use crate::Failure;

/// What `verify --backward` checks, from verify's options.
pub struct Plan {
    pub shapes: Vec<Shape>,
    pub dtypes: Vec<DType>,
    pub layouts: Vec<Layout>,
    pub causal: Vec<bool>,
    /// Also the sliding windows and softcaps of `backward_check::maskings` on the small problems.
    pub windows_and_softcaps: bool,
    /// Deterministic runs per problem that must agree bit for bit (0 or 1: not checked).
    pub repeat: usize,
    pub seed: Option<u64>,
    pub json: Option<PathBuf>,
}

/// The default problems: per head dim, a square training shape and the backward's ragged,
/// grouped and single-row problems (`backward_check::shapes`).
pub fn default_shapes() -> Vec<Shape> {
    flashrs::backward::HEAD_DIMS
        .iter()
        .flat_map(|&d| std::iter::once(Shape::new(2, 8, 512, d)).chain(shapes(d)))
        .collect()
}

/// One gradient's errors.
#[derive(Serialize)]
struct GradientError {
    rel_l2: f64,
    max_abs: f64,
    non_finite: usize,
}

impl From<&Comparison> for GradientError {
    fn from(c: &Comparison) -> Self {
        GradientError {
            rel_l2: c.rel_l2_err,
            max_abs: c.max_abs_err,
            non_finite: c.non_finite,
        }
    }
}

/// One problem's result.
#[derive(Serialize)]
struct CaseResult {
    shape: String,
    dtype: DType,
    layout: Layout,
    /// The mask and softcap ("full" or "causal", then any window and softcap).
    mask: String,
    /// The bound on each gradient's relative L2 error.
    bound: f64,
    d_q: GradientError,
    d_k: GradientError,
    d_v: GradientError,
    /// Deterministic runs compared (0: not checked) and whether all gave the same bits.
    deterministic_runs: usize,
    bit_identical: bool,
    pass: bool,
}

#[derive(Serialize)]
struct Report {
    gpu: String,
    arch: u32,
    seed: u64,
    all_pass: bool,
    cases: Vec<CaseResult>,
}

/// Runs the plan on GPU `device`; a failed check is `Failure::Check`.
pub fn verify(device: usize, plan: Plan) -> Result<(), Failure> {
    inputs::check_json_outputs([&plan.json])?;
    let seed = plan.seed.unwrap_or_else(inputs::fresh_seed);
    inputs::json_to_stdout(plan.json.as_deref())?;
    let gpu = inputs::open_gpu(device)?;
    println!(
        "verify --backward on {} (sm_{}), seed {seed} (replay with --seed {seed})",
        gpu.name, gpu.arch
    );
    let mut problems = Vec::new();
    for &shape in &plan.shapes {
        // The causal values asked for, and on the small problems also the sliding windows and
        // softcaps (`backward_check::maskings`) under those values.
        let extra = if plan.windows_and_softcaps && shape.seq_q * shape.seq_k <= 331 * 331 {
            maskings()
                .into_iter()
                .filter(|m| (m.window.is_bounded() || m.softcap.is_some()) && plan.causal.contains(&m.causal))
                .collect()
        } else {
            Vec::new()
        };
        let masks = plan.causal.iter().map(|&c| Masking::from(c)).chain(extra);
        for masking in masks {
            for &dtype in &plan.dtypes {
                for &layout in &plan.layouts {
                    problems.push((shape, dtype, layout, masking));
                }
            }
        }
    }
    let bar = inputs::progress(problems.len(), "verify --backward");
    let mut cases = Vec::new();
    for (index, &(shape, dtype, layout, masking)) in problems.iter().enumerate() {
        bar.set_message(format!("{shape} {dtype} {layout} {masking}"));
        let mut rng = StdRng::seed_from_u64(seed.wrapping_add(index as u64));
        let case = match dtype {
            DType::F16 => check::<f16>(&gpu, (shape, layout, masking), plan.repeat, &mut rng)?,
            DType::Bf16 => check::<bf16>(&gpu, (shape, layout, masking), plan.repeat, &mut rng)?,
        };
        cases.push(case);
        bar.inc(1);
    }
    bar.finish_and_clear();
    print_cases(&cases);
    let failed = cases.iter().filter(|c| !c.pass).count();
    let report = Report {
        gpu: gpu.name.clone(),
        arch: gpu.arch,
        seed,
        all_pass: failed == 0,
        cases,
    };
    if let Some(path) = &plan.json {
        inputs::write_json(path, &report)?;
    }
    if failed == 0 {
        println!("PASS: every backward case (seed {seed})");
        Ok(())
    } else {
        println!("FAIL: {failed} backward case(s) failed (seed {seed}; replay with --seed {seed})");
        Err(Failure::Check)
    }
}

/// One problem: the default mode's gradients against float64, then the deterministic mode's
/// runs against each other.
fn check<T: Half>(
    gpu: &Gpu,
    (shape, layout, masking): (Shape, Layout, Masking),
    repeat: usize,
    rng: &mut StdRng,
) -> Result<CaseResult, Failure> {
    let case = Case::<T>::new(gpu, shape, layout, masking, rng)?;
    let grads = case.backward(gpu, false)?;
    let [d_q, d_k, d_v] = case.compare(&grads);
    let mut same = true;
    let mut runs = 0;
    if repeat >= 2 {
        let first = case.backward(gpu, true)?;
        let [q, k, v] = case.compare(&first);
        same &= passes::<T>(&q) && passes::<T>(&k) && passes::<T>(&v);
        for _ in 1..repeat {
            same &= bit_identical(&first, &case.backward(gpu, true)?);
        }
        runs = repeat;
    }
    let accurate = passes::<T>(&d_q) && passes::<T>(&d_k) && passes::<T>(&d_v);
    Ok(CaseResult {
        shape: shape.to_string(),
        dtype: T::DTYPE,
        layout,
        mask: masking.to_string(),
        bound: T::REL_L2,
        d_q: (&d_q).into(),
        d_k: (&d_k).into(),
        d_v: (&d_v).into(),
        deterministic_runs: runs,
        bit_identical: same,
        pass: accurate && same,
    })
}

fn print_cases(cases: &[CaseResult]) {
    println!(
        "{:<24} {:<5} {:<5} {:<32} {:>9} {:>9} {:>9} {:>6}  result",
        "shape", "dtype", "layout", "mask", "dq rel", "dk rel", "dv rel", "det"
    );
    for c in cases {
        let det = if c.deterministic_runs == 0 {
            "-".to_string()
        } else if c.bit_identical {
            format!("{}x", c.deterministic_runs)
        } else {
            "DIFF".to_string()
        };
        println!(
            "{:<24} {:<5} {:<5} {:<32} {:>9.2e} {:>9.2e} {:>9.2e} {:>6}  {}",
            c.shape,
            c.dtype.to_string(),
            c.layout.to_string(),
            c.mask,
            c.d_q.rel_l2,
            c.d_k.rel_l2,
            c.d_v.rel_l2,
            det,
            if c.pass { "ok" } else { "FAIL" }
        );
    }
}
