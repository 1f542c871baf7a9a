//! What `bench` measures and reports, and what `plot` reads back: the per-kernel rows, the
//! per-shape summary against the peers, and the JSON report around them.

use flashrs::gpu::Choice;
use flashrs::stats::{bootstrap_speedup_ci, Summary};
use flashrs::{DType, Shape};
use serde::{Deserialize, Serialize};

use crate::Failure;

#[derive(Serialize, Deserialize, Clone)]
pub struct Row {
    pub kernel: String,
    pub shape: [usize; 4],
    pub seq_k: usize,
    pub causal: bool,
    pub dtype: String,
    pub peer: bool,
    /// For peers: flash, cudnn, efficient (torch) or cublas.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub backend: Option<String>,
    /// How `p50_us`.. were measured: CUDA events around each replay of a graph of
    /// `calls_per_graph` back-to-back calls, divided by that count.
    pub method: String,
    pub calls_per_graph: u32,
    pub p50_us: f64,
    pub p90_us: f64,
    pub p99_us: f64,
    pub min_us: f64,
    /// From `p50_us`: 4*B*H*S_q*S_k*D, halved when causal.
    pub tflops: f64,
    /// CUDA events around each single launch (launch overhead included); ours only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub event_p50_us: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub speedup_vs_naive: Option<f64>,
    /// Declared by the variant's barrier policy; ours only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub barriers_per_tile: Option<u32>,
    /// Counted by the instrumented twin on this shape; ours only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub barriers_per_tile_runtime: Option<f64>,
    /// Per-call time of every replay, for the bootstrap intervals.
    pub samples_us: Vec<f64>,
}

#[derive(Serialize)]
pub struct ShapeSummary {
    pub shape: [usize; 4],
    pub seq_k: usize,
    pub causal: bool,
    pub ours: String,
    pub ours_us: f64,
    pub best_peer: Option<String>,
    pub best_peer_us: Option<f64>,
    /// best_peer_us / ours_us: above 1 means ours is faster.
    pub speedup: Option<f64>,
    /// 95% bootstrap interval of the speedup (10,000 resamples of the per-replay timings).
    pub ci95: Option<(f64, f64)>,
    /// Ratio to cuDNN's SDPA when it ran.
    pub speedup_vs_cudnn: Option<f64>,
    /// Ratio to torch's flash backend (FlashAttention-2) when it ran.
    pub speedup_vs_torch_flash: Option<f64>,
    /// 95% bootstrap interval of that ratio.
    pub ci95_vs_torch_flash: Option<(f64, f64)>,
    /// The variant the library's dispatch picks for this shape, and its speedup over the best peer.
    pub dispatch: String,
    pub dispatch_speedup: Option<f64>,
    /// Whether the pick came from the tuned table or the built-in heuristic.
    pub dispatch_source: Choice,
}

/// The JSON of `bench --json`.
#[derive(Serialize)]
pub struct Report {
    pub gpu: String,
    pub iters: u32,
    pub warmup: u32,
    pub peers: Vec<String>,
    pub notes: Vec<String>,
    pub results: Vec<Row>,
    pub summary: Vec<ShapeSummary>,
}

/// The part of a saved `Report` that `plot` redraws from.
#[derive(Deserialize)]
pub struct SavedRows {
    pub gpu: String,
    pub results: Vec<Row>,
}

pub fn row_from(
    kernel: String,
    shape: Shape,
    dtype: DType,
    causal: bool,
    calls: u32,
    samples: Vec<f64>,
    backend: Option<String>,
) -> Result<Row, Failure> {
    let s = Summary::from_samples(&samples)
        .ok_or_else(|| Failure::Usage(format!("{kernel}: no valid timings")))?;
    Ok(Row {
        kernel,
        shape: [shape.batch, shape.heads, shape.seq_q, shape.head_dim],
        seq_k: shape.seq_k,
        causal,
        dtype: dtype.long_name().to_string(),
        peer: backend.is_some(),
        backend,
        method: "cuda_graph_replay".to_string(),
        calls_per_graph: calls,
        p50_us: s.p50,
        p90_us: s.p90,
        p99_us: s.p99,
        min_us: s.min,
        tflops: shape.flops(causal) / (s.p50 * 1e-6) / 1e12,
        event_p50_us: None,
        speedup_vs_naive: None,
        barriers_per_tile: None,
        barriers_per_tile_runtime: None,
        samples_us: samples,
    })
}

fn same_case(row: &Row, shape: Shape, causal: bool) -> bool {
    row.shape == [shape.batch, shape.heads, shape.seq_q, shape.head_dim]
        && row.seq_k == shape.seq_k
        && row.causal == causal
}

