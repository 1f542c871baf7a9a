//! `bench`: our kernels and the peers, side by side, on the same GPU in the same run, timed the
//! same way (CUDA graphs of back-to-back calls, CUDA events around each replay).

use std::path::PathBuf;

use flashrs::{embedded, DType, Family, Params, Shape, VariantSpec, VARIANTS};
use flashrs_lab::ptx;
use flashrs_lab::{LabError, Timing};

use crate::fp8::Elem;
use crate::inputs::{self, Inputs};
use crate::library;
use crate::peers::{self, Peer};
use crate::report::{print_summary, print_table, row_from, summarise, Report, Row};
use crate::rounds::{measure_rounds, rounds_text, time_calls, Order, Repetitions, Sides};
use crate::varlen::{VARLEN_CASE, VARLEN_SEED};
use crate::Failure;

#[derive(clap::Args)]
pub struct Args {
    /// Named shape sets, comma-separated: small, mission, long, odd, large, std (std fixes its
    /// own masks: 8 shapes non-causal, 3 causal), decode (one query per head against long KV
    /// caches, some grouped: every row also reports GB/s of K and V read), fp8 (`--dtype
    /// e4m3`'s default: (2,16,4096,128), (2,16,4096,256), (1,16,8192,128), (1,16,8192,256)
    /// non-causal, (2,16,4096,128) causal). Default: std (fp8 with e4m3), or none when a
    /// `--shape` is given.
    #[arg(long, value_delimiter = ',')]
    shapes: Vec<String>,
    /// A shape B,H,S,D (or B,H,S_Q,S_K,D); repeatable, and combines with --shapes (given alone,
    /// only these shapes are timed).
    #[arg(long)]
    shape: Vec<Shape>,
    /// Also these variants (repeatable; naive and flash_scalar are skipped on shapes too big for
    /// them unless named here), or the library-composed paths `cublas` and `cutensor`. Every
    /// case times what the library's dispatch weighs for it (its pick, the tuned entry, the
    /// heuristic's), so the summary's pick is always measured; with no `--kernel` and no
    /// `--all-variants` that is all it times.
    #[arg(long = "kernel")]
    kernels: Vec<String>,
    /// The exhaustive sweep: every compiled variant on every case, and the library-composed
    /// paths (a missing library is a note). `--block-size` and `--varlen` imply it for their
    /// rows unless `--kernel` names the variants.
    #[arg(long)]
    all_variants: bool,
    /// Causal masking (for shape sets that do not fix it).
    #[arg(long)]
    causal: bool,
    /// Key/value heads for every shape (grouped-query attention; must divide each shape's
    /// heads). The peers run it through torch's `enable_gqa`.
    #[arg(long)]
    heads_kv: Option<usize>,
    /// Element type of inputs and outputs: f16 or bf16; or e4m3: the FP8 kernel (the library's
    /// pick and every FP8 variant, output in `--out-dtype`) beside our fp16 kernels the dispatch
    /// weighs on each shape, with the FP8/fp16 speedup per row and FA3's and cuDNN's published
    /// FP8 figures quoted (not measured here).
    #[arg(long, default_value = "f16")]
    dtype: Elem,
    /// With `--dtype e4m3`: the output's type, f16 or bf16.
    #[arg(long, value_name = "DTYPE")]
    out_dtype: Option<DType>,
    /// Timed repetitions per kernel and shape: graph replays, and single launches.
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u32).range(1..))]
    iters: u32,
    /// Untimed launches (or graph replays) before timing.
    #[arg(long, default_value_t = 10)]
    warmup: u32,
    /// Before each timed set of graph replays, ours and the peers' alike, replay for at least
    /// this many milliseconds (the `--warmup` count still being the least): an H100 drops its
    /// clock within about 0.1 s of sustained load, so a kernel timed straight after an idle
    /// spell (a peer's compile) runs faster than one timed after other kernels. Every row
    /// records the SM clock, power and temperature it ran at (`clocks` in the JSON, `MHz` in the
    /// table) where NVML can be read. 0 restores count-only warm-ups.
    #[arg(long, default_value_t = 500.0, value_parser = non_negative_ms)]
    warmup_ms: f64,
    /// Most back-to-back calls per CUDA graph; fewer for long kernels (about 1 ms per replay).
    #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u32).range(1..))]
    calls_per_graph: u32,
    /// Time everything this many times. A round is one whole measurement: our kernels (with
    /// `--block-size`'s and `--varlen`'s rows) and the peers, one side after the other. Odd
    /// rounds time ours first, even rounds the peers first: an H100 under sustained load is
    /// power-capped and its clock follows its thermal history, so a single pass favours
    /// whichever side ran on the cooler card. Each row is then the one of the round whose p50
    /// is the median of its rounds (for an even count the lower of the middle two), every
    /// figure from that one measurement; the JSON lists each round's p50 (`rounds_p50_us`). A
    /// row missing from a round (a peer that failed once) is the median of the rounds it has.
    /// With `--dtype e4m3` the two sides are the e4m3 rows (the pick and every FP8 variant) and
    /// our fp16 kernels, odd rounds e4m3 first; each FP8/fp16 speedup is then taken from the
    /// merged rows, both from their median rounds.
    #[arg(long, default_value_t = crate::report::single_round())]
    rounds: u32,
    /// Peers to measure in the same run, comma-separated: `torch` (its SDPA backends: flash, i.e.
    /// FlashAttention-2, cuDNN and memory-efficient), `fa3` (the FlashAttention-3 algorithm from
    /// flash-attn-4's `flash_attn.cute`, on Hopper), both through python3 + torch. A peer that is
    /// not installed is a note, not a failure. Default: both (with 16-bit inputs).
    #[arg(long, value_delimiter = ',')]
    peers: Vec<Peer>,
    /// Time no peer (by default torch and fa3 are timed where they are installed).
    #[arg(long, conflicts_with = "peers")]
    no_peers: bool,
    /// Fail (exit 1) when KERNEL is slower than RATIO x the best peer on any benched shape,
    /// e.g. `flash_mma_m128_n64_w4_s2_light:0.95`. Repeatable.
    #[arg(long)]
    gate: Vec<String>,
    /// Draw TFLOP/s against sequence length (one panel per head dim and mask) into this .svg.
    #[arg(long)]
    plot: Option<PathBuf>,
    /// Write the results as JSON to this file.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Also time the flash_decode variants' paged entry points on a paged KV cache of pages of
    /// this many keys (16 to 256, a power of two; comma-separated for several), every sequence
    /// at the shape's S_k, pages in a random order: rows `<variant>_paged`, `block_size` set.
    #[arg(long, value_delimiter = ',')]
    block_size: Vec<usize>,
    /// The varlen case (docs/kernels/varlen-paged.md): 16 sequences of lengths drawn uniformly
    /// from 1 to 4096 (`--varlen-seed`, printed), queries and keys alike, H=16, D=128, `--causal` or not. Times
    /// every variant's varlen entry point on the packed batch (rows `<variant>_varlen`, TFLOP/s
    /// of the useful work), and adds two dense cases: B=1 at the length S with S^2 = sum L^2
    /// (the same useful FLOPs; with `--causal` both sides count the visible keys), and the batch
    /// padded to the longest sequence (what the peers run: `--peers torch`). Our kernels time
    /// the two dense cases right beside the packed batch, before it in the rounds that time ours
    /// first and after it in the others.
    #[arg(long)]
    varlen: bool,
    /// The layout of Q, K, V and the output for our kernels on the dense cases: bhsd
    /// ([B,H,S,D]) or bshd ([B,S,H,D], the layout of packed varlen batches); rows carry it. The
    /// peers take [B,H,S,D] either way.
    #[arg(long, default_value = "bhsd")]
    layout: flashrs::Layout,
    /// Seed of `--varlen`'s lengths.
    #[arg(long, default_value_t = VARLEN_SEED)]
    varlen_seed: u64,
}

