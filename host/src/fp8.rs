//! `--dtype e4m3`: the FP8 kernel in `verify` (against float64 on the dequantised inputs, and
//! the accuracy study `--rmse`) and in `bench` (beside our fastest fp16 kernel on each shape).

use std::path::PathBuf;

use flashrs::fp8::quantize::Fp8Inputs;
use flashrs::{DType, Fp8Tensors, Gpu, Layout, Params, Shape, VariantSpec, FP8_VARIANTS};
use flashrs_lab::fp8::{self as lab, Fp8Tolerance, P_SCALE};
use flashrs_lab::reference::{self, ReferenceDims};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use rand_distr::StandardNormal;
use serde::Serialize;

use crate::inputs;
use crate::report::Row;
use crate::rounds::{measure_rounds, rounds_text, time_calls, Order, Repetitions, Sides};
use crate::Failure;

/// An element type on the command line: the 16-bit ones, or e4m3 (FP8 inputs, 16-bit output).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Elem {
    /// fp16 or bf16 inputs and output.
    Sixteen(DType),
    /// e4m3 Q, K, V with descale factors; the output in `--out-dtype`.
    E4m3,
}

impl Elem {
    /// The 16-bit type, or fp16 for e4m3 (whose paths never read it).
    pub fn sixteen(self) -> DType {
        match self {
            Elem::Sixteen(t) => t,
            Elem::E4m3 => DType::F16,
        }
    }
}

impl std::str::FromStr for Elem {
    type Err = String;
    fn from_str(text: &str) -> Result<Elem, String> {
        match text {
            "e4m3" | "fp8" | "float8_e4m3fn" => Ok(Elem::E4m3),
            other => other
                .parse::<DType>()
                .map(Elem::Sixteen)
                .map_err(|_| format!("unknown dtype `{other}` (f16, bf16, e4m3)")),
        }
    }
}

impl std::fmt::Display for Elem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Elem::Sixteen(t) => t.fmt(f),
            Elem::E4m3 => f.write_str("e4m3"),
        }
    }
}

/// The head dims some FP8 variant is compiled for.
pub fn head_dims() -> Vec<usize> {
    let mut dims: Vec<usize> = FP8_VARIANTS
        .iter()
        .flat_map(|v| v.head_dims.iter().copied())
        .collect();
    dims.sort_unstable();
    dims.dedup();
    dims
}

/// Refuses a shape the FP8 kernel cannot run, in one line.
pub fn check_shape(shape: &Shape) -> Result<(), Failure> {
    shape.validate()?;
    let dims = head_dims();
    if !dims.contains(&shape.head_dim) {
        return Err(Failure::Usage(format!(
            "--dtype e4m3: head dim {} has no FP8 kernel (compiled for {dims:?})",
            shape.head_dim
        )));
    }
    Ok(())
}

/// The FP8 variants named by `--kernel` (all when none is).
pub fn variants(names: &[String]) -> Result<Vec<&'static VariantSpec>, Failure> {
    if names.is_empty() {
        return Ok(flashrs::variants::built(FP8_VARIANTS).collect());
    }
    names
        .iter()
        .map(|n| {
            VariantSpec::fp8_by_name(n).ok_or_else(|| {
                let known: Vec<&str> = FP8_VARIANTS.iter().map(|v| v.name).collect();
                Failure::Usage(format!(
                    "--dtype e4m3: `{n}` is not an FP8 variant ({})",
                    known.join(", ")
                ))
            })
        })
        .collect()
}

/// The key/value heads of a grouped-query twin of a problem of `heads` query heads: the most
/// that divide them and are at most a quarter of them (1 below 4 heads); 133 heads get 19 (a
/// quarter, 33, is not a divisor, and such a problem is invalid).
fn grouped_heads_kv(heads: usize) -> usize {
    (1..=(heads / 4).max(1))
        .rev()
        .find(|kv| heads.is_multiple_of(*kv))
        .unwrap_or(1)
}

/// The problems of an FP8 run: the cases asked for whose head dim has an FP8 kernel (an
/// explicit `--shape` without one is an error, a shape set's is skipped with a note), and with
/// `grouped` a grouped-query twin of each (`grouped_heads_kv`) unless `heads_kv` fixes the
/// key/value heads of all.
pub fn cases(
    sets: &[String],
    explicit: &[Shape],
    masks: &[bool],
    heads_kv: Option<usize>,
    grouped: bool,
    notes: &mut Vec<String>,
) -> Result<Vec<(Shape, bool)>, Failure> {
    for shape in explicit {
        check_shape(&shape.with_heads_kv(heads_kv.unwrap_or(shape.heads_kv)))?;
    }
    let dense: Vec<String> = sets
        .iter()
        .filter(|s| {
            let skip = matches!(s.as_str(), "paged" | "varlen");
            if skip {
                notes.push(format!(
                    "shape set `{s}` skipped: the FP8 kernel has no {s} entry point"
                ));
            }
            !skip
        })
        .cloned()
        .collect();
    let dims = head_dims();
    let mut out = Vec::new();
    let mut skipped = Vec::new();
    for (shape, causal) in inputs::cases(&dense, explicit, masks)? {
        if !dims.contains(&shape.head_dim) {
            if !skipped.contains(&shape) {
                skipped.push(shape);
            }
            continue;
        }
        let mut push = |s: Shape| {
            if !out.contains(&(s, causal)) {
                out.push((s, causal));
            }
        };
        match heads_kv {
            Some(h_kv) => {
                let s = shape.with_heads_kv(h_kv);
                s.validate()?;
                push(s);
            }
            None => {
                push(shape);
                if grouped && shape.heads > 1 && shape.heads_kv == shape.heads {
                    push(shape.with_heads_kv(grouped_heads_kv(shape.heads)));
                }
            }
        }
    }
    if !skipped.is_empty() {
        let list: Vec<String> = skipped.iter().map(|s| s.to_string()).collect();
        notes.push(format!(
            "skipped (no FP8 kernel for their head dim; compiled for {dims:?}): {}",
            list.join(", ")
        ));
    }
    Ok(out)
}

