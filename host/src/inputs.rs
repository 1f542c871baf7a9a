//! Shared pieces of the subcommands: named shape sets, random inputs, JSON output, progress.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};

use flashrs::{DType, Shape, VariantSpec, VARIANTS};
use indicatif::{ProgressBar, ProgressStyle};
use rand::rngs::StdRng;
use rand::{Rng, RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;
use rand_distr::StandardNormal;
use serde::Serialize;

use crate::Failure;

/// A shape and, for sets that fix it, the mask (`None`: the command's mask flags decide).
pub type Case = (Shape, Option<bool>);

/// The named shape sets of `--shapes`.
pub fn shape_set(name: &str) -> Result<Vec<Case>, Failure> {
    let open = |shapes: Vec<Shape>| shapes.into_iter().map(|s| (s, None)).collect();
    Ok(match name {
        "small" => open(vec![Shape::new(1, 8, 128, 64)]),
        "mission" => open(vec![Shape::new(2, 8, 512, 64)]),
        "long" => open(vec![
            Shape::new(1, 8, 2048, 64),
            Shape::new(1, 8, 2048, 128),
            Shape::new(1, 4, 2048, 256),
        ]),
        "odd" => open(vec![
            Shape::new(1, 2, 1, 64),
            Shape::new(2, 3, 77, 64),
            Shape::new(1, 4, 1000, 128),
            Shape::new(1, 3, 211, 256),
        ]),
        "large" => open(vec![Shape::new(4, 16, 2048, 64), Shape::new(4, 16, 2048, 128)]),
        // Edge cases: one query and one key; more queries than keys (causal: the first rows see
        // no key at all and must come out as zeros); more keys than queries; lengths one past a
        // tile.
        "edge" => open(vec![
            Shape {
                seq_k: 1,
                ..Shape::new(1, 2, 1, 64)
            },
            Shape {
                seq_k: 70,
                ..Shape::new(1, 3, 200, 128)
            },
            Shape {
                seq_k: 300,
                ..Shape::new(2, 2, 65, 64)
            },
            Shape {
                seq_k: 1,
                ..Shape::new(1, 1, 129, 128)
            },
            Shape::new(1, 2, 129, 128),
            Shape {
                seq_k: 97,
                ..Shape::new(1, 2, 160, 256)
            },
        ]),
        // Decode-like problems that `flash_decode` splits over the key range (few query rows per
        // KV head, keys many tiles long): one query; three queries of a group of 2; grouped and
        // multi-query heads whose packed rows fill one or two 16-row tiles; key lengths that end
        // mid-tile; and a single key.
        "splitkv" => open(vec![
            Shape {
                seq_q: 1,
                seq_k: 5000,
                ..Shape::new(1, 8, 1, 128)
            },
            Shape {
                seq_q: 3,
                seq_k: 777,
                ..Shape::new(2, 4, 3, 64).with_heads_kv(2)
            },
            Shape {
                seq_q: 1,
                seq_k: 4001,
                ..Shape::new(2, 8, 1, 128).with_heads_kv(2)
            },
            Shape {
                seq_q: 4,
                seq_k: 2500,
                ..Shape::new(1, 8, 4, 128).with_heads_kv(1)
            },
            Shape {
                seq_q: 2,
                seq_k: 3333,
                ..Shape::new(1, 6, 2, 64).with_heads_kv(3)
            },
            Shape {
                seq_q: 1,
                seq_k: 1,
                ..Shape::new(1, 4, 1, 64).with_heads_kv(2)
            },
        ]),
        // Decode as served (`bench`): one query per head against long caches, then the same with
        // 8 KV heads for 32 query heads (grouped-query attention), and a short prefill chunk.
        "decode" => {
            let one = |b, s_k| Shape {
                seq_q: 1,
                seq_k: s_k,
                ..Shape::new(b, 32, 1, 128)
            };
            open(vec![
                one(1, 32768),
                one(8, 8192),
                one(64, 2048),
                Shape {
                    seq_q: 128,
                    ..Shape::new(4, 32, 4096, 128)
                },
                one(1, 32768).with_heads_kv(8),
                one(16, 32768).with_heads_kv(8),
            ])
        }
        // The standard comparison with the peers: these non-causal, then these causal.
        "std" => {
            let plain = [
                (1, 8, 512, 64),
                (2, 8, 512, 64),
                (2, 8, 2048, 64),
                (4, 16, 2048, 64),
                (4, 16, 2048, 128),
                (2, 16, 4096, 64),
                (2, 16, 4096, 128),
                (1, 16, 8192, 128),
            ];
            let causal = [(2, 8, 512, 64), (2, 16, 4096, 128), (1, 16, 16384, 128)];
            let case = |(b, h, s, d): (usize, usize, usize, usize), c| (Shape::new(b, h, s, d), Some(c));
            plain
                .into_iter()
                .map(|t| case(t, false))
                .chain(causal.into_iter().map(|t| case(t, true)))
                .collect()
        }
        // The FP8 comparison (`bench --dtype e4m3`, the goal of 1.6x the fp16 pick): these
        // non-causal, the first causal.
        "fp8" => {
            let plain = [
                (2, 16, 4096, 128),
                (2, 16, 4096, 256),
                (1, 16, 8192, 128),
                (1, 16, 8192, 256),
            ];
            let case = |(b, h, s, d): (usize, usize, usize, usize), c| (Shape::new(b, h, s, d), Some(c));
            plain
                .into_iter()
                .map(|t| case(t, false))
                .chain([case((2, 16, 4096, 128), true)])
                .collect()
        }
        other => {
            return Err(Failure::Usage(format!(
            "unknown shape set `{other}` (small, mission, long, odd, edge, large, std, splitkv, decode, fp8)"
        )))
        }
    })
}

/// Cases from `--shapes a,b` and `--shape B,H,S,D` (repeatable), in order, without repeats;
/// `masks` gives the masks for cases whose set does not fix one.
pub fn cases(sets: &[String], explicit: &[Shape], masks: &[bool]) -> Result<Vec<(Shape, bool)>, Failure> {
    let mut out: Vec<(Shape, bool)> = Vec::new();
    let mut push = |shape: Shape, causal: bool| {
        if !out.contains(&(shape, causal)) {
            out.push((shape, causal));
        }
    };
    for set in sets {
        for (shape, fixed) in shape_set(set.trim())? {
            match fixed {
                Some(causal) => push(shape, causal),
                None => masks.iter().for_each(|&causal| push(shape, causal)),
            }
        }
    }
    for shape in explicit {
        shape.validate()?;
        masks.iter().for_each(|&causal| push(*shape, causal));
    }
    Ok(out)
}

/// The variants named by `--kernel` (all when none is named); the library-composed paths
/// (`cublas`, `cutensor`) are not variants (see `library::wanted`).
pub fn variants(names: &[String]) -> Result<Vec<&'static VariantSpec>, Failure> {
    if names.is_empty() {
        return Ok(flashrs::variants::built(VARIANTS).collect());
    }
    names
        .iter()
        .filter(|n| crate::library::Path::from_name(n).is_none())
        .map(|n| {
            VariantSpec::by_name(n)
                .ok_or_else(|| Failure::Usage(flashrs::Error::UnknownKernel(n.clone()).to_string()))
        })
        .collect()
}