/// Above this many multiply-adds (B*H*S_q*S_k*D) `naive` and `flash_scalar` are skipped unless
/// named with `--kernel`: they would take minutes and say nothing new.
const SLOW_KERNEL_LIMIT: f64 = 3e10;

/// What a run measures, all checked before the GPU is opened.
struct Plan {
    /// Every case; `--varlen`'s dense cases last.
    cases: Vec<(Shape, bool)>,
    /// How many of the last `cases` are `--varlen`'s (timed beside the varlen batch).
    varlen_cases: usize,
    variants: Vec<&'static VariantSpec>,
    gates: Vec<(String, f64)>,
    peers: Vec<Peer>,
    /// `--rounds`, at least one.
    rounds: u32,
}

impl Plan {
    fn new(args: &Args) -> Result<Plan, Failure> {
        let rounds = check_rounds(args.rounds)?;
        let masks: &[bool] = if args.causal { &[true] } else { &[false] };
        let mut peers: Vec<Peer> = Vec::new();
        for &peer in args.peers_or_default() {
            if !peers.contains(&peer) {
                peers.push(peer);
            }
        }
        let gates = args
            .gate
            .iter()
            .map(|g| parse_gate(g))
            .collect::<Result<Vec<_>, _>>()?;
        if let Some(path) = &args.plot {
            crate::plot::check_path(path)?;
        }
        inputs::check_json_outputs([&args.json])?;
        for &block_size in &args.block_size {
            if !block_size.is_power_of_two() || !flashrs::paged::BLOCK_SIZES.contains(&block_size) {
                return Err(Failure::Usage(format!(
                    "--block-size {block_size}: a power of two from 16 to 256"
                )));
            }
        }
        let mut cases = inputs::cases(&shape_sets(args), &args.shape, masks)?;
        let mut varlen_cases = 0;
        if args.varlen {
            let (dense, padded) = varlen_dense_shapes(args.varlen_seed);
            cases.extend([(dense, args.causal), (padded, args.causal)]);
            varlen_cases = 2;
        }
        if let Some(heads_kv) = args.heads_kv {
            for (shape, _) in &mut cases {
                *shape = shape.with_heads_kv(heads_kv);
                shape.validate()?;
            }
        }
        library::check_named_paths(&args.kernels, cases.iter().map(|c| c.0), &[args.layout], false)?;
        Ok(Plan {
            cases,
            varlen_cases,
            variants: match (args.all_variants, args.kernels.is_empty()) {
                (true, _) => all_built_variants(),
                // `--block-size` and `--varlen` rows are every variant's twins.
                (false, true) if args.varlen || !args.block_size.is_empty() => all_built_variants(),
                // What the dispatch weighs on each case is added there (`case_variants`).
                (false, true) => Vec::new(),
                (false, false) => inputs::variants(&args.kernels)?,
            },
            gates,
            peers,
            rounds,
        })
    }
}

/// `--rounds`, refused at 0. Checked here rather than by clap, so that the line is the project's
/// own usage error.
fn check_rounds(rounds: u32) -> Result<u32, Failure> {
    if rounds == 0 {
        return Err(Failure::Usage(
            "--rounds 0: at least one round is needed to measure anything".into(),
        ));
    }
    Ok(rounds)
}

/// `--shapes`, or its default for the dtype; none when only `--shape`s are given.
fn shape_sets(args: &Args) -> Vec<String> {
    if !args.shapes.is_empty() || !args.shape.is_empty() {
        return args.shapes.clone();
    }
    let default: &[&str] = match args.dtype {
        Elem::E4m3 => &["fp8"],
        Elem::Sixteen(_) => &["std"],
    };
    default.iter().map(|s| s.to_string()).collect()
}

/// `--dtype e4m3`'s run, its options checked before the GPU is opened.
fn fp8_args(args: &Args) -> Result<crate::fp8::BenchArgs, Failure> {
    let refused = [
        (!args.peers.is_empty(), "--peers"),
        (!args.gate.is_empty(), "--gate"),
        (args.plot.is_some(), "--plot"),
        (!args.block_size.is_empty(), "--block-size"),
        (args.varlen, "--varlen"),
    ];
    if let Some((_, flag)) = refused.iter().find(|(given, _)| *given) {
        return Err(Failure::Usage(format!(
            "{flag} is not available with --dtype e4m3 (no FP8 peer runs here; see the published figures it prints)"
        )));
    }
    let rounds = check_rounds(args.rounds)?;
    inputs::check_json_outputs([&args.json])?;
    let masks: &[bool] = if args.causal { &[true] } else { &[false] };
    let mut notes = Vec::new();
    let cases = crate::fp8::cases(
        &shape_sets(args),
        &args.shape,
        masks,
        args.heads_kv,
        false,
        &mut notes,
    )?;
    for note in notes {
        println!("note: {note}");
    }
    Ok(crate::fp8::BenchArgs {
        cases,
        variants: crate::fp8::variants(&args.kernels)?,
        out_dtype: args.out_dtype.unwrap_or(DType::Bf16),
        reps: args.repetitions(),
        rounds,
        json: args.json.clone(),
    })
}

pub fn run(device: usize, args: Args) -> Result<(), Failure> {
    if args.dtype == Elem::E4m3 {
        return crate::fp8::bench(device, fp8_args(&args)?);
    }
    if args.out_dtype.is_some() {
        return Err(Failure::Usage("--out-dtype goes with --dtype e4m3".into()));
    }
    let plan = Plan::new(&args)?;
    inputs::json_to_stdout(args.json.as_deref())?;
    let gpu = inputs::open_gpu(device)?;
    println!(
        "bench on {} (sm_{}): per kernel and case, {} timed replays of a CUDA graph of up to {} calls \
         (p50..p99 per call) and {} single launches (launch p50), after {} warm-ups and at least {} ms \
         of replays{}",
        gpu.name,
        gpu.arch,
        args.iters,
        args.calls_per_graph,
        args.iters,
        args.warmup,
        args.warmup_ms,
        rounds_text(plan.rounds, OUR_SIDES)
    );
    let mut notes = Vec::new();
    let rows = measure(&gpu, &plan, &args, &mut notes)?;
    if args.varlen {
        notes.extend(varlen_summary(&rows, &args));
    }
    let dense_pick = |shape: Shape, causal: bool| gpu.choose(shape, args.dtype.sixteen(), causal).0;
    let paged_pick = |shape: Shape, block_size: usize| gpu.choose_paged(shape, block_size).ok();
    notes.extend(paged_summary(
        &plan.cases,
        &args.block_size,
        &rows,
        dense_pick,
        paged_pick,
    ));
    for note in &notes {
        println!("note: {note}");
    }
    let pick = |shape: Shape, causal: bool| {
        let compiled = flashrs::problem::kernel_head_dim(shape.head_dim).is_some();
        compiled.then(|| {
            let (variant, source) = gpu.choose(shape, args.dtype.sixteen(), causal);
            (variant.name, source)
        })
    };
    let summary = summarise(&plan.cases, &rows, &pick);
    print_table(&rows);
    print_summary(&summary);
    let gate_failures: Vec<String> = plan
        .gates
        .iter()
        .flat_map(|(kernel, ratio)| gate_failures(&rows, kernel, *ratio))
        .collect();
    if let Some(path) = &args.plot {
        let plotted: Vec<Row> = rows
            .iter()
            .filter(|r| crate::plot::plotted(&r.kernel))
            .cloned()
            .collect();
        crate::plot::plot(path, &plotted, &gpu.name)?;
    }
    if let Some(path) = &args.json {
        let report = Report {
            gpu: gpu.name.clone(),
            iters: args.iters,
            warmup: args.warmup,
            warmup_ms: Some(args.warmup_ms),
            rounds: plan.rounds,
            peers: plan.peers.iter().map(|p| p.name().to_string()).collect(),
            notes,
            results: rows,
            summary,
        };
        inputs::write_json(path, &report)?;
    }
    for failure in &gate_failures {
        println!("GATE FAIL: {failure}");
    }
    if gate_failures.is_empty() {
        Ok(())
    } else {
        Err(Failure::Check)
    }
}

