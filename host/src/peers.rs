//! Peers measured in the same run: PyTorch's SDPA backends through an embedded Python helper
//! (`host/peers/torch_sdpa.py`), timed with the same graph-replay method as our kernels.

use std::io::Write;
use std::process::{Command, Stdio};

use flashrs::Shape;
use serde::Deserialize;

/// The helper script, embedded so the binary works from any directory and on machines that
/// receive only the binary.
const TORCH_SCRIPT: &str = include_str!("../peers/torch_sdpa.py");

#[derive(Debug, Deserialize)]
pub struct TorchReport {
    pub torch: String,
    pub cudnn: Option<i64>,
    pub device: String,
    pub results: Vec<TorchRow>,
}

#[derive(Debug, Deserialize)]
pub struct TorchRow {
    pub backend: String,
    pub shape: [usize; 4],
    pub seq_k: usize,
    pub causal: bool,
    pub calls_per_graph: Option<u32>,
    #[serde(default)]
    pub samples_us: Vec<f64>,
    pub error: Option<String>,
}

/// Times torch's flash, cuDNN and memory-efficient SDPA on `cases`. `Err` carries a one-line
/// reason (no python3, no torch, no GPU for torch) for the caller to print as a note.
pub fn torch_bench(
    cases: &[(Shape, bool)],
    dtype: &str,
    calls: u32,
    warmup: u32,
    replays: u32,
) -> Result<Vec<(bool, TorchReport)>, String> {
    let mut reports = Vec::new();
    for causal in [false, true] {
        let shapes: Vec<[usize; 5]> = cases
            .iter()
            .filter(|(_, c)| *c == causal)
            .map(|(s, _)| [s.batch, s.heads, s.seq_q, s.seq_k, s.head_dim])
            .collect();
        if shapes.is_empty() {
            continue;
        }
        let spec = serde_json::json!({
            "shapes": shapes, "causal": causal, "dtype": dtype, "calls": calls,
            "warmup": warmup, "replays": replays, "backends": ["flash", "cudnn", "efficient"],
        });
        let stdout = run_python(&[&spec.to_string()])?;
        let value: serde_json::Value =
            serde_json::from_str(&stdout).map_err(|e| format!("torch helper printed no JSON ({e})"))?;
        if let Some(error) = value.get("error").and_then(|e| e.as_str()) {
            return Err(error.to_string());
        }
        let report: TorchReport = serde_json::from_value(value).map_err(|e| format!("torch helper: {e}"))?;
        reports.push((causal, report));
    }
    Ok(reports)
}

/// Torch's float32 math-backend SDPA on the `.npy` inputs in `in_dir` (for `verify --peer torch`);
/// the output lands in `out_dir/out.npy`.
pub fn torch_check(in_dir: &std::path::Path, out_dir: &std::path::Path) -> Result<(), String> {
    let stdout = run_python(&[
        "--check",
        &in_dir.display().to_string(),
        &out_dir.display().to_string(),
    ])?;
    let value: serde_json::Value =
        serde_json::from_str(&stdout).map_err(|e| format!("torch helper printed no JSON ({e})"))?;
    match value.get("error").and_then(|e| e.as_str()) {
        Some(error) => Err(error.to_string()),
        None => Ok(()),
    }
}

fn run_python(args: &[&str]) -> Result<String, String> {
    let mut child = Command::new("python3")
        .arg("-")
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("python3 not runnable ({e})"))?;
    child
        .stdin
        .take()
        .ok_or("python3 has no stdin")?
        .write_all(TORCH_SCRIPT.as_bytes())
        .map_err(|e| format!("python3: {e}"))?;
    let output = child.wait_with_output().map_err(|e| format!("python3: {e}"))?;
    if !output.status.success() {
        let stderr = String::from_utf8_lossy(&output.stderr);
        let last = stderr
            .lines()
            .rev()
            .find(|l| !l.trim().is_empty())
            .unwrap_or("no message");
        return Err(format!("torch helper failed: {last}"));
    }
    Ok(String::from_utf8_lossy(&output.stdout).trim().to_string())
}
