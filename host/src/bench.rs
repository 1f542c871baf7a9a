//! `bench`: our kernels and the peers, side by side, on the same GPU in the same run, timed the
//! same way (CUDA graphs of back-to-back calls, CUDA events around each replay).

use std::path::PathBuf;

use flashrs::stats::Summary;
use flashrs::{embedded, ptx, DType, Family, Params, Shape};

use crate::inputs::{self, Inputs};
use crate::peers;
use crate::report::{print_summary, print_table, row_from, summarise, Report, Row};
use crate::Failure;

#[derive(clap::Args)]
pub struct Args {
    /// Named shape sets, comma-separated: small, mission, long, odd, large, std (std fixes its
    /// own masks: 8 shapes non-causal, 3 causal).
    #[arg(long, value_delimiter = ',', default_value = "small,mission,long")]
    shapes: Vec<String>,
    /// An extra shape B,H,S,D (or B,H,S_Q,S_K,D); repeatable.
    #[arg(long)]
    shape: Vec<Shape>,
    /// Only these variants (repeatable; default all; naive and flash_scalar are skipped on
    /// shapes too big for them unless named here).
    #[arg(long = "kernel")]
    kernels: Vec<String>,
    /// Causal masking (for shape sets that do not fix it).
    #[arg(long)]
    causal: bool,
    /// Element type of inputs and outputs: f16 or bf16.
    #[arg(long, default_value = "f16")]
    dtype: DType,
    /// Timed repetitions per kernel and shape: graph replays, and single launches.
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u32).range(1..))]
    iters: u32,
    /// Untimed launches (or graph replays) before timing.
    #[arg(long, default_value_t = 10)]
    warmup: u32,
    /// Most back-to-back calls per CUDA graph; fewer for long kernels (about 1 ms per replay).
    #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u32).range(1..))]
    calls_per_graph: u32,
    /// Peers to measure in the same run: `torch` (flash, cuDNN and memory-efficient SDPA through
    /// python3 + torch, when present).
    #[arg(long, value_delimiter = ',')]
    peers: Vec<String>,
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
}

/// Above this many multiply-adds (B*H*S_q*S_k*D) `naive` and `flash_scalar` are skipped unless
/// named with `--kernel`: they would take minutes and say nothing new.
const SLOW_KERNEL_LIMIT: f64 = 3e10;