/// The 16-bit bench's sides: our kernels and the peers.
const OUR_SIDES: Sides = ["ours", "the peers"];

/// Every round of the run ([`time_round`]), merged ([`measure_rounds`]).
fn measure(
    gpu: &flashrs::Gpu,
    plan: &Plan,
    args: &Args,
    notes: &mut Vec<String>,
) -> Result<Vec<Row>, Failure> {
    measure_rounds(gpu, plan.rounds, OUR_SIDES, notes, |order, notes| {
        time_round(gpu, plan, args, order, notes)
    })
}

/// One round: ours ([`time_ours`], [`time_paged`], [`time_varlen`]) and the peers, in `order`.
/// The rows list ours before the peers' either way, as a single pass always has.
fn time_round(
    gpu: &flashrs::Gpu,
    plan: &Plan,
    args: &Args,
    order: Order,
    notes: &mut Vec<String>,
) -> Result<Vec<Row>, Failure> {
    let (mut ours, peers) = match order {
        Order::OursFirst => {
            let ours = time_our_side(gpu, plan, args, order, notes)?;
            (ours, time_peers(plan, args, notes)?)
        }
        Order::PeersFirst => {
            let peers = time_peers(plan, args, notes)?;
            (time_our_side(gpu, plan, args, order, notes)?, peers)
        }
    };
    ours.extend(peers);
    Ok(ours)
}

/// Our side of a round: the variants and library paths on every case, then the paged entry
/// points, then the varlen batch right beside its dense cases: the two sides of its ratio
/// measured next to each other, the dense cases first in the rounds that time ours first and
/// last in the others, so that neither side always meets the GPU in the same thermal state (a
/// minute of other kernels between them cost the varlen batch 45 MHz against its dense case
/// in one H200 run).
fn time_our_side(
    gpu: &flashrs::Gpu,
    plan: &Plan,
    args: &Args,
    order: Order,
    notes: &mut Vec<String>,
) -> Result<Vec<Row>, Failure> {
    let (cases, varlen_cases) = plan.cases.split_at(plan.cases.len() - plan.varlen_cases);
    let mut rows = time_ours(gpu, plan, cases, args, notes)?;
    rows.extend(time_paged(gpu, plan, cases, args)?);
    if order == Order::OursFirst {
        rows.extend(time_ours(gpu, plan, varlen_cases, args, notes)?);
        rows.extend(time_varlen(gpu, plan, args)?);
    } else {
        rows.extend(time_varlen(gpu, plan, args)?);
        rows.extend(time_ours(gpu, plan, varlen_cases, args, notes)?);
    }
    Ok(rows)
}

/// Our variants (and the library-composed paths) on every one of `cases` whose head dim they
/// support.
fn time_ours(
    gpu: &flashrs::Gpu,
    plan: &Plan,
    cases: &[(Shape, bool)],
    args: &Args,
    notes: &mut Vec<String>,
) -> Result<Vec<Row>, Failure> {
    let mut rows = Vec::new();
    // The composed paths are part of the sweep, or named.
    let mut paths = match args.kernels.is_empty() && !args.all_variants {
        true => Vec::new(),
        false => library::wanted(&args.kernels),
    };
    let bar = inputs::progress(cases.len() * plan.variants.len(), "bench");
    for &(shape, causal) in cases {
        if flashrs::problem::kernel_head_dim(shape.head_dim).is_none() {
            continue;
        }
        let params = Params {
            causal,
            scale: None,
            ..Params::default()
        };
        let inputs = Inputs::for_timing(shape, args.dtype.sixteen(), inputs::fresh_seed());
        let dtype = args.dtype.sixteen();
        let mut tensors = gpu.tensors_in(args.layout, shape, dtype, &inputs.q, &inputs.k, &inputs.v)?;
        let first = rows.len();
        let work = (shape.batch * shape.heads) as f64 * (shape.seq_q * shape.seq_k * shape.head_dim) as f64;
        let candidates: Vec<&'static VariantSpec> = gpu
            .dispatch_candidates(shape, args.dtype.sixteen(), causal)
            .into_iter()
            .map(|(variant, _)| variant)
            .collect();
        let variants = case_variants(&plan.variants, &candidates, shape.head_dim, gpu.arch);
        bar.inc_length(variants.len().saturating_sub(plan.variants.len()) as u64);
        for &variant in &variants {
            bar.inc(1);
            let slow = matches!(variant.family, Family::Naive | Family::FlashScalar);
            if slow && work > SLOW_KERNEL_LIMIT && args.kernels.is_empty() {
                continue;
            }
            bar.set_message(format!("{} {shape}", variant.name));
            rows.push(time_variant(gpu, variant, &mut tensors, params, args)?);
        }
        let mut missing = Vec::new();
        for &path in &paths {
            // What a path cannot run (grouped heads for cublas) is a note, checked without the GPU.
            let timed = path
                .check(shape, args.layout, false)
                .map_err(LabError::from)
                .and_then(|()| time_path(gpu, path, &mut tensors, params, args));
            match timed {
                Ok(row) => rows.push(row),
                Err(e) if e.is_missing_library() => {
                    missing.push(path);
                    notes.push(format!("{} peer not measured: {e}", path.name()));
                }
                Err(e) if e.is_gpu_fault() => return Err(e.into()),
                Err(e) => notes.push(format!("{} on {shape} causal={causal}: {e}", path.name())),
            }
        }
        paths.retain(|p| !missing.contains(p));
        gpu.synchronize()?;
        let naive = rows[first..]
            .iter()
            .find(|r| r.kernel == "naive")
            .map(|r| r.p50_us);
        for row in &mut rows[first..] {
            row.speedup_vs_naive = naive.map(|n| n / row.p50_us);
        }
    }
    bar.finish_and_clear();
    Ok(rows)
}

