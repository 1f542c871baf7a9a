//! `list`: the compiled variants, their barriers per tile and their resources (no GPU needed).

use std::path::PathBuf;

use flashrs::embedded;
use flashrs::variants::DTYPES;
use flashrs::variants::VARIANTS;
use flashrs_lab::ptx;
use flashrs_lab::ptxas::{self, KernelResources};
use serde::Serialize;

use crate::inputs;
use crate::Failure;

#[derive(clap::Args)]
pub struct Args {
    /// Architecture whose PTX to describe: 80 or 90.
    #[arg(long, default_value_t = 90)]
    arch: u32,
    /// Write the list as JSON to this file.
    #[arg(long)]
    json: Option<PathBuf>,
}

#[derive(Serialize)]
struct Entry {
    kernel: &'static str,
    symbol: String,
    variant: &'static flashrs::VariantSpec,
    head_dim: usize,
    dtype: &'static str,
    smem_bytes: u32,
    barriers_declared: u32,
    barriers_in_ptx_loop: usize,
    resources: Option<KernelResources>,
}

pub fn run(args: Args) -> Result<(), Failure> {
    let (target, _, ptx_text) = embedded::modules()
        .find(|&(_, number, _)| number == args.arch)
        .ok_or_else(|| Failure::Usage(format!("no PTX for sm_{} (80 or 90)", args.arch)))?;
    let globals = ptx::u32_globals(ptx_text);
    let entries = ptx::entries(ptx_text);
    let resources = match ptxas::find_ptxas() {
        Some(path) => match ptxas::assemble(&path, ptx_text, target) {
            Ok(r) => Some(r),
            Err(e) => {
                eprintln!("note: ptxas failed, no register counts: {e}");
                None
            }
        },
        None => {
            eprintln!("note: ptxas not found (run scripts/setup.sh): no register or spill counts");
            None
        }
    };
    let mut list = Vec::new();
    for variant in VARIANTS {
        for (&head_dim, &dtype) in variant
            .head_dims
            .iter()
            .flat_map(|d| DTYPES.iter().map(move |t| (d, t)))
        {
            let symbol = variant.symbol(head_dim, dtype);
            let loop_barriers = entries
                .iter()
                .find(|e| e.name == symbol)
                .and_then(ptx::barriers_in_loop)
                .unwrap_or(0);
            list.push(Entry {
                kernel: variant.name,
                barriers_declared: globals
                    .get(format!("{symbol}_barriers_per_tile").as_str())
                    .copied()
                    .unwrap_or(0),
                smem_bytes: globals
                    .get(format!("{symbol}_smem_bytes").as_str())
                    .copied()
                    .unwrap_or(0),
                resources: resources
                    .as_ref()
                    .and_then(|r| r.iter().find(|k| k.kernel == symbol).cloned()),
                barriers_in_ptx_loop: loop_barriers,
                variant,
                head_dim,
                dtype,
                symbol,
            });
        }
    }
    println!(
        "{:<40} {:>4} {:>5} {:>7} {:>5} {:>5} {:>4} {:>6} {:>9} {:>5} {:>8} {:>6}",
        "variant",
        "d",
        "dtype",
        "block_m",
        "bn",
        "warps",
        "vec",
        "stages",
        "bar/tile",
        "regs",
        "smem B",
        "spills"
    );
    for e in &list {
        let (regs, spills) = match &e.resources {
            Some(r) => (
                r.registers.to_string(),
                (r.spill_stores_bytes + r.spill_loads_bytes).to_string(),
            ),
            None => ("-".into(), "-".into()),
        };
        let v = e.variant;
        println!(
            "{:<40} {:>4} {:>5} {:>7} {:>5} {:>5} {:>4} {:>6} {:>5}/{:<3} {:>5} {:>8} {:>6}",
            e.kernel,
            e.head_dim,
            e.dtype,
            v.block_m,
            v.block_n,
            v.warps,
            v.vec,
            v.stages,
            e.barriers_declared,
            e.barriers_in_ptx_loop,
            regs,
            e.smem_bytes,
            spills
        );
    }
    println!(
        "{} variants, {} kernels (each with a barrier-counting twin), {target} PTX; bar/tile = declared/in the PTX loop",
        VARIANTS.len(),
        list.len(),
    );
    println!(
        "clean PTX build of every variant: {:.1} s (both architectures, measured by build.rs when it last ran)",
        embedded::PTX_BUILD_MS as f64 / 1000.0
    );
    if let Some(path) = &args.json {
        inputs::write_json(path, &list)?;
    }
    Ok(())
}
