//! `tune`: evolutionary search over the compiled configurations (`flashrs_lab::search`), seeded by
//! `micro`'s ranking. Every candidate passes three gates in order: it exists for this GPU and head
//! dim, it is correct on fresh random inputs against the float64 reference, and only then is it
//! timed (median of at least 100 graph-replayed calls). `--save` records the winner in the tuned
//! table the library's dispatch reads.
//!
//! `tune --splits` searches the other decision the library makes for decode-like problems: how
//! many key slices the dispatch's `flash_decode` variant cuts each row block's keys into. Each
//! candidate count (powers of two up to the problem's KV tiles and `MAX_SPLITS`, the heuristic's
//! count, the one launches take now, or `--split-counts`) is forced on the launch
//! (`DecodeOptions::splits`) and passes the same gates; `--save` records the fastest as a
//! `decode_splits` entry, which the decode plan then prefers to its heuristic.

use std::path::{Path, PathBuf};

use flashrs::decode::{Plan, SplitSource, MAX_SPLITS};
use flashrs::tuned_table::{Entry, SeqBucket, SplitProblem, TunedTable};
use flashrs::{DType, DecodeOptions, Gpu, Params, Shape, VariantSpec};
use flashrs_lab::reference::{self, DTypeTolerance, ReferenceDims};
use flashrs_lab::search::{self, Outcome, SearchConfig, Space};
use flashrs_lab::Timing;
use serde::Serialize;

use crate::inputs::{self, Inputs};
use crate::{micro, peers, Failure};

#[derive(clap::Args)]
pub struct Args {
    /// Problem to tune for, B,H,S,D (or B,H,S_Q,S_K,D).
    #[arg(long, default_value = "2,16,4096,128")]
    shape: Shape,
    /// Key/value heads (grouped-query attention; must divide the shape's heads), e.g. 8 for
    /// `--shape 1,32,1,32768,128`: the correctness gate keeps the grouping.
    #[arg(long)]
    heads_kv: Option<usize>,
    /// Element type: f16 or bf16.
    #[arg(long, default_value = "f16")]
    dtype: DType,
    /// Causal masking.
    #[arg(long)]
    causal: bool,
    /// Evaluations (distinct configurations) at most.
    #[arg(long, default_value_t = 40)]
    budget: usize,
    /// Configurations per generation.
    #[arg(long, default_value_t = 8)]
    population: usize,
    /// The best this many always survive into the next generation.
    #[arg(long, default_value_t = 3)]
    elite: usize,
    /// Seed of the search (mutation, crossover, random immigrants) and of the inputs.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Timed graph replays per candidate (at least 100).
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u64).range(100..))]
    iters: u64,
    /// Also time torch's SDPA backends on the shape (`torch`), for the speedup over the best.
    #[arg(long)]
    peers: Option<String>,
    /// Every evaluation as CSV (evidence/search/evo_log.csv).
    #[arg(long)]
    log: Option<PathBuf>,
    /// The result as JSON (evidence/search/evo_best.json).
    #[arg(long)]
    json: Option<PathBuf>,
    /// Record the winner for this GPU, dtype, head dim, sequence bucket and mask in the tuned table.
    #[arg(long)]
    save: bool,
    /// The tuned table `--save` writes (the library embeds tuned/h100.json).
    #[arg(long, default_value = "tuned/h100.json")]
    table: PathBuf,
    /// Tune the split count instead of the kernel: on a decode-like --shape (at most 32 query
    /// rows per KV head, e.g. 1,32,1,32768,128), time the dispatch's flash_decode variant at
    /// each candidate count of key slices, each first checked against the float64 reference;
    /// `--save` records the fastest as the tuned table's `decode_splits` entry for this GPU,
    /// dtype, kernel, head dim and the shape's buckets (rows per KV head, unsplit blocks, S_k).
    #[arg(long, conflicts_with_all = ["budget", "population", "elite", "peers", "log"])]
    splits: bool,
    /// With --splits: the counts to try, comma-separated, in place of the powers of two up to the
    /// problem's KV tiles and 128 (the heuristic's count and the one launches take now are
    /// always tried too). A count the problem cannot take as given is refused before timing.
    #[arg(long, value_delimiter = ',', requires = "splits", value_name = "N,...")]
    split_counts: Vec<u32>,
}