/// The variants timed on a case of head dim `head_dim` on a GPU of architecture `arch`: those
/// asked for (every one by default) that have the head dim, then the dispatch's `candidates` for
/// the case that are not among them and run here. Without the candidates, a `--kernel` list
/// that leaves out the dispatch's pick (the decode set's prefill chunk goes to flash_ws) left
/// the summary's pick unmeasured and its `ours` the fastest of the wrong family.
fn case_variants(
    asked: &[&'static VariantSpec],
    candidates: &[&'static VariantSpec],
    head_dim: usize,
    arch: u32,
) -> Vec<&'static VariantSpec> {
    let mut variants: Vec<&'static VariantSpec> = asked
        .iter()
        .copied()
        .filter(|v| v.runs_head_dim(head_dim))
        .collect();
    for &candidate in candidates {
        let runs = candidate.runs_head_dim(head_dim) && candidate.min_arch <= arch;
        if runs && !variants.iter().any(|v| v.name == candidate.name) {
            variants.push(candidate);
        }
    }
    variants
}

/// The flash_decode variants' paged entry points on every one of `cases`, once per
/// `--block-size`.
fn time_paged(
    gpu: &flashrs::Gpu,
    plan: &Plan,
    cases: &[(Shape, bool)],
    args: &Args,
) -> Result<Vec<Row>, Failure> {
    let mut rows = Vec::new();
    let decode: Vec<_> = plan
        .variants
        .iter()
        .filter(|v| v.has_paged() && v.min_arch <= gpu.arch)
        .collect();
    for &(shape, causal) in cases {
        for &block_size in &args.block_size {
            let problem = crate::paged::Problem {
                heads: shape.heads,
                heads_kv: shape.heads_kv,
                seq_q: shape.seq_q,
                head_dim: shape.head_dim,
                block_size,
                lens: vec![shape.seq_k as i32; shape.batch],
                causal,
                dtype: args.dtype.sixteen(),
            };
            let data = crate::paged::data(&problem, inputs::fresh_seed(), true)?;
            let mut tensors = crate::paged::upload(gpu, &data, args.dtype.sixteen(), flashrs::Layout::Bhsd)?;
            let params = Params {
                causal,
                scale: None,
                ..Params::default()
            };
            for variant in decode.iter().filter(|v| v.head_dims.contains(&shape.head_dim)) {
                let kernel = gpu.paged_kernel(variant, shape.head_dim, args.dtype.sixteen(), false)?;
                let timed = time_calls(gpu, args.repetitions(), || {
                    gpu.launch_paged(&kernel, &mut tensors, params, None)
                })?;
                let name = format!("{}_paged", variant.name);
                let mut row = timed.row(name, shape, args.dtype.sixteen(), causal, None)?;
                row.block_size = Some(block_size);
                row.layout = Some(flashrs::Layout::Bhsd);
                record_splits(&mut row, gpu, kernel.kernel(), tensors.shape())?;
                rows.push(row);
            }
        }
    }
    Ok(rows)
}

/// `--varlen`'s lengths, and its two dense cases: B=1 at the length of the same useful work,
/// and the batch padded to its longest sequence.
fn varlen_dense_shapes(seed: u64) -> (Shape, Shape) {
    let (count, max, heads, d) = VARLEN_CASE;
    let lens = crate::varlen::bench_lengths(count, max, seed);
    let longest = lens.iter().copied().max().unwrap_or(1);
    (
        Shape::new(1, heads, crate::varlen::dense_equivalent(&lens), d),
        Shape::new(count, heads, longest, d),
    )
}

/// `--varlen`: every runnable variant's varlen entry point on the packed batch.
fn time_varlen(gpu: &flashrs::Gpu, plan: &Plan, args: &Args) -> Result<Vec<Row>, Failure> {
    if !args.varlen {
        return Ok(Vec::new());
    }
    let (count, _, heads, d) = VARLEN_CASE;
    let heads_kv = args.heads_kv.unwrap_or(heads);
    let (lens, mut tensors) = crate::varlen::bench_case(
        gpu,
        args.varlen_seed,
        Some(heads_kv),
        args.causal,
        args.dtype.sixteen(),
    )?;
    println!(
        "varlen: {count} sequences, lengths {lens:?} (--varlen-seed {})",
        args.varlen_seed
    );
    let batch = tensors.batch().clone();
    let params = Params {
        causal: args.causal,
        scale: None,
        ..Params::default()
    };
    let padded = Shape::new(count, heads, batch.max_q(), d).with_heads_kv(heads_kv);
    let useful = batch.flops(heads, d, args.causal);
    let kv_bytes = 2.0 * (batch.total_k() * heads_kv * d) as f64 * 2.0;
    let mut rows = Vec::new();
    for variant in plan
        .variants
        .iter()
        .filter(|v| crate::varlen::runnable(gpu, v, d))
    {
        let kernel = gpu.varlen_kernel(variant, d, args.dtype.sixteen(), false)?;
        let timed = time_calls(gpu, args.repetitions(), || {
            gpu.launch_varlen(&kernel, &mut tensors, params, None)
        })?;
        let name = format!("{}_varlen", variant.name);
        let mut row = timed.row(name, padded, args.dtype.sixteen(), args.causal, None)?;
        row.tflops = useful / (row.p50_us * 1e-6) / 1e12;
        row.gbps = kv_bytes / (row.p50_us * 1e-6) / 1e9;
        row.varlen_lens = Some(lens.clone());
        row.layout = Some(flashrs::Layout::Bshd);
        rows.push(row);
    }
    Ok(rows)
}

/// `--block-size`'s verdicts as notes, one per case and page size: the library's paged kernel
/// (`paged_pick`: `Gpu::choose_paged`) against its dense pick on the contiguous cache
/// (`dense_pick`: `Gpu::choose`). Where that pick is `flash_decode` too (the decode shapes) this
/// is the comparison the decode goal limits to 10%; elsewhere (a prefill chunk, a prompt) the
/// dense pick is `flash_ws`, which reads no pages, and the note says so instead of a goal.
/// Silent where either row was not timed (name the picks with `--kernel`).
fn paged_summary(
    cases: &[(Shape, bool)],
    block_sizes: &[usize],
    rows: &[Row],
    dense_pick: impl Fn(Shape, bool) -> &'static VariantSpec,
    paged_pick: impl Fn(Shape, usize) -> Option<&'static VariantSpec>,
) -> Vec<String> {
    let timed = |name: &str, shape: Shape, causal: bool, block_size: Option<usize>| {
        rows.iter().find(|r| {
            !r.peer
                && r.kernel == name
                && r.shape == [shape.batch, shape.heads, shape.seq_q, shape.head_dim]
                && r.seq_k == shape.seq_k
                && r.heads_kv == shape.heads_kv
                && r.causal == causal
                && r.block_size == block_size
                && r.varlen_lens.is_none()
        })
    };
    let mut notes = Vec::new();
    for &(shape, causal) in cases {
        let dense = dense_pick(shape, causal);
        let Some(contiguous) = timed(dense.name, shape, causal, None) else {
            continue;
        };
        for &block_size in block_sizes {
            let Some(variant) = paged_pick(shape, block_size) else {
                continue;
            };
            let name = format!("{}_paged", variant.name);
            if let Some(paged) = timed(&name, shape, causal, Some(block_size)) {
                let goal = if dense.family == Family::FlashDecode {
                    "goal >= 0.909"
                } else {
                    "no goal: the contiguous pick is another family"
                };
                notes.push(format!(
                    "paged {shape} causal={causal}, {block_size} keys per page: {} {:.1} us against {} {:.1} us contiguous: {:.3}x ({goal})",
                    variant.name,
                    paged.p50_us,
                    dense.name,
                    contiguous.p50_us,
                    contiguous.p50_us / paged.p50_us
                ));
            }
        }
    }
    notes
}

/// `--varlen`'s verdicts as notes: our fastest varlen row against our fastest dense kernel at
/// the same useful work (its time scaled by useful / its own FLOPs) and against the padded batch
/// through cuDNN.
fn varlen_summary(rows: &[Row], args: &Args) -> Vec<String> {
    let (count, max, heads, d) = VARLEN_CASE;
    let lens = crate::varlen::bench_lengths(count, max, args.varlen_seed);
    let Ok(batch) = flashrs::VarlenBatch::from_lengths(&lens, &lens) else {
        return Vec::new();
    };
    let useful = batch.flops(heads, d, args.causal);
    let (dense, padded) = varlen_dense_shapes(args.varlen_seed);
    let at = |shape: Shape, peer: Option<&str>| {
        rows.iter()
            .filter(|r| {
                r.varlen_lens.is_none()
                    && r.shape == [shape.batch, shape.heads, shape.seq_q, shape.head_dim]
                    && r.causal == args.causal
                    && match peer {
                        Some(backend) => r.backend.as_deref() == Some(backend),
                        None => !r.peer,
                    }
            })
            .min_by(|a, b| a.p50_us.total_cmp(&b.p50_us))
    };
    let Some(ours) = rows
        .iter()
        .filter(|r| r.varlen_lens.is_some())
        .min_by(|a, b| a.p50_us.total_cmp(&b.p50_us))
    else {
        return vec!["varlen: no variant with a varlen entry point ran".into()];
    };
    let mut notes = vec![format!(
        "varlen: lengths {lens:?} (seed {}), useful work {:.1} GFLOP; ours {} {:.1} us ({:.0} TFLOP/s useful)",
        args.varlen_seed,
        useful / 1e9,
        ours.kernel,
        ours.p50_us,
        ours.tflops
    )];
    if let Some(row) = at(dense, None) {
        let same_work_us = row.p50_us * useful / dense.flops(args.causal);
        notes.push(format!(
            "varlen vs dense: {} on {dense} ({}) {:.1} us, {:.1} us at the same useful work: varlen takes {:.3}x (goal <= 1.10)",
            row.kernel,
            args.layout,
            row.p50_us,
            same_work_us,
            ours.p50_us / same_work_us
        ));
    }
    if let Some(row) = at(padded, Some("cudnn")) {
        notes.push(format!(
            "varlen vs the padded batch {padded} through cuDNN: {:.1} us ({:.0} TFLOP/s useful), ours {:.2}x faster (goal > 1)",
            row.p50_us,
            useful / (row.p50_us * 1e-6) / 1e12,
            row.p50_us / ours.p50_us
        ));
    }
    notes
}

impl Args {
    /// `--peers`, or both peers unless `--no-peers`.
    fn peers_or_default(&self) -> &[Peer] {
        match (self.peers.is_empty(), self.no_peers) {
            (true, false) => &Peer::ALL,
            (true, true) => &[],
            (false, _) => &self.peers,
        }
    }

    fn repetitions(&self) -> Repetitions {
        Repetitions {
            iters: self.iters,
            warmup: self.warmup,
            warmup_ms: self.warmup_ms,
            calls_per_graph: self.calls_per_graph,
        }
    }
}

/// One variant on one case: its timings ([`time_calls`]) and the barriers per tile declared and
/// counted.
fn time_variant(
    gpu: &flashrs::Gpu,
    variant: &'static VariantSpec,
    tensors: &mut flashrs::Tensors,
    params: Params,
    args: &Args,
) -> Result<Row, Failure> {
    let shape = tensors.shape();
    let kernel = gpu.kernel(variant, shape.head_dim, args.dtype.sixteen(), false)?;
    gpu.check_tensors_on_own_stream(tensors)?;
    let timed = time_calls(gpu, args.repetitions(), || {
        gpu.launch(&kernel, tensors, params, None)
    })?;
    // Counted at run time where this build has the instrumentation twin (FLASHRS_VARIANTS).
    let counted = match variant.counted_built {
        true => Some(gpu.count_barriers(variant, tensors, params)?),
        false => None,
    };
    let declared = ptx::u32_globals(embedded::PTX_SM90)
        .get(format!("{}_barriers_per_tile", kernel.symbol()).as_str())
        .copied();
    let mut row = timed.row(
        variant.name.to_string(),
        shape,
        args.dtype.sixteen(),
        params.causal,
        None,
    )?;
    row.layout = Some(tensors.layout());
    row.barriers_per_tile = declared;
    row.barriers_per_tile_runtime = counted.map(|c| c.per_tile);
    record_splits(&mut row, gpu, &kernel, shape)?;
    Ok(row)
}

/// For a flash_decode `kernel`: the key slices its launches on `shape` take, and who chose them.
fn record_splits(
    row: &mut Row,
    gpu: &flashrs::Gpu,
    kernel: &flashrs::Kernel,
    shape: Shape,
) -> Result<(), Failure> {
    if kernel.variant().family == Family::FlashDecode {
        let plan = gpu.split_plan(kernel, shape, flashrs::DecodeOptions::default())?;
        row.splits = Some(plan.splits);
        row.splits_source = Some(plan.source);
    }
    Ok(())
}

/// The peers asked for, on every case; what could not run becomes a note.
fn time_peers(plan: &Plan, args: &Args, notes: &mut Vec<String>) -> Result<Vec<Row>, Failure> {
    if plan.peers.is_empty() {
        return Ok(Vec::new());
    }
    let names: Vec<&str> = plan.peers.iter().map(|p| p.name()).collect();
    eprintln!("timing the peers ({}) on the same shapes...", names.join(", "));
    let reports = match peers::peer_bench(
        &plan.cases,
        &plan.peers,
        args.dtype.sixteen().long_name(),
        args.calls_per_graph,
        args.warmup,
        args.warmup_ms,
        args.iters,
    ) {
        Ok(reports) => reports,
        Err(reason) => {
            notes.push(format!("peers ({}) not measured: {reason}", names.join(", ")));
            return Ok(Vec::new());
        }
    };
    let mut rows = Vec::new();
    for (_, report) in reports {
        let mut note_once = |note: String| {
            if !notes.contains(&note) {
                notes.push(note);
            }
        };
        let fa3 = report
            .fa3
            .as_ref()
            .map_or(String::new(), |v| format!(", flash-attn-4 {v} (fa3)"));
        note_once(format!(
            "torch {} (cuDNN {:?}) on {}{fa3}",
            report.torch, report.cudnn, report.device
        ));
        if let Some(reason) = &report.fa3_error {
            note_once(format!("fa3 peer not measured: {reason}"));
        }
        for r in report.results {
            rows.extend(peer_row(r, args.dtype.sixteen(), notes)?);
        }
    }
    Ok(rows)
}

/// A peer's timings as a row (named `torch_<backend>`, or `fa3`), or its error as a note.
fn peer_row(r: peers::PeerRow, dtype: DType, notes: &mut Vec<String>) -> Result<Option<Row>, Failure> {
    let shape = Shape {
        batch: r.shape[0],
        heads: r.shape[1],
        heads_kv: r.heads_kv.unwrap_or(r.shape[1]),
        seq_q: r.shape[2],
        seq_k: r.seq_k,
        head_dim: r.shape[3],
        head_dim_v: r.shape[3],
    };
    let kernel = if r.backend == peers::FA3_BACKEND {
        r.backend.clone()
    } else {
        format!("torch_{}", r.backend)
    };
    if let Some(error) = r.error {
        notes.push(format!("{kernel} on {shape} causal={}: {error}", r.causal));
        return Ok(None);
    }
    if let Some(note) = &r.method_note {
        notes.push(format!("{kernel} on {shape} causal={}: {note}", r.causal));
    }
    let calls = r.calls_per_graph.unwrap_or(1);
    let mut row = row_from(
        kernel,
        shape,
        dtype,
        r.causal,
        calls,
        r.samples_us,
        Some(r.backend),
    )?;
    if let Some(method) = r.method {
        row.method = method;
    }
    row.window = r
        .window
        .and_then(|[start, end]| flashrs_lab::clocks::Window::from_unix_seconds(start, end));
    Ok(Some(row))
}

/// A library-composed path, timed like our kernels; a peer row (`backend: <path>`).
fn time_path(
    gpu: &flashrs::Gpu,
    path: library::Path,
    tensors: &mut flashrs::Tensors,
    params: Params,
    args: &Args,
) -> flashrs_lab::error::Result<Row> {
    let shape = tensors.shape();
    let mut made = path.make(gpu, shape, tensors.dtype())?;
    let no_timings = || flashrs::Error::InvalidProblem(format!("{}: no valid timings", path.name()));
    let timed = time_calls(gpu, args.repetitions(), || made.launch(gpu, tensors, params))
        .map_err(|_| no_timings())?;
    let name = path.name().to_string();
    let mut row = timed
        .row(name.clone(), shape, tensors.dtype(), params.causal, Some(name))
        .map_err(|_| no_timings())?;
    row.layout = Some(tensors.layout());
    Ok(row)
}

/// `--warmup-ms`: a finite number of milliseconds, 0 or more.
fn non_negative_ms(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(ms) if ms.is_finite() && ms >= 0.0 => Ok(ms),
        _ => Err(format!("`{text}` is not a number of milliseconds (0 or more)")),
    }
}