pub fn run(device: usize, args: Args) -> Result<(), Failure> {
    let masks: &[bool] = if args.causal { &[true] } else { &[false] };
    let cases = inputs::cases(&args.shapes, &args.shape, masks)?;
    let variants = inputs::variants(&args.kernels)?;
    let gates = args
        .gate
        .iter()
        .map(|g| parse_gate(g))
        .collect::<Result<Vec<_>, _>>()?;
    for peer in &args.peers {
        if peer != "torch" {
            return Err(Failure::Usage(format!("unknown peer `{peer}` (torch)")));
        }
    }
    if let Some(path) = &args.plot {
        crate::plot::check_path(path)?;
    }
    let gpu = inputs::open_gpu(device)?;
    println!(
        "bench on {} (sm_{}): per kernel and case, {} timed replays of a CUDA graph of up to {} calls \
         (p50..p99 per call) and {} single launches (launch p50), after {} warm-ups",
        gpu.name, gpu.arch, args.iters, args.calls_per_graph, args.iters, args.warmup
    );
    let globals = ptx::u32_globals(embedded::PTX_SM90);
    let mut rows = Vec::new();
    let mut notes = Vec::new();
    let mut cublas_missing = false;
    let bar = inputs::progress(cases.len() * variants.len(), "bench");
    for &(shape, causal) in &cases {
        let params = Params { causal, scale: None };
        let inputs = Inputs::random(shape, args.dtype, inputs::fresh_seed());
        let mut tensors = gpu.tensors(shape, args.dtype, &inputs.q, &inputs.k, &inputs.v)?;
        let first = rows.len();
        let work = (shape.batch * shape.heads) as f64 * (shape.seq_q * shape.seq_k * shape.head_dim) as f64;
        for variant in variants.iter().filter(|v| v.head_dims.contains(&shape.head_dim)) {
            bar.inc(1);
            let slow = matches!(variant.family, Family::Naive | Family::FlashScalar);
            if slow && work > SLOW_KERNEL_LIMIT && args.kernels.is_empty() {
                continue;
            }
            bar.set_message(format!("{} {shape}", variant.name));
            let kernel = gpu.kernel(variant, shape.head_dim, args.dtype, false)?;
            let singles = gpu.time_launches(
                &kernel,
                &mut tensors,
                params,
                args.warmup as usize,
                args.iters as usize,
            )?;
            let singles =
                Summary::from_samples(&singles).ok_or_else(|| Failure::Usage("no valid timings".into()))?;
            // About a millisecond of work per replay: launch gaps amortised, long kernels not repeated needlessly.
            let calls = ((1000.0 / singles.p50) as u32).clamp(1, args.calls_per_graph);
            let samples = gpu.time_graph(
                &kernel,
                &mut tensors,
                params,
                calls as usize,
                args.warmup as usize,
                args.iters as usize,
            )?;
            let counted = gpu.count_barriers(variant, &mut tensors, params)?;
            let declared = globals
                .get(format!("{}_barriers_per_tile", kernel.symbol).as_str())
                .copied();
            let mut row = row_from(
                variant.name.to_string(),
                shape,
                args.dtype,
                causal,
                calls,
                samples,
                None,
            )?;
            row.event_p50_us = Some(singles.p50);
            row.barriers_per_tile = declared;
            row.barriers_per_tile_runtime = Some(counted.per_tile);
            rows.push(row);
        }
        if inputs::wants_cublas(&args.kernels) && !cublas_missing {
            match time_cublas(&gpu, &mut tensors, params, &args) {
                Ok(row) => rows.push(row),
                Err(flashrs::Error::NoCublas) => {
                    cublas_missing = true;
                    notes.push(format!("cublas peer not measured: {}", flashrs::Error::NoCublas));
                }
                Err(e) => notes.push(format!("cublas on {shape} causal={causal}: {e}")),
            }
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

    if args.peers.iter().any(|p| p == "torch") {
        eprintln!("timing torch SDPA backends on the same shapes...");
        match peers::torch_bench(
            &cases,
            args.dtype.long_name(),
            args.calls_per_graph,
            args.warmup,
            args.iters,
        ) {
            Ok(reports) => {
                for (_, report) in reports {
                    notes.push(format!(
                        "torch {} (cuDNN {:?}) on {}",
                        report.torch, report.cudnn, report.device
                    ));
                    for r in report.results {
                        let shape = Shape {
                            batch: r.shape[0],
                            heads: r.shape[1],
                            heads_kv: r.shape[1],
                            seq_q: r.shape[2],
                            seq_k: r.seq_k,
                            head_dim: r.shape[3],
                        };
                        match r.error {
                            Some(error) => notes.push(format!(
                                "torch {} on {shape} causal={}: {error}",
                                r.backend, r.causal
                            )),
                            None => rows.push(row_from(
                                format!("torch_{}", r.backend),
                                shape,
                                args.dtype,
                                r.causal,
                                r.calls_per_graph.unwrap_or(1),
                                r.samples_us,
                                Some(r.backend),
                            )?),
                        }
                    }
                }
            }
            Err(reason) => notes.push(format!("torch peers not measured: {reason}")),
        }
    }
    for note in &notes {
        println!("note: {note}");
    }
    let pick = |shape: Shape, causal: bool| {
        let (variant, source) = gpu.choose(shape, args.dtype, causal);
        (variant.name, source)
    };
    let summary = summarise(&cases, &rows, &pick);
    print_table(&rows);
    print_summary(&summary);
    let gate_failures: Vec<String> = gates
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
            peers: args.peers.clone(),
            notes,
            results: rows,
            summary,
        };
        inputs::write_json(path, &report)?;
    }
    if gate_failures.is_empty() {
        Ok(())
    } else {
        for failure in &gate_failures {
            println!("GATE FAIL: {failure}");
        }
        Err(Failure::Check)
    }
}

/// The cuBLAS-composed path, timed like our kernels; a peer row (`backend: cublas`).
fn time_cublas(
    gpu: &flashrs::Gpu,
    tensors: &mut flashrs::Tensors,
    params: Params,
    args: &Args,
) -> flashrs::Result<Row> {
    let shape = tensors.shape();
    let mut path = flashrs::cublas::CublasAttention::new(gpu, shape, tensors.dtype())?;
    let singles = gpu.time_each(args.warmup as usize, args.iters as usize, || {
        path.launch(gpu, tensors, params)
    })?;
    let single_p50 = flashrs::stats::median(&singles).unwrap_or(f64::INFINITY);
    let calls = ((1000.0 / single_p50) as u32).clamp(1, args.calls_per_graph);
    let samples = gpu.time_graph_of(calls as usize, args.warmup as usize, args.iters as usize, || {
        path.launch(gpu, tensors, params)
    })?;
    let mut row = row_from(
        flashrs::cublas::NAME.into(),
        shape,
        tensors.dtype(),
        params.causal,
        calls,
        samples,
        Some("cublas".into()),
    )
    .map_err(|_| flashrs::Error::InvalidProblem("cublas: no valid timings".into()))?;
    row.event_p50_us = Some(single_p50);
    Ok(row)
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
            .filter(|p| p.peer && p.shape == row.shape && p.seq_k == row.seq_k && p.causal == row.causal)
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

#[cfg(test)]
mod tests {
    use super::*;

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
}