impl Args {
    /// The problem: `--shape` with `--heads-kv` applied.
    fn problem(&self) -> Shape {
        match self.heads_kv {
            Some(heads_kv) => self.shape.with_heads_kv(heads_kv),
            None => self.shape,
        }
    }
}

#[derive(Serialize)]
struct Report<'a> {
    gpu: &'a str,
    shape: String,
    dtype: &'static str,
    causal: bool,
    micro_seeds: Vec<&'static str>,
    best_kernel: Option<&'static str>,
    best_p50_us: Option<f64>,
    default_kernel: &'static str,
    default_p50_us: Option<f64>,
    speedup_vs_default: Option<f64>,
    best_peer: Option<String>,
    best_peer_p50_us: Option<f64>,
    speedup_vs_best_peer: Option<f64>,
    search: &'a search::SearchResult,
}

/// Everything checked before the GPU is opened.
fn check(args: &Args) -> Result<(), Failure> {
    args.problem().validate()?;
    if args.budget == 0 || args.population == 0 {
        return Err(Failure::Usage(
            "--budget and --population must be at least 1".into(),
        ));
    }
    if let Some(other) = args.peers.as_deref().filter(|p| *p != "torch") {
        return Err(Failure::Usage(format!("unknown peer `{other}` (torch)")));
    }
    if args.splits {
        check_splits(args)?;
    }
    let table = args.save.then(|| args.table.clone());
    inputs::check_outputs([&args.log, &table])?;
    inputs::check_json_outputs([&args.json])
}

/// `--splits`' own checks: a problem `flash_decode` packs into one or two row tiles, and counts
/// that some problem could take.
fn check_splits(args: &Args) -> Result<(), Failure> {
    let rows = args.problem().kv_group() * args.problem().seq_q;
    if rows > flashrs::decode::DECODE_MAX_ROWS {
        return Err(Failure::Usage(format!(
            "--splits: {} has {rows} query rows per KV head (group x S_q), more than the {} of a decode-like problem",
            args.problem(),
            flashrs::decode::DECODE_MAX_ROWS
        )));
    }
    match args.split_counts.iter().find(|&&n| n == 0 || n > MAX_SPLITS) {
        Some(n) => Err(Failure::Usage(format!(
            "--split-counts: {n} is outside 1 to {MAX_SPLITS}"
        ))),
        None => Ok(()),
    }
}