/// How Q, K and V are drawn.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Distribution {
    /// Standard normal entries.
    Gaussian,
    /// FlashAttention-3's outlier model (Shah et al. 2024, arXiv:2407.08608, section 4.3, its
    /// FP8 numerical-error study): each entry standard normal, plus, with probability 0.001, an
    /// independent normal term of standard deviation 10 (`N(0,1) + N(0,100) * Bernoulli(0.001)`).
    /// One outlier stretches its group's scale, so the other entries of the group lose precision.
    Outliers,
}

impl Distribution {
    fn draw(self, rng: &mut StdRng, n: usize) -> Vec<f32> {
        (0..n)
            .map(|_| {
                let x: f32 = rng.sample(StandardNormal);
                match self {
                    Distribution::Outliers if rng.random_bool(0.001) => {
                        x + 10.0 * rng.sample::<f32, _>(StandardNormal)
                    }
                    _ => x,
                }
            })
            .collect()
    }
}

/// Fresh f32 Q, K, V (`[B, H, S, D]`) from `seed`.
pub fn draw(shape: Shape, distribution: Distribution, seed: u64) -> (Vec<f32>, Vec<f32>, Vec<f32>) {
    let mut rng = StdRng::seed_from_u64(seed);
    let q = distribution.draw(&mut rng, shape.q_len());
    let k = distribution.draw(&mut rng, shape.kv_len());
    let v = distribution.draw(&mut rng, shape.kv_len());
    (q, k, v)
}

/// An FP8 run's output (`[B, H, S, D]` f32), LSE when asked for, and the variant that ran.
type Fp8Run = (Vec<f32>, Option<Vec<f32>>, &'static str);

/// Runs one FP8 variant (`None`: the library's pick) on inputs quantised in `[B, H, S, D]` order,
/// laid out as `layout` on the device, output NaN-poisoned first; returns the output as
/// `[B, H, S, D]` f32, the LSE when asked for, and the variant that ran.
pub fn run_fp8(
    gpu: &Gpu,
    shape: Shape,
    layout: Layout,
    out_dtype: DType,
    fp8: &Fp8Inputs,
    params: Params,
    (kernel, lse): (Option<&str>, bool),
) -> Result<Fp8Run, Failure> {
    let (b, d) = (shape.batch, shape.head_dim);
    let q = layout.from_bhsd(&fp8.q, b, shape.heads, shape.seq_q, d);
    let k = layout.from_bhsd(&fp8.k, b, shape.heads_kv, shape.seq_k, d);
    let v = layout.from_bhsd(&fp8.v, b, shape.heads_kv, shape.seq_k, d);
    let mut tensors = gpu.fp8_tensors(shape, layout, out_dtype, &q, &k, &v, &fp8.descale)?;
    gpu.fp8_poison(&mut tensors)?;
    if lse {
        gpu.fp8_request_lse(&mut tensors)?;
    }
    let used = gpu.fp8_forward(&mut tensors, params, kernel)?;
    let out = flashrs::gpu::decode(out_dtype, &gpu.download(tensors.out())?);
    let out = layout.to_bhsd(&out, b, shape.heads, shape.seq_q, d);
    let lse = tensors.lse().map(|l| gpu.download(l)).transpose()?;
    Ok((out, lse, used.name))
}

/// What `verify --dtype e4m3` was asked for.
pub struct VerifyArgs {
    pub seed: u64,
    pub cases: Vec<(Shape, bool)>,
    pub notes: Vec<String>,
    pub variants: Vec<&'static VariantSpec>,
    pub layouts: Vec<Layout>,
    pub lse: bool,
    pub scale: Option<f32>,
    pub out_dtype: DType,
    pub rmse: bool,
    pub json: Option<PathBuf>,
}

/// One FP8 kernel on one problem against float64 on its dequantised inputs.
#[derive(Serialize)]
pub struct Case {
    pub kernel: &'static str,
    pub shape: [usize; 4],
    pub seq_k: usize,
    pub heads_kv: usize,
    pub causal: bool,
    pub dtype: &'static str,
    pub out_dtype: &'static str,
    pub layout: Layout,
    pub reference: &'static str,
    pub max_abs_err: f64,
    pub rel_l2_err: f64,
    /// `max |err| / bound` over the elements (the per-element bound of `flashrs_lab::fp8`).
    pub bound_ratio: f64,
    pub non_finite: usize,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lse_bound_ratio: Option<f64>,
    pub pass: bool,
}

/// One row of the accuracy study: RMSE against float64 on the original (unquantised) inputs.
#[derive(Serialize)]
pub struct RmseRow {
    pub shape: [usize; 4],
    pub seq_k: usize,
    pub heads_kv: usize,
    pub causal: bool,
    pub distribution: Distribution,
    /// Our FP8 kernel (the library's pick), output in `out_dtype`.
    pub fp8_kernel: &'static str,
    pub rmse_fp8: f64,
    /// The same float64 attention on the e4m3-quantised inputs: the inputs' share of the error.
    pub rmse_fp8_inputs_only: f64,
    /// Our fp16 path (the library's pick) on the inputs rounded to fp16.
    pub fp16_kernel: &'static str,
    pub rmse_fp16: f64,
    pub fp8_over_fp16: f64,
}

#[derive(Serialize)]
struct VerifyReport<'a> {
    gpu: String,
    seed: u64,
    dtype: &'static str,
    out_dtype: &'static str,
    all_pass: bool,
    /// The factor the check assumes the kernel scales P by before converting it.
    p_scale_assumed: f64,
    tolerance: Fp8Tolerance,
    notes: &'a [String],
    cases: Vec<Case>,
}