/// `n` elements of `dtype` (its bits) from `rng`: standard normal draws, or with `timing` a cheap
/// hash of one draw, uniform in [-1, 1) (the gigabytes of a paged or varlen bench case in seconds).
pub fn draw_bits(rng: &mut StdRng, dtype: DType, n: usize, timing: bool) -> Vec<u16> {
    if timing {
        let base: u64 = rng.random();
        (0..n as u64)
            .map(|i| dtype.encode(((base ^ i).wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 40) as f32 / 8e6 - 1.0))
            .collect()
    } else {
        (0..n)
            .map(|_| dtype.encode(rng.sample::<f32, _>(StandardNormal)))
            .collect()
    }
}

/// Fresh standard-normal inputs rounded to `dtype` (as its bits), and the same values as f32 for
/// the reference, so the reference sees exactly what the kernel sees.
pub struct Inputs {
    pub dtype: DType,
    pub q: Vec<u16>,
    pub k: Vec<u16>,
    pub v: Vec<u16>,
}

impl Inputs {
    pub fn random(shape: Shape, dtype: DType, seed: u64) -> Inputs {
        let mut rng = StdRng::seed_from_u64(seed);
        let mut draw = |n: usize| -> Vec<u16> {
            (0..n)
                .map(|_| dtype.encode(rng.sample::<f32, _>(StandardNormal)))
                .collect()
        };
        Inputs {
            dtype,
            q: draw(shape.q_len()),
            k: draw(shape.kv_len()),
            v: draw(shape.kv_len()),
        }
    }