pub fn run(device: usize, args: Args) -> Result<(), Failure> {
    check(&args)?;
    inputs::json_to_stdout(args.json.as_deref())?;
    let gpu = inputs::open_gpu(device)?;
    if args.splits {
        return tune_splits(&gpu, &args);
    }
    let iters = args.iters as usize;
    println!(
        "tune on {} (sm_{}): {} {} causal={}, budget {} evaluations, seed {}",
        gpu.name,
        gpu.arch,
        args.problem(),
        args.dtype,
        args.causal,
        args.budget,
        args.seed
    );
    let space = Space::from_built(flashrs::VARIANTS, args.problem().head_dim).retain_arch(gpu.arch);
    if space.is_empty() {
        return Err(flashrs::Error::UnsupportedHeadDim(
            args.problem().head_dim,
            flashrs::variants::HEAD_DIMS,
        )
        .into());
    }

    eprintln!("seeding from micro...");
    let ranked = micro::measure(&gpu, args.problem(), args.dtype, args.causal)?;
    let seeds: Vec<&'static str> = ranked.iter().take(args.elite.max(3)).map(|r| r.kernel).collect();
    println!("micro Top-{}: {}", seeds.len(), seeds.join(", "));

    let mut evaluator = Gates::new(
        &gpu,
        check_shape(args.problem()),
        args.problem(),
        args.dtype,
        args.causal,
        args.seed,
        iters,
    )?;
    let config = SearchConfig {
        budget: args.budget,
        population: args.population,
        elite: args.elite,
        seed: args.seed,
        ..SearchConfig::default()
    };
    let bar = inputs::progress(args.budget.min(space.len()), "tune");
    let result = search::search(
        &space,
        &seeds,
        &config,
        &mut |v: &'static VariantSpec| evaluator.evaluate(v),
        |done, total| {
            bar.set_length(total as u64);
            bar.set_position(done as u64);
        },
    );
    bar.finish_and_clear();

    for record in &result.history {
        println!(
            "gen {:>2}  {:<44} {:<10} {}",
            record.generation,
            record.variant,
            format!("{:?}", record.outcome),
            record.p50_us.map_or(String::new(), |p| format!("{p:.2} us"))
        );
    }
    let default = flashrs::gpu::default_variant(args.problem(), args.causal, gpu.sm_count, gpu.arch);
    // The default's time from the search itself when it was a candidate (one measurement per
    // kernel: re-timing the same kernel would report run-to-run noise as a speedup).
    let searched = result
        .history
        .iter()
        .find(|r| r.variant == default.name)
        .map(|r| r.p50_us);
    let default_p50 = match searched {
        Some(p50) => p50,
        None => match evaluator.evaluate(default) {
            Outcome::Timed { p50_us } => Some(p50_us),
            _ => None,
        },
    };
    let best = result.best.as_ref();
    let speedup_vs_default = best.zip(default_p50).map(|(b, d)| d / b.p50_us);
    let peer = match args.peers.as_deref() {
        None => None,
        Some("torch") => best_torch(&args, iters),
        Some(other) => return Err(Failure::Usage(format!("unknown peer `{other}` (torch)"))),
    };
    match best {
        Some(b) => println!(
            "best: {} {:.2} us; default {} {}; {}",
            b.variant,
            b.p50_us,
            default.name,
            default_p50.map_or("failed its gates".into(), |d| format!(
                "{d:.2} us ({:.3}x)",
                d / b.p50_us
            )),
            peer.as_ref().map_or("no peer timed".into(), |(n, p)| format!(
                "best peer {n} {p:.2} us ({:.3}x)",
                p / b.p50_us
            ))
        ),
        None => println!("no configuration passed the gates"),
    }

    if let Some(path) = &args.log {
        std::fs::write(path, result.to_csv()).map_err(|e| format!("{}: {e}", path.display()))?;
    }
    if let Some(path) = &args.json {
        let report = Report {
            gpu: &gpu.name,
            shape: args.problem().to_string(),
            dtype: args.dtype.name(),
            causal: args.causal,
            micro_seeds: seeds.clone(),
            best_kernel: best.map(|b| b.variant),
            best_p50_us: best.map(|b| b.p50_us),
            default_kernel: default.name,
            default_p50_us: default_p50,
            speedup_vs_default,
            best_peer: peer.as_ref().map(|(n, _)| n.clone()),
            best_peer_p50_us: peer.as_ref().map(|(_, p)| *p),
            speedup_vs_best_peer: best.zip(peer.as_ref()).map(|(b, (_, p))| p / b.p50_us),
            search: &result,
        };
        inputs::write_json(path, &report)?;
    }
    if args.save {
        let Some(best) = best else {
            return Err(Failure::Usage("--save: no configuration passed the gates".into()));
        };
        save_to_table(&args.table, |table| {
            table.upsert(
                &gpu.name,
                Entry {
                    dtype: args.dtype.name().to_string(),
                    head_dim: args.problem().head_dim,
                    seq_bucket: SeqBucket::of_lengths(args.problem().seq_q, args.problem().seq_k),
                    causal: args.causal,
                    kernel: best.variant.to_string(),
                    p50_us: best.p50_us,
                    speedup_vs_default: speedup_vs_default.unwrap_or(1.0),
                    measured: flashrs::tuned_table::today_utc(),
                },
            );
        })?;
    }
    Ok(())
}

/// Adds to the tuned table at `path` (a new one where there is none) and writes it back.
fn save_to_table(path: &Path, update: impl FnOnce(&mut TunedTable)) -> Result<(), Failure> {
    let mut table = if path.exists() {
        TunedTable::load(path)?
    } else {
        TunedTable::new()
    };
    update(&mut table);
    table.save(path)?;
    println!("saved to {}", path.display());
    Ok(())
}

/// One count's result in `tune --splits`' JSON.
#[derive(Serialize)]
struct SplitCandidate {
    splits: u32,
    outcome: Outcome,
}