/// Per case: our fastest kernel against the fastest peer, with a bootstrap interval.
/// Per case: our fastest against the best peer, and what the library's choice (`pick`) scored.
pub fn summarise(
    cases: &[(Shape, bool)],
    rows: &[Row],
    pick: &dyn Fn(Shape, bool) -> (&'static str, Choice),
) -> Vec<ShapeSummary> {
    let fastest = |peer: bool, shape, causal| {
        rows.iter()
            .filter(|r| r.peer == peer && same_case(r, shape, causal))
            .min_by(|a, b| a.p50_us.total_cmp(&b.p50_us))
    };
    cases
        .iter()
        .filter_map(|&(shape, causal)| {
            let ours = fastest(false, shape, causal)?;
            let peer = fastest(true, shape, causal);
            let backend = |name: &str| {
                rows.iter()
                    .find(|r| r.backend.as_deref() == Some(name) && same_case(r, shape, causal))
            };
            let cudnn = backend("cudnn");
            let (dispatch, dispatch_source) = pick(shape, causal);
            let picked = rows
                .iter()
                .find(|r| r.kernel == dispatch && same_case(r, shape, causal));
            Some(ShapeSummary {
                shape: ours.shape,
                seq_k: shape.seq_k,
                causal,
                ours: ours.kernel.clone(),
                ours_us: ours.p50_us,
                best_peer: peer.map(|p| p.kernel.clone()),
                best_peer_us: peer.map(|p| p.p50_us),
                speedup: peer.map(|p| p.p50_us / ours.p50_us),
                ci95: peer
                    .and_then(|p| bootstrap_speedup_ci(&p.samples_us, &ours.samples_us, 10_000, 0x5eed)),
                speedup_vs_cudnn: cudnn.map(|c| c.p50_us / ours.p50_us),
                speedup_vs_torch_flash: backend("flash").map(|c| c.p50_us / ours.p50_us),
                ci95_vs_torch_flash: backend("flash")
                    .and_then(|f| bootstrap_speedup_ci(&f.samples_us, &ours.samples_us, 10_000, 0x5eed)),
                dispatch: dispatch.to_string(),
                dispatch_speedup: picked.zip(peer).map(|(d, p)| p.p50_us / d.p50_us),
                dispatch_source,
            })
        })
        .collect()
}

pub fn print_table(rows: &[Row]) {
    println!(
        "{:<40} {:>22} {:>6} {:>10} {:>10} {:>10} {:>8} {:>8} {:>9} {:>10}",
        "kernel",
        "shape",
        "causal",
        "p50 us",
        "p90 us",
        "p99 us",
        "TFLOP/s",
        "x naive",
        "bar/tile",
        "launch p50"
    );
    for r in rows {
        let barriers = match (r.barriers_per_tile, r.barriers_per_tile_runtime) {
            (Some(d), Some(c)) => format!("{d}/{c}"),
            _ => "-".into(),
        };
        println!(
            "{:<40} {:>22} {:>6} {:>10.2} {:>10.2} {:>10.2} {:>8.1} {:>8} {:>9} {:>10}",
            r.kernel,
            format!("{:?}", r.shape),
            r.causal,
            r.p50_us,
            r.p90_us,
            r.p99_us,
            r.tflops,
            r.speedup_vs_naive.map_or("-".to_string(), |s| format!("{s:.1}")),
            barriers,
            r.event_p50_us.map_or("-".to_string(), |e| format!("{e:.2}")),
        );
    }
}

pub fn print_summary(summary: &[ShapeSummary]) {
    if summary.iter().all(|s| s.best_peer.is_none()) {
        return;
    }
    println!(
        "\n{:>22} {:>6}  {:<38} {:>9}  {:<16} {:>9}  {:>8}  {:>15}  {:>8}  {:>8}  {:>9}",
        "shape",
        "causal",
        "ours (fastest)",
        "us",
        "best peer",
        "us",
        "speedup",
        "95% CI",
        "vs cuDNN",
        "vs FA2",
        "library's pick vs best peer"
    );
    for s in summary {
        println!(
            "{:>22} {:>6}  {:<38} {:>9.2}  {:<16} {:>9}  {:>8}  {:>15}  {:>8}  {:>8}  {:>9}",
            format!("{:?}", s.shape),
            s.causal,
            s.ours,
            s.ours_us,
            s.best_peer.as_deref().unwrap_or("-"),
            s.best_peer_us.map_or("-".into(), |u| format!("{u:.2}")),
            s.speedup.map_or("-".into(), |x| format!("{x:.3}x")),
            s.ci95
                .map_or("-".into(), |(lo, hi)| format!("[{lo:.3}, {hi:.3}]")),
            s.speedup_vs_cudnn.map_or("-".into(), |x| format!("{x:.3}x")),
            s.speedup_vs_torch_flash
                .map_or("-".into(), |x| format!("{x:.3}x")),
            match (s.ours == s.dispatch, s.dispatch_source) {
                (true, Choice::Tuned) => "= fastest (tuned)".to_string(),
                (true, Choice::Heuristic) => "= fastest".to_string(),
                (false, source) => format!(
                    "{} {}",
                    s.dispatch_speedup.map_or("-".into(), |x| format!("{x:.3}x")),
                    if source == Choice::Tuned { "(tuned)" } else { "" }
                ),
            },
        );
    }
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
    fn summary_picks_the_fastest_on_each_side() {
        let rows = vec![
            row("a", false, 10.0),
            row("b", false, 8.0),
            row("torch_flash", true, 12.0),
            row("torch_cudnn", true, 9.0),
        ];
        let s = summarise(&[(Shape::new(1, 8, 512, 64), false)], &rows, &|_, _| {
            ("a", Choice::Heuristic)
        });
        assert_eq!(s[0].ours, "b");
        assert_eq!(s[0].best_peer.as_deref(), Some("torch_cudnn"));
        assert!((s[0].speedup.unwrap() - 9.0 / 8.0).abs() < 1e-12);
        let (lo, hi) = s[0].ci95.unwrap();
        assert!(lo <= 9.0 / 8.0 && 9.0 / 8.0 <= hi);
    }
}
