//! `profile`: one launch of a kernel under Nsight Compute (`ncu`), reduced to the few numbers that
//! say what bounds it, with a one-line verdict.

use std::path::PathBuf;
use std::process::Command;

use flashrs::{DType, Params, Shape, VariantSpec};
use serde::Serialize;

use crate::inputs::{self, Inputs};
use crate::Failure;

#[derive(clap::Args)]
pub struct Args {
    /// The variant to profile (see `list`).
    #[arg(long)]
    kernel: String,
    /// Problem shape B,H,S,D.
    #[arg(long, default_value = "2,16,4096,128")]
    shape: Shape,
    /// Causal masking.
    #[arg(long)]
    causal: bool,
    /// Element type: f16 or bf16.
    #[arg(long, default_value = "f16")]
    dtype: DType,
    /// Where to write the JSON (default evidence/profiles/ncu_<kernel>.json).
    #[arg(long)]
    out: Option<PathBuf>,
}

/// `profile-target`: what ncu runs (this binary again): one launch to profile.
#[derive(clap::Args)]
pub struct TargetArgs {
    #[arg(long)]
    kernel: String,
    #[arg(long)]
    shape: Shape,
    #[arg(long)]
    causal: bool,
    #[arg(long)]
    dtype: DType,
}

/// (metric, field name in the JSON)
const METRICS: &[(&str, &str)] = &[
    (
        "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active",
        "tensor_pipe_pct",
    ),
    (
        "dram__throughput.avg.pct_of_peak_sustained_elapsed",
        "dram_throughput_pct",
    ),
    (
        "sm__warps_active.avg.pct_of_peak_sustained_active",
        "achieved_occupancy_pct",
    ),
    (
        "l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum",
        "shared_bank_conflicts",
    ),
    (
        "l1tex__data_pipe_lsu_wavefronts_mem_shared.sum",
        "shared_wavefronts",
    ),
    ("l1tex__t_bytes_pipe_lsu_mem_local_op_st.sum", "local_store_bytes"),
    ("launch__registers_per_thread", "registers_per_thread"),
    ("gpu__time_duration.sum", "duration_ns"),
];

#[derive(Serialize)]
struct Profile {
    dtype: DType,
    kernel: String,
    symbol: String,
    shape: [usize; 4],
    causal: bool,
    gpu: String,
    metrics: serde_json::Map<String, serde_json::Value>,
    verdict: String,
    command: String,
}

pub fn run(device: usize, args: Args) -> Result<(), Failure> {
    let variant = VariantSpec::by_name(&args.kernel)
        .ok_or_else(|| Failure::Usage(flashrs::Error::UnknownKernel(args.kernel.clone()).to_string()))?;
    args.shape.validate()?;
    inputs::check_json_outputs([&args.out])?;
    let symbol = variant.symbol(args.shape.head_dim, args.dtype.name());
    let ncu = which("ncu").ok_or_else(|| {
        Failure::Usage("ncu (Nsight Compute) not found on PATH: profiling needs it; nothing was run".into())
    })?;
    inputs::json_to_stdout(args.out.as_deref())?;
    let gpu_name = inputs::open_gpu(device)?.name.clone();
    let me = std::env::current_exe()?;
    let shape = format!(
        "{},{},{},{},{}",
        args.shape.batch, args.shape.heads, args.shape.seq_q, args.shape.seq_k, args.shape.head_dim
    );
    let metric_list: Vec<&str> = METRICS.iter().map(|(m, _)| *m).collect();
    let mut command = Command::new(&ncu);
    command
        .args([
            "--clock-control",
            "none",
            "--launch-count",
            "1",
            "--csv",
            "--page",
            "raw",
        ])
        .arg("--kernel-name")
        .arg(&symbol)
        .arg("--metrics")
        .arg(metric_list.join(","))
        .arg(&me)
        .args([
            "--device",
            &device.to_string(),
            "profile-target",
            "--kernel",
            &args.kernel,
            "--shape",
            &shape,
            "--dtype",
            args.dtype.name(),
        ]);
    if args.causal {
        command.arg("--causal");
    }
    let shown = format!("{command:?}");
    let output = command
        .output()
        .map_err(|e| Failure::Usage(format!("running ncu: {e}")))?;
    let stdout = String::from_utf8_lossy(&output.stdout);
    if !output.status.success() {
        let stderr = String::from_utf8_lossy(&output.stderr);
        return Err(Failure::Usage(format!(
            "ncu failed: {}",
            stderr
                .lines()
                .chain(stdout.lines())
                .find(|l| l.contains("ERR"))
                .unwrap_or("see its output")
        )));
    }
    let metrics = parse_raw_csv(&stdout)?;
    let value = |name: &str| metrics.get(name).and_then(|v| v.as_f64());
    let verdict = verdict(value("tensor_pipe_pct"), value("dram_throughput_pct"));
    let profile = Profile {
        dtype: args.dtype,
        kernel: args.kernel.clone(),
        symbol,
        shape: [
            args.shape.batch,
            args.shape.heads,
            args.shape.seq_q,
            args.shape.head_dim,
        ],
        causal: args.causal,
        gpu: gpu_name,
        metrics,
        verdict: verdict.clone(),
        command: shown,
    };
    let out = args
        .out
        .unwrap_or_else(|| PathBuf::from(format!("evidence/profiles/ncu_{}.json", args.kernel)));
    inputs::write_json(&out, &profile)?;
    println!("{}", serde_json::to_string_pretty(&profile.metrics)?);
    println!("verdict: {verdict}\nwritten to {}", out.display());
    Ok(())
}

