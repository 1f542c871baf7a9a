//! `micro`: ranks every compiled configuration by the SM cycles its KV-tile loop takes, measured
//! inside the kernel with `clock64` by the instrumented twin (one launch per configuration, so
//! dozens rank in seconds). It seeds `tune`.

use std::path::PathBuf;

use flashrs::{DType, Gpu, Params, Shape, VariantSpec};
use flashrs_lab::Timing;
use serde::Serialize;

use crate::inputs::{self, Inputs};
use crate::Failure;

#[derive(clap::Args)]
pub struct Args {
    /// Problem the configurations are measured on, B,H,S,D (or B,H,S_Q,S_K,D).
    #[arg(long, default_value = "2,16,4096,128")]
    pub shape: Shape,
    /// Element type: f16 or bf16.
    #[arg(long, default_value = "f16")]
    pub dtype: DType,
    /// Causal masking.
    #[arg(long)]
    pub causal: bool,
    /// Rows of the Top-K table (and entries of --best).
    #[arg(long, default_value_t = 5)]
    pub top: usize,
    /// Every configuration as CSV (evidence/search/micro_log.csv in the evidence round).
    #[arg(long)]
    pub csv: Option<PathBuf>,
    /// The Top-K as JSON (evidence/search/micro_best.json).
    #[arg(long)]
    pub best: Option<PathBuf>,
}

/// One configuration's measurement.
#[derive(Clone, Debug, Serialize)]
pub struct MicroRow {
    pub kernel: &'static str,
    pub block_m: u32,
    pub block_n: u32,
    pub stages: u32,
    pub vec: u32,
    pub warps: u32,
    pub policy: String,
    /// Median over blocks of SM cycles per KV tile.
    pub cycles_per_tile: f64,
    /// The same in nanoseconds at the driver's reported SM clock.
    pub ns_per_iter: f64,
    /// Blocks resident per SM (occupancy calculator).
    pub resident_blocks: u32,
    /// SM time per 128 x 128 (query x key) unit of work: `ns_per_iter` over the tile's units and
    /// the blocks sharing the SM. The ranking key: lower is faster.
    pub ns_per_unit: f64,
}

impl MicroRow {
    pub const CSV_HEADER: &'static str =
        "kernel,block_m,block_n,stages,vec,warps,policy,cycles_per_tile,ns_per_iter,resident_blocks,ns_per_unit";

    pub fn csv(&self) -> String {
        format!(
            "{},{},{},{},{},{},{},{:.1},{:.1},{},{:.2}",
            self.kernel,
            self.block_m,
            self.block_n,
            self.stages,
            self.vec,
            self.warps,
            self.policy,
            self.cycles_per_tile,
            self.ns_per_iter,
            self.resident_blocks,
            self.ns_per_unit
        )
    }
}

/// The tiled configurations `gpu` can run at `shape`'s head dim (the naive reference has no tiles).
pub fn candidates(gpu: &Gpu, shape: Shape) -> Vec<&'static VariantSpec> {
    flashrs::variants::built(flashrs::VARIANTS)
        .filter(|v| {
            v.family != flashrs::Family::Naive
                && v.head_dims.contains(&shape.head_dim)
                && v.min_arch <= gpu.arch
        })
        .collect()
}

/// Measures every candidate once on fresh random inputs, fastest first.
pub fn measure(gpu: &Gpu, shape: Shape, dtype: DType, causal: bool) -> Result<Vec<MicroRow>, Failure> {
    shape.validate()?;
    let inputs = Inputs::random(shape, dtype, inputs::fresh_seed());
    let mut tensors = gpu.tensors(shape, dtype, &inputs.q, &inputs.k, &inputs.v)?;
    let params = Params {
        causal,
        scale: None,
        ..Params::default()
    };
    let ghz = gpu.clock_khz.map_or(1.0, |k| k as f64 / 1e6);
    let variants = candidates(gpu, shape);
    let bar = inputs::progress(variants.len(), "micro");
    let mut rows = Vec::new();
    for variant in variants {
        bar.set_message(variant.name);
        let kernel = gpu.kernel(variant, shape.head_dim, dtype, true)?;
        let resident = gpu.resident_blocks(&kernel)?.max(1);
        // One warm-up launch (module load, clocks), then the measured one.
        gpu.count_barriers(variant, &mut tensors, params)?;
        let counted = gpu.count_barriers(variant, &mut tensors, params)?;
        let ns_per_iter = counted.cycles_per_tile / ghz;
        let units = (variant.block_m * variant.block_n) as f64 / (128.0 * 128.0);
        rows.push(MicroRow {
            kernel: variant.name,
            block_m: variant.block_m,
            block_n: variant.block_n,
            stages: variant.stages,
            vec: variant.vec,
            warps: variant.warps,
            policy: variant
                .policy
                .map_or("none".into(), |p| format!("{p:?}").to_lowercase()),
            cycles_per_tile: counted.cycles_per_tile,
            ns_per_iter,
            resident_blocks: resident,
            ns_per_unit: ns_per_iter / units / resident as f64,
        });
        bar.inc(1);
    }
    bar.finish_and_clear();
    rank(&mut rows);
    Ok(rows)
}