/// Above this many multiply-adds the float64 reference (and its bounds, as much again) would
/// take too long; such problems are skipped with a note (no FP8 reference on the GPU).
const CPU_REFERENCE_LIMIT: f64 = 2e10;

pub fn verify(device: usize, mut args: VerifyArgs) -> Result<(), Failure> {
    inputs::json_to_stdout(args.json.as_deref())?;
    let gpu = inputs::open_gpu(device)?;
    let seed = args.seed;
    println!(
        "verify --dtype e4m3 on {} (sm_{}), output {}, seed {seed} (replay with --seed {seed})",
        gpu.name, gpu.arch, args.out_dtype
    );
    if args.rmse {
        return rmse_study(&gpu, &args);
    }
    let tolerance = Fp8Tolerance::new(args.out_dtype, P_SCALE);
    let bar = inputs::progress(args.cases.len(), "verify e4m3");
    let mut cases = Vec::new();
    for (index, &(shape, causal)) in args.cases.iter().enumerate() {
        bar.set_message(format!("{shape} causal={causal}"));
        let work = shape.flops(false) / 4.0;
        if work > CPU_REFERENCE_LIMIT {
            args.notes.push(format!(
                "{shape} causal={causal} skipped: too large for the float64 reference"
            ));
            continue;
        }
        cases.extend(check_case(
            &gpu,
            &args,
            shape,
            causal,
            seed.wrapping_add(index as u64),
            tolerance,
        )?);
        bar.inc(1);
    }
    bar.finish_and_clear();
    if gpu.arch < 90 || args.variants.is_empty() {
        args.notes.push(format!(
            "no FP8 variant runs here (sm_{}; the FP8 kernel needs sm_90): nothing was checked",
            gpu.arch
        ));
    }
    for note in &args.notes {
        println!("note: {note}");
    }
    print_cases(&cases);
    let failed = cases.iter().filter(|c| !c.pass).count();
    let all_pass = failed == 0 && !cases.is_empty();
    if let Some(path) = &args.json {
        let report = VerifyReport {
            gpu: gpu.name.clone(),
            seed,
            dtype: "e4m3",
            out_dtype: args.out_dtype.long_name(),
            all_pass,
            p_scale_assumed: P_SCALE,
            tolerance,
            notes: &args.notes,
            cases,
        };
        inputs::write_json(path, &report)?;
    }
    if all_pass {
        println!("PASS: every FP8 case within its tolerance (seed {seed})");
        Ok(())
    } else {
        println!(
            "FAIL: {failed} of the FP8 cases failed or none ran (seed {seed}; replay with --seed {seed})"
        );
        Err(Failure::Check)
    }
}

