//! `bench`: CUDA-event timing of each variant on each shape, side by side.

use std::path::PathBuf;

use flashrs::stats::Summary;
use flashrs::{embedded, ptx, Params, Shape};
use serde::Serialize;

use crate::inputs::{self, Inputs};
use crate::Failure;

#[derive(clap::Args)]
pub struct Args {
    /// Named shape sets, comma-separated: small, mission, long, odd, large.
    #[arg(long, value_delimiter = ',', default_value = "small,mission,long")]
    shapes: Vec<String>,
    /// An extra shape B,H,S,D (or B,H,S_Q,S_K,D); repeatable.
    #[arg(long)]
    shape: Vec<Shape>,
    /// Only these variants (repeatable; default all).
    #[arg(long = "kernel")]
    kernels: Vec<String>,
    /// Causal masking.
    #[arg(long)]
    causal: bool,
    /// Timed launches per kernel and shape.
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u32).range(1..))]
    iters: u32,
    /// Untimed launches (or graph replays) before timing.
    #[arg(long, default_value_t = 10)]
    warmup: u32,
    /// Back-to-back launches captured in each CUDA graph for the graph-replay timing.
    #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u32).range(1..))]
    calls_per_graph: u32,
    /// Write the results as JSON to this file.
    #[arg(long)]
    json: Option<PathBuf>,
}

#[derive(Serialize)]
struct Row {
    kernel: &'static str,
    shape: [usize; 4],
    seq_k: usize,
    causal: bool,
    dtype: &'static str,
    /// How `p50_us`.. were measured: CUDA events around each replay of a graph of
    /// `calls_per_graph` back-to-back launches, divided by that count.
    method: &'static str,
    calls_per_graph: u32,
    p50_us: f64,
    p90_us: f64,
    p99_us: f64,
    min_us: f64,
    /// From `p50_us`.
    tflops: f64,
    /// CUDA events around each single launch (launch overhead included).
    event_p50_us: f64,
    event_p90_us: f64,
    event_p99_us: f64,
    speedup_vs_naive: Option<f64>,
    /// Declared by the variant's barrier policy.
    barriers_per_tile: u32,
    /// Counted by the instrumented twin on this shape.
    barriers_per_tile_runtime: f64,
}

#[derive(Serialize)]
struct Report {
    gpu: String,
    iters: u32,
    warmup: u32,
    calls_per_graph: u32,
    results: Vec<Row>,
}

pub fn run(device: usize, args: Args) -> Result<(), Failure> {
    let shapes = inputs::shapes(&args.shapes, &args.shape)?;
    let variants = inputs::variants(&args.kernels)?;
    let gpu = inputs::open_gpu(device)?;
    let params = Params {
        causal: args.causal,
        scale: None,
    };
    println!(
        "bench on {} (sm_{}), causal={}: per kernel and shape, {} timed replays of a CUDA graph of {} \
         launches (p50..p99 per call) and {} launches timed one by one (events p50), after {} warm-ups",
        gpu.name, gpu.arch, args.causal, args.iters, args.calls_per_graph, args.iters, args.warmup
    );
    let globals = ptx::u32_globals(embedded::PTX_SM90);
    let mut rows = Vec::new();
    let bar = inputs::progress(shapes.len() * variants.len(), "bench");
    for shape in &shapes {
        let inputs = Inputs::random(*shape, inputs::fresh_seed());
        let mut tensors = gpu.tensors(*shape, &inputs.q, &inputs.k, &inputs.v)?;
        let first = rows.len();
        for variant in variants.iter().filter(|v| v.head_dims.contains(&shape.head_dim)) {
            bar.set_message(format!("{} {shape}", variant.name));
            let kernel = gpu.kernel(variant, shape.head_dim, false)?;
            let times = gpu.time_launches(
                &kernel,
                &mut tensors,
                params,
                args.warmup as usize,
                args.iters as usize,
            )?;
            let events =
                Summary::from_samples(&times).ok_or_else(|| Failure::Usage("no valid timings".into()))?;
            let replays = gpu.time_graph(
                &kernel,
                &mut tensors,
                params,
                args.calls_per_graph as usize,
                args.warmup as usize,
                args.iters as usize,
            )?;
            let summary =
                Summary::from_samples(&replays).ok_or_else(|| Failure::Usage("no valid timings".into()))?;
            let counted = gpu.count_barriers(variant, &mut tensors, params)?;
            let declared = globals
                .get(format!("{}_barriers_per_tile", kernel.symbol).as_str())
                .copied()
                .unwrap_or(0);
            rows.push(Row {
                kernel: variant.name,
                shape: [shape.batch, shape.heads, shape.seq_q, shape.head_dim],
                seq_k: shape.seq_k,
                causal: args.causal,
                dtype: inputs::dtype_name(),
                method: "cuda_graph_replay",
                calls_per_graph: args.calls_per_graph,
                event_p50_us: events.p50,
                event_p90_us: events.p90,
                event_p99_us: events.p99,
                p50_us: summary.p50,
                p90_us: summary.p90,
                p99_us: summary.p99,
                min_us: summary.min,
                tflops: shape.flops(args.causal) / (summary.p50 * 1e-6) / 1e12,
                speedup_vs_naive: None,
                barriers_per_tile: declared,
                barriers_per_tile_runtime: counted.per_tile,
            });
            bar.inc(1);
        }
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
    print_table(&rows);
    if let Some(path) = &args.json {
        inputs::write_json(
            path,
            &Report {
                gpu: gpu.name.clone(),
                iters: args.iters,
                warmup: args.warmup,
                calls_per_graph: args.calls_per_graph,
                results: rows,
            },
        )?;
    }
    Ok(())
}

fn print_table(rows: &[Row]) {
    println!(
        "{:<40} {:>20} {:>10} {:>10} {:>10} {:>8} {:>9} {:>9} {:>10}",
        "kernel", "shape", "p50 us", "p90 us", "p99 us", "TFLOP/s", "x naive", "bar/tile", "launch p50"
    );
    for r in rows {
        println!(
            "{:<40} {:>20} {:>10.2} {:>10.2} {:>10.2} {:>8.1} {:>9} {:>5}/{:<3} {:>10.2}",
            r.kernel,
            format!("{:?}", r.shape),
            r.p50_us,
            r.p90_us,
            r.p99_us,
            r.tflops,
            r.speedup_vs_naive.map_or("-".to_string(), |s| format!("{s:.1}")),
            r.barriers_per_tile,
            r.barriers_per_tile_runtime,
            r.event_p50_us
        );
    }
}