/// `tune --splits --json`.
#[derive(Serialize)]
struct SplitReport<'a> {
    gpu: &'a str,
    shape: String,
    dtype: &'static str,
    causal: bool,
    kernel: &'static str,
    kv_tiles: u32,
    /// Blocks without splitting (`B x H_kv x row blocks`).
    blocks: u64,
    heuristic_splits: u32,
    /// What a launch takes before this run's `--save`, and from where.
    launch_splits: u32,
    launch_source: SplitSource,
    candidates: Vec<SplitCandidate>,
    best_splits: Option<u32>,
    best_p50_us: Option<f64>,
    heuristic_p50_us: Option<f64>,
    speedup_vs_heuristic: Option<f64>,
}

/// `--splits`: every candidate count through the gates on the dispatch's flash_decode variant.
fn tune_splits(gpu: &Gpu, args: &Args) -> Result<(), Failure> {
    let shape = args.problem();
    let variant = flashrs::decode::decode_variant(shape, gpu.arch, gpu.sm_count).ok_or_else(|| {
        Failure::Usage(format!(
            "--splits: the dispatch does not take flash_decode for {shape} on {} (sm_{}), so no split count applies",
            gpu.name, gpu.arch
        ))
    })?;
    let kernel = gpu.kernel(variant, shape.head_dim, args.dtype, false)?;
    let heuristic = gpu.heuristic_split_plan(&kernel, shape)?;
    let launch = gpu.split_plan(&kernel, shape, DecodeOptions::default())?;
    let candidates = split_candidates(heuristic, launch.splits, &args.split_counts)?;
    println!(
        "tune --splits on {} (sm_{}): {} on {shape} {} causal={}: {} KV tiles, {} blocks unsplit; \
         the heuristic cuts {} slices, launches take {} ({}); trying {candidates:?}",
        gpu.name,
        gpu.arch,
        variant.name,
        args.dtype,
        args.causal,
        heuristic.kv_tiles,
        heuristic.blocks(),
        heuristic.splits,
        launch.splits,
        launch.source.name(),
    );
    let mut gates = Gates::new(
        gpu,
        split_check_shape(shape, variant.block_n),
        shape,
        args.dtype,
        args.causal,
        args.seed,
        args.iters as usize,
    )?;
    let bar = inputs::progress(candidates.len(), "tune --splits");
    let results: Vec<SplitCandidate> = candidates
        .iter()
        .map(|&splits| {
            bar.set_message(format!("{splits} slices"));
            let outcome = gates.evaluate_with(variant, DecodeOptions { splits: Some(splits) });
            bar.inc(1);
            SplitCandidate { splits, outcome }
        })
        .collect();
    bar.finish_and_clear();
    let p50 = |c: &SplitCandidate| match c.outcome {
        Outcome::Timed { p50_us } => Some(p50_us),
        _ => None,
    };
    let best = results
        .iter()
        .filter_map(|c| p50(c).map(|p| (c.splits, p)))
        .min_by(|a, b| a.1.total_cmp(&b.1));
    let heuristic_p50 = results
        .iter()
        .find(|c| c.splits == heuristic.splits)
        .and_then(p50);
    let speedup_vs_heuristic = best.zip(heuristic_p50).map(|((_, b), h)| h / b);

    println!(
        "{:>6}  {:<22} {:<10} {:>10} {:>13}",
        "splits", "", "outcome", "p50 us", "vs heuristic"
    );
    for c in &results {
        let mut notes = Vec::new();
        if c.splits == heuristic.splits {
            notes.push("heuristic");
        }
        if c.splits == launch.splits && launch.source == SplitSource::Tuned {
            notes.push("tuned now");
        }
        if best.is_some_and(|(s, _)| s == c.splits) {
            notes.push("best");
        }
        println!(
            "{:>6}  {:<22} {:<10} {:>10} {:>13}",
            c.splits,
            notes.join(", "),
            c.outcome.kind().name(),
            p50(c).map_or("-".into(), |p| format!("{p:.2}")),
            p50(c)
                .zip(heuristic_p50)
                .map_or("-".into(), |(p, h)| format!("{:.3}x", h / p)),
        );
        if let Outcome::Failed { message } = &c.outcome {
            println!("        {message}");
        }
    }
    match best {
        Some((splits, p)) => println!(
            "best: {splits} slices, {p:.2} us; heuristic {} slices {}",
            heuristic.splits,
            heuristic_p50.map_or("failed its gates".into(), |h| format!(
                "{h:.2} us ({:.3}x)",
                h / p
            ))
        ),
        None => println!("no split count passed the gates"),
    }

    if let Some(path) = &args.json {
        let report = SplitReport {
            gpu: &gpu.name,
            shape: shape.to_string(),
            dtype: args.dtype.name(),
            causal: args.causal,
            kernel: variant.name,
            kv_tiles: heuristic.kv_tiles,
            blocks: heuristic.blocks(),
            heuristic_splits: heuristic.splits,
            launch_splits: launch.splits,
            launch_source: launch.source,
            best_splits: best.map(|(s, _)| s),
            best_p50_us: best.map(|(_, p)| p),
            heuristic_p50_us: heuristic_p50,
            speedup_vs_heuristic,
            candidates: results,
        };
        inputs::write_json(path, &report)?;
    }
    if args.save {
        let Some((splits, p50_us)) = best else {
            return Err(Failure::Usage("--save: no split count passed the gates".into()));
        };
        let problem = SplitProblem::of(args.dtype, variant.name, shape, heuristic.blocks());
        let entry = problem.entry(splits, p50_us, speedup_vs_heuristic.unwrap_or(1.0), shape);
        save_to_table(&args.table, |table| {
            table.upsert_splits(&gpu.name, entry);
        })?;
    }
    Ok(())
}