fn check_case(
    gpu: &Gpu,
    args: &VerifyArgs,
    shape: Shape,
    causal: bool,
    seed: u64,
    tolerance: Fp8Tolerance,
) -> Result<Vec<Case>, Failure> {
    let params = Params {
        causal,
        scale: args.scale,
        ..Params::default()
    };
    let (q, k, v) = draw(shape, Distribution::Gaussian, seed);
    let fp8 = Fp8Inputs::quantize(shape, Layout::Bhsd, &q, &k, &v)?;
    let (dq, dk, dv) = fp8.dequantize(shape, Layout::Bhsd)?;
    let scale = params.scale_for(shape.head_dim) as f64;
    let dims = shape.reference_dims();
    let expected = lab::fp8_reference((&dq, &dk, &dv), dims, causal, scale, tolerance);
    let lse_reference = args
        .lse
        .then(|| reference::log_sum_exp_f64(&dq, &dk, dims, causal, scale));
    let mut cases = Vec::new();
    let runnable = args
        .variants
        .iter()
        .filter(|v| v.head_dims.contains(&shape.head_dim) && v.min_arch <= gpu.arch);
    for variant in runnable {
        for &layout in &args.layouts {
            let (out, lse, _) = run_fp8(
                gpu,
                shape,
                layout,
                args.out_dtype,
                &fp8,
                params,
                (Some(variant.name), args.lse),
            )?;
            let cmp = lab::compare_fp8(&out, &expected);
            let lse_ratio = lse_reference.as_ref().map(|r| {
                lse.as_deref()
                    .map_or(f64::INFINITY, |l| lab::lse_bound_ratio(l, r, &expected.lse_bound))
            });
            cases.push(Case {
                kernel: variant.name,
                shape: [shape.batch, shape.heads, shape.seq_q, shape.head_dim],
                seq_k: shape.seq_k,
                heads_kv: shape.heads_kv,
                causal,
                dtype: "e4m3",
                out_dtype: args.out_dtype.long_name(),
                layout,
                reference: "cpu_f64_dequantised",
                max_abs_err: cmp.errors.max_abs_err,
                rel_l2_err: cmp.errors.rel_l2_err,
                bound_ratio: cmp.bound_ratio,
                non_finite: cmp.errors.non_finite,
                lse_bound_ratio: lse_ratio,
                pass: cmp.passes(tolerance) && lse_ratio.is_none_or(|r| r <= 1.0),
            });
        }
    }
    Ok(cases)
}

fn print_cases(cases: &[Case]) {
    println!(
        "{:<46} {:>26} {:>6} {:>6} {:>11} {:>11} {:>7} {:>7}  result",
        "kernel", "shape", "causal", "layout", "max_abs", "rel_l2", "bound", "lse"
    );
    for c in cases {
        let mut shape = format!("{:?}", c.shape);
        if c.seq_k != c.shape[2] {
            shape += &format!(" k={}", c.seq_k);
        }
        if c.heads_kv != c.shape[1] {
            shape += &format!(" kv={}", c.heads_kv);
        }
        println!(
            "{:<46} {:>26} {:>6} {:>6} {:>11.3e} {:>11.3e} {:>7.3} {:>7}  {}",
            c.kernel,
            shape,
            c.causal,
            c.layout,
            c.max_abs_err,
            c.rel_l2_err,
            c.bound_ratio,
            c.lse_bound_ratio.map_or("-".to_string(), |r| format!("{r:.3}")),
            if c.pass { "PASS" } else { "FAIL" }
        );
    }
}

/// `--rmse`: on each case, Gaussian and outlier inputs, the RMSE of our FP8 output and of our
/// fp16 output against float64 on the original inputs (FA3's comparison, section 4.3).
fn rmse_study(gpu: &Gpu, args: &VerifyArgs) -> Result<(), Failure> {
    let mut rows = Vec::new();
    let bar = inputs::progress(args.cases.len() * 2, "rmse");
    for (index, &(shape, causal)) in args.cases.iter().enumerate() {
        if shape.flops(false) / 4.0 > CPU_REFERENCE_LIMIT {
            continue;
        }
        let params = Params {
            causal,
            scale: args.scale,
            ..Params::default()
        };
        let scale = params.scale_for(shape.head_dim) as f64;
        let dims = shape.reference_dims();
        for distribution in [Distribution::Gaussian, Distribution::Outliers] {
            bar.set_message(format!("{shape} causal={causal} {distribution:?}"));
            let (q, k, v) = draw(shape, distribution, args.seed.wrapping_add(index as u64));
            let exact = reference::attention_f64(&q, &k, &v, dims, causal, scale);
            let fp8 = Fp8Inputs::quantize(shape, Layout::Bhsd, &q, &k, &v)?;
            let (dq, dk, dv) = fp8.dequantize(shape, Layout::Bhsd)?;
            let inputs_only: Vec<f32> = reference::attention_f64(&dq, &dk, &dv, dims, causal, scale)
                .into_iter()
                .map(|x| x as f32)
                .collect();
            let (out8, _, fp8_kernel) = run_fp8(
                gpu,
                shape,
                Layout::Bhsd,
                args.out_dtype,
                &fp8,
                params,
                (None, false),
            )?;
            let round = |x: &[f32]| -> Vec<u16> { x.iter().map(|&x| DType::F16.encode(x)).collect() };
            let mut tensors = gpu.tensors(shape, DType::F16, &round(&q), &round(&k), &round(&v))?;
            let fp16_kernel = gpu.forward(&mut tensors, params, None)?.name;
            let out16 = flashrs::gpu::decode(DType::F16, &gpu.download(tensors.out())?);
            let (rmse_fp8, rmse_fp16) = (lab::rmse(&out8, &exact), lab::rmse(&out16, &exact));
            rows.push(RmseRow {
                shape: [shape.batch, shape.heads, shape.seq_q, shape.head_dim],
                seq_k: shape.seq_k,
                heads_kv: shape.heads_kv,
                causal,
                distribution,
                fp8_kernel,
                rmse_fp8,
                rmse_fp8_inputs_only: lab::rmse(&inputs_only, &exact),
                fp16_kernel,
                rmse_fp16,
                fp8_over_fp16: rmse_fp8 / rmse_fp16,
            });
            bar.inc(1);
        }
    }
    bar.finish_and_clear();
    for note in &args.notes {
        println!("note: {note}");
    }
    println!(
        "RMSE against float64 on the original inputs (FP8 output {}; fp16 path: inputs rounded to fp16)",
        args.out_dtype
    );
    println!(
        "{:<34} {:>6} {:>9} {:>11} {:>12} {:>11} {:>9}",
        "shape", "causal", "inputs", "fp8", "fp8 inputs", "fp16", "fp8/fp16"
    );
    for r in &rows {
        println!(
            "{:<34} {:>6} {:>9} {:>11.3e} {:>12.3e} {:>11.3e} {:>9.1}",
            format!("{:?} k={} kv={}", r.shape, r.seq_k, r.heads_kv),
            r.causal,
            match r.distribution {
                Distribution::Gaussian => "gaussian",
                Distribution::Outliers => "outliers",
            },
            r.rmse_fp8,
            r.rmse_fp8_inputs_only,
            r.rmse_fp16,
            r.fp8_over_fp16
        );
    }
    if let Some(path) = &args.json {
        let report = serde_json::json!({
            "gpu": gpu.name, "seed": args.seed, "out_dtype": args.out_dtype.long_name(),
            "method": "RMSE against float64 attention on the original f32 inputs; outliers: \
                       N(0,1) + N(0,100) * Bernoulli(0.001) per entry (FlashAttention-3, arXiv:2407.08608, section 4.3)",
            "notes": args.notes, "rows": rows,
        });
        inputs::write_json(path, &report)?;
    }
    if rows
        .iter()
        .all(|r| r.rmse_fp8.is_finite() && r.rmse_fp16.is_finite())
        && !rows.is_empty()
    {
        Ok(())
    } else {
        println!("FAIL: a non-finite RMSE, or nothing measured");
        Err(Failure::Check)
    }
}

