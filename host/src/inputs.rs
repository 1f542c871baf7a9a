//! Shared pieces of the subcommands: named shape sets, random inputs, JSON output, progress.

use flashrs::gpu::DTYPE;
use flashrs::{Shape, VariantSpec, VARIANTS};
use half::f16;
use indicatif::{ProgressBar, ProgressStyle};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use rand_distr::StandardNormal;
use serde::Serialize;

use crate::Failure;

/// The named shape sets of `--shapes`.
pub fn shape_set(name: &str) -> Result<Vec<Shape>, Failure> {
    Ok(match name {
        "small" => vec![Shape::new(1, 8, 128, 64)],
        "mission" => vec![Shape::new(2, 8, 512, 64)],
        "long" => vec![Shape::new(1, 8, 2048, 64), Shape::new(1, 8, 2048, 128)],
        "odd" => vec![
            Shape::new(1, 2, 1, 64),
            Shape::new(2, 3, 77, 64),
            Shape::new(1, 4, 1000, 128),
        ],
        "large" => vec![Shape::new(4, 16, 2048, 64), Shape::new(4, 16, 2048, 128)],
        other => {
            return Err(Failure::Usage(format!(
                "unknown shape set `{other}` (small, mission, long, odd, large)"
            )))
        }
    })
}

/// Shapes from `--shapes a,b` and `--shape B,H,S,D` (repeatable), in order, without repeats.
pub fn shapes(sets: &[String], explicit: &[Shape]) -> Result<Vec<Shape>, Failure> {
    let mut out: Vec<Shape> = Vec::new();
    for set in sets {
        for shape in shape_set(set.trim())? {
            if !out.contains(&shape) {
                out.push(shape);
            }
        }
    }
    for shape in explicit {
        shape.validate()?;
        if !out.contains(shape) {
            out.push(*shape);
        }
    }
    Ok(out)
}

/// The variants named by `--kernel` (all when none is named).
pub fn variants(names: &[String]) -> Result<Vec<&'static VariantSpec>, Failure> {
    if names.is_empty() {
        return Ok(VARIANTS.iter().collect());
    }
    names
        .iter()
        .map(|n| {
            VariantSpec::by_name(n)
                .ok_or_else(|| Failure::Usage(flashrs::Error::UnknownKernel(n.clone()).to_string()))
        })
        .collect()
}

/// Fresh standard-normal inputs rounded to the kernels' dtype, and the same values as f32 for the
/// reference (so the reference sees exactly what the kernel sees).
pub struct Inputs {
    pub q: Vec<f16>,
    pub k: Vec<f16>,
    pub v: Vec<f16>,
}

impl Inputs {
    pub fn random(shape: Shape, seed: u64) -> Inputs {
        let mut rng = StdRng::seed_from_u64(seed);
        let mut draw = |n: usize| -> Vec<f16> {
            (0..n)
                .map(|_| f16::from_f32(rng.sample::<f32, _>(StandardNormal)))
                .collect()
        };
        Inputs {
            q: draw(shape.q_len()),
            k: draw(shape.kv_len()),
            v: draw(shape.kv_len()),
        }
    }

    pub fn as_f32(&self) -> (Vec<f32>, Vec<f32>, Vec<f32>) {
        let widen = |x: &[f16]| x.iter().map(|h| h.to_f32()).collect::<Vec<f32>>();
        (widen(&self.q), widen(&self.k), widen(&self.v))
    }
}

/// A seed from the clock, so every run draws new inputs; printed so `--seed` replays it.
pub fn fresh_seed() -> u64 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    nanos ^ (std::process::id() as u64).rotate_left(32)
}

/// The dtype name used in reports.
pub fn dtype_name() -> &'static str {
    match DTYPE {
        "f16" => "float16",
        other => other,
    }
}

pub fn write_json<T: Serialize>(path: &std::path::Path, value: &T) -> Result<(), Failure> {
    let text = serde_json::to_string_pretty(value)?;
    std::fs::write(path, text + "\n").map_err(|e| Failure::Usage(format!("{}: {e}", path.display())))
}

/// A progress bar on stderr (hidden when stderr is not a terminal).
pub fn progress(len: usize, what: &str) -> ProgressBar {
    let bar = ProgressBar::new(len as u64);
    if let Ok(style) = ProgressStyle::with_template("{prefix} [{bar:30}] {pos}/{len} {msg}") {
        bar.set_style(style.progress_chars("=> "));
    }
    bar.set_prefix(what.to_string());
    bar
}

/// Opens the GPU or explains in one line why not.
pub fn open_gpu(device: usize) -> Result<flashrs::Gpu, Failure> {
    flashrs::Gpu::open(device).map_err(|e| Failure::Usage(e.to_string()))
}
