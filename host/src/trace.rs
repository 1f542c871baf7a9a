//! `trace`: where a `flash_ws` launch's blocks spend their cycles, item by item. Warm-up launches
//! of the kernel itself (Q, K and V then sit in L2, as in `bench`'s graph replay), then one launch
//! of its instrumented twin, whose first consumer warpgroup records the SM clock at five points of
//! each of the block's first work items (`launch::record`). Prints, per item position (a
//! persistent block's first item, its second, ...), the median over blocks of each span; `--json`
//! writes every block's timeline beside it.

use std::path::PathBuf;

use flashrs::spec::Family;
use flashrs::{DType, Params, Shape, VariantSpec};
use flashrs_lab::timeline::{item_spans, BlockTimeline, ItemSpans};
use flashrs_lab::Timing;
use serde::Serialize;

use crate::inputs::{self, Inputs};
use crate::Failure;

#[derive(clap::Args)]
pub struct Args {
    /// The variant (see `list`): a `flash_ws` one, the family whose twins record timelines.
    #[arg(long)]
    kernel: String,
    /// Problem shape B,H,S,D or B,H,S_q,S_k,D.
    #[arg(long, required_unless_present = "varlen", conflicts_with = "varlen")]
    shape: Option<Shape>,
    /// Trace the kernel's varlen entry point on `bench --varlen`'s batch (16 sequences of 1-4096
    /// keys, H=16, D=128) instead of a dense shape.
    #[arg(long)]
    varlen: bool,
    /// Seed of `--varlen`'s lengths [default: 2026, `bench --varlen`'s batch].
    #[arg(long)]
    varlen_seed: Option<u64>,
    /// Causal masking.
    #[arg(long)]
    causal: bool,
    /// Element type: f16 or bf16.
    #[arg(long, default_value = "f16")]
    dtype: DType,
    /// Launches of the kernel itself before the traced one.
    #[arg(long, default_value_t = 20)]
    warmup: usize,
    /// Write the spans and every block's timeline as JSON to this file (`-` for stdout).
    #[arg(long)]
    json: Option<PathBuf>,
}

#[derive(Serialize)]
struct Report {
    kernel: String,
    /// The dense shape; for `--varlen`, the batch padded to its longest sequence.
    shape: Shape,
    /// `--varlen`'s sequence lengths (queries and keys the same).
    varlen_lens: Option<Vec<usize>>,
    causal: bool,
    dtype: DType,
    warmup: usize,
    gpu: String,
    /// Per item position, the median over blocks of each span (SM cycles).
    spans: Vec<ItemSpans>,
    /// The median and the largest, over blocks, of the cycles from a block's first item's start
    /// to its last item's end.
    block_end_median: f64,
    block_end_max: u32,
    blocks: Vec<BlockTimeline>,
}

pub fn run(device: usize, args: Args) -> Result<(), Failure> {
    let variant = VariantSpec::by_name(&args.kernel)
        .ok_or_else(|| Failure::Usage(format!("unknown kernel {} (see `list`)", args.kernel)))?;
    if variant.family != Family::FlashWs {
        return Err(Failure::Usage(format!(
            "{} is a {} kernel: only flash_ws kernels record item timelines",
            args.kernel,
            variant.family.name()
        )));
    }
    if args.varlen_seed.is_some() && !args.varlen {
        return Err(Failure::Usage(
            "--varlen-seed chooses --varlen's lengths: add --varlen".into(),
        ));
    }
    let varlen_head_dim = crate::bench::VARLEN_CASE.3;
    if args.varlen
        && variant
            .varlen_symbol(varlen_head_dim, args.dtype.name(), true)
            .is_none()
    {
        return Err(Failure::Usage(format!(
            "{} has no varlen entry point at head dim {varlen_head_dim} (see `list`)",
            args.kernel
        )));
    }
    let gpu = inputs::open_gpu(device)?;
    let params = Params {
        causal: args.causal,
        scale: None,
    };
    let (shape, varlen_lens, blocks) = match args.shape {
        Some(shape) => (shape, None, trace_dense(&gpu, variant, shape, &args, params)?),
        None => {
            let (shape, lens, blocks) = trace_varlen(&gpu, variant, &args, params)?;
            (shape, Some(lens), blocks)
        }
    };
    if blocks.is_empty() {
        return Err(Failure::Usage(format!(
            "{} recorded no timeline on {shape} (no block had an item)",
            args.kernel
        )));
    }
    let spans = item_spans(&blocks);
    let ends: Vec<f64> = blocks.iter().filter_map(|b| b.end()).map(f64::from).collect();
    let report = Report {
        kernel: args.kernel.clone(),
        shape,
        varlen_lens,
        causal: args.causal,
        dtype: args.dtype,
        warmup: args.warmup,
        gpu: gpu.name.clone(),
        block_end_median: flashrs_lab::stats::median(&ends).unwrap_or(0.0),
        block_end_max: blocks.iter().filter_map(|b| b.end()).max().unwrap_or(0),
        spans,
        blocks,
    };
    print_spans(&report);
    if let Some(path) = &args.json {
        inputs::write_json(path, &report)?;
    }
    Ok(())
}