    /// Inputs for timing only: as `random` up to 2^24 elements of K, beyond that uniform in
    /// [-2, 2) from ChaCha8 drawn on every core, which draws the gigabytes of a long KV cache in
    /// seconds instead of minutes (the values do not change a kernel's time).
    pub fn for_timing(shape: Shape, dtype: DType, seed: u64) -> Inputs {
        if shape.kv_len() <= 1 << 24 {
            return Inputs::random(shape, dtype, seed);
        }
        let threads = std::thread::available_parallelism().map_or(1, |t| t.get());
        let draw = |n: usize, stream: u64| uniform_in_parallel(dtype, n, seed, stream, threads);
        Inputs {
            dtype,
            q: draw(shape.q_len(), 1),
            k: draw(shape.kv_len(), 2),
            v: draw(shape.kv_len(), 3),
        }
    }

    /// Multiplies Q and K by `factor` (rounded back to the element type): larger scores.
    pub fn scale_queries_and_keys(&mut self, factor: f32) {
        let dtype = self.dtype;
        for x in self.q.iter_mut().chain(self.k.iter_mut()) {
            *x = dtype.encode(dtype.decode(*x) * factor);
        }
    }

    pub fn as_f32(&self) -> (Vec<f32>, Vec<f32>, Vec<f32>) {
        let widen = |x: &[u16]| flashrs::gpu::decode(self.dtype, x);
        (widen(&self.q), widen(&self.k), widen(&self.v))
    }
}

/// `n` values uniform in [-2, 2) (24 random bits each), element `i` from word `i` of ChaCha8's
/// stream `stream` under `seed`. ChaCha is a counter-mode generator: each thread seeks to its
/// chunk's first word, so the values do not depend on how many threads drew them.
fn uniform_in_parallel(dtype: DType, n: usize, seed: u64, stream: u64, threads: usize) -> Vec<u16> {
    let mut out = vec![0u16; n];
    let chunk = n.div_ceil(threads.max(1)).max(1);
    std::thread::scope(|scope| {
        for (c, part) in out.chunks_mut(chunk).enumerate() {
            scope.spawn(move || {
                let mut rng = ChaCha8Rng::seed_from_u64(seed);
                rng.set_stream(stream);
                rng.set_word_pos((c * chunk) as u128);
                for x in part {
                    let bits = rng.next_u32() >> 8;
                    *x = dtype.encode(bits as f32 / (1u32 << 22) as f32 - 2.0);
                }
            });
        }
    });
    out
}

/// A seed from the clock, so every run draws new inputs; printed so `--seed` replays it.
pub fn fresh_seed() -> u64 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    nanos ^ (std::process::id() as u64).rotate_left(32)
}

/// Writes `value` as pretty JSON to `path`, or to stdout for `-` (see `json_to_stdout`).
pub fn write_json<T: Serialize>(path: &Path, value: &T) -> Result<(), Failure> {
    let text = serde_json::to_string_pretty(value)? + "\n";
    if is_stdout(path) {
        let mut saved = JSON_STDOUT
            .get()
            .map(|out| out.lock().unwrap_or_else(|e| e.into_inner()));
        let written = match saved.as_deref_mut() {
            Some(out) => out.write_all(text.as_bytes()).and_then(|()| out.flush()),
            None => std::io::stdout().write_all(text.as_bytes()),
        };
        return written.map_err(|e| Failure::Usage(format!("--json -: {e}")));
    }
    std::fs::write(path, text).map_err(|e| Failure::Usage(format!("{}: {e}", path.display())))
}

/// `-` as an output path: standard output.
pub fn is_stdout(path: &Path) -> bool {
    path == Path::new("-")
}

/// Where `write_json` writes `-` once `json_to_stdout` has moved everything else to stderr.
static JSON_STDOUT: OnceLock<Mutex<std::fs::File>> = OnceLock::new();

