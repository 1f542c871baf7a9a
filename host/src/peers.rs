//! Peers measured in the same run: PyTorch's SDPA backends and FlashAttention-3 (PyPI's
//! `flash-attn-4`) through an embedded Python helper (`host/peers/attention_peers.py`), timed
//! with the same graph-replay method as our kernels.

use std::io::Write;
use std::process::{Command, Stdio};

use flashrs::Shape;
use serde::Deserialize;

/// The helper script, embedded so the binary works from any directory and on machines that
/// receive only the binary.
const PEER_SCRIPT: &str = include_str!("../peers/attention_peers.py");

/// A peer `bench --peers` can time beside our kernels.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Peer {
    /// torch's SDPA: flash (FlashAttention-2), cuDNN and memory-efficient backends.
    Torch,
    /// The FlashAttention-3 algorithm from `flash_attn.cute` (PyPI `flash-attn-4`, sm90).
    Fa3,
}

impl Peer {
    pub const ALL: [Peer; 2] = [Peer::Torch, Peer::Fa3];

    pub fn name(self) -> &'static str {
        match self {
            Peer::Torch => "torch",
            Peer::Fa3 => "fa3",
        }
    }

    /// The helper's backend names for this peer.
    fn backends(self) -> &'static [&'static str] {
        match self {
            Peer::Torch => &["flash", "cudnn", "efficient"],
            Peer::Fa3 => &[FA3_BACKEND],
        }
    }
}

/// The backend (and kernel) name of the FlashAttention-3 peer's rows.
pub const FA3_BACKEND: &str = "fa3";

impl std::str::FromStr for Peer {
    type Err = String;

    fn from_str(text: &str) -> Result<Peer, String> {
        Peer::ALL
            .into_iter()
            .find(|p| p.name() == text.trim())
            .ok_or_else(|| {
                let known: Vec<&str> = Peer::ALL.iter().map(|p| p.name()).collect();
                format!("unknown peer `{}` ({})", text.escape_debug(), known.join(", "))
            })
    }
}

#[derive(Debug, Deserialize)]
pub struct PeerReport {
    pub torch: String,
    pub cudnn: Option<i64>,
    pub device: String,
    /// flash-attn-4's version when `fa3` was asked for and imported, else why it did not.
    #[serde(default)]
    pub fa3: Option<String>,
    #[serde(default)]
    pub fa3_error: Option<String>,
    pub results: Vec<PeerRow>,
}

#[derive(Debug, Deserialize)]
pub struct PeerRow {
    pub backend: String,
    pub shape: [usize; 4],
    pub seq_k: usize,
    /// Key/value heads of K and V (grouped-query attention through `enable_gqa`); absent from
    /// helpers that predate it, meaning as many as the query heads.
    #[serde(default)]
    pub heads_kv: Option<usize>,
    pub causal: bool,
    /// `cuda_graph_replay`, or `cuda_events_back_to_back` where a graph could not be captured
    /// (`method_note` says why).
    #[serde(default)]
    pub method: Option<String>,
    #[serde(default)]
    pub method_note: Option<String>,
    pub calls_per_graph: Option<u32>,
    #[serde(default)]
    pub samples_us: Vec<f64>,
    /// Seconds since the Unix epoch when the timed replays began and ended (to look up the
    /// clock they ran at); absent from helpers that predate it.
    #[serde(default)]
    pub window: Option<[f64; 2]>,
    pub error: Option<String>,
}

/// Times torch's flash, cuDNN and memory-efficient SDPA on `cases`. `Err` carries a one-line
/// reason (no python3, no torch, no GPU for torch) for the caller to print as a note.
pub fn torch_bench(
    cases: &[(Shape, bool)],
    dtype: &str,
    calls: u32,
    warmup: u32,
    warmup_ms: f64,
    replays: u32,
) -> Result<Vec<(bool, PeerReport)>, String> {
    peer_bench(cases, &[Peer::Torch], dtype, calls, warmup, warmup_ms, replays)
}

/// Times `peers` on `cases`, one helper run per mask. A peer missing from an otherwise working
/// helper (flash_attn not installed) is reported inside the report (`fa3_error`); `Err` is the
/// helper as a whole failing (no python3, no torch, no GPU for torch), in one line.
pub fn peer_bench(
    cases: &[(Shape, bool)],
    peers: &[Peer],
    dtype: &str,
    calls: u32,
    warmup: u32,
    warmup_ms: f64,
    replays: u32,
) -> Result<Vec<(bool, PeerReport)>, String> {
    let backends: Vec<&str> = peers.iter().flat_map(|p| p.backends()).copied().collect();
    let mut reports = Vec::new();
    for causal in [false, true] {
        let shapes: Vec<[usize; 6]> = cases
            .iter()
            .filter(|(_, c)| *c == causal)
            .map(|(s, _)| [s.batch, s.heads, s.seq_q, s.seq_k, s.head_dim, s.heads_kv])
            .collect();
        if shapes.is_empty() || backends.is_empty() {
            continue;
        }
        let spec = serde_json::json!({
            "shapes": shapes, "causal": causal, "dtype": dtype, "calls": calls,
            "warmup": warmup, "warmup_ms": warmup_ms, "replays": replays, "backends": backends,
        });
        let value = helper_json(&[&spec.to_string()])?;
        let report: PeerReport = serde_json::from_value(value).map_err(|e| format!("peer helper: {e}"))?;
        reports.push((causal, report));
    }
    Ok(reports)
}

