//! `tune`: evolutionary search over the compiled configurations (`flashrs_lab::search`), seeded by
//! `micro`'s ranking. Every candidate passes three gates in order: it exists for this GPU and head
//! dim, it is correct on fresh random inputs against the float64 reference, and only then is it
//! timed (median of at least 100 graph-replayed calls). `--save` records the winner in the tuned
//! table the library's dispatch reads.

use std::path::PathBuf;

use flashrs::tuned_table::{Entry, SeqBucket, TunedTable};
use flashrs::{DType, Gpu, Params, Shape, VariantSpec};
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
    /// Every evaluation as CSV (evidence/evo_log.csv).
    #[arg(long)]
    log: Option<PathBuf>,
    /// The result as JSON (evidence/evo_best.json).
    #[arg(long)]
    json: Option<PathBuf>,
    /// Record the winner for this GPU, dtype, head dim, sequence bucket and mask in the tuned table.
    #[arg(long)]
    save: bool,
    /// The tuned table `--save` writes (the library embeds tuned/h100.json).
    #[arg(long, default_value = "tuned/h100.json")]
    table: PathBuf,
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
    args.shape.validate()?;
    if args.budget == 0 || args.population == 0 {
        return Err(Failure::Usage(
            "--budget and --population must be at least 1".into(),
        ));
    }
    if let Some(other) = args.peers.as_deref().filter(|p| *p != "torch") {
        return Err(Failure::Usage(format!("unknown peer `{other}` (torch)")));
    }
    let table = args.save.then(|| args.table.clone());
    inputs::check_outputs([&args.log, &table])?;
    inputs::check_json_outputs([&args.json])
}

pub fn run(device: usize, args: Args) -> Result<(), Failure> {
    check(&args)?;
    inputs::json_to_stdout(args.json.as_deref())?;
    let iters = args.iters as usize;
    let gpu = inputs::open_gpu(device)?;
    println!(
        "tune on {} (sm_{}): {} {} causal={}, budget {} evaluations, seed {}",
        gpu.name, gpu.arch, args.shape, args.dtype, args.causal, args.budget, args.seed
    );
    let space = Space::from_variants(flashrs::VARIANTS, args.shape.head_dim).retain_arch(gpu.arch);
    if space.is_empty() {
        return Err(
            flashrs::Error::UnsupportedHeadDim(args.shape.head_dim, flashrs::variants::HEAD_DIMS).into(),
        );
    }

    eprintln!("seeding from micro...");
    let ranked = micro::measure(&gpu, args.shape, args.dtype, args.causal)?;
    let seeds: Vec<&'static str> = ranked.iter().take(args.elite.max(3)).map(|r| r.kernel).collect();
    println!("micro Top-{}: {}", seeds.len(), seeds.join(", "));

    let mut evaluator = Gates::new(&gpu, args.shape, args.dtype, args.causal, args.seed, iters)?;
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
    let default = flashrs::gpu::default_variant(args.shape, args.causal, gpu.sm_count, gpu.arch);
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
            shape: args.shape.to_string(),
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
        let mut table = if args.table.exists() {
            TunedTable::load(&args.table)?
        } else {
            TunedTable::new()
        };
        table.upsert(
            &gpu.name,
            Entry {
                dtype: args.dtype.name().to_string(),
                head_dim: args.shape.head_dim,
                seq_bucket: SeqBucket::of_lengths(args.shape.seq_q, args.shape.seq_k),
                causal: args.causal,
                kernel: best.variant.to_string(),
                p50_us: best.p50_us,
                speedup_vs_default: speedup_vs_default.unwrap_or(1.0),
                measured: flashrs::tuned_table::today_utc(),
            },
        );
        table.save(&args.table)?;
        println!("saved to {}", args.table.display());
    }
    Ok(())
}

/// The gates, with inputs made once: a small problem of the same head dim, mask and grouping for
/// correctness (checked against float64 on the CPU), the real problem for timing.
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
        shape: Shape,
        dtype: DType,
        causal: bool,
        seed: u64,
        iters: usize,
    ) -> Result<Self, Failure> {
        let params = Params { causal, scale: None };
        // Odd lengths so that every tail path runs; the grouping of heads is kept.
        let group = shape.kv_group();
        let small = Shape {
            batch: 1,
            heads: 2 * group,
            heads_kv: 2,
            seq_q: shape.seq_q.min(301),
            seq_k: shape.seq_k.min(333),
            head_dim: shape.head_dim,
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
        let (small, tensors, expected) = &mut self.check;
        // Gate 1: compiled for this GPU and head dim.
        let kernel = match self.gpu.kernel(variant, small.head_dim, self.dtype, false) {
            Ok(k) => k,
            Err(_) => return Outcome::NotCompiled,
        };
        // Gate 2: correct, on an output poisoned with NaN.
        let correct = (|| -> flashrs::Result<reference::Comparison> {
            self.gpu.poison(tensors)?;
            self.gpu.launch(&kernel, tensors, self.params, None)?;
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
        // Gate 3: timed on the real problem.
        let timed = (|| -> flashrs::Result<f64> {
            let singles = self
                .gpu
                .time_launches(&kernel, &mut self.timed, self.params, 3, 5)?;
            let single = flashrs_lab::stats::median(&singles).unwrap_or(1000.0);
            let calls = ((1000.0 / single) as usize).clamp(1, 20);
            let samples =
                self.gpu
                    .time_graph(&kernel, &mut self.timed, self.params, calls, 10, self.iters)?;
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
        &[(args.shape, args.causal)],
        args.dtype.long_name(),
        20,
        10,
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
        assert!(check_of(&["tune", "--shape", "1,2,128,96"]).contains("unsupported head dim"));
        assert!(check_of(&["tune", "--log", "/no/such/dir/e.csv"]).contains("/no/such/dir"));
        assert!(check_of(&["tune", "--save", "--table", "/no/such/dir/t.json"]).contains("/no/such/dir"));
        // Without --save the table is not written, so its directory does not matter.
        assert_eq!(check_of(&["tune", "--table", "/no/such/dir/t.json"]), "");
        assert_eq!(check_of(&["tune", "--peers", "torch"]), "");
        let few = <Cli as clap::Parser>::try_parse_from(["tune", "--iters", "99"]);
        assert!(few.is_err());
    }
}
