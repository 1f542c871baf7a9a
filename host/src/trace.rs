//! `trace`: where a `flash_ws` launch's blocks spend their cycles, item by item. Warm-up launches
//! of the kernel itself (Q, K and V then sit in L2, as in `bench`'s graph replay), then one launch
//! of its instrumented twin, whose first consumer warpgroup records the SM clock at five points of
//! each of the block's first work items (`launch::record`). Prints, per item position (a
//! persistent block's first item, its second, ...), the median over blocks of each span; then,
//! per KV tile of a block's first item, where each of the first two consumer warpgroups' chains
//! went (the turn, the issue, the wait for S, the softmax) and how far apart the two were.
//! `--json` writes every block's timeline beside it. `--dtype e4m3` traces a `flash_ws_fp8`
//! kernel on quantised random inputs.

use std::path::PathBuf;

use flashrs::spec::Family;
use flashrs::{DType, Params, Shape, VariantSpec};
use flashrs_lab::timeline::{item_spans, tile_spans, timelines, BlockTimeline, ItemSpans, TileSpans};
use flashrs_lab::Timing;
use serde::Serialize;

use crate::fp8::Elem;
use crate::inputs::{self, Inputs};
use crate::Failure;

#[derive(clap::Args)]
pub struct Args {
    /// The variant (see `list`): a `flash_ws` one, or with `--dtype e4m3` a `flash_ws_fp8` one,
    /// the families whose twins record timelines.
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
    /// Element type: f16, bf16, or e4m3 (quantised random inputs, bf16 output; dense shapes only).
    #[arg(long, default_value = "f16")]
    dtype: Elem,
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
    dtype: String,
    warmup: usize,
    gpu: String,
    /// Per item position, the median over blocks of each span (SM cycles).
    spans: Vec<ItemSpans>,
    /// Per traced consumer and KV tile of a block's first item, the median over blocks of each
    /// span of its chain (SM cycles).
    tile_spans: Vec<TileSpans>,
    /// The median and the largest, over blocks, of the cycles from a block's first item's start
    /// to its last item's end.
    block_end_median: f64,
    block_end_max: u32,
    blocks: Vec<BlockTimeline>,
}

pub fn run(device: usize, args: Args) -> Result<(), Failure> {
    let e4m3 = args.dtype == Elem::E4m3;
    let by_name = if e4m3 {
        VariantSpec::fp8_by_name
    } else {
        VariantSpec::by_name
    };
    let variant = by_name(&args.kernel).ok_or_else(|| {
        Failure::Usage(format!(
            "unknown {} kernel {} (see `list`)",
            if e4m3 { "e4m3" } else { "16-bit" },
            args.kernel
        ))
    })?;
    let family = if e4m3 { Family::FlashWsFp8 } else { Family::FlashWs };
    if variant.family != family {
        return Err(Failure::Usage(format!(
            "{} is a {} kernel: with --dtype {} only {} kernels record item timelines",
            args.kernel,
            variant.family.name(),
            args.dtype,
            family.name()
        )));
    }
    if e4m3 && args.varlen {
        return Err(Failure::Usage(
            "--varlen takes 16-bit inputs (no e4m3 varlen path)".into(),
        ));
    }
    if args.varlen_seed.is_some() && !args.varlen {
        return Err(Failure::Usage(
            "--varlen-seed chooses --varlen's lengths: add --varlen".into(),
        ));
    }
    let varlen_head_dim = crate::varlen::VARLEN_CASE.3;
    if args.varlen
        && variant
            .varlen_symbol(varlen_head_dim, args.dtype.sixteen().name(), true)
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
        ..Params::default()
    };
    let (shape, varlen_lens, blocks) = match args.shape {
        Some(shape) if e4m3 => (shape, None, trace_e4m3(&gpu, variant, shape, &args, params)?),
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
        dtype: args.dtype.to_string(),
        warmup: args.warmup,
        gpu: gpu.name.clone(),
        block_end_median: flashrs_lab::stats::median(&ends).unwrap_or(0.0),
        block_end_max: blocks.iter().filter_map(|b| b.end()).max().unwrap_or(0),
        spans,
        tile_spans: tile_spans(&blocks),
        blocks,
    };
    print_spans(&report);
    print_tile_spans(&report.tile_spans);
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
    let dtype = args.dtype.sixteen();
    let inputs = Inputs::random(shape, dtype, 1);
    let mut tensors = gpu.tensors(shape, dtype, &inputs.q, &inputs.k, &inputs.v)?;
    for _ in 0..args.warmup {
        gpu.forward(&mut tensors, params, Some(&args.kernel))?;
    }
    Ok(gpu.trace_items(variant, &mut tensors, params)?)
}