/// `KERNEL:RATIO` of `--gate`.
pub fn parse_gate(text: &str) -> Result<(String, f64), Failure> {
    let (kernel, ratio) = text
        .rsplit_once(':')
        .ok_or_else(|| Failure::Usage(format!("--gate `{text}`: expected KERNEL:RATIO")))?;
    let ratio: f64 = ratio
        .parse()
        .ok()
        .filter(|r: &f64| r.is_finite() && *r > 0.0)
        .ok_or_else(|| Failure::Usage(format!("--gate `{text}`: RATIO must be a positive number")))?;
    flashrs::VariantSpec::by_name(kernel)
        .ok_or_else(|| Failure::Usage(flashrs::Error::UnknownKernel(kernel.into()).to_string()))?;
    Ok((kernel.to_string(), ratio))
}

/// The cases where `kernel`'s speed is below `ratio` x the best peer's (speed = 1/p50), each as a
/// line; a case where the kernel or no peer ran cannot be judged and fails too.
pub fn gate_failures(rows: &[Row], kernel: &str, ratio: f64) -> Vec<String> {
    let mut failures = Vec::new();
    let mut judged = 0;
    for row in rows.iter().filter(|r| r.kernel == kernel) {
        let best_peer = rows
            .iter()
            .filter(|p| {
                p.peer
                    && p.shape == row.shape
                    && p.seq_k == row.seq_k
                    && p.heads_kv == row.heads_kv
                    && p.causal == row.causal
            })
            .min_by(|a, b| a.p50_us.total_cmp(&b.p50_us));
        let Some(peer) = best_peer else {
            failures.push(format!(
                "{kernel} on {:?} causal={}: no peer measured to compare with",
                row.shape, row.causal
            ));
            continue;
        };
        judged += 1;
        let achieved = peer.p50_us / row.p50_us;
        if achieved < ratio {
            failures.push(format!(
                "{kernel} on {:?} causal={}: {:.2} us vs {} {:.2} us = {achieved:.3}x, below {ratio}x",
                row.shape, row.causal, row.p50_us, peer.kernel, peer.p50_us
            ));
        }
    }
    if judged == 0 && failures.is_empty() {
        failures.push(format!("{kernel}: not benched on any shape, nothing to gate"));
    }
    failures
}