/// What `bench --dtype e4m3` was asked for.
pub struct BenchArgs {
    pub cases: Vec<(Shape, bool)>,
    pub variants: Vec<&'static VariantSpec>,
    pub out_dtype: DType,
    pub reps: Repetitions,
    /// `--rounds`, at least one: the e4m3 side and the fp16 side alternating ([`round_sides`]).
    pub rounds: u32,
    pub json: Option<PathBuf>,
}

/// A bench row with what the FP8 comparison adds.
#[derive(Serialize)]
pub struct BenchRow {
    #[serde(flatten)]
    pub row: Row,
    /// The variant timed (for the library's pick, the one it chose).
    pub variant: String,
    /// The library's pick (`fp8_forward(.., None)`) rather than a named variant.
    pub pick: bool,
    /// For e4m3 rows: the output type.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub out_dtype: Option<&'static str>,
    /// For e4m3 rows: our fastest fp16 kernel's p50 on the same case over this row's, in this
    /// run (above 1: FP8 is faster); with `--rounds`, both of the merged rows, each from its
    /// median round ([`set_speedups`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub speedup_vs_fp16: Option<f64>,
}

impl BenchRow {
    fn is_e4m3(&self) -> bool {
        self.row.dtype == "e4m3"
    }
}

impl AsRef<Row> for BenchRow {
    fn as_ref(&self) -> &Row {
        &self.row
    }
}

impl AsMut<Row> for BenchRow {
    fn as_mut(&mut self) -> &mut Row {
        &mut self.row
    }
}

/// The two sides of an FP8 round: the e4m3 rows (the pick and every FP8 variant) and our fp16
/// kernels the dispatch weighs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Side {
    E4m3,
    Fp16,
}

/// The sides' names in the header and each round's line: e4m3 (first on odd rounds), fp16.
const SIDES: Sides = ["e4m3", "fp16"];

/// The order a round times the sides in: e4m3 first where the 16-bit bench times ours first
/// (odd rounds), fp16 first on even rounds.
fn round_sides(order: Order) -> [Side; 2] {
    match order {
        Order::OursFirst => [Side::E4m3, Side::Fp16],
        Order::PeersFirst => [Side::Fp16, Side::E4m3],
    }
}

/// One round of `cases` cases: every case's rows of one side, then every case's of the other,
/// in `order`'s sides ([`round_sides`]); `time(side, case)` times one side on one case. The rows
/// come back case by case, e4m3 before fp16, whichever side ran first.
fn time_round<E>(
    cases: usize,
    order: Order,
    mut time: impl FnMut(Side, usize) -> Result<Vec<BenchRow>, E>,
) -> Result<Vec<BenchRow>, E> {
    let (mut e4m3, mut fp16) = (Vec::new(), Vec::new());
    for side in round_sides(order) {
        for case in 0..cases {
            let rows = time(side, case)?;
            match side {
                Side::E4m3 => e4m3.push(rows),
                Side::Fp16 => fp16.push(rows),
            }
        }
    }
    Ok(e4m3
        .into_iter()
        .zip(fp16)
        .flat_map(|(e4m3, fp16)| e4m3.into_iter().chain(fp16))
        .collect())
}

