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

/// ptxas's report on the module (registers, spills), from a cache beside the system's temporary
/// files when this very PTX was assembled before (keyed by its fingerprint), else by running
/// ptxas (about 15 s for sm_90a) behind a spinner; `None`, with a note, without ptxas.
fn resources(target: &str, ptx_text: &'static str) -> Option<Vec<KernelResources>> {
    let cache = std::env::temp_dir().join(format!(
        "flashrs-list-{target}-{:016x}.json",
        embedded::fingerprint(ptx_text)
    ));
    if let Some(cached) = std::fs::read_to_string(&cache)
        .ok()
        .and_then(|text| serde_json::from_str::<Vec<KernelResources>>(&text).ok())
    {
        return Some(cached);
    }
    let Some(path) = ptxas::find_ptxas() else {
        eprintln!("note: ptxas not found (run scripts/setup.sh): no register or spill counts");
        return None;
    };
    let spinner = indicatif::ProgressBar::new_spinner();
    spinner.set_message(format!(
        "assembling the {target} PTX with ptxas for register counts (cached for the next run)..."
    ));
    spinner.enable_steady_tick(std::time::Duration::from_millis(120));
    let assembled = ptxas::assemble_parallel(&path, ptx_text, target);
    spinner.finish_and_clear();
    match assembled {
        Ok(found) => {
            // Written aside then renamed, so that a concurrent run never reads half a file; a
            // cache that cannot be written only costs the next run the same wait.
            let partial = cache.with_extension(format!("{}.part", std::process::id()));
            if let Ok(text) = serde_json::to_string(&found) {
                if std::fs::write(&partial, text).is_ok() {
                    let _ = std::fs::rename(&partial, &cache);
                }
            }
            Some(found)
        }
        Err(e) => {
            eprintln!("note: ptxas failed, no register counts: {e}");
            None
        }
    }
}

pub fn run(args: Args) -> Result<(), Failure> {
    inputs::check_json_outputs([&args.json])?;
    inputs::json_to_stdout(args.json.as_deref())?;
    let (target, _, ptx_text) = embedded::modules()
        .find(|&(_, number, _)| number == args.arch)
        .ok_or_else(|| Failure::Usage(format!("no PTX for sm_{} (80 or 90)", args.arch)))?;
    let globals = ptx::u32_globals(ptx_text);
    let entries = ptx::entries(ptx_text);
    let resources = resources(target, ptx_text);
    // Only what this architecture's PTX holds (the sm_80 module has no wgmma variants).
    let present = |symbol: &str| entries.iter().any(|e| e.name == symbol);
    let mut list = Vec::new();
    let mut listed_variants = 0;
    for variant in VARIANTS {
        let in_module = variant
            .head_dims
            .iter()
            .flat_map(|&d| DTYPES.iter().map(move |t| variant.symbol(d, t)))
            .any(|s| present(&s));
        if !in_module {
            continue;
        }
        listed_variants += 1;
        for (&head_dim, &dtype) in variant
            .head_dims
            .iter()
            .flat_map(|d| DTYPES.iter().map(move |t| (d, t)))
        {
            let symbol = variant.symbol(head_dim, dtype);
            if !present(&symbol) {
                continue;
            }
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
    let counted = flashrs::variants::built(VARIANTS)
        .filter(|v| v.counted_built)
        .count();
    println!(
        "{listed_variants} variants, {} kernels ({counted} variants with barrier-counting twins), {target} PTX; \
         bar/tile = declared/in the PTX loop",
        list.len(),
    );
    let unbuilt = VARIANTS.iter().filter(|v| !v.built).count();
    if unbuilt > 0 {
        println!(
            "{unbuilt} more variants of kernels.toml are not in this build (it has the shipped ones): \
             FLASHRS_VARIANTS=all compiles every variant"
        );
    }
    println!(
        "last PTX build: {:.1} s (build.rs, when it last ran)",
        embedded::PTX_BUILD_MS as f64 / 1000.0
    );
    if let Some(path) = &args.json {
        inputs::write_json(path, &list)?;
    }
    Ok(())
}
