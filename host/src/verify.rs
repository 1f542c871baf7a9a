//! `verify`: every variant against a float64 reference on fresh random inputs, and every
//! variant's barriers per tile counted three ways.

use std::path::PathBuf;

use flashrs::{embedded, DType, Family, Gpu, Layout, Params, Policy, Shape, VariantSpec};
use flashrs_lab::ptx;
use flashrs_lab::reference::{self, DTypeTolerance, ReferenceDims, Tolerance};
use flashrs_lab::Timing;
use serde::Serialize;

use crate::fp8::Elem;
use crate::harness::{run_kernel, runnable};
use crate::inputs::{self, Inputs};
use crate::Failure;
use crate::{library, peers};
use flashrs_lab::npy::{self, NpyData};

#[derive(clap::Args)]
pub struct Args {
    /// Seed of the random inputs (default: a fresh one, printed; pass it back to replay a run).
    #[arg(long)]
    seed: Option<u64>,
    /// Named shape sets, comma-separated: small, mission, long, odd, edge, large, std, splitkv
    /// (decode-like shapes that flash_decode splits over the keys), decode (bench's, large),
    /// paged (flash_decode's paged entry points on a paged KV cache: block sizes 16, 64, 256,
    /// random page permutations, lengths from 0, grouped heads, causal with S_q > 1; Q and the
    /// output in each `--layout`), varlen (packed variable-length batches through the flash_ws
    /// and flash_decode varlen entry points: lengths from 0, S_q above and below S_k, grouped
    /// heads, every packed element and guards around the output checked).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "small,mission,long,odd,edge,splitkv,paged,varlen"
    )]
    shapes: Vec<String>,
    /// A quick pass for slow tools (compute-sanitizer): the small, odd and edge shapes and small
    /// paged and varlen sets in fp16, our kernels only (not the library-composed paths) unless
    /// `--kernel` names some; so it takes no `--shapes`, `--dtype`, `--random` or `--repeat`.
    #[arg(long, conflicts_with_all = ["shapes", "dtype", "random", "repeat"])]
    quick: bool,
    /// Multiply Q and K by this factor, so that scores reach large magnitudes (40 at head dim
    /// 128 gives scores of several thousand): softmax must stay finite and exact.
    #[arg(long, value_name = "FACTOR")]
    logit_scale: Option<f32>,
    /// An extra shape B,H,S,D (or B,H,S_Q,S_K,D); repeatable.
    #[arg(long)]
    shape: Vec<Shape>,
    /// Only these variants (repeatable; default all, see `list`), or the library-composed paths
    /// `cublas` and `cutensor` (cuBLAS or cuTENSOR around our row softmax; run by default too; a
    /// missing library is a note).
    #[arg(long = "kernel")]
    kernels: Vec<String>,
    /// Element types to test, comma-separated: f16, bf16; or e4m3 alone: the FP8 kernel on
    /// e4m3-quantised Gaussian inputs (one scale per batch and key/value head) against float64 on
    /// the dequantised inputs, within the tolerance derived in flashrs-lab's `fp8` module; its
    /// shape sets are the dense ones of head dims with an FP8 kernel (others skipped with a
    /// note), each also with grouped key/value heads.
    #[arg(long, value_delimiter = ',', default_value = "f16,bf16")]
    dtype: Vec<Elem>,
    /// With `--dtype e4m3`: the output's type, f16 or bf16.
    #[arg(long, value_name = "DTYPE")]
    out_dtype: Option<DType>,
    /// With `--dtype e4m3`: the accuracy study instead: RMSE of the FP8 output and of our fp16
    /// path against float64 on the original (unquantised) inputs, Gaussian and with 0.1% large
    /// outliers (FlashAttention-3's method).
    #[arg(long)]
    rmse: bool,
    /// Key/value heads (grouped-query attention): every shape's heads must be a multiple.
    #[arg(long)]
    heads_kv: Option<usize>,
    /// Also check each row's log-sum-exp output against the float64 reference.
    #[arg(long)]
    lse: bool,
    /// Tensor layouts to test, comma-separated: bhsd ([B,H,S,D]), bshd ([B,S,H,D]).
    #[arg(long, value_delimiter = ',', default_value = "bhsd")]
    layout: Vec<Layout>,
    /// Masking to test.
    #[arg(long, value_enum, default_value_t = Masks::Both)]
    masks: Masks,
    /// Softmax scale (default 1/sqrt(D)).
    #[arg(long)]
    scale: Option<f32>,
    /// Also compare every output with this peer on the same inputs: `torch` (float32 SDPA,
    /// math backend, through python3 + torch when present).
    #[arg(long)]
    peer: Option<String>,
    /// Write the results as JSON to this file.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Determinism instead: run every kernel N times on the same inputs (the shape sets, both
    /// masks) and require bit-identical outputs and log-sum-exps.
    #[arg(long, value_name = "N", conflicts_with = "random")]
    repeat: Option<usize>,
    /// The backward pass instead: dQ, dK and dV against float64 gradients (fresh random inputs;
    /// every gradient finite and within the type's relative L2 bound), on `--shape`s or the
    /// backward's default set (head dims 64, 128, 256: ragged, S_q above and below S_k, GQA and
    /// MQA, one query row), each `--dtype`, `--layout` and `--masks`; with `--repeat N` also the
    /// deterministic mode bit-identical over N runs of each problem.
    #[arg(long, conflicts_with_all = ["quick", "random", "shapes", "kernels", "peer", "lse", "logit_scale", "heads_kv", "scale", "out_dtype", "rmse"])]
    backward: bool,
    /// Random testing instead: N random valid problems (sizes, grouped heads, S_q != S_k, masks,
    /// dtypes, layouts, scales), every kernel against the float64 reference; a failure prints the
    /// problem's seed to replay it alone with `--random 1 --seed <seed>`.
    #[arg(long, value_name = "N")]
    random: Option<usize>,
}

#[derive(Clone, Copy, clap::ValueEnum, PartialEq)]
enum Masks {
    None,
    Causal,
    Both,
}

impl Masks {
    /// The `causal` values to check.
    fn list(self) -> &'static [bool] {
        match self {
            Masks::None => &[false],
            Masks::Causal => &[true],
            Masks::Both => &[false, true],
        }
    }
}