/// For `--json -`: the JSON alone on standard output, so that it can be piped; the command's
/// tables, notes and verdict go to stderr from here on. Call before the command prints anything.
pub fn json_to_stdout(json: Option<&Path>) -> Result<(), Failure> {
    if !json.is_some_and(is_stdout) || JSON_STDOUT.get().is_some() {
        return Ok(());
    }
    std::io::stdout().flush()?;
    // Safety: duplicating descriptors this process owns: 1 is kept as a new descriptor for the
    // JSON, then 1 becomes a copy of 2; no Rust object owns either number.
    let saved = unsafe { libc::dup(1) };
    if saved < 0 || unsafe { libc::dup2(2, 1) } < 0 {
        return Err(Failure::Usage(format!(
            "--json -: cannot redirect stdout ({})",
            std::io::Error::last_os_error()
        )));
    }
    // Safety: `saved` is a fresh descriptor from `dup`, owned by nothing else.
    let file = unsafe { <std::fs::File as std::os::fd::FromRawFd>::from_raw_fd(saved) };
    let _ = JSON_STDOUT.set(Mutex::new(file));
    Ok(())
}

/// Refuses an output path whose directory does not exist (or is not a directory), so that a
/// typo fails before any GPU work rather than after it; `-` is refused (see `check_json_outputs`).
pub fn check_output(path: &Path) -> Result<(), Failure> {
    if is_stdout(path) {
        return Err(Failure::Usage(
            "-: only JSON outputs (--json, micro's --best, profile's --out) go to stdout; give a file here"
                .into(),
        ));
    }
    let dir = match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    };
    if dir.is_dir() {
        Ok(())
    } else {
        Err(Failure::Usage(format!(
            "{}: the directory {} does not exist",
            path.display(),
            dir.display()
        )))
    }
}

/// `check_output` for every path given.
pub fn check_outputs<'a>(paths: impl IntoIterator<Item = &'a Option<PathBuf>>) -> Result<(), Failure> {
    paths.into_iter().flatten().try_for_each(|p| check_output(p))
}

/// `check_output` for JSON outputs, which may also be `-` (stdout, see `json_to_stdout`).
pub fn check_json_outputs<'a>(paths: impl IntoIterator<Item = &'a Option<PathBuf>>) -> Result<(), Failure> {
    paths
        .into_iter()
        .flatten()
        .filter(|p| !is_stdout(p))
        .try_for_each(|p| check_output(p))
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

/// Opens the GPU or explains in one line why not; any failure here means no usable GPU (exit
/// code 2), even a driver error, since nothing has run yet.
pub fn open_gpu(device: usize) -> Result<flashrs::Gpu, Failure> {
    flashrs::Gpu::open_with(device, flashrs::GpuOptions::from_env())
        .map_err(|e| Failure::Usage(e.to_string()))
}

#[cfg(test)]
mod timing_input_tests {
    use super::*;

    #[test]
    fn parallel_uniform_values_do_not_depend_on_the_thread_count() {
        let one = uniform_in_parallel(DType::F16, 10_001, 42, 2, 1);
        for threads in [2, 3, 7, 64] {
            assert_eq!(
                one,
                uniform_in_parallel(DType::F16, 10_001, 42, 2, threads),
                "{threads}"
            );
        }
        // Another stream or seed is another draw.
        assert_ne!(one, uniform_in_parallel(DType::F16, 10_001, 42, 3, 1));
        assert_ne!(one, uniform_in_parallel(DType::F16, 10_001, 43, 2, 1));
    }

    #[test]
    fn parallel_uniform_values_cover_minus_two_to_two() {
        let values: Vec<f32> = uniform_in_parallel(DType::Bf16, 100_000, 7, 1, 4)
            .into_iter()
            .map(|x| DType::Bf16.decode(x))
            .collect();
        assert!(values.iter().all(|v| (-2.0..=2.0).contains(v)), "out of range");
        let mean = values.iter().map(|&v| v as f64).sum::<f64>() / values.len() as f64;
        assert!(mean.abs() < 0.02, "mean {mean}");
        assert!(values.iter().any(|&v| v < -1.9) && values.iter().any(|&v| v > 1.9));
        assert!(uniform_in_parallel(DType::F16, 0, 7, 1, 4).is_empty());
    }
}