/// `trace_dense` for an e4m3 variant: random inputs quantised per head (as `bench --dtype e4m3`
/// times), a bf16 output.
fn trace_e4m3(
    gpu: &flashrs::Gpu,
    variant: &'static VariantSpec,
    shape: Shape,
    args: &Args,
    params: Params,
) -> Result<Vec<BlockTimeline>, Failure> {
    let inputs = Inputs::random(shape, DType::F16, 1);
    let mut tensors = crate::fp8::quantized_tensors(gpu, shape, DType::Bf16, &inputs)?;
    for _ in 0..args.warmup {
        gpu.fp8_forward(&mut tensors, params, Some(&args.kernel))?;
    }
    let words = gpu.fp8_barrier_log_len(variant, &tensors)?;
    let mut log = gpu
        .stream()
        .alloc_zeros::<u32>(words)
        .map_err(flashrs::Error::from)?;
    gpu.fp8_forward_counted(&mut tensors, params, Some(&args.kernel), &mut log)?;
    Ok(timelines(&gpu.download(&log)?)?)
}

/// As `trace_dense`, on the varlen entry point of `variant` and `bench --varlen`'s batch: the
/// batch padded to its longest sequence (the report's shape), the lengths and the timelines.
fn trace_varlen(
    gpu: &flashrs::Gpu,
    variant: &'static VariantSpec,
    args: &Args,
    params: Params,
) -> Result<(Shape, Vec<usize>, Vec<BlockTimeline>), Failure> {
    let (count, _, heads, head_dim) = crate::varlen::VARLEN_CASE;
    let seed = args.varlen_seed.unwrap_or(crate::varlen::VARLEN_SEED);
    let (lens, mut tensors) = crate::varlen::bench_case(gpu, seed, None, args.causal, args.dtype.sixteen())?;
    let kernel = gpu.varlen_kernel(variant, head_dim, args.dtype.sixteen(), false)?;
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
        report.dtype,
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

/// Per KV tile of a block's first item, side by side for the two traced consumers: the wait for
/// the turn (from the tile before's P packed), the issue, the wait for S, the softmax in its three
/// parts (before the wait for V and the last P V, that wait, the rest with the packing of P); and
/// when the other consumer took its turn after this one's.
fn print_tile_spans(spans: &[TileSpans]) {
    if spans.is_empty() {
        return;
    }
    println!("first item's KV tiles, per consumer warpgroup (SM cycles, medians over the blocks):");
    let columns = [
        "turn", "wait", "issue", "S wait", "head", "retire", "tail", "other",
    ];
    let header: Vec<String> = columns.iter().map(|c| format!("{c:>6}")).collect();
    println!(
        "{:>4} | c0 {} | c1 {}",
        "tile",
        header.join(" "),
        header.join(" ")
    );
    let tiles = spans.iter().map(|s| s.tile + 1).max().unwrap_or(0);
    for tile in 0..tiles {
        let cell = |consumer: usize| match spans.iter().find(|s| s.consumer == consumer && s.tile == tile) {
            Some(s) => [
                s.turn,
                s.turn_wait,
                s.issue,
                s.scores_wait,
                s.head,
                s.retire,
                s.tail,
                s.other_turn_after,
            ]
            .iter()
            .map(|v| {
                if v.is_nan() {
                    format!("{:>6}", "-")
                } else {
                    format!("{v:>6.0}")
                }
            })
            .collect::<Vec<_>>()
            .join(" "),
            None => vec![format!("{:>6}", "-"); columns.len()].join(" "),
        };
        println!("{tile:>4} |    {} |    {}", cell(0), cell(1));
    }
    println!(
        "(wait: from the tile before's P packed; other: the other consumer's next turn after this one's)"
    );
}