/// Every 16-bit variant this build compiled, saying on stderr how many of the table's it is: a
/// default build has the shipped ones only (`FLASHRS_VARIANTS=all` compiles the rest).
fn all_built_variants() -> Vec<&'static VariantSpec> {
    let built: Vec<_> = flashrs::variants::built(VARIANTS).collect();
    if built.len() < VARIANTS.len() {
        eprintln!(
            "{} of the table's {} variants are in this build (the shipped ones); build with \
             FLASHRS_VARIANTS=all for every one",
            built.len(),
            VARIANTS.len()
        );
    }
    built
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rounds::*;

    /// `bench`'s arguments as clap parses them from `argv` (its first word the command's name).
    fn parse_args(argv: &[&str]) -> Result<Args, clap::Error> {
        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            args: Args,
        }
        <Cli as clap::Parser>::try_parse_from(argv).map(|cli| cli.args)
    }

    fn row(kernel: &str, peer: bool, p50: f64) -> Row {
        row_from(
            kernel.into(),
            Shape::new(1, 8, 512, 64),
            DType::F16,
            false,
            1,
            vec![p50; 5],
            peer.then(|| "cudnn".to_string()),
        )
        .ok()
        .unwrap()
    }

    #[test]
    fn paged_notes_compare_the_paged_pick_with_the_contiguous_pick() {
        let named = |name: &str| VariantSpec::by_name(name).unwrap();
        let (pick, twin) = (
            named("flash_decode_m16_n128_w8_s3_mbarrier"),
            named("flash_decode_m16_n64_w4_s2_mbarrier"),
        );
        let decode = Shape::new(1, 8, 512, 64);
        let timed = |kernel: String, p50: f64, block_size: Option<usize>| {
            let mut r = row(&kernel, false, p50);
            r.block_size = block_size;
            r
        };
        let rows = vec![
            timed(pick.name.into(), 100.0, None),
            timed(format!("{}_paged", pick.name), 101.0, Some(256)),
            // The twin's row at 16 keys; the pick's paged row there must not be the one taken.
            timed(format!("{}_paged", pick.name), 150.0, Some(16)),
            timed(format!("{}_paged", twin.name), 125.0, Some(16)),
        ];
        let paged_pick = |_: Shape, block_size: usize| Some(if block_size == 16 { twin } else { pick });
        let notes = paged_summary(&[(decode, false)], &[16, 32, 256], &rows, |_, _| pick, paged_pick);
        assert_eq!(notes.len(), 2, "no row at 32 keys per page: no note: {notes:?}");
        assert!(
            notes[0].contains("16 keys per page") && notes[0].contains(twin.name),
            "{}",
            notes[0]
        );
        assert!(notes[0].contains("0.800x (goal >= 0.909)"), "{}", notes[0]);
        assert!(
            notes[1].contains("256 keys per page") && notes[1].contains("0.990x"),
            "{}",
            notes[1]
        );
        // Against a dense pick of another family: the ratio, no goal.
        let ws = named("flash_ws_m128_n128_s2_pp_ov_mbarrier");
        let rows = vec![timed(ws.name.into(), 20.0, None), rows[1].clone()];
        let notes = paged_summary(&[(decode, false)], &[256], &rows, |_, _| ws, |_, _| Some(pick));
        assert!(notes[0].contains("0.198x (no goal"), "{notes:?}");
        // No contiguous row of the dense pick: silent.
        assert!(paged_summary(
            &[(decode, false)],
            &[256],
            &rows[1..],
            |_, _| pick,
            |_, _| Some(pick)
        )
        .is_empty());
    }

    #[test]
    fn every_case_times_the_dispatchs_candidates_beside_what_was_asked() {
        let named = |name: &str| VariantSpec::by_name(name).unwrap();
        let decode = [
            named("flash_decode_m16_n128_w8_s3_light"),
            named("flash_decode_m16_n64_w4_s4_light"),
        ];
        // The decode set's prefill chunk, as the H100's dispatch sees it.
        let chunk = Shape {
            seq_q: 128,
            ..Shape::new(4, 32, 4096, 128)
        };
        let candidates: Vec<_> = flashrs::gpu::dispatch_candidates(
            flashrs::dispatch::builtin_tuned(),
            "NVIDIA H100 80GB HBM3",
            90,
            132,
            chunk,
            DType::F16,
            false,
        )
        .into_iter()
        .map(|(v, _)| v)
        .collect();
        let timed = case_variants(&decode, &candidates, 128, 90);
        let names: Vec<&str> = timed.iter().map(|v| v.name).collect();
        assert_eq!(&names[..2], [decode[0].name, decode[1].name], "asked for first");
        for candidate in &candidates {
            assert_eq!(
                names.iter().filter(|&&n| n == candidate.name).count(),
                1,
                "{} timed once: {names:?}",
                candidate.name
            );
        }
        // A candidate already asked for is not timed twice; one this GPU or head dim lacks is
        // left out.
        let ws = named("flash_ws_m128_n176_s2_pp_ov_mbarrier");
        assert_eq!(case_variants(&[ws], &[ws, decode[0]], 128, 90).len(), 2);
        assert_eq!(
            case_variants(&decode, &[ws], 128, 80).len(),
            2,
            "flash_ws needs sm_90"
        );
        let d256 = case_variants(
            &[],
            &[decode[0], named("flash_ws_m128_n80_s2_ov_mbarrier")],
            256,
            90,
        );
        assert_eq!(
            d256.iter().map(|v| v.name).collect::<Vec<_>>(),
            ["flash_ws_m128_n80_s2_ov_mbarrier"]
        );
    }

    #[test]
    fn gate_passes_a_reachable_ratio_and_fails_an_unreachable_one() {
        let rows = vec![
            row("flash_mma_m64_n64_w4_s2_light", false, 10.0),
            row("torch_cudnn", true, 9.0),
        ];
        assert!(gate_failures(&rows, "flash_mma_m64_n64_w4_s2_light", 0.85).is_empty());
        let failures = gate_failures(&rows, "flash_mma_m64_n64_w4_s2_light", 0.95);
        assert_eq!(failures.len(), 1);
        assert!(failures[0].contains("0.900x"), "{failures:?}");
        assert!(!gate_failures(&rows, "flash_mma_m64_n64_w4_s2_light", 1e6).is_empty());
    }

    #[test]
    fn gate_without_peers_or_kernel_fails_rather_than_passing_silently() {
        let alone = vec![row("flash_mma_m64_n64_w4_s2_light", false, 10.0)];
        assert!(!gate_failures(&alone, "flash_mma_m64_n64_w4_s2_light", 0.5).is_empty());
        assert!(!gate_failures(&alone, "naive", 0.5).is_empty());
    }

    #[test]
    fn gate_arguments_are_checked() {
        assert!(parse_gate("flash_mma_m64_n64_w4_s2_light:0.95").is_ok());
        for bad in [
            "flash_mma_m64_n64_w4_s2_light",
            "nope:1.0",
            "flash_mma_m64_n64_w4_s2_light:-1",
            "naive:x",
        ] {
            assert!(parse_gate(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn peer_rows_keep_their_method_and_errors_become_notes() {
        let row = |backend: &str, error: Option<&str>| peers::PeerRow {
            backend: backend.into(),
            shape: [2, 16, 4096, 256],
            seq_k: 4096,
            heads_kv: None,
            causal: true,
            method: Some("cuda_events_back_to_back".into()),
            method_note: Some("graph capture failed (x)".into()),
            calls_per_graph: Some(2),
            samples_us: if error.is_some() { vec![] } else { vec![400.0; 3] },
            window: Some([1.5, 2.0]),
            error: error.map(str::to_string),
        };
        let mut notes = Vec::new();
        let fa3 = peer_row(row("fa3", None), DType::Bf16, &mut notes)
            .ok()
            .unwrap()
            .unwrap();
        assert_eq!(
            (fa3.kernel.as_str(), fa3.backend.as_deref()),
            ("fa3", Some("fa3"))
        );
        assert!(fa3.peer && fa3.method == "cuda_events_back_to_back" && fa3.calls_per_graph == 2);
        // The helper's Unix-seconds window becomes the row's, for the clock lookup.
        let at = |s: f64| std::time::SystemTime::UNIX_EPOCH + std::time::Duration::from_secs_f64(s);
        assert_eq!(fa3.window.map(|w| (w.start, w.end)), Some((at(1.5), at(2.0))));
        assert!(
            notes[0].contains("fa3") && notes[0].contains("graph capture failed"),
            "{notes:?}"
        );
        let cudnn = peer_row(row("cudnn", None), DType::Bf16, &mut notes)
            .ok()
            .unwrap()
            .unwrap();
        assert_eq!(cudnn.kernel, "torch_cudnn");
        let failed = peer_row(
            row("efficient", Some("No available kernel.")),
            DType::F16,
            &mut notes,
        );
        assert!(failed.ok().unwrap().is_none());
        assert!(
            notes.last().unwrap().contains("torch_efficient")
                && notes.last().unwrap().contains("No available")
        );
    }

    #[test]
    fn peers_parse_as_a_comma_list_once_each() {
        let parse = |peers: &str| parse_args(&["bench", "--peers", peers]);
        let args = parse("torch,fa3,torch").ok().unwrap();
        assert_eq!(args.peers, [Peer::Torch, Peer::Fa3, Peer::Torch]);
        let plan = Plan::new(&args).ok().unwrap();
        assert_eq!(plan.peers, [Peer::Torch, Peer::Fa3]);
        assert_eq!(parse("fa3").ok().unwrap().peers, [Peer::Fa3]);
        let err = parse("torch,fa4").err().unwrap().to_string();
        assert!(err.contains("unknown peer `fa4` (torch, fa3)"), "{err}");
        // A head dim without tiles of its own (192) runs padded: a case with any peers or none.
        // One that no kernel takes (not a multiple of 8) is refused whatever the peers.
        let shape = |d: usize, peers: &[&str]| {
            let extra = format!("2,16,4096,{d}");
            let mut argv = vec!["bench", "--shapes", "std", "--shape", &extra];
            argv.extend_from_slice(peers);
            let args = parse_args(&argv).ok().unwrap();
            Plan::new(&args).map(|p| p.cases)
        };
        for peers in [&["--peers", "fa3"][..], &[], &["--no-peers"]] {
            let cases = shape(192, peers).ok().unwrap();
            assert_eq!(cases.len(), 12);
            assert_eq!(cases[11], (Shape::new(2, 16, 4096, 192), false));
            assert!(shape(100, peers).is_err());
        }
    }

    #[test]
    fn a_shape_given_alone_is_the_only_case() {
        let cases = |argv: &[&str]| {
            let args = parse_args(argv).ok().unwrap();
            Plan::new(&args).ok().unwrap().cases
        };
        let alone = cases(&["bench", "--shape", "1,32,1,4096,128"]);
        let decode = Shape {
            seq_q: 1,
            ..Shape::new(1, 32, 4096, 128)
        };
        assert_eq!(alone, [(decode, false)]);
        // Beside a named set it is one more case; with neither, the default sets.
        let beside = cases(&["bench", "--shapes", "small", "--shape", "1,32,1,4096,128"]);
        assert_eq!(beside.len(), cases(&["bench", "--shapes", "small"]).len() + 1);
        assert!(cases(&["bench"]).len() > 1);
    }

    /// `row`'s, timed in `round` (recorded in its launch p50, to tell which round a merged row
    /// came from) at `p50`.
    fn row_of_round(kernel: &str, peer: bool, round: u32, p50: f64) -> Row {
        let mut row = row(kernel, peer, p50);
        row.event_p50_us = Some(round as f64);
        row
    }

    /// The round a merged row was taken from, and its p50s of every round.
    fn origin(row: &Row) -> (Option<f64>, Option<&[f64]>) {
        (row.event_p50_us, row.rounds_p50_us.as_deref())
    }

    #[test]
    fn the_merged_row_is_the_median_round_or_the_lower_middle_one() {
        assert_eq!(median_round(&[30.0, 10.0, 20.0]), 2);
        assert_eq!(median_round(&[10.0, 40.0, 30.0, 20.0]), 3, "20 of 10, 20, 30, 40");
        assert_eq!(median_round(&[5.0]), 0);
        assert_eq!(median_round(&[7.0, 6.0]), 1, "the lower of two");
        // Three rounds: the middle p50, with every other figure of that same round.
        let three = vec![
            vec![row_of_round("a", false, 1, 12.0)],
            vec![row_of_round("a", false, 2, 10.0)],
            vec![row_of_round("a", false, 3, 11.0)],
        ];
        let merged = merge_rounds(three);
        assert_eq!(merged.len(), 1);
        assert_eq!(origin(&merged[0]), (Some(3.0), Some(&[12.0, 10.0, 11.0][..])));
        assert_eq!((merged[0].p50_us, merged[0].p90_us), (11.0, 11.0));
        assert_eq!(merged[0].samples_us, [11.0; 5]);
        // Four rounds: the lower of the middle two (11 of 10, 11, 12, 13), never their mean.
        let four = [13.0, 12.0, 10.0, 11.0]
            .iter()
            .zip(1..)
            .map(|(&p50, round)| vec![row_of_round("a", false, round, p50)])
            .collect();
        let merged = merge_rounds(four);
        assert_eq!(
            origin(&merged[0]),
            (Some(4.0), Some(&[13.0, 12.0, 10.0, 11.0][..]))
        );
        assert_eq!(merged[0].p50_us, 11.0);
    }

    #[test]
    fn a_row_missing_from_a_round_merges_from_the_rounds_it_has() {
        let rounds = vec![
            vec![
                row_of_round("a", false, 1, 10.0),
                row_of_round("torch_cudnn", true, 1, 9.0),
            ],
            // The peer failed in this round.
            vec![row_of_round("a", false, 2, 12.0)],
            vec![
                row_of_round("a", false, 3, 11.0),
                row_of_round("torch_cudnn", true, 3, 8.0),
            ],
        ];
        let merged = merge_rounds(rounds);
        let kernels: Vec<&str> = merged.iter().map(|r| r.kernel.as_str()).collect();
        assert_eq!(kernels, ["a", "torch_cudnn"]);
        assert_eq!(origin(&merged[0]), (Some(3.0), Some(&[10.0, 12.0, 11.0][..])));
        assert_eq!(origin(&merged[1]), (Some(3.0), Some(&[9.0, 8.0][..])));
        // A row first timed in a later round is kept too, after those timed before it.
        let late = merge_rounds(vec![vec![], vec![row_of_round("fa3", true, 2, 7.0)]]);
        assert_eq!(origin(&late[0]), (Some(2.0), Some(&[7.0][..])));
    }

    #[test]
    fn rows_merge_only_with_the_same_measurement_of_other_rounds() {
        let paged = |round: u32, p50: f64| {
            let mut row = row_of_round("a", false, round, p50);
            row.block_size = Some(16);
            row
        };
        let bshd = |round: u32, p50: f64| {
            let mut row = row_of_round("a", false, round, p50);
            row.layout = Some(flashrs::Layout::Bshd);
            row
        };
        let round = |r: u32, p50: f64| {
            vec![
                row_of_round("a", false, r, p50),
                paged(r, p50 + 100.0),
                bshd(r, p50 + 200.0),
                row_of_round("a", true, r, p50 + 300.0),
                // The same case listed twice: its second timing goes with the others' second.
                row_of_round("a", false, r, p50 + 400.0),
            ]
        };
        let merged = merge_rounds(vec![round(1, 1.0), round(2, 2.0), round(3, 3.0)]);
        let p50s: Vec<Vec<f64>> = merged
            .iter()
            .map(|r| r.rounds_p50_us.clone().unwrap_or_default())
            .collect();
        assert_eq!(
            p50s,
            [
                [1.0, 2.0, 3.0],
                [101.0, 102.0, 103.0],
                [201.0, 202.0, 203.0],
                [301.0, 302.0, 303.0],
                [401.0, 402.0, 403.0]
            ]
        );
        assert_eq!(merged[1].block_size, Some(16));
        assert_eq!(merged[2].layout, Some(flashrs::Layout::Bshd));
        assert!(merged[3].peer && !merged[4].peer);
    }

    #[test]
    fn odd_rounds_time_ours_first_and_even_rounds_the_peers_first() {
        let orders: Vec<Order> = (1..=4).map(round_order).collect();
        assert_eq!(
            orders,
            [
                Order::OursFirst,
                Order::PeersFirst,
                Order::OursFirst,
                Order::PeersFirst
            ]
        );
        assert_eq!(round_order(2).describe(OUR_SIDES), "the peers first");
        assert_eq!(round_order(3).describe(["e4m3", "fp16"]), "e4m3 first");
    }

    #[test]
    fn one_round_leaves_rows_and_notes_as_they_are() {
        let rows = vec![
            row("a", false, 10.0),
            row("a", false, 10.0),
            row("torch_cudnn", true, 9.0),
        ];
        let merged = merge_rounds(vec![rows]);
        assert_eq!(merged.len(), 3, "nothing merged within a round");
        assert!(merged.iter().all(|r| r.rounds_p50_us.is_none()));
        let json = serde_json::to_value(&merged[0]).unwrap();
        assert!(json.get("rounds_p50_us").is_none(), "{json}");
        let notes = vec!["x".to_string(), "x".to_string()];
        assert_eq!(merge_notes(vec![notes.clone()]), notes);
        assert_eq!(rounds_text(1, OUR_SIDES), "");
        let text = rounds_text(3, OUR_SIDES);
        assert!(
            text.contains("3 rounds (odd rounds ours first, even rounds the peers first"),
            "{text}"
        );
        let args = parse_args(&["bench"]).ok().unwrap();
        assert_eq!(Plan::new(&args).ok().unwrap().rounds, 1);
    }

    #[test]
    fn notes_of_several_rounds_come_once_naming_the_rounds_of_a_partial_one() {
        let notes = |list: &[&str]| list.iter().map(|n| n.to_string()).collect::<Vec<_>>();
        let merged = merge_notes(vec![
            notes(&["torch 2.9"]),
            notes(&["torch 2.9", "fa3 failed"]),
            notes(&["torch 2.9", "fa3 failed"]),
        ]);
        assert_eq!(merged, ["torch 2.9", "fa3 failed (rounds 2, 3 of 3)"]);
        let once = merge_notes(vec![notes(&["x"]), notes(&[])]);
        assert_eq!(once, ["x (round 1 of 2)"]);
    }

    #[test]
    fn zero_rounds_is_a_usage_error_and_fp8_takes_rounds() {
        let zero = parse_args(&["bench", "--rounds", "0"]).ok().unwrap();
        let Err(Failure::Usage(line)) = Plan::new(&zero) else {
            panic!("--rounds 0 accepted");
        };
        assert!(line.contains("--rounds") && line.lines().count() == 1, "{line}");
        let three = parse_args(&["bench", "--rounds", "3"]).ok().unwrap();
        assert_eq!(Plan::new(&three).ok().unwrap().rounds, 3);
        let fp8 = |rounds: &str| {
            let args = parse_args(&["bench", "--dtype", "e4m3", "--rounds", rounds])
                .ok()
                .unwrap();
            fp8_args(&args)
        };
        assert_eq!(fp8("3").ok().map(|a| a.rounds), Some(3));
        assert_eq!(fp8("1").ok().map(|a| a.rounds), Some(1));
        let Err(Failure::Usage(line)) = fp8("0") else {
            panic!("--dtype e4m3 --rounds 0 accepted");
        };
        assert!(
            line.starts_with("--rounds 0") && line.lines().count() == 1,
            "{line}"
        );
    }

    #[test]
    fn the_layout_defaults_to_bhsd_and_takes_bshd() {
        let layout = |argv: &[&str]| parse_args(argv).map(|args| args.layout);
        assert_eq!(layout(&["bench"]).unwrap(), flashrs::Layout::Bhsd);
        assert_eq!(
            layout(&["bench", "--layout", "bshd"]).unwrap(),
            flashrs::Layout::Bshd
        );
        assert!(layout(&["bench", "--layout", "bsdh"]).is_err());
    }
}