#[derive(Serialize)]
struct Case {
    kernel: &'static str,
    shape: [usize; 4],
    seq_k: usize,
    causal: bool,
    dtype: &'static str,
    layout: Layout,
    reference: &'static str,
    max_abs_err: f64,
    rel_l2_err: f64,
    non_finite: usize,
    /// Against torch's float32 SDPA on the same inputs (`--peer torch`).
    #[serde(skip_serializing_if = "Option::is_none")]
    torch_max_abs_err: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    torch_rel_l2_err: Option<f64>,
    /// Largest difference of the log-sum-exp output from float64 (`--lse`).
    #[serde(skip_serializing_if = "Option::is_none")]
    lse_max_abs_err: Option<f64>,
    pass: bool,
}

#[derive(Serialize)]
pub struct BarrierCheck {
    pub kernel: &'static str,
    /// The variant's paged-cache entry point (`flash_decode`), not its contiguous one.
    pub paged: bool,
    /// The variant's variable-length entry point (`_varlen`).
    #[serde(default)]
    pub varlen: bool,
    pub head_dim: usize,
    pub dtype: DType,
    pub policy: Option<Policy>,
    /// Declared by the policy (a constant the device crate exports into the PTX).
    pub declared: u32,
    /// `bar.sync` inside the KV-tile loop of the PTX, per architecture; `None` for sm_80 where
    /// that PTX lacks the variant (wgmma).
    pub ptx_sm80: Option<usize>,
    pub ptx_sm90: usize,
    /// Counted by the instrumented kernel, non-causal and causal.
    pub runtime: f64,
    pub runtime_causal: f64,
    pub pass: bool,
}

#[derive(Serialize)]
struct Report {
    gpu: String,
    seed: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    peer_note: Option<String>,
    all_pass: bool,
    /// Pass bounds against the float64 reference (and torch), per dtype.
    tolerances: Vec<(DType, Tolerance)>,
    cases: Vec<Case>,
    /// The `paged` set: flash_decode's paged entry points against the float64 paged reference.
    paged: Vec<crate::paged::Case>,
    /// The `varlen` set: the varlen entry points against the float64 per-sequence reference.
    varlen: Vec<crate::varlen::Case>,
    barriers: Vec<BarrierCheck>,
}

/// Above this many multiply-adds (B*H*S_q*S_k*D) the CPU reference would take too long: `naive`
/// becomes the reference, itself spot-checked in float64 on a sample of rows.
const CPU_REFERENCE_LIMIT: f64 = 2e10;

pub fn run(device: usize, mut args: Args) -> Result<(), Failure> {
    if args.backward {
        return crate::backward::verify(device, backward_plan(&args)?);
    }
    apply_quick(&mut args);
    check_options(&args)?;
    inputs::check_json_outputs([&args.json])?;
    if args.dtype.contains(&Elem::E4m3) {
        return crate::fp8::verify(device, fp8_args(&args)?);
    }
    let problems = problems(&args)?;
    let variants = inputs::variants(&args.kernels)?;
    library::check_named_paths(
        &args.kernels,
        problems.iter().map(|p| p.0),
        &args.layout,
        args.lse,
    )?;
    let seed = args.seed.unwrap_or_else(inputs::fresh_seed);
    inputs::json_to_stdout(args.json.as_deref())?;
    let gpu = inputs::open_gpu(device)?;
    println!(
        "verify on {} (sm_{}), seed {seed} (replay with --seed {seed})",
        gpu.name, gpu.arch
    );
    if let Some(count) = args.random {
        return run_random(&gpu, &variants, count, seed, &args.json);
    }
    if let Some(runs) = args.repeat {
        return run_repeat(&gpu, &variants, &problems, runs.max(2), seed, &args.json);
    }
    let mut cross = CrossChecks::new(&args);
    let bar = inputs::progress(problems.len(), "verify");
    let mut cases = Vec::new();
    for (index, &problem) in problems.iter().enumerate() {
        bar.set_message(format!("{} causal={} {}", problem.0, problem.1, problem.2));
        let case_seed = seed.wrapping_add(index as u64);
        cases.extend(check_problem(
            &gpu, &variants, problem, case_seed, &args, &mut cross,
        )?);
        bar.inc(1);
    }
    bar.finish_and_clear();
    let paged = check_paged(&gpu, &variants, &args, seed)?;
    let varlen = check_varlen(&gpu, &variants, &args, seed)?;
    let torch_note = cross.torch_note(&args);
    if let Some(note) = &torch_note {
        println!("note: {note}");
    }
    for (path, state) in &cross.paths {
        if let Some(reason) = state.as_ref().err().filter(|r| !r.is_empty()) {
            println!("note: {} not checked: {reason}", path.name());
        }
    }
    let barriers = check_barriers(&gpu, &variants, &args.dtypes())?;
    print_cases(&cases);
    print_paged(&paged);
    print_varlen(&varlen);
    print_barriers(&barriers);
    let report = Report {
        peer_note: torch_note,
        gpu: gpu.name.clone(),
        seed,
        all_pass: cases.iter().all(|c| c.pass)
            && paged.iter().all(|c| c.pass)
            && varlen.iter().all(|c| c.pass)
            && barriers.iter().all(|b| b.pass),
        tolerances: args.dtypes().iter().map(|&t| (t, t.tolerance())).collect(),
        cases,
        paged,
        varlen,
        barriers,
    };
    verdict(report, &args.json)
}

/// `--backward`'s plan from the options it shares with the forward's checks.
fn backward_plan(args: &Args) -> Result<crate::backward::Plan, Failure> {
    let dtypes = args
        .dtype
        .iter()
        .map(|e| match e {
            Elem::Sixteen(t) => Ok(*t),
            Elem::E4m3 => Err(Failure::Usage(
                "verify --backward takes f16 and bf16, not e4m3".into(),
            )),
        })
        .collect::<Result<Vec<_>, _>>()?;
    let head_dims = flashrs::backward::HEAD_DIMS;
    if let Some(s) = args.shape.iter().find(|s| !head_dims.contains(&s.head_dim)) {
        return Err(Failure::Usage(format!(
            "{s}: the backward is compiled for head dims {head_dims:?}"
        )));
    }
    Ok(crate::backward::Plan {
        shapes: if args.shape.is_empty() {
            crate::backward::default_shapes()
        } else {
            args.shape.clone()
        },
        dtypes,
        layouts: args.layout.clone(),
        causal: args.masks.list().to_vec(),
        // The default problem set only: `--shape`s are checked under the masks asked for.
        windows_and_softcaps: args.shape.is_empty(),
        repeat: args.repeat.unwrap_or(0),
        seed: args.seed,
        json: args.json.clone(),
    })
}