/// The counts `--splits` times, ascending, each once: `asked` (each checked against the
/// problem: a count it cannot take as given is refused, naming why), or by default the powers of
/// two up to the KV tiles and [`MAX_SPLITS`], each as the fewest slices that cut the tiles the
/// same way; with the heuristic's count and `launch` (what launches take now) always.
fn split_candidates(heuristic: Plan, launch: u32, asked: &[u32]) -> Result<Vec<u32>, Failure> {
    for &splits in asked {
        heuristic.forced(splits)?;
    }
    let powers = std::iter::successors(Some(1u32), |p| p.checked_mul(2))
        .take_while(|&p| p <= MAX_SPLITS.min(heuristic.kv_tiles))
        .map(|p| flashrs::decode::without_empty_slices(heuristic.kv_tiles, p));
    let defaults: Vec<u32> = if asked.is_empty() {
        powers.collect()
    } else {
        Vec::new()
    };
    let mut candidates: Vec<u32> = asked
        .iter()
        .chain(&defaults)
        .chain([&heuristic.splits, &launch])
        .copied()
        .filter(|&s| heuristic.forced(s).is_ok())
        .collect();
    candidates.sort_unstable();
    candidates.dedup();
    Ok(candidates)
}

/// The correctness gate's problem for the search: small, with odd lengths so that every tail
/// path runs, the grouping of heads kept.
fn check_shape(shape: Shape) -> Shape {
    Shape {
        batch: 1,
        heads: 2 * shape.kv_group(),
        heads_kv: 2,
        seq_q: shape.seq_q.min(301),
        seq_k: shape.seq_k.min(333),
        head_dim: shape.head_dim,
        head_dim_v: shape.head_dim,
    }
}

/// The correctness gate's problem for `--splits`: [`check_shape`]'s two KV heads, but over as
/// many KV tiles of `block_n` keys as the timed problem (one key fewer where that keeps the
/// count, so the last tile's tail runs), so that every count the timed problem takes cuts this
/// one the same way.
fn split_check_shape(shape: Shape, block_n: u32) -> Shape {
    let tiles = |seq_k: usize| seq_k.div_ceil(block_n as usize);
    let seq_k = match shape.seq_k.checked_sub(1) {
        Some(shorter) if shorter > 0 && tiles(shorter) == tiles(shape.seq_k) => shorter,
        _ => shape.seq_k,
    };
    Shape {
        seq_q: shape.seq_q,
        seq_k,
        ..check_shape(shape)
    }
}