/// Each e4m3 row's `speedup_vs_fp16`: the fastest fp16 row's p50 on its case over its own (none
/// where no fp16 kernel ran on the case); fp16 rows get none. Run on the merged rows, so that
/// with `--rounds` both times are of their median rounds, never of one round's single pass.
fn set_speedups(rows: &mut [BenchRow]) {
    let case = |r: &Row| (r.shape, r.seq_k, r.heads_kv, r.causal);
    let fastest: Vec<Option<f64>> = rows
        .iter()
        .map(|r| {
            rows.iter()
                .filter(|f| !f.is_e4m3() && case(&f.row) == case(&r.row))
                .map(|f| f.row.p50_us)
                .min_by(f64::total_cmp)
        })
        .collect();
    for (row, fastest) in rows.iter_mut().zip(fastest) {
        row.speedup_vs_fp16 = match row.is_e4m3() {
            true => fastest.map(|f| f / row.row.p50_us),
            false => None,
        };
    }
}

/// FP8 attention speeds published by others, quoted beside ours: not measured here.
#[derive(Serialize, Clone, Copy)]
pub struct Published {
    pub who: &'static str,
    pub gpu: &'static str,
    pub what: &'static str,
    pub tflops: f64,
    pub source: &'static str,
}

pub const PUBLISHED: [Published; 2] = [
    Published {
        who: "FlashAttention-3",
        gpu: "H100 80GB SXM5",
        what: "FP8 forward, head dim 256, long sequences: close to 1.2 PFLOP/s",
        tflops: 1200.0,
        source: "Shah et al., FlashAttention-3 (arXiv:2407.08608, 2024), FP8 forward figures",
    },
    Published {
        who: "cuDNN 9",
        gpu: "H200",
        what: "FP8 SDPA: up to 1.2 PFLOP/s",
        tflops: 1200.0,
        source: "NVIDIA technical blog, Accelerating Transformers with NVIDIA cuDNN 9 (2024)",
    },
];

#[derive(Serialize)]
struct BenchReport {
    gpu: String,
    iters: u32,
    warmup: u32,
    warmup_ms: f64,
    /// `--rounds`: how many times everything was timed, each row then taken from its median
    /// round (as in `bench`'s 16-bit report).
    rounds: u32,
    dtype: &'static str,
    out_dtype: &'static str,
    /// Not measured here: quoted from the sources named.
    published_not_measured_here: [Published; 2],
    results: Vec<BenchRow>,
}

pub fn bench(device: usize, args: BenchArgs) -> Result<(), Failure> {
    inputs::json_to_stdout(args.json.as_deref())?;
    let gpu = inputs::open_gpu(device)?;
    let reps = args.reps;
    println!(
        "bench --dtype e4m3 on {} (sm_{}): FP8 (output {}) and our fp16 kernels, {} timed replays \
         of a CUDA graph of up to {} calls after {} warm-ups and at least {} ms of replays{}",
        gpu.name,
        gpu.arch,
        args.out_dtype,
        reps.iters,
        reps.calls_per_graph,
        reps.warmup,
        reps.warmup_ms,
        rounds_text(args.rounds, SIDES)
    );
    let mut notes = Vec::new();
    let mut rows = measure_rounds(&gpu, args.rounds, SIDES, &mut notes, |order, _| {
        // One seed per case for the round, both sides: the same values, as fp16 and quantised.
        let seed = inputs::fresh_seed();
        time_round(args.cases.len(), order, |side, case| {
            let (shape, causal) = args.cases[case];
            let seed = seed.wrapping_add(case as u64);
            match side {
                Side::E4m3 => time_e4m3(&gpu, &args, shape, causal, seed),
                Side::Fp16 => time_fp16(&gpu, &args, shape, causal, seed),
            }
        })
    })?;
    // After the merge: each ratio from the two merged rows.
    set_speedups(&mut rows);
    for note in &notes {
        println!("note: {note}");
    }
    println!(
        "{:<46} {:>5} {:>26} {:>6} {:>10} {:>10} {:>10} {:>8} {:>9} {:>5}",
        "kernel", "dtype", "shape", "causal", "p50 us", "p90 us", "p99 us", "TFLOP/s", "vs fp16", "MHz"
    );
    for r in &rows {
        println!(
            "{:<46} {:>5} {:>26} {:>6} {:>10.1} {:>10.1} {:>10.1} {:>8.0} {:>9} {:>5}",
            if r.pick {
                format!("{} (pick)", r.variant)
            } else {
                r.variant.clone()
            },
            r.row.dtype,
            format!("{:?} kv={}", r.row.shape, r.row.heads_kv),
            r.row.causal,
            r.row.p50_us,
            r.row.p90_us,
            r.row.p99_us,
            r.row.tflops,
            r.speedup_vs_fp16.map_or("-".into(), |s| format!("{s:.2}x")),
            r.row.clocks.map_or("-".into(), |c| format!("{:.0}", c.sm_mhz))
        );
    }
    println!("published, not measured here:");
    for p in PUBLISHED {
        println!("  {} on {}: {} ({})", p.who, p.gpu, p.what, p.source);
    }
    if let Some(path) = &args.json {
        let report = BenchReport {
            gpu: gpu.name.clone(),
            iters: reps.iters,
            warmup: reps.warmup,
            warmup_ms: reps.warmup_ms,
            rounds: args.rounds,
            dtype: "e4m3",
            out_dtype: args.out_dtype.long_name(),
            published_not_measured_here: PUBLISHED,
            results: rows,
        };
        inputs::write_json(path, &report)?;
    }
    Ok(())
}