/// Warm-up launches of `variant` on random inputs of `shape`, then one traced launch.
fn trace_dense(
    gpu: &flashrs::Gpu,
    variant: &'static VariantSpec,
    shape: Shape,
    args: &Args,
    params: Params,
) -> Result<Vec<BlockTimeline>, Failure> {
    let inputs = Inputs::random(shape, args.dtype, 1);
    let mut tensors = gpu.tensors(shape, args.dtype, &inputs.q, &inputs.k, &inputs.v)?;
    for _ in 0..args.warmup {
        gpu.forward(&mut tensors, params, Some(&args.kernel))?;
    }
    Ok(gpu.trace_items(variant, &mut tensors, params)?)
}

/// As `trace_dense`, on the varlen entry point of `variant` and `bench --varlen`'s batch: the
/// batch padded to its longest sequence (the report's shape), the lengths and the timelines.
fn trace_varlen(
    gpu: &flashrs::Gpu,
    variant: &'static VariantSpec,
    args: &Args,
    params: Params,
) -> Result<(Shape, Vec<usize>, Vec<BlockTimeline>), Failure> {
    let (count, _, heads, head_dim) = crate::bench::VARLEN_CASE;
    let seed = args.varlen_seed.unwrap_or(crate::bench::VARLEN_SEED);
    let (lens, mut tensors) = crate::varlen::bench_case(gpu, seed, None, args.causal, args.dtype)?;
    let kernel = gpu.varlen_kernel(variant, head_dim, args.dtype, false)?;
    for _ in 0..args.warmup {
        gpu.launch_varlen(&kernel, &mut tensors, params, None)?;
    }
    let blocks = gpu.trace_varlen_items(variant, &mut tensors, params)?;
    let padded = Shape::new(count, heads, tensors.batch().max_q(), head_dim);
    Ok((padded, lens, blocks))
}

fn print_spans(report: &Report) {
    println!(
        "{} on {}{} ({}), {} blocks; SM cycles, medians over the blocks that had the item:",
        report.kernel,
        report.shape,
        if report.causal { " causal" } else { "" },
        report.dtype.name(),
        report.blocks.len()
    );
    println!(
        "{:>4} {:>6} {:>8} {:>6} {:>7} {:>8} {:>6} {:>8} {:>8}",
        "item", "blocks", "start", "gap", "Q wait", "KV loop", "merge", "epilogue", "end"
    );
    for s in &report.spans {
        println!(
            "{:>4} {:>6} {:>8.0} {:>6.0} {:>7.0} {:>8.0} {:>6.0} {:>8.0} {:>8.0}",
            s.position, s.blocks, s.start, s.gap, s.q_wait, s.kv_loop, s.merge, s.epilogue, s.end
        );
    }
    println!(
        "block end: median {:.0}, largest {} cycles from its first item's start",
        report.block_end_median, report.block_end_max
    );
}