/// The gates, with inputs made once: a smaller problem of the same head dim, mask and grouping
/// for correctness (checked against float64 on the CPU), the real problem for timing.
struct Gates<'g> {
    gpu: &'g Gpu,
    dtype: DType,
    params: Params,
    check: (Shape, flashrs::Tensors, Vec<f64>),
    timed: flashrs::Tensors,
    iters: usize,
}

impl<'g> Gates<'g> {
    fn new(
        gpu: &'g Gpu,
        small: Shape,
        shape: Shape,
        dtype: DType,
        causal: bool,
        seed: u64,
        iters: usize,
    ) -> Result<Self, Failure> {
        let params = Params {
            causal,
            scale: None,
            ..Params::default()
        };
        let check_inputs = Inputs::random(small, dtype, seed ^ 0x5eed);
        let (q, k, v) = check_inputs.as_f32();
        let scale = params.scale_for(small.head_dim) as f64;
        let expected = reference::attention_f64(&q, &k, &v, small.reference_dims(), causal, scale);
        let check_tensors = gpu.tensors(small, dtype, &check_inputs.q, &check_inputs.k, &check_inputs.v)?;
        let timed_inputs = Inputs::random(shape, dtype, seed);
        let timed = gpu.tensors(shape, dtype, &timed_inputs.q, &timed_inputs.k, &timed_inputs.v)?;
        Ok(Gates {
            gpu,
            dtype,
            params,
            check: (small, check_tensors, expected),
            timed,
            iters,
        })
    }

    fn evaluate(&mut self, variant: &'static VariantSpec) -> Outcome {
        self.evaluate_with(variant, DecodeOptions::default())
    }

    /// [`Gates::evaluate`] with every launch of the variant taking `options`.
    fn evaluate_with(&mut self, variant: &'static VariantSpec, options: DecodeOptions) -> Outcome {
        let (small, tensors, expected) = &mut self.check;
        // Gate 1: compiled for this GPU and head dim.
        let kernel = match self.gpu.kernel(variant, small.head_dim, self.dtype, false) {
            Ok(k) => k,
            Err(_) => return Outcome::NotCompiled,
        };
        // Gate 2: correct, on an output poisoned with NaN.
        let correct = (|| -> flashrs::Result<reference::Comparison> {
            self.gpu.poison(tensors)?;
            self.gpu
                .launch_with(&kernel, tensors, self.params, None, options)?;
            let out = flashrs::gpu::decode(self.dtype, &self.gpu.download(tensors.out())?);
            Ok(reference::compare(&out, expected))
        })();
        match correct {
            Err(e) => {
                return Outcome::Failed {
                    message: e.to_string(),
                }
            }
            Ok(cmp) if !cmp.passes(self.dtype.tolerance()) => {
                return Outcome::Incorrect {
                    max_err: cmp.max_abs_err,
                }
            }
            Ok(_) => {}
        }
        // Gate 3: timed on the real problem (made on the GPU's own stream, where the events and
        // the graph capture are).
        let (gpu, params, iters) = (self.gpu, self.params, self.iters);
        let timed_tensors = &mut self.timed;
        let timed = (|| -> flashrs::Result<f64> {
            let mut launch = || gpu.launch_with(&kernel, timed_tensors, params, None, options);
            let singles = gpu.time_each(3, 5, &mut launch)?;
            let single = flashrs_lab::stats::median(&singles).unwrap_or(1000.0);
            let calls = ((1000.0 / single) as usize).clamp(1, 20);
            let samples = gpu.time_graph_of(calls, 10, iters, &mut launch)?.samples_us;
            flashrs_lab::stats::median(&samples)
                .ok_or_else(|| flashrs::Error::InvalidProblem("no valid timings".into()))
        })();
        match timed {
            Ok(p50_us) => Outcome::Timed { p50_us },
            Err(e) => Outcome::Failed {
                message: e.to_string(),
            },
        }
    }
}