/// Our fp16 kernels the dispatch weighs on one case (those that run here), on inputs drawn
/// from `seed`.
fn time_fp16(
    gpu: &Gpu,
    args: &BenchArgs,
    shape: Shape,
    causal: bool,
    seed: u64,
) -> Result<Vec<BenchRow>, Failure> {
    let params = Params {
        causal,
        scale: None,
        ..Params::default()
    };
    let sixteen = inputs::Inputs::for_timing(shape, DType::F16, seed);
    let mut rows = Vec::new();
    let mut tensors = gpu.tensors(shape, DType::F16, &sixteen.q, &sixteen.k, &sixteen.v)?;
    for (variant, _) in gpu.dispatch_candidates(shape, DType::F16, causal) {
        if !variant.head_dims.contains(&shape.head_dim) || variant.min_arch > gpu.arch {
            continue;
        }
        let kernel = gpu.kernel(variant, shape.head_dim, DType::F16, false)?;
        let timed = time_calls(gpu, args.reps, || gpu.launch(&kernel, &mut tensors, params, None))?;
        let row = timed.row(variant.name.into(), shape, DType::F16, causal, None)?;
        rows.push(BenchRow {
            row,
            variant: variant.name.into(),
            pick: false,
            out_dtype: None,
            speedup_vs_fp16: None,
        });
    }
    gpu.synchronize()?;
    Ok(rows)
}

/// `sixteen`'s Q, K and V (`[B,H,S,D]`) quantised to e4m3 per head and uploaded, with an
/// `out_dtype` output: the tensors `bench` and `trace` time e4m3 kernels on.
pub fn quantized_tensors(
    gpu: &Gpu,
    shape: Shape,
    out_dtype: DType,
    sixteen: &inputs::Inputs,
) -> Result<Fp8Tensors, Failure> {
    let (q, k, v) = sixteen.as_f32();
    let fp8 = Fp8Inputs::quantize(shape, Layout::Bhsd, &q, &k, &v)?;
    Ok(gpu.fp8_tensors(
        shape,
        Layout::Bhsd,
        out_dtype,
        &fp8.q,
        &fp8.k,
        &fp8.v,
        &fp8.descale,
    )?)
}