/// One launch of the kernel on random inputs, for ncu to catch.
pub fn run_target(device: usize, args: TargetArgs) -> Result<(), Failure> {
    let gpu = inputs::open_gpu(device)?;
    let inputs = Inputs::random(args.shape, args.dtype, 1);
    let mut tensors = gpu.tensors(args.shape, args.dtype, &inputs.q, &inputs.k, &inputs.v)?;
    gpu.forward(
        &mut tensors,
        Params {
            causal: args.causal,
            scale: None,
            ..Params::default()
        },
        Some(&args.kernel),
    )?;
    gpu.synchronize()?;
    Ok(())
}

/// The rule: compute-bound if the tensor pipe is at least 50% busy and DRAM below 50% of
/// its peak; memory-bound if DRAM is above 70%; otherwise latency-bound (neither saturated).
pub fn verdict(tensor_pct: Option<f64>, dram_pct: Option<f64>) -> String {
    match (tensor_pct, dram_pct) {
        (Some(t), Some(d)) if t >= 50.0 && d < 50.0 => {
            format!("compute-bound (tensor pipe {t:.1}%, DRAM {d:.1}%)")
        }
        (Some(t), Some(d)) if d > 70.0 => format!("memory-bound (DRAM {d:.1}%, tensor pipe {t:.1}%)"),
        (Some(t), Some(d)) => {
            format!("latency-bound: neither the tensor pipe ({t:.1}%) nor DRAM ({d:.1}%) is saturated")
        }
        _ => "unknown: ncu did not report tensor-pipe and DRAM utilisation".into(),
    }
}

/// `--csv --page raw`: a header row of metric names, a row of units, then one row per kernel.
fn parse_raw_csv(text: &str) -> Result<serde_json::Map<String, serde_json::Value>, Failure> {
    // ncu mixes its own `==PROF==` lines into stdout; the table's lines are the quoted ones.
    let table: String = text
        .lines()
        .filter(|l| l.starts_with('"'))
        .flat_map(|l| [l, "\n"])
        .collect();
    let rows: Vec<Vec<String>> = csv::ReaderBuilder::new()
        .has_headers(false)
        .flexible(true)
        .from_reader(table.as_bytes())
        .records()
        .map(|record| record.map(|r| r.iter().map(str::to_string).collect()))
        .collect::<Result<_, _>>()
        .map_err(|e| Failure::Usage(format!("ncu's CSV output: {e}")))?;
    let header = rows
        .iter()
        .position(|r| r.iter().any(|c| c == "Kernel Name"))
        .ok_or_else(|| Failure::Usage("ncu printed no metrics (was the kernel launched?)".into()))?;
    let names = &rows[header];
    let values = rows
        .get(header + 2)
        .ok_or_else(|| Failure::Usage("ncu printed no metric values".into()))?;
    let mut out = serde_json::Map::new();
    for (metric, field) in METRICS {
        if let Some(i) = names.iter().position(|n| n == metric) {
            let raw = values.get(i).map(|v| v.replace(',', "")).unwrap_or_default();
            let value = raw
                .parse::<f64>()
                .map(serde_json::Value::from)
                .unwrap_or(serde_json::Value::String(raw));
            out.insert(field.to_string(), value);
        }
    }
    Ok(out)
}

fn which(program: &str) -> Option<PathBuf> {
    std::env::var_os("PATH")?
        .to_str()?
        .split(':')
        .map(|dir| PathBuf::from(dir).join(program))
        .find(|p| p.is_file())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verdicts_follow_the_rule() {
        assert!(verdict(Some(62.0), Some(10.0)).starts_with("compute-bound"));
        assert!(verdict(Some(20.0), Some(85.0)).starts_with("memory-bound"));
        assert!(verdict(Some(30.0), Some(30.0)).starts_with("latency-bound"));
        assert!(verdict(None, Some(30.0)).starts_with("unknown"));
    }

    #[test]
    fn parses_ncu_raw_csv() {
        let text = "==PROF== Connected\n\"ID\",\"Kernel Name\",\"gpu__time_duration.sum\",\"sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active\"\n\"\",\"\",\"nsecond\",\"%\"\n\"0\",\"k\",\"1,234\",\"55.5\"\n";
        let m = parse_raw_csv(text).ok().unwrap();
        assert_eq!(m["duration_ns"], serde_json::json!(1234.0));
        assert_eq!(m["tensor_pipe_pct"], serde_json::json!(55.5));
    }

    #[test]
    fn quoted_commas_and_quotes_stay_in_their_field() {
        // A kernel name with a comma and a doubled quote, as CSV writes them: the columns after
        // it still line up with the header.
        let text = "\"ID\",\"Kernel Name\",\"gpu__time_duration.sum\"\n\"\",\"\",\"nsecond\"\n\"0\",\"f<a, \"\"b\"\">\",\"2,500\"\n";
        let m = parse_raw_csv(text).ok().unwrap();
        assert_eq!(m["duration_ns"], serde_json::json!(2500.0));
        assert!(parse_raw_csv("==PROF== nothing\n").is_err());
    }
}