/// `--quick`: the shapes, dtype and kernels that a compute-sanitizer pass can afford.
fn apply_quick(args: &mut Args) {
    if args.quick {
        // `paged` and `varlen` are their `quick_problems` under `--quick`.
        args.shapes = ["small", "odd", "edge", "paged", "varlen"]
            .map(String::from)
            .to_vec();
        args.dtype = vec![Elem::Sixteen(DType::F16)];
        // Naming every variant leaves the cuBLAS path out.
        if args.kernels.is_empty() {
            args.kernels = flashrs::variants::built(flashrs::VARIANTS)
                .map(|v| v.name.to_string())
                .collect();
        }
    }
}

impl Args {
    /// The 16-bit types asked for (`--dtype e4m3` takes its own path, `fp8_args`).
    fn dtypes(&self) -> Vec<DType> {
        self.dtype
            .iter()
            .filter_map(|t| match t {
                Elem::Sixteen(t) => Some(*t),
                Elem::E4m3 => None,
            })
            .collect()
    }
}

/// `--dtype e4m3`'s run: its options checked, its cases planned, before the GPU is opened.
fn fp8_args(args: &Args) -> Result<crate::fp8::VerifyArgs, Failure> {
    let mut notes = Vec::new();
    let cases = crate::fp8::cases(
        &args.shapes,
        &args.shape,
        args.masks.list(),
        args.heads_kv,
        true,
        &mut notes,
    )?;
    Ok(crate::fp8::VerifyArgs {
        seed: args.seed.unwrap_or_else(inputs::fresh_seed),
        cases,
        notes,
        variants: crate::fp8::variants(&args.kernels)?,
        layouts: args.layout.clone(),
        lse: args.lse,
        scale: args.scale,
        out_dtype: args.out_dtype.unwrap_or(DType::Bf16),
        rmse: args.rmse,
        json: args.json.clone(),
    })
}

/// The options checked before the GPU is opened.
fn check_options(args: &Args) -> Result<(), Failure> {
    if args.dtype.contains(&Elem::E4m3) {
        if args.dtype.len() > 1 {
            return Err(Failure::Usage(
                "--dtype e4m3 runs the FP8 kernel on its own: give it alone (f16 and bf16 in another run)"
                    .into(),
            ));
        }
        let refused = [
            (args.random.is_some(), "--random"),
            (args.repeat.is_some(), "--repeat"),
            (args.peer.is_some(), "--peer"),
            (args.logit_scale.is_some(), "--logit-scale"),
        ];
        if let Some((_, flag)) = refused.iter().find(|(given, _)| *given) {
            return Err(Failure::Usage(format!(
                "{flag} is not available with --dtype e4m3"
            )));
        }
    } else if args.out_dtype.is_some() || args.rmse {
        return Err(Failure::Usage(
            "--out-dtype and --rmse go with --dtype e4m3 (the 16-bit kernels write their input's type)"
                .into(),
        ));
    }
    if let Some(factor) = args.logit_scale {
        if !(factor.is_finite() && factor > 0.0) {
            return Err(Failure::Usage(format!(
                "--logit-scale must be a positive number, got {factor}"
            )));
        }
    }
    if library::only_paths(&args.kernels) && (args.random.is_some() || args.repeat.is_some()) {
        return Err(Failure::Usage(
            "--random and --repeat test our kernels: name a variant with --kernel (see `list`), not only cublas or cutensor".into(),
        ));
    }
    if let Some(other) = args.peer.as_deref().filter(|p| *p != "torch") {
        return Err(Failure::Usage(format!("unknown peer `{other}` (torch)")));
    }
    Params {
        causal: false,
        scale: args.scale,
        ..Params::default()
    }
    .validate()?;
    Ok(())
}

/// Every (shape, causal, dtype) to check: the shape sets and `--shape`s under the masks asked
/// for, in each dtype, with `--heads-kv` applied.
fn problems(args: &Args) -> Result<Vec<(Shape, bool, DType)>, Failure> {
    let masks = args.masks.list();
    // The paged and varlen sets are not lists of dense shapes (`check_paged`, `check_varlen`).
    let sets: Vec<String> = args
        .shapes
        .iter()
        .filter(|s| *s != "paged" && *s != "varlen")
        .cloned()
        .collect();
    let mut problems: Vec<(Shape, bool, DType)> = inputs::cases(&sets, &args.shape, masks)?
        .into_iter()
        .flat_map(|(s, c)| args.dtypes().into_iter().map(move |t| (s, c, t)))
        .collect();
    if let Some(heads_kv) = args.heads_kv {
        for (shape, _, _) in &mut problems {
            *shape = shape.with_heads_kv(heads_kv);
            shape.validate()?;
        }
    }
    Ok(problems)
}