/// The library's FP8 pick and every FP8 variant asked for on one case, on the fp16 inputs
/// drawn from `seed` (as [`time_fp16`]'s) quantised; their speedups are set after the rounds
/// are merged ([`set_speedups`]).
fn time_e4m3(
    gpu: &Gpu,
    args: &BenchArgs,
    shape: Shape,
    causal: bool,
    seed: u64,
) -> Result<Vec<BenchRow>, Failure> {
    let params = Params {
        causal,
        scale: None,
        ..Params::default()
    };
    let sixteen = inputs::Inputs::for_timing(shape, DType::F16, seed);
    let mut rows = Vec::new();
    let mut t = quantized_tensors(gpu, shape, args.out_dtype, &sixteen)?;
    let named = args
        .variants
        .iter()
        .filter(|v| v.head_dims.contains(&shape.head_dim) && v.min_arch <= gpu.arch)
        .map(|v| Some(v.name));
    for kernel in std::iter::once(None).chain(named) {
        let used = gpu.fp8_forward(&mut t, params, kernel)?.name;
        let timed = time_calls(gpu, args.reps, || {
            gpu.fp8_forward(&mut t, params, kernel).map(|_| ())
        })?;
        let mut row = timed.row(used.into(), shape, args.out_dtype, causal, None)?;
        row.dtype = "e4m3".into();
        // K and V are one byte an element here.
        row.gbps /= 2.0;
        rows.push(BenchRow {
            row,
            variant: used.into(),
            pick: kernel.is_none(),
            out_dtype: Some(args.out_dtype.long_name()),
            speedup_vs_fp16: None,
        });
    }
    gpu.synchronize()?;
    Ok(rows)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dtypes_parse_with_e4m3_among_them() {
        assert_eq!("e4m3".parse::<Elem>(), Ok(Elem::E4m3));
        assert_eq!("fp8".parse::<Elem>(), Ok(Elem::E4m3));
        assert_eq!("bf16".parse::<Elem>(), Ok(Elem::Sixteen(DType::Bf16)));
        let err = "e5m2".parse::<Elem>().unwrap_err();
        assert!(err.contains("e4m3") && err.lines().count() == 1, "{err}");
        assert_eq!(Elem::E4m3.to_string(), "e4m3");
    }

    #[test]
    fn grouped_twins_divide_the_heads() {
        for (heads, kv) in [
            (1, 1),
            (2, 1),
            (4, 1),
            (7, 1),
            (8, 2),
            (16, 4),
            (32, 8),
            (133, 19),
            (12, 3),
        ] {
            assert_eq!(grouped_heads_kv(heads), kv, "{heads} heads");
        }
        for heads in 1..300 {
            let kv = grouped_heads_kv(heads);
            assert!(
                heads.is_multiple_of(kv) && (kv <= heads / 4 || kv == 1),
                "{heads} heads: {kv}"
            );
        }
    }

    /// A bench row of `kernel` on `shape`, e4m3 or fp16, every replay at `p50`.
    fn bench_row(kernel: &str, e4m3: bool, pick: bool, case: (Shape, bool), p50: f64) -> BenchRow {
        let (shape, causal) = case;
        let dtype = if e4m3 { DType::Bf16 } else { DType::F16 };
        let mut row = crate::report::row_from(kernel.into(), shape, dtype, causal, 1, vec![p50; 5], None)
            .ok()
            .unwrap();
        if e4m3 {
            row.dtype = "e4m3".into();
        }
        BenchRow {
            row,
            variant: kernel.into(),
            pick,
            out_dtype: e4m3.then_some("bfloat16"),
            // Stale on purpose: the merged rows' speedups must replace it.
            speedup_vs_fp16: Some(9.0),
        }
    }

    #[test]
    fn rounds_alternate_the_e4m3_and_fp16_sides_and_list_each_case_e4m3_first() {
        let case = (Shape::new(2, 16, 4096, 128), false);
        for round in 1..=4 {
            let mut calls = Vec::new();
            let rows = time_round(2, crate::rounds::round_order(round), |side, c| {
                calls.push((side, c));
                let name = format!("{side:?}{c}");
                Ok::<_, ()>(vec![bench_row(&name, side == Side::E4m3, false, case, 1.0)])
            })
            .unwrap();
            let first = if round % 2 == 1 { Side::E4m3 } else { Side::Fp16 };
            let second = if first == Side::E4m3 {
                Side::Fp16
            } else {
                Side::E4m3
            };
            assert_eq!(
                calls,
                [(first, 0), (first, 1), (second, 0), (second, 1)],
                "round {round}: one side on every case, then the other"
            );
            let names: Vec<&str> = rows.iter().map(|r| r.variant.as_str()).collect();
            assert_eq!(names, ["E4m30", "Fp160", "E4m31", "Fp161"], "round {round}");
        }
        assert_eq!(SIDES, ["e4m3", "fp16"]);
        // A side that fails ends the round there.
        let mut calls = 0;
        let failed = time_round(3, Order::OursFirst, |_, _| {
            calls += 1;
            Err::<Vec<BenchRow>, _>("lost")
        });
        assert_eq!((failed.err(), calls), (Some("lost"), 1));
    }

    #[test]
    fn speedups_come_from_the_merged_rows_of_the_same_case() {
        let case = (Shape::new(2, 16, 4096, 256), false);
        let causal = (case.0, true);
        let fp8 = "flash_fp8_ws_m128_n128";
        let round = |[pick, named, fast16, slow16]: [f64; 4]| {
            vec![
                bench_row(fp8, true, true, case, pick),
                bench_row(fp8, true, false, case, named),
                bench_row("fp16_a", false, false, case, fast16),
                bench_row("fp16_b", false, false, case, slow16),
                // The causal case has no fp16 row: no speedup, whatever the other case's.
                bench_row(fp8, true, true, causal, 50.0),
            ]
        };
        // Each round's own ratio for the pick: 1.5, 1.73, 1.78; the merged rows' is 160 / 100.
        let rounds = vec![
            round([100.0, 105.0, 150.0, 170.0]),
            round([110.0, 95.0, 200.0, 190.0]),
            round([90.0, 120.0, 160.0, 180.0]),
        ];
        let mut rows = crate::rounds::merge_rounds(rounds);
        set_speedups(&mut rows);
        let got: Vec<(bool, f64, Option<f64>)> = rows
            .iter()
            .map(|r| (r.pick, r.row.p50_us, r.speedup_vs_fp16))
            .collect();
        assert_eq!(
            got,
            [
                (true, 100.0, Some(160.0 / 100.0)),
                (false, 105.0, Some(160.0 / 105.0)),
                (false, 160.0, None),
                (false, 180.0, None),
                (true, 50.0, None),
            ]
        );
        let json = serde_json::to_value(&rows[0]).unwrap();
        assert_eq!(json["rounds_p50_us"], serde_json::json!([100.0, 110.0, 90.0]));
        assert_eq!(json["speedup_vs_fp16"], serde_json::json!(1.6));
        // One round: the same ratio as the single pass had.
        let mut one = crate::rounds::merge_rounds(vec![round([100.0, 105.0, 150.0, 170.0])]);
        set_speedups(&mut one);
        assert_eq!(one[0].speedup_vs_fp16, Some(1.5));
        assert!(one[0].row.rounds_p50_us.is_none());
    }

    #[test]
    fn outliers_are_rare_and_large() {
        let mut rng = StdRng::seed_from_u64(3);
        let x = Distribution::Outliers.draw(&mut rng, 1_000_000);
        let big = x.iter().filter(|v| v.abs() > 8.0).count();
        // About 0.1% get the N(0, 100) term, about half of those land beyond 8.
        assert!((200..900).contains(&big), "{big}");
        let mut rng = StdRng::seed_from_u64(3);
        let g = Distribution::Gaussian.draw(&mut rng, 1_000_000);
        assert!(g.iter().filter(|v| v.abs() > 8.0).count() == 0);
    }
}