/// Fastest first; a configuration that measured nothing (no tiles) goes last.
pub fn rank(rows: &mut [MicroRow]) {
    let key = |r: &MicroRow| {
        if r.ns_per_unit > 0.0 {
            r.ns_per_unit
        } else {
            f64::INFINITY
        }
    };
    rows.sort_by(|a, b| key(a).total_cmp(&key(b)));
}

/// Everything checked before the GPU is opened: the shape (its head dim among the compiled
/// ones), the table's size, the output paths.
fn check(args: &Args) -> Result<(), Failure> {
    args.shape.validate()?;
    if args.top == 0 {
        return Err(Failure::Usage("--top must be at least 1".into()));
    }
    inputs::check_outputs([&args.csv])?;
    inputs::check_json_outputs([&args.best])
}

pub fn run(device: usize, args: Args) -> Result<(), Failure> {
    check(&args)?;
    inputs::json_to_stdout(args.best.as_deref())?;
    let gpu = inputs::open_gpu(device)?;
    let clock = gpu
        .clock_khz
        .map_or("unknown clock: ns columns are cycles".to_string(), |k| {
            format!("{} MHz", k / 1000)
        });
    println!(
        "micro on {} (sm_{}, {clock}): {} {} causal={}, one instrumented launch per configuration",
        gpu.name, gpu.arch, args.shape, args.dtype, args.causal
    );
    let rows = measure(&gpu, args.shape, args.dtype, args.causal)?;
    print_top(&rows, args.top);
    if let Some(path) = &args.csv {
        let mut text = String::from(MicroRow::CSV_HEADER);
        text.push('\n');
        for row in &rows {
            text.push_str(&row.csv());
            text.push('\n');
        }
        std::fs::write(path, text).map_err(|e| format!("{}: {e}", path.display()))?;
    }
    if let Some(path) = &args.best {
        let top: Vec<&MicroRow> = rows.iter().take(args.top).collect();
        let report = serde_json::json!({
            "gpu": gpu.name,
            "shape": args.shape.to_string(),
            "dtype": args.dtype.name(),
            "causal": args.causal,
            "clock_khz": gpu.clock_khz,
            "top": top,
        });
        inputs::write_json(path, &report)?;
    }
    Ok(())
}

fn print_top(rows: &[MicroRow], top: usize) {
    println!(
        "{:>3}  {:<44} {:>9} {:>10} {:>7} {:>7} {:>6} {:>3} {:>5} {:>6}",
        "#", "kernel", "ns/unit", "ns/iter", "BLOCK_M", "BLOCK_N", "STAGES", "VEC", "warps", "policy"
    );
    for (i, r) in rows.iter().take(top).enumerate() {
        println!(
            "{:>3}  {:<44} {:>9.1} {:>10.1} {:>7} {:>7} {:>6} {:>3} {:>5} {:>6}",
            i + 1,
            r.kernel,
            r.ns_per_unit,
            r.ns_per_iter,
            r.block_m,
            r.block_n,
            r.stages,
            r.vec,
            r.warps,
            r.policy
        );
    }
    println!(
        "({} configurations; ns/unit = SM time per 128x128 block of scores, lower is faster)",
        rows.len()
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(kernel: &'static str, ns_per_unit: f64) -> MicroRow {
        MicroRow {
            kernel,
            block_m: 128,
            block_n: 64,
            stages: 2,
            vec: 8,
            warps: 8,
            policy: "light".into(),
            cycles_per_tile: 1.0,
            ns_per_iter: 1.0,
            resident_blocks: 1,
            ns_per_unit,
        }
    }

    #[test]
    fn ranking_puts_the_fastest_first_and_unmeasured_last() {
        let mut rows = vec![row("slow", 9.0), row("none", 0.0), row("fast", 2.0)];
        rank(&mut rows);
        let order: Vec<_> = rows.iter().map(|r| r.kernel).collect();
        assert_eq!(order, ["fast", "slow", "none"]);
    }

    #[test]
    fn bad_options_are_refused_without_a_gpu() {
        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            args: Args,
        }
        let check_of = |argv: &[&str]| {
            let args = <Cli as clap::Parser>::try_parse_from(argv).ok().unwrap().args;
            match check(&args) {
                Err(Failure::Usage(m)) => m,
                _ => String::new(),
            }
        };
        assert!(check_of(&["micro", "--shape", "1,2,128,100"]).contains("unsupported head dim 100"));
        assert!(check_of(&["micro", "--top", "0"]).contains("--top"));
        assert!(check_of(&["micro", "--csv", "/no/such/dir/m.csv"]).contains("/no/such/dir"));
        assert!(check_of(&["micro", "--best", "/no/such/dir/b.json"]).contains("/no/such/dir"));
        assert_eq!(check_of(&["micro", "--best", "-"]), "");
        assert!(check_of(&["micro", "--csv", "-"]).contains("stdout"));
    }

    #[test]
    fn csv_rows_have_the_header_columns() {
        let columns = MicroRow::CSV_HEADER.split(',').count();
        assert_eq!(row("k", 1.0).csv().split(',').count(), columns);
    }
}