/// Torch's float32 math-backend SDPA on the `.npy` inputs in `in_dir` (for `verify --peer torch`);
/// the output lands in `out_dir/out.npy`.
pub fn torch_check(in_dir: &std::path::Path, out_dir: &std::path::Path) -> Result<(), String> {
    helper_json(&[
        "--check",
        &in_dir.display().to_string(),
        &out_dir.display().to_string(),
    ])
    .map(|_| ())
}

/// Runs the helper and returns the JSON object it printed, or its `error` as `Err`.
fn helper_json(args: &[&str]) -> Result<serde_json::Value, String> {
    let stdout = run_python(args)?;
    // The helper prints one object; its last line, should anything slip onto stdout before it.
    let last = stdout.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or("");
    let value: serde_json::Value =
        serde_json::from_str(last).map_err(|e| format!("peer helper printed no JSON ({e})"))?;
    match value.get("error").and_then(|e| e.as_str()) {
        Some(error) => Err(error.to_string()),
        None => Ok(value),
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
        .write_all(PEER_SCRIPT.as_bytes())
        .map_err(|e| format!("python3: {e}"))?;
    let output = child.wait_with_output().map_err(|e| format!("python3: {e}"))?;
    if !output.status.success() {
        let stderr = String::from_utf8_lossy(&output.stderr);
        let last = stderr
            .lines()
            .rev()
            .find(|l| !l.trim().is_empty())
            .unwrap_or("no message");
        return Err(format!("peer helper failed: {last}"));
    }
    Ok(String::from_utf8_lossy(&output.stdout).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn peer_names_parse_and_unknown_ones_are_named_in_the_error() {
        assert_eq!("torch".parse::<Peer>(), Ok(Peer::Torch));
        assert_eq!(" fa3".parse::<Peer>(), Ok(Peer::Fa3));
        let err = "fa2".parse::<Peer>().unwrap_err();
        assert!(err.contains("`fa2`") && err.contains("torch, fa3"), "{err}");
        assert!("".parse::<Peer>().is_err());
    }

    #[test]
    fn the_helpers_report_reads_with_and_without_fa3() {
        let with = r#"{"torch": "2.11.0", "cudnn": 91900, "device": "NVIDIA H100", "fa3": "4.0.0b36",
            "results": [
              {"backend": "fa3", "shape": [2, 16, 4096, 256], "seq_k": 4096, "causal": false,
               "method": "cuda_events_back_to_back", "method_note": "graph capture failed (x)",
               "calls_per_graph": 1, "samples_us": [800.0, 801.0]},
              {"backend": "efficient", "shape": [2, 16, 4096, 256], "seq_k": 4096, "causal": false,
               "error": "No available kernel."}]}"#;
        let report: PeerReport = serde_json::from_str(with).unwrap();
        assert_eq!(report.fa3.as_deref(), Some("4.0.0b36"));
        assert_eq!(
            report.results[0].method.as_deref(),
            Some("cuda_events_back_to_back")
        );
        assert_eq!(report.results[0].samples_us.len(), 2);
        assert!(report.results[1].error.is_some() && report.results[1].samples_us.is_empty());
        let without = r#"{"torch": "2.11.0", "cudnn": null, "device": "NVIDIA H100",
            "fa3_error": "flash_attn.cute not importable: No module named 'flash_attn'", "results": []}"#;
        let report: PeerReport = serde_json::from_str(without).unwrap();
        assert!(report.fa3.is_none() && report.fa3_error.unwrap().contains("flash_attn"));
    }

    #[test]
    fn without_torch_the_helper_fails_in_one_line() {
        // On machines without python3 or torch (CI), the helper's failure is one line for a note.
        let Err(reason) = peer_bench(
            &[(Shape::new(1, 2, 64, 64), false)],
            &[Peer::Torch, Peer::Fa3],
            "float16",
            1,
            1,
            0.0,
            1,
        ) else {
            println!("python3 with torch is present: this check is for machines without");
            return;
        };
        assert_eq!(reason.lines().count(), 1, "{reason}");
        assert!(reason.contains("torch") || reason.contains("python3"), "{reason}");
    }
}