/// `--random N`: random problems against float64.
fn run_random(
    gpu: &Gpu,
    variants: &[&'static VariantSpec],
    count: usize,
    seed: u64,
    json: &Option<PathBuf>,
) -> Result<(), Failure> {
    let results = crate::stress::random(gpu, variants, count, seed)?;
    // One paged problem per four dense ones (at least one), on the flash_decode variants tested.
    let paged = random_paged(gpu, variants, count.div_ceil(4), seed)?;
    // As many varlen problems, on the variants with a varlen entry point.
    let varlen = random_varlen(gpu, variants, count.div_ceil(4), seed)?;
    let failed = results.iter().filter(|r| !r.pass).count()
        + paged.iter().filter(|c| !c.pass).count()
        + varlen.iter().filter(|c| !c.pass).count();
    let runs: usize = results.iter().map(|r| r.kernels).sum::<usize>() + paged.len() + varlen.len();
    stress_verdict(
        json,
        serde_json::json!({ "gpu": gpu.name, "seed": seed, "problems": count, "kernel_runs": runs,
                            "all_pass": failed == 0, "random": results, "paged": paged,
                            "varlen": varlen }),
        failed,
        &format!(
            "{count} random problems, {} paged and {} varlen ones, {runs} kernel runs against float64",
            count.div_ceil(4),
            count.div_ceil(4)
        ),
    )
}

/// `--repeat N`: bit-identical outputs over `runs` runs.
fn run_repeat(
    gpu: &Gpu,
    variants: &[&'static VariantSpec],
    problems: &[(Shape, bool, DType)],
    runs: usize,
    seed: u64,
    json: &Option<PathBuf>,
) -> Result<(), Failure> {
    let results = crate::stress::repeat(gpu, variants, problems, runs, seed)?;
    let failed = results.iter().filter(|r| !r.pass).count();
    for r in results.iter().filter(|r| !r.pass) {
        println!(
            "FAIL {} on {} causal={} {}: {} of {} runs differ",
            r.kernel, r.shape, r.causal, r.dtype, r.differing_runs, r.runs
        );
    }
    stress_verdict(
        json,
        serde_json::json!({ "gpu": gpu.name, "seed": seed, "runs": runs, "all_pass": failed == 0,
                            "repeat": results }),
        failed,
        &format!(
            "{} kernel/problem pairs bit-identical over {runs} runs",
            results.len()
        ),
    )
}

/// A composed path's output on one problem: (path, layout, output as `[B,H,S,D]`).
type PathOutput = (&'static str, Layout, Vec<f32>);

/// The optional comparisons beside the reference, torch's float32 SDPA (`--peer torch`) and the
/// library-composed paths (`cublas`, `cutensor`): `Ok` while one runs, else why it does not (empty
/// when not asked for). Torch is tried until it first fails, a path until its library is found
/// missing; then each is left off for the rest of the run.
struct CrossChecks {
    torch: Result<(), String>,
    paths: Vec<(library::Path, Result<(), String>)>,
}

impl CrossChecks {
    fn new(args: &Args) -> CrossChecks {
        let off = || Err(String::new());
        CrossChecks {
            torch: if args.peer.is_some() { Ok(()) } else { off() },
            paths: library::wanted(&args.kernels)
                .into_iter()
                .map(|path| (path, Ok(())))
                .collect(),
        }
    }

    fn torch_output(&mut self, shape: Shape, params: Params, inputs: &Inputs, tag: u64) -> Option<Vec<f64>> {
        // Torch aligns causal masks top-left: no comparison when S_q != S_k.
        if self.torch.is_err() || (params.causal && shape.seq_q != shape.seq_k) {
            return None;
        }
        torch_output(shape, params, inputs, tag)
            .map_err(|reason| self.torch = Err(reason))
            .ok()
    }

    /// Every composed path still on, in every layout it runs, on this problem (plain `[B,H,S,D]`
    /// inputs, no LSE): (path, layout, output as `[B,H,S,D]`).
    fn path_outputs(
        &mut self,
        gpu: &Gpu,
        shape: Shape,
        params: Params,
        inputs: &Inputs,
        layouts: &[Layout],
    ) -> Result<Vec<PathOutput>, Failure> {
        let mut outputs = Vec::new();
        for (path, state) in &mut self.paths {
            for &layout in layouts {
                // What a path cannot run (grouped heads for cublas, say) is skipped, not failed.
                if state.is_err() || path.check(shape, layout, false).is_err() {
                    continue;
                }
                match run_path(gpu, *path, shape, params, inputs, layout) {
                    Ok(out) => outputs.push((path.name(), layout, out)),
                    Err(e) if e.is_missing_library() => *state = Err(e.to_string()),
                    Err(e) => return Err(e.into()),
                }
            }
        }
        Ok(outputs)
    }

    fn torch_note(&self, args: &Args) -> Option<String> {
        args.peer.as_ref()?;
        Some(match &self.torch {
            Err(reason) => format!("torch cross-check not run: {reason}"),
            Ok(()) => "every output also compared with torch's float32 SDPA".to_string(),
        })
    }
}

/// Every kernel (in every layout asked for) and the cross-checks on one problem's fresh inputs.
fn check_problem(
    gpu: &Gpu,
    variants: &[&'static VariantSpec],
    (shape, causal, dtype): (Shape, bool, DType),
    case_seed: u64,
    args: &Args,
    cross: &mut CrossChecks,
) -> Result<Vec<Case>, Failure> {
    let params = Params {
        causal,
        scale: args.scale,
        ..Params::default()
    };
    let mut inputs = Inputs::random(shape, dtype, case_seed);
    if let Some(factor) = args.logit_scale {
        inputs.scale_queries_and_keys(factor);
    }
    let (reference, reference_name) = reference_output(gpu, shape, params, &inputs, dtype.tolerance())?;
    let torch = cross.torch_output(shape, params, &inputs, case_seed);
    let lse_reference = args.lse.then(|| {
        let (q, k, _) = inputs.as_f32();
        let scale = params.scale_for(shape.head_dim) as f64;
        reference::log_sum_exp_f64(&q, &k, shape.reference_dims(), causal, scale)
    });
    let expected = Expected {
        reference: &reference,
        reference_name,
        torch: torch.as_deref(),
    };
    let mut cases = Vec::new();
    for variant in runnable(gpu, variants, shape) {
        for &layout in &args.layout {
            let (out, lse) = run_kernel(gpu, variant, shape, params, &inputs, args.lse, layout)?;
            let mut result = judge(variant.name, shape, (causal, dtype), &out, &expected);
            result.layout = layout;
            if let (Some(lse), Some(reference)) = (&lse, &lse_reference) {
                let err = lse_error(lse, reference);
                result.lse_max_abs_err = Some(err);
                result.pass &= err <= LSE_TOLERANCE;
            }
            cases.push(result);
        }
    }
    for (name, layout, out) in cross.path_outputs(gpu, shape, params, &inputs, &args.layout)? {
        let mut result = judge(name, shape, (causal, dtype), &out, &expected);
        result.layout = layout;
        cases.push(result);
    }
    Ok(cases)
}

/// Writes the report's JSON and turns it into the exit status.
fn verdict(report: Report, json: &Option<PathBuf>) -> Result<(), Failure> {
    let failed = report.cases.iter().filter(|c| !c.pass).count()
        + report.paged.iter().filter(|c| !c.pass).count()
        + report.varlen.iter().filter(|c| !c.pass).count()
        + report.barriers.iter().filter(|b| !b.pass).count();
    let (all_pass, seed) = (report.all_pass, report.seed);
    if let Some(path) = json {
        inputs::write_json(path, &report)?;
    }
    if all_pass {
        println!("PASS: every case and every barrier count (seed {seed})");
        Ok(())
    } else {
        println!("FAIL: {failed} check(s) failed (seed {seed}; replay with --seed {seed})");
        Err(Failure::Check)
    }
}

/// Writes a stress mode's JSON and turns its failure count into the exit status.
fn stress_verdict(
    json: &Option<PathBuf>,
    report: serde_json::Value,
    failed: usize,
    what: &str,
) -> Result<(), Failure> {
    if let Some(path) = json {
        inputs::write_json(path, &report)?;
    }
    if failed == 0 {
        println!("PASS: {what}");
        Ok(())
    } else {
        println!("FAIL: {failed} failed ({what})");
        Err(Failure::Check)
    }
}

/// What an output is judged against: the float64 (or naive-GPU) reference, and torch's float32
/// output when `--peer torch` could run.
struct Expected<'a> {
    reference: &'a [f64],
    reference_name: &'static str,
    torch: Option<&'a [f64]>,
}

/// One case's verdict: within the dtype's tolerance of the reference, and of torch if present.
fn judge(
    kernel: &'static str,
    shape: Shape,
    (causal, dtype): (bool, DType),
    out: &[f32],
    expected: &Expected,
) -> Case {
    let tolerance = dtype.tolerance();
    let cmp = reference::compare(out, expected.reference);
    let vs_torch = expected.torch.map(|torch| reference::compare(out, torch));
    Case {
        kernel,
        shape: [shape.batch, shape.heads, shape.seq_q, shape.head_dim],
        seq_k: shape.seq_k,
        causal,
        dtype: dtype.long_name(),
        layout: Layout::Bhsd,
        reference: expected.reference_name,
        max_abs_err: cmp.max_abs_err,
        rel_l2_err: cmp.rel_l2_err,
        non_finite: cmp.non_finite,
        torch_max_abs_err: vs_torch.map(|c| c.max_abs_err),
        torch_rel_l2_err: vs_torch.map(|c| c.rel_l2_err),
        lse_max_abs_err: None,
        pass: cmp.passes(tolerance) && vs_torch.is_none_or(|c| c.passes(tolerance)),
    }
}

/// The log-sum-exp is fp32 arithmetic on the same rounded inputs as the reference: only the
/// accumulation order and `ex2`/`lg2.approx` separate them (~1e-5 at these magnitudes).
const LSE_TOLERANCE: f64 = 1e-3;

/// What the fp32 scores cannot hold beyond `LSE_TOLERANCE`, relative to the log-sum-exp: a row's
/// LSE is about its largest scaled score, which the kernel rounds to fp32 in every product and
/// sum (a few units of 2^-23 of it). 1e-6 is 8 units. At ordinary scores (|LSE| < 20) it adds
/// 2e-5; at `--logit-scale 40` (LSE near 5,000, where one unit is 5e-4) it is what makes the
/// check one that fp32 can pass at all (without it every kernel measured 1.1e-3 to 2.2e-3 there,
/// `naive` included: docs/history/perf-notes.md, the lazy rescale).
const LSE_RELATIVE: f64 = 1e-6;

/// Largest difference between a kernel's log-sum-exp and the reference's beyond `LSE_RELATIVE` of
/// the reference's magnitude (so `LSE_TOLERANCE` bounds what is left); rows that see no key must
/// be `-inf` on both sides; NaN never passes.
fn lse_error(actual: &[f32], reference: &[f64]) -> f64 {
    if actual.len() != reference.len() {
        return f64::INFINITY;
    }
    actual.iter().zip(reference).fold(0.0f64, |worst, (&a, &r)| {
        let a = a as f64;
        let err = if a == r {
            0.0
        } else if a.is_finite() && r.is_finite() {
            ((a - r).abs() - LSE_RELATIVE * r.abs()).max(0.0)
        } else {
            f64::INFINITY
        };
        worst.max(err)
    })
}

/// A library-composed path on a NaN-poisoned output, the inputs laid out as `layout` on the
/// device; the output comes back as `[B,H,S,D]`.
fn run_path(
    gpu: &Gpu,
    path: library::Path,
    shape: Shape,
    params: Params,
    inputs: &Inputs,
    layout: Layout,
) -> flashrs_lab::error::Result<Vec<f32>> {
    let mut made = path.make(gpu, shape, inputs.dtype)?;
    let (b, d) = (shape.batch, shape.head_dim);
    let q = layout.from_bhsd(&inputs.q, b, shape.heads, shape.seq_q, d);
    let k = layout.from_bhsd(&inputs.k, b, shape.heads_kv, shape.seq_k, d);
    let v = layout.from_bhsd(&inputs.v, b, shape.heads_kv, shape.seq_k, d);
    let mut tensors = gpu.tensors_in(layout, shape, inputs.dtype, &q, &k, &v)?;
    made.launch(gpu, &mut tensors, params)?;
    let out = flashrs::gpu::decode(inputs.dtype, &gpu.download(tensors.out())?);
    Ok(layout.to_bhsd(&out, b, shape.heads, shape.seq_q, d))
}

/// Torch's float32 SDPA on the same (rounded) inputs, through `.npy` files.
fn torch_output(shape: Shape, params: Params, inputs: &Inputs, tag: u64) -> Result<Vec<f64>, String> {
    let dir = std::env::temp_dir().join(format!("flashrs-torch-{}-{tag}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    let result = (|| {
        let (q, k, v) = inputs.as_f32();
        let dims_q = [shape.batch, shape.heads, shape.seq_q, shape.head_dim];
        let dims_k = [shape.batch, shape.heads_kv, shape.seq_k, shape.head_dim];
        for (name, dims, data) in [("q", dims_q, q), ("k", dims_k, k), ("v", dims_k, v)] {
            npy::write_npy(&dir.join(format!("{name}.npy")), &dims, &NpyData::F32(data))
                .map_err(|e| e.to_string())?;
        }
        let meta = serde_json::json!({ "causal": params.causal, "scale": params.scale_for(shape.head_dim) });
        std::fs::write(dir.join("meta.json"), meta.to_string()).map_err(|e| e.to_string())?;
        peers::torch_check(&dir, &dir)?;
        let out = npy::read_npy(&dir.join("out.npy")).map_err(|e| e.to_string())?;
        Ok(out.to_f32().into_iter().map(f64::from).collect())
    })();
    let _ = std::fs::remove_dir_all(&dir);
    result
}

/// The float64 CPU reference, or for big problems `naive` checked against float64 on sample rows.
fn reference_output(
    gpu: &Gpu,
    shape: Shape,
    params: Params,
    inputs: &Inputs,
    tolerance: Tolerance,
) -> Result<(Vec<f64>, &'static str), Failure> {
    let (q, k, v) = inputs.as_f32();
    let scale = params.scale_for(shape.head_dim) as f64;
    let work =
        (shape.batch * shape.heads) as f64 * shape.seq_q as f64 * shape.seq_k as f64 * shape.head_dim as f64;
    if work <= CPU_REFERENCE_LIMIT {
        let out = reference::attention_f64(&q, &k, &v, shape.reference_dims(), params.causal, scale);
        return Ok((out, "cpu_f64"));
    }
    let naive =
        VariantSpec::by_name("naive").ok_or_else(|| Failure::Usage("no naive variant compiled".into()))?;
    let (out, _) = run_kernel(gpu, naive, shape, params, inputs, false, Layout::Bhsd)?;
    // Spot-check naive on 64 rows spread over heads and positions.
    let bh = shape.batch * shape.heads;
    let rows: Vec<(usize, usize)> = (0..64)
        .map(|i| ((i * 7919) % bh, (i * 104_729) % shape.seq_q))
        .collect();
    let expected =
        reference::attention_rows_f64(&q, &k, &v, shape.reference_dims(), params.causal, scale, &rows);
    let d = shape.head_dim;
    let actual: Vec<f32> = rows
        .iter()
        .flat_map(|&(h, r)| out[(h * shape.seq_q + r) * d..][..d].to_vec())
        .collect();
    let cmp = reference::compare(&actual, &expected);
    if !cmp.passes(tolerance) {
        return Err(Failure::Usage(format!(
            "the naive reference itself fails its float64 spot check on {shape}: {cmp:?}"
        )));
    }
    Ok((out.iter().map(|&x| x as f64).collect(), "naive_gpu"))
}

/// Barriers per tile three ways, for every variant and head dim.
pub fn check_barriers(
    gpu: &Gpu,
    variants: &[&'static VariantSpec],
    dtypes: &[DType],
) -> Result<Vec<BarrierCheck>, Failure> {
    let mut out = Vec::new();
    let uncounted: Vec<&str> = variants
        .iter()
        .filter(|v| !v.counted_built)
        .map(|v| v.name)
        .collect();
    if !uncounted.is_empty() {
        println!(
            "barriers not counted at run time for {} variants (their instrumentation twins are built \
             with FLASHRS_VARIANTS naming them, or =all)",
            uncounted.len()
        );
    }
    for variant in variants
        .iter()
        .filter(|v| v.min_arch <= gpu.arch && v.counted_built)
    {
        for (&head_dim, &dtype) in variant
            .head_dims
            .iter()
            .flat_map(|d| dtypes.iter().map(move |t| (d, t)))
        {
            let shape = Shape::new(2, 8, 512, head_dim);
            let inputs = Inputs::random(shape, dtype, 1);
            let mut tensors = gpu.tensors(shape, dtype, &inputs.q, &inputs.k, &inputs.v)?;
            let mut runtime = [0.0; 2];
            for (i, causal) in [false, true].into_iter().enumerate() {
                let params = Params {
                    causal,
                    scale: None,
                    ..Params::default()
                };
                runtime[i] = gpu.count_barriers(variant, &mut tensors, params)?.per_tile;
            }
            out.push(static_barriers(variant, head_dim, dtype, runtime, Entry::Dense));
            if variant.has_paged() {
                out.push(check_paged_barriers(gpu, variant, head_dim, dtype)?);
            }
            if variant.has_varlen_at(head_dim) {
                out.push(check_varlen_barriers(gpu, variant, head_dim, dtype)?);
            }
        }
    }
    Ok(out)
}

/// A `flash_decode` variant's paged entry point, counted at run time (`_paged_counted`) on a
/// small paged cache, non-causal and causal, and judged as the contiguous entry points are.
fn check_paged_barriers(
    gpu: &Gpu,
    variant: &'static VariantSpec,
    head_dim: usize,
    dtype: DType,
) -> Result<BarrierCheck, Failure> {
    let problem = crate::paged::barrier_problem(head_dim, dtype);
    let data = crate::paged::data(&problem, 1, false)?;
    let mut tensors = crate::paged::upload(gpu, &data, dtype, Layout::Bhsd)?;
    let mut runtime = [0.0; 2];
    for (i, causal) in [false, true].into_iter().enumerate() {
        let params = Params {
            causal,
            scale: None,
            ..Params::default()
        };
        runtime[i] = gpu.count_paged_barriers(variant, &mut tensors, params)?.per_tile;
    }
    Ok(static_barriers(variant, head_dim, dtype, runtime, Entry::Paged))
}

/// A variant's varlen entry point, counted at run time (`_varlen_counted`) on a small packed
/// batch, non-causal and causal, and judged as the paged entry points are.
fn check_varlen_barriers(
    gpu: &Gpu,
    variant: &'static VariantSpec,
    head_dim: usize,
    dtype: DType,
) -> Result<BarrierCheck, Failure> {
    let problem = crate::varlen::Problem {
        heads: 8,
        heads_kv: 2,
        head_dim,
        lens_q: vec![300, 0, 130],
        lens_k: vec![700, 5, 333],
        causal: false,
        dtype,
    };
    let data = crate::varlen::data(&problem, 1, false)?;
    let mut tensors = crate::varlen::upload(gpu, &problem, &data)?;
    let mut runtime = [0.0; 2];
    for (i, causal) in [false, true].into_iter().enumerate() {
        let params = Params {
            causal,
            scale: None,
            ..Params::default()
        };
        runtime[i] = gpu.count_varlen_barriers(variant, &mut tensors, params)?.per_tile;
    }
    Ok(static_barriers(variant, head_dim, dtype, runtime, Entry::Varlen))
}

/// Which entry point of a variant a barrier check is about.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Entry {
    Dense,
    Paged,
    Varlen,
}

/// The declared and PTX counts of one entry point of a variant, judged together with the
/// run-time counts.
pub fn static_barriers(
    variant: &'static VariantSpec,
    head_dim: usize,
    dtype: DType,
    runtime: [f64; 2],
    entry: Entry,
) -> BarrierCheck {
    let variant_symbol = variant.symbol(head_dim, dtype.name());
    // The paged and varlen entry points share their variant's declared count.
    let declared = ptx::u32_globals(embedded::PTX_SM90)
        .get(format!("{variant_symbol}_barriers_per_tile").as_str())
        .copied()
        .unwrap_or(u32::MAX);
    let symbol = match entry {
        Entry::Paged => variant.paged_symbol(head_dim, dtype.name(), false),
        Entry::Varlen => variant.varlen_symbol(head_dim, dtype.name(), false),
        Entry::Dense => Some(variant_symbol),
    }
    .unwrap_or_default();
    let paged = entry != Entry::Dense;
    let count_in = |ptx_text: &str| {
        ptx::entries(ptx_text)
            .iter()
            .find(|e| e.name == symbol)
            .and_then(ptx::barriers_in_loop)
            .unwrap_or(0)
    };
    let ptx_sm80 = (variant.min_arch <= 80).then(|| count_in(embedded::PTX_SM80));
    let ptx_sm90 = count_in(embedded::PTX_SM90);
    let ptx = [ptx_sm80.unwrap_or(ptx_sm90), ptx_sm90];
    // A paged (or varlen) entry point's KV loop shares its span in the PTX with the epilogue's
    // loops (LLVM lays them out inside it), so the static count there is only a lower bound (the CPU test
    // `tests/ptx_analysis.rs` holds the paged entries to the same rule); its run-time counts must
    // still be the declared ones.
    let ptx_agrees = ptx.iter().all(|&n| {
        if paged {
            n >= declared as usize
        } else {
            n == declared as usize
        }
    });
    let agree = ptx_agrees && runtime.iter().all(|&n| n == declared as f64);
    let in_range = match (variant.family, variant.policy) {
        (Family::Naive, _) => declared == 0,
        (_, Some(Policy::Light)) => (2..=4).contains(&declared),
        (_, Some(Policy::Legacy)) => declared == 6,
        (_, Some(Policy::Mbarrier)) => declared == 0,
        (_, None) => false,
    };
    BarrierCheck {
        kernel: variant.name,
        paged: entry == Entry::Paged,
        varlen: entry == Entry::Varlen,
        head_dim,
        dtype,
        policy: variant.policy,
        declared,
        ptx_sm80,
        ptx_sm90,
        runtime: runtime[0],
        runtime_causal: runtime[1],
        pass: agree && in_range,
    }
}

/// The `paged` set, when asked for: every flash_decode variant under test on each problem.
fn check_paged(
    gpu: &Gpu,
    variants: &[&'static VariantSpec],
    args: &Args,
    seed: u64,
) -> Result<Vec<crate::paged::Case>, Failure> {
    let problems = || {
        let masks = args.masks.list();
        if args.quick {
            crate::paged::quick_problems(&args.dtypes(), masks)
        } else {
            crate::paged::problems(&args.dtypes(), masks)
        }
    };
    run_set(
        args,
        "paged",
        problems,
        crate::paged::Problem::describe,
        |problem, index| {
            let case_seed = seed.wrapping_add(1_000_000 + index);
            crate::paged::check(
                gpu,
                variants,
                problem,
                case_seed,
                &args.layout,
                LSE_TOLERANCE,
                lse_error,
            )
        },
    )
}

/// A problem set that is not a list of dense shapes (`paged`, `varlen`), when `--shapes` names
/// it: `check` on each of `problems` and its index, under a progress bar.
fn run_set<P, C>(
    args: &Args,
    name: &str,
    problems: impl FnOnce() -> Vec<P>,
    describe: impl Fn(&P) -> String,
    mut check: impl FnMut(&P, u64) -> Result<Vec<C>, Failure>,
) -> Result<Vec<C>, Failure> {
    if !args.shapes.iter().any(|s| s == name) {
        return Ok(Vec::new());
    }
    let problems = problems();
    let bar = inputs::progress(problems.len(), name);
    let mut cases = Vec::new();
    for (index, problem) in problems.iter().enumerate() {
        bar.set_message(describe(problem));
        cases.extend(check(problem, index as u64)?);
        bar.inc(1);
    }
    bar.finish_and_clear();
    Ok(cases)
}

/// `--random`'s paged problems: problem `i` from seed `seed + i` (replay: `--random 1 --seed`).
fn random_paged(
    gpu: &Gpu,
    variants: &[&'static VariantSpec],
    count: usize,
    seed: u64,
) -> Result<Vec<crate::paged::Case>, Failure> {
    let mut cases = Vec::new();
    for i in 0..count as u64 {
        let mut rng = <rand::rngs::StdRng as rand::SeedableRng>::seed_from_u64(seed.wrapping_add(i));
        let problem = crate::paged::random_problem(&mut rng);
        // Drawn after the problem, so that a seed replays the same problem as before layouts.
        let layout = if rand::Rng::random_bool(&mut rng, 0.5) {
            Layout::Bshd
        } else {
            Layout::Bhsd
        };
        let found = crate::paged::check(
            gpu,
            variants,
            &problem,
            seed.wrapping_add(i),
            &[layout],
            LSE_TOLERANCE,
            lse_error,
        )?;
        for c in found.iter().filter(|c| !c.pass) {
            println!(
                "FAIL paged {} on {} causal={} {}: max_abs {:.3e}, lse {:.3e} (replay: --random 1 --seed {})",
                c.kernel,
                c.problem,
                c.causal,
                c.layout,
                c.max_abs_err,
                c.lse_max_abs_err,
                seed.wrapping_add(i)
            );
        }
        cases.extend(found);
    }
    Ok(cases)
}

/// The `varlen` set, when asked for: every variant with a varlen entry point on each problem.
fn check_varlen(
    gpu: &Gpu,
    variants: &[&'static VariantSpec],
    args: &Args,
    seed: u64,
) -> Result<Vec<crate::varlen::Case>, Failure> {
    let problems = || {
        let masks = args.masks.list();
        if args.quick {
            crate::varlen::quick_problems(&args.dtypes(), masks)
        } else {
            crate::varlen::problems(&args.dtypes(), masks)
        }
    };
    run_set(
        args,
        "varlen",
        problems,
        crate::varlen::Problem::describe,
        |problem, index| {
            let case_seed = seed.wrapping_add(2_000_000 + index);
            crate::varlen::check(gpu, variants, problem, case_seed, LSE_TOLERANCE, lse_error)
        },
    )
}

/// `--random`'s varlen problems: problem `i` from seed `seed + i` (replay: `--random 1 --seed`).
fn random_varlen(
    gpu: &Gpu,
    variants: &[&'static VariantSpec],
    count: usize,
    seed: u64,
) -> Result<Vec<crate::varlen::Case>, Failure> {
    let mut cases = Vec::new();
    for i in 0..count as u64 {
        // Its own stream of draws, apart from the paged problem of the same seed.
        let problem_seed = seed.wrapping_add(i) ^ 0x7661_726c_656e;
        let mut rng = <rand::rngs::StdRng as rand::SeedableRng>::seed_from_u64(problem_seed);
        let problem = crate::varlen::random_problem(&mut rng);
        let found = crate::varlen::check(gpu, variants, &problem, problem_seed, LSE_TOLERANCE, lse_error)?;
        for c in found.iter().filter(|c| !c.pass) {
            println!(
                "FAIL varlen {} on {} causal={}: max_abs {:.3e}, lse {:.3e}, guard writes {} (replay: --random 1 --seed {})",
                c.kernel,
                c.problem,
                c.causal,
                c.max_abs_err,
                c.lse_max_abs_err,
                c.guard_writes,
                seed.wrapping_add(i)
            );
        }
        cases.extend(found);
    }
    Ok(cases)
}

fn print_varlen(cases: &[crate::varlen::Case]) {
    for c in cases {
        println!(
            "{:<40} varlen {} causal={} {} {:>11.3e} {:>11.3e} lse {:.1e} guard {}  {}",
            c.kernel,
            c.problem,
            c.causal,
            c.dtype,
            c.max_abs_err,
            c.rel_l2_err,
            c.lse_max_abs_err,
            c.guard_writes,
            if c.pass { "PASS" } else { "FAIL" }
        );
    }
}

fn print_paged(cases: &[crate::paged::Case]) {
    for c in cases {
        println!(
            "{:<40} paged {} causal={} {} {} {:>11.3e} {:>11.3e} lse {:.1e}  {}",
            c.kernel,
            c.problem,
            c.causal,
            c.dtype,
            c.layout,
            c.max_abs_err,
            c.rel_l2_err,
            c.lse_max_abs_err,
            if c.pass { "PASS" } else { "FAIL" }
        );
    }
}

fn print_cases(cases: &[Case]) {
    println!(
        "{:<40} {:>22} {:>6} {:>6} {:>10} {:>11} {:>11}  result",
        "kernel", "shape", "causal", "layout", "reference", "max_abs", "rel_l2"
    );
    for c in cases {
        let shape = if c.seq_k == c.shape[2] {
            format!("{:?}", c.shape)
        } else {
            format!("{:?} k={}", c.shape, c.seq_k)
        };
        println!(
            "{:<40} {:>22} {:>6} {:>6} {:>10} {:>11.3e} {:>11.3e}  {}",
            c.kernel,
            shape,
            c.causal,
            c.layout,
            c.reference,
            c.max_abs_err,
            c.rel_l2_err,
            if c.pass { "PASS" } else { "FAIL" }
        );
    }
}

pub fn print_barriers(checks: &[BarrierCheck]) {
    println!("\nblock barriers per KV tile: declared by the policy / in the PTX loop (sm_80, sm_90a) / counted at run time (non-causal, causal)");
    for b in checks {
        println!(
            "{:<46} d={:<4} {:>2} / {:>2} {:>2} / {:>4} {:>4}  {}",
            format!(
                "{}{}",
                b.kernel,
                match (b.paged, b.varlen) {
                    (true, _) => " (paged)",
                    (_, true) => " (varlen)",
                    _ => "",
                }
            ),
            b.head_dim,
            b.declared,
            b.ptx_sm80.map_or("-".to_string(), |n| n.to_string()),
            b.ptx_sm90,
            b.runtime,
            b.runtime_causal,
            if b.pass { "PASS" } else { "FAIL" }
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lse_error_allows_fp32_rounding_of_large_scores_only() {
        // Ordinary magnitudes: the absolute difference, less a negligible allowance.
        let err = lse_error(&[2.5005], &[2.5]);
        assert!((err - 5e-4).abs() < 1e-5, "{err}");
        assert!(err <= LSE_TOLERANCE);
        assert!(lse_error(&[2.502], &[2.5]) > LSE_TOLERANCE);
        // Near 5,000 an fp32 unit is 5e-4: 2e-3 off is rounding, 8e-3 off is not.
        assert!(lse_error(&[5000.002], &[5000.0]) <= LSE_TOLERANCE);
        assert!(lse_error(&[5000.008], &[5000.0]) > LSE_TOLERANCE);
        // Rows without keys are -inf on both sides; anything else there, and NaN, never passes.
        assert_eq!(lse_error(&[f32::NEG_INFINITY], &[f64::NEG_INFINITY]), 0.0);
        assert_eq!(lse_error(&[0.0], &[f64::NEG_INFINITY]), f64::INFINITY);
        assert_eq!(lse_error(&[f32::NAN], &[1.0]), f64::INFINITY);
        assert_eq!(lse_error(&[1.0, 2.0], &[1.0]), f64::INFINITY);
    }
}
