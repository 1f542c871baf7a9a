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
    #[arg(long)]
    shape: Shape,
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
    shape: Shape,
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
    let gpu = inputs::open_gpu(device)?;
    let inputs = Inputs::random(args.shape, args.dtype, 1);
    let mut tensors = gpu.tensors(args.shape, args.dtype, &inputs.q, &inputs.k, &inputs.v)?;
    let params = Params {
        causal: args.causal,
        scale: None,
    };
    for _ in 0..args.warmup {
        gpu.forward(&mut tensors, params, Some(&args.kernel))?;
    }
    let blocks = gpu.trace_items(variant, &mut tensors, params)?;
    if blocks.is_empty() {
        return Err(Failure::Usage(format!(
            "{} recorded no timeline on {} (no block had an item)",
            args.kernel, args.shape
        )));
    }
    let spans = item_spans(&blocks);
    let ends: Vec<f64> = blocks.iter().filter_map(|b| b.end()).map(f64::from).collect();
    let report = Report {
        kernel: args.kernel.clone(),
        shape: args.shape,
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