/// The fastest torch SDPA backend on the tuned problem: (name, p50 us).
fn best_torch(args: &Args, iters: usize) -> Option<(String, f64)> {
    let reports = peers::torch_bench(
        &[(args.problem(), args.causal)],
        args.dtype.long_name(),
        20,
        10,
        // Count-only warm-ups, as the candidates get (`tune` ranks, `bench` measures).
        0.0,
        iters as u32,
    )
    .ok()?;
    reports
        .into_iter()
        .flat_map(|(_, r)| r.results)
        .filter(|r| r.error.is_none())
        .filter_map(|r| {
            flashrs_lab::stats::median(&r.samples_us).map(|p| (format!("torch_{}", r.backend), p))
        })
        .min_by(|a, b| a.1.total_cmp(&b.1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(clap::Parser)]
    struct Cli {
        #[command(flatten)]
        args: Args,
    }

    fn check_of(argv: &[&str]) -> String {
        let args = <Cli as clap::Parser>::try_parse_from(argv).ok().unwrap().args;
        match check(&args) {
            Err(Failure::Usage(m)) => m,
            _ => String::new(),
        }
    }

    #[test]
    fn bad_options_are_refused_without_a_gpu() {
        assert!(check_of(&["tune", "--peers", "fa9"]).contains("unknown peer `fa9`"));
        assert!(check_of(&["tune", "--shape", "1,2,128,100"]).contains("unsupported head dim"));
        assert!(check_of(&["tune", "--log", "/no/such/dir/e.csv"]).contains("/no/such/dir"));
        assert!(check_of(&["tune", "--save", "--table", "/no/such/dir/t.json"]).contains("/no/such/dir"));
        // Without --save the table is not written, so its directory does not matter.
        assert_eq!(check_of(&["tune", "--table", "/no/such/dir/t.json"]), "");
        assert_eq!(check_of(&["tune", "--peers", "torch"]), "");
        let few = <Cli as clap::Parser>::try_parse_from(["tune", "--iters", "99"]);
        assert!(few.is_err());
    }

    fn parse(argv: &[&str]) -> Result<Args, clap::Error> {
        <Cli as clap::Parser>::try_parse_from(argv).map(|cli| cli.args)
    }

    #[test]
    fn splits_flags_parse_and_keep_out_the_searchs_own() {
        let args = parse(&["tune", "--shape", "1,32,1,32768,128", "--splits"]).unwrap();
        assert!(args.splits && args.split_counts.is_empty());
        let counts = parse(&["tune", "--splits", "--split-counts", "4,8,16", "--save"]).unwrap();
        assert_eq!(counts.split_counts, [4, 8, 16]);
        // The search's knobs mean nothing to --splits: given, they are refused (their defaults
        // are not).
        for flag in [
            &["--budget", "10"][..],
            &["--population", "4"],
            &["--elite", "2"],
            &["--peers", "torch"],
            &["--log", "e.csv"],
        ] {
            let mut argv = vec!["tune", "--splits"];
            argv.extend_from_slice(flag);
            let err = parse(&argv).err().unwrap();
            assert_eq!(err.kind(), clap::error::ErrorKind::ArgumentConflict, "{flag:?}");
        }
        // Counts without --splits, or that are not numbers, are refused.
        assert!(parse(&["tune", "--split-counts", "4"]).is_err());
        assert!(parse(&["tune", "--splits", "--split-counts", "4,x"]).is_err());
        assert!(parse(&["tune", "--splits", "--split-counts", "-1"]).is_err());
    }

    #[test]
    fn splits_are_tuned_on_decode_like_problems_with_counts_in_bounds() {
        assert_eq!(check_of(&["tune", "--shape", "1,32,1,32768,128", "--splits"]), "");
        let grouped = [
            "tune",
            "--shape",
            "1,32,1,32768,128",
            "--heads-kv",
            "8",
            "--splits",
        ];
        assert_eq!(check_of(&grouped), "");
        assert_eq!(parse(&grouped).unwrap().problem().kv_group(), 4);
        // 4 queries of a group of 16: 64 packed rows.
        let wide = check_of(&[
            "tune",
            "--shape",
            "1,32,4,32768,128",
            "--heads-kv",
            "2",
            "--splits",
        ]);
        assert!(wide.contains("64 query rows per KV head"), "{wide}");
        assert!(
            !check_of(&["tune", "--heads-kv", "3"]).is_empty(),
            "3 does not divide 16 heads"
        );
        assert_eq!(
            check_of(&[
                "tune",
                "--shape",
                "4,32,4,8192,128",
                "--splits",
                "--split-counts",
                "1,128"
            ]),
            ""
        );
        let prefill = check_of(&["tune", "--shape", "2,16,4096,128", "--splits"]);
        assert!(prefill.contains("4096 query rows per KV head"), "{prefill}");
        for bad in ["0", "129", "8,200"] {
            let message = check_of(&[
                "tune",
                "--shape",
                "1,8,1,4096,64",
                "--splits",
                "--split-counts",
                bad,
            ]);
            assert!(message.contains("outside 1 to 128"), "{bad}: {message}");
        }
    }

    /// (1, 32, 1, 32768, 128) on an H100-sized GPU in 128-key tiles: 256 tiles, 32 blocks.
    fn long_decode_plan() -> Plan {
        let shape = Shape {
            seq_q: 1,
            ..Shape::new(1, 32, 32768, 128)
        };
        Plan::new(shape, 16, 128, 132).unwrap()
    }

    #[test]
    fn split_candidates_are_powers_of_two_and_the_counts_in_use() {
        let plan = long_decode_plan();
        assert_eq!(plan.kv_tiles, 256);
        let heuristic = plan.splits;
        let candidates = split_candidates(plan, heuristic, &[]).ok().unwrap();
        let mut expected = vec![1, 2, 4, 8, 16, 32, 64, 128, heuristic];
        expected.sort_unstable();
        expected.dedup();
        assert_eq!(candidates, expected);
        // What launches take now (a tuned count) is timed too.
        assert!(split_candidates(plan, 24, &[]).ok().unwrap().contains(&24));
        // Few tiles: the powers stop at them, each as the fewest slices cutting them the same way.
        let short = Plan::new(
            Shape {
                seq_q: 1,
                seq_k: 640,
                ..Shape::new(1, 32, 1, 128)
            },
            16,
            64,
            132,
        )
        .unwrap();
        assert_eq!(short.kv_tiles, 10);
        let few = split_candidates(short, short.splits, &[]).ok().unwrap();
        assert!(few.iter().all(|&s| short.forced(s).is_ok()), "{few:?}");
        assert!(
            few.contains(&5) && !few.contains(&8) && !few.contains(&16),
            "{few:?}"
        );
    }

    #[test]
    fn asked_split_counts_are_checked_against_the_problem() {
        let plan = long_decode_plan();
        // Only what was asked and the count in use, not the powers of two.
        let asked = split_candidates(plan, plan.splits, &[24, 6]).ok().unwrap();
        let mut expected = vec![6, 24, plan.splits];
        expected.sort_unstable();
        expected.dedup();
        assert_eq!(asked, expected);
        // 256 tiles in slices of 3 fill 86 slices and leave 14 of 100 empty.
        let message = match split_candidates(plan, plan.splits, &[24, 100]) {
            Err(Failure::Usage(message)) => message,
            _ => panic!("100 slices of 256 tiles should be refused"),
        };
        assert!(message.contains("100 key slices"), "{message}");
        assert!(message.contains("leave 14 of them empty; 86 slices"), "{message}");
    }

    #[test]
    fn the_split_check_problem_has_the_timed_problems_tiles_and_rows() {
        let timed = Shape {
            seq_q: 2,
            ..Shape::new(16, 32, 1, 128).with_heads_kv(8)
        };
        let timed = Shape {
            seq_k: 32768,
            ..timed
        };
        let check = split_check_shape(timed, 128);
        assert_eq!(check.seq_k, 32767, "one key short: the last tile has a tail");
        assert_eq!(check.seq_k.div_ceil(128), timed.seq_k.div_ceil(128));
        assert_eq!((check.kv_group(), check.seq_q), (timed.kv_group(), timed.seq_q));
        assert_eq!((check.batch, check.heads_kv, check.head_dim), (1, 2, 128));
        // A key length one past whole tiles keeps its length: one key fewer would drop a tile.
        assert_eq!(split_check_shape(Shape { seq_k: 257, ..timed }, 128).seq_k, 257);
        assert_eq!(split_check_shape(Shape { seq_k: 1, ..timed }, 128).seq_k, 1);
    }
}
