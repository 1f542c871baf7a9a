//! What `bench` measures and reports, and what `plot` reads back: the per-kernel rows, the
//! per-shape summary against the peers, and the JSON report around them.

use flashrs::decode::SplitSource;
use flashrs::gpu::Choice;
use flashrs::{DType, Shape};
use flashrs_lab::clocks::{ClockStats, Window};
use flashrs_lab::stats::{bootstrap_speedup_ci, Summary};
use serde::{Deserialize, Serialize};

use crate::peers::FA3_BACKEND;
use crate::Failure;

#[derive(Serialize, Deserialize, Clone)]
pub struct Row {
    pub kernel: String,
    pub shape: [usize; 4],
    pub seq_k: usize,
    /// Key/value heads (`H` itself without grouped-query attention); 0 in reports from before
    /// it was recorded.
    #[serde(default)]
    pub heads_kv: usize,
    pub causal: bool,
    pub dtype: String,
    pub peer: bool,
    /// For peers: flash, cudnn, efficient (torch), fa3 or cublas.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub backend: Option<String>,
    /// How `p50_us`.. were measured: `cuda_graph_replay`, CUDA events around each replay of a
    /// graph of `calls_per_graph` back-to-back calls, divided by that count; for a peer whose
    /// calls cannot be captured, `cuda_events_back_to_back`, the same around eager calls.
    pub method: String,
    pub calls_per_graph: u32,
    pub p50_us: f64,
    pub p90_us: f64,
    pub p99_us: f64,
    pub min_us: f64,
    /// From `p50_us`: 4*B*H*S_q*S_k*D, halved when causal.
    pub tflops: f64,
    /// Effective bandwidth from `p50_us`, GB/s: the bytes of K and V read once per KV head
    /// (2 * B * H_kv * S_k * D elements of 2 bytes), what bounds decode.
    #[serde(default)]
    pub gbps: f64,
    /// Keys per page of a paged KV cache (`bench --block-size`); null for contiguous K and V.
    #[serde(default)]
    pub block_size: Option<usize>,
    /// Our kernels' tensor layout (`bench --layout`); absent for peers, which take `[B,H,S,D]`,
    /// and in reports from before it was recorded (all `bhsd`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub layout: Option<flashrs::Layout>,
    /// A varlen row (`bench --varlen`): the sequences' lengths (queries and keys alike); `shape`
    /// is then the padded batch `[B, H, max length, D]`, and `tflops` and `gbps` count the
    /// useful work (each sequence's own length) only. Absent for every other row.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub varlen_lens: Option<Vec<usize>>,
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
    /// A flash_decode row: the key slices per row block its launches took, and whether the
    /// tuned table or the heuristic chose them. Absent for every other row.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub splits: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub splits_source: Option<SplitSource>,
    /// The SM clock, power and temperature during the timed replays (NVML); absent where NVML
    /// could not be read, and in reports from before it was recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clocks: Option<ClockStats>,
    /// `bench --rounds N` with N > 1: this row's p50 in every round it ran, in round order (a
    /// round where it did not run, such as one where its peer failed, left out); every other
    /// field is that of the round with the median p50. Absent for a single round, and in
    /// reports from before rounds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rounds_p50_us: Option<Vec<f64>>,
    /// When the timed replays ran, to look their clocks up; not written out.
    #[serde(skip)]
    pub window: Option<Window>,
    /// Per-call time of every replay, for the bootstrap intervals.
    pub samples_us: Vec<f64>,
}

/// A row as `bench --rounds` merges it ([`crate::bench::merge_rounds`]), alike for a bare row
/// and for one with more beside it.
impl AsRef<Row> for Row {
    fn as_ref(&self) -> &Row {
        self
    }
}

impl AsMut<Row> for Row {
    fn as_mut(&mut self) -> &mut Row {
        self
    }
}

/// One case: our fastest kernel against the peers. Where no kernel of ours ran (a head dim we
/// lack), `ours` and every ratio are null and the peers' numbers stand alone.
#[derive(Serialize)]
pub struct ShapeSummary {
    pub shape: [usize; 4],
    pub seq_k: usize,
    pub heads_kv: usize,
    pub causal: bool,
    pub ours: Option<String>,
    pub ours_us: Option<f64>,
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
    /// The FlashAttention-3 peer (`--peers fa3`) when it ran: time, TFLOP/s, our ratio to it and
    /// that ratio's 95% bootstrap interval.
    pub fa3_us: Option<f64>,
    pub fa3_tflops: Option<f64>,
    pub speedup_vs_fa3: Option<f64>,
    pub ci95_vs_fa3: Option<(f64, f64)>,
    /// The variant the library's dispatch picks for this shape, and its speedup over the best
    /// peer; null where no variant of ours has the head dim.
    pub dispatch: Option<String>,
    pub dispatch_speedup: Option<f64>,
    /// Whether the pick came from the tuned table or the built-in heuristic.
    pub dispatch_source: Option<Choice>,
    /// Where the pick is a flash_decode variant: its key slices on this case and their source
    /// (its row's `splits`); absent otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dispatch_splits: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dispatch_splits_source: Option<SplitSource>,
}

/// The JSON of `bench --json`.
#[derive(Serialize)]
pub struct Report {
    pub gpu: String,
    pub iters: u32,
    pub warmup: u32,
    /// `--warmup-ms`: the least milliseconds of replays before each timed set.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub warmup_ms: Option<f64>,
    /// `--rounds`: how many times everything was timed, each row then taken from its median
    /// round; reports from before rounds timed once.
    #[serde(default = "single_round")]
    pub rounds: u32,
    pub peers: Vec<String>,
    pub notes: Vec<String>,
    pub results: Vec<Row>,
    pub summary: Vec<ShapeSummary>,
}

/// One round: `bench --rounds`' default, and what a report from before rounds measured.
pub fn single_round() -> u32 {
    1
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
        heads_kv: shape.heads_kv,
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
        gbps: kv_bytes(shape) / (s.p50 * 1e-6) / 1e9,
        block_size: None,
        layout: None,
        varlen_lens: None,
        event_p50_us: None,
        speedup_vs_naive: None,
        barriers_per_tile: None,
        barriers_per_tile_runtime: None,
        splits: None,
        splits_source: None,
        clocks: None,
        rounds_p50_us: None,
        window: None,
        samples_us: samples,
    })
}

/// Bytes of K and V read once per KV head (16-bit elements).
pub fn kv_bytes(shape: Shape) -> f64 {
    2.0 * shape.kv_len() as f64 * 2.0
}

/// Whether `row` ran the case itself: contiguous K and V of these dims, as the peers read them
/// (a paged or varlen row of the same dims is another problem, reported beside it).
fn same_case(row: &Row, shape: Shape, causal: bool) -> bool {
    row.shape == [shape.batch, shape.heads, shape.seq_q, shape.head_dim]
        && row.seq_k == shape.seq_k
        && row.heads_kv == shape.heads_kv
        && row.causal == causal
        && row.varlen_lens.is_none()
        && row.block_size.is_none()
}

/// Per case: our fastest against the best peer and against cuDNN, FA2 and FA3 by name (with
/// bootstrap intervals), and what the library's choice (`pick`, `None` where it has none) scored.
/// A case where nothing ran is left out.
pub fn summarise(
    cases: &[(Shape, bool)],
    rows: &[Row],
    pick: &dyn Fn(Shape, bool) -> Option<(&'static str, Choice)>,
) -> Vec<ShapeSummary> {
    cases
        .iter()
        .filter_map(|&(shape, causal)| {
            let case: Vec<&Row> = rows.iter().filter(|r| same_case(r, shape, causal)).collect();
            let fastest = |peer: bool| {
                case.iter()
                    .filter(|r| r.peer == peer)
                    .min_by(|a, b| a.p50_us.total_cmp(&b.p50_us))
                    .copied()
            };
            let backend = |name: &str| case.iter().find(|r| r.backend.as_deref() == Some(name)).copied();
            let (ours, peer) = (fastest(false), fastest(true));
            ours.or(peer)?;
            // Our speed relative to `other`'s (above 1: ours is faster), and its interval.
            let ratio = |other: Option<&Row>| ours.zip(other).map(|(o, p)| p.p50_us / o.p50_us);
            let interval = |other: Option<&Row>| {
                ours.zip(other)
                    .and_then(|(o, p)| bootstrap_speedup_ci(&p.samples_us, &o.samples_us, 10_000, 0x5eed))
            };
            let (cudnn, fa2, fa3) = (backend("cudnn"), backend("flash"), backend(FA3_BACKEND));
            let picked = pick(shape, causal);
            let picked_row = picked.and_then(|(name, _)| case.iter().find(|r| r.kernel == name));
            Some(ShapeSummary {
                shape: [shape.batch, shape.heads, shape.seq_q, shape.head_dim],
                seq_k: shape.seq_k,
                heads_kv: shape.heads_kv,
                causal,
                ours: ours.map(|o| o.kernel.clone()),
                ours_us: ours.map(|o| o.p50_us),
                best_peer: peer.map(|p| p.kernel.clone()),
                best_peer_us: peer.map(|p| p.p50_us),
                speedup: ratio(peer),
                ci95: interval(peer),
                speedup_vs_cudnn: ratio(cudnn),
                speedup_vs_torch_flash: ratio(fa2),
                ci95_vs_torch_flash: interval(fa2),
                fa3_us: fa3.map(|f| f.p50_us),
                fa3_tflops: fa3.map(|f| f.tflops),
                speedup_vs_fa3: ratio(fa3),
                ci95_vs_fa3: interval(fa3),
                dispatch: picked.map(|(name, _)| name.to_string()),
                dispatch_speedup: picked_row.zip(peer).map(|(d, p)| p.p50_us / d.p50_us),
                dispatch_source: picked.map(|(_, source)| source),
                dispatch_splits: picked_row.and_then(|r| r.splits),
                dispatch_splits_source: picked_row.and_then(|r| r.splits_source),
            })
        })
        .collect()
}

pub fn print_table(rows: &[Row]) {
    println!(
        "{:<40} {:>30} {:>6} {:>10} {:>10} {:>10} {:>8} {:>8} {:>8} {:>9} {:>10} {:>5}  splits",
        "kernel",
        "shape",
        "causal",
        "p50 us",
        "p90 us",
        "p99 us",
        "TFLOP/s",
        "GB/s",
        "x naive",
        "bar/tile",
        "launch p50",
        "MHz"
    );
    for r in rows {
        let barriers = match (r.barriers_per_tile, r.barriers_per_tile_runtime) {
            (Some(d), Some(c)) => format!("{d}/{c}"),
            _ => "-".into(),
        };
        println!(
            "{:<40} {:>30} {:>6} {:>10.2} {:>10.2} {:>10.2} {:>8.1} {:>8.0} {:>8} {:>9} {:>10} {:>5}  {}",
            r.kernel,
            shape_text(r),
            r.causal,
            r.p50_us,
            r.p90_us,
            r.p99_us,
            r.tflops,
            r.gbps,
            r.speedup_vs_naive.map_or("-".to_string(), |s| format!("{s:.1}")),
            barriers,
            r.event_p50_us.map_or("-".to_string(), |e| format!("{e:.2}")),
            r.clocks.map_or("-".to_string(), |c| format!("{:.0}", c.sm_mhz)),
            splits_text(r.splits, r.splits_source),
        );
    }
}

/// A flash_decode launch's key slices and who chose them (`8 (tuned)`), `-` for other kernels.
fn splits_text(splits: Option<u32>, source: Option<SplitSource>) -> String {
    match (splits, source) {
        (Some(n), Some(source)) => format!("{n} ({})", source.name()),
        (Some(n), None) => n.to_string(),
        (None, _) => "-".to_string(),
    }
}

/// `[B, H, S_q, D]`, with `k=S_k` when it differs and `kv=H_kv` when grouped.
fn shape_text(r: &Row) -> String {
    let mut text = format!("{:?}", r.shape);
    if r.seq_k != r.shape[2] {
        text += &format!(" k={}", r.seq_k);
    }
    if let Some(block_size) = r.block_size {
        text += &format!(" pg={block_size}");
    }
    if r.heads_kv != 0 && r.heads_kv != r.shape[1] {
        text += &format!(" kv={}", r.heads_kv);
    }
    text
}

/// A summary line's shape, with S_k and the key/value heads when they differ (as in the table).
fn summary_shape_text(s: &ShapeSummary) -> String {
    let mut text = format!("{:?}", s.shape);
    if s.seq_k != s.shape[2] {
        text += &format!(" k={}", s.seq_k);
    }
    if s.heads_kv != 0 && s.heads_kv != s.shape[1] {
        text += &format!(" kv={}", s.heads_kv);
    }
    text
}

pub fn print_summary(summary: &[ShapeSummary]) {
    if summary.iter().any(|s| s.best_peer.is_some()) {
        print!("\n{}", summary_table(summary));
    }
}

/// The summary as a table, one line per case; `-` where a peer did not run, `unsupported` for
/// ours where no kernel has the head dim.
pub fn summary_table(summary: &[ShapeSummary]) -> String {
    let ratio = |x: Option<f64>| x.map_or("-".to_string(), |x| format!("{x:.3}x"));
    let us = |x: Option<f64>| x.map_or("-".to_string(), |x| format!("{x:.2}"));
    let mut out = format!(
        "{:>32} {:>6}  {:<38} {:>9}  {:<16} {:>9}  {:>8}  {:>15}  {:>8}  {:>8}  {:>9} {:>7}  {:>8}  {}\n",
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
        "FA3 us",
        "FA3 TF",
        "vs FA3",
        "library's pick vs best peer"
    );
    for s in summary {
        let ours = match &s.ours {
            Some(name) => name.as_str(),
            None if flashrs::problem::kernel_head_dim(s.shape[3]).is_none() => "unsupported",
            None => "-",
        };
        let pick = match (&s.dispatch, s.dispatch_source) {
            (Some(name), Some(source)) if s.ours.as_ref() == Some(name) => match source {
                Choice::Tuned => "= fastest (tuned)".to_string(),
                Choice::Heuristic => "= fastest".to_string(),
            },
            (Some(_), source) => format!(
                "{} {}",
                ratio(s.dispatch_speedup),
                if source == Some(Choice::Tuned) {
                    "(tuned)"
                } else {
                    ""
                }
            ),
            (None, _) => "-".to_string(),
        };
        let pick = match s.dispatch_splits {
            Some(_) => format!(
                "{}, splits {}",
                pick.trim_end(),
                splits_text(s.dispatch_splits, s.dispatch_splits_source)
            ),
            None => pick,
        };
        out += &format!(
            "{:>32} {:>6}  {:<38} {:>9}  {:<16} {:>9}  {:>8}  {:>15}  {:>8}  {:>8}  {:>9} {:>7}  {:>8}  {}\n",
            summary_shape_text(s),
            s.causal,
            ours,
            us(s.ours_us),
            s.best_peer.as_deref().unwrap_or("-"),
            us(s.best_peer_us),
            ratio(s.speedup),
            s.ci95
                .map_or("-".into(), |(lo, hi)| format!("[{lo:.3}, {hi:.3}]")),
            ratio(s.speedup_vs_cudnn),
            ratio(s.speedup_vs_torch_flash),
            us(s.fa3_us),
            s.fa3_tflops.map_or("-".into(), |t| format!("{t:.0}")),
            ratio(s.speedup_vs_fa3),
            pick.trim_end(),
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A row of ours (`backend: None`) or of a peer on `shape`, every sample `p50`.
    fn row_on(shape: Shape, kernel: &str, backend: Option<&str>, p50: f64) -> Row {
        row_from(
            kernel.into(),
            shape,
            DType::F16,
            false,
            1,
            vec![p50; 5],
            backend.map(str::to_string),
        )
        .ok()
        .unwrap()
    }

    fn row(kernel: &str, backend: Option<&str>, p50: f64) -> Row {
        row_on(Shape::new(1, 8, 512, 64), kernel, backend, p50)
    }

    fn pick_a(_: Shape, _: bool) -> Option<(&'static str, Choice)> {
        Some(("a", Choice::Heuristic))
    }

    #[test]
    fn summary_picks_the_fastest_on_each_side() {
        let rows = vec![
            row("a", None, 10.0),
            row("b", None, 8.0),
            row("torch_flash", Some("flash"), 12.0),
            row("torch_cudnn", Some("cudnn"), 9.0),
        ];
        let s = summarise(&[(Shape::new(1, 8, 512, 64), false)], &rows, &pick_a);
        assert_eq!(s[0].ours.as_deref(), Some("b"));
        assert_eq!(s[0].best_peer.as_deref(), Some("torch_cudnn"));
        assert!((s[0].speedup.unwrap() - 9.0 / 8.0).abs() < 1e-12);
        let (lo, hi) = s[0].ci95.unwrap();
        assert!(lo <= 9.0 / 8.0 && 9.0 / 8.0 <= hi);
        assert!((s[0].dispatch_speedup.unwrap() - 9.0 / 10.0).abs() < 1e-12);
    }

    #[test]
    fn paged_rows_are_not_the_cases_ours() {
        let mut paged = row("a_paged", None, 5.0);
        paged.block_size = Some(16);
        let rows = vec![paged, row("a", None, 8.0), row("torch_cudnn", Some("cudnn"), 9.0)];
        let s = summarise(&[(Shape::new(1, 8, 512, 64), false)], &rows, &pick_a);
        assert_eq!(s[0].ours.as_deref(), Some("a"));
        assert_eq!(s[0].dispatch_speedup, s[0].speedup);
    }

    #[test]
    fn summary_ratios_name_each_peer_and_a_missing_peer_stays_empty() {
        let case = [(Shape::new(1, 8, 512, 64), false)];
        let mut rows = vec![
            row("b", None, 8.0),
            row("torch_flash", Some("flash"), 12.0),
            row("torch_cudnn", Some("cudnn"), 9.0),
        ];
        let without = summarise(&case, &rows, &pick_a);
        assert!((without[0].speedup_vs_torch_flash.unwrap() - 1.5).abs() < 1e-12);
        assert!((without[0].speedup_vs_cudnn.unwrap() - 9.0 / 8.0).abs() < 1e-12);
        assert!(without[0].fa3_us.is_none() && without[0].speedup_vs_fa3.is_none());
        assert!(without[0].ci95_vs_fa3.is_none() && without[0].fa3_tflops.is_none());
        let line = summary_table(&without).lines().nth(1).unwrap().to_string();
        assert!(line.contains("1.500x") && line.contains("1.125x"), "{line}");
        assert!(line.contains(" -  "), "FA3's columns should be empty: {line}");

        rows.push(row("fa3", Some(FA3_BACKEND), 6.0));
        let with = summarise(&case, &rows, &pick_a);
        assert_eq!(with[0].best_peer.as_deref(), Some("fa3"));
        assert!((with[0].speedup_vs_fa3.unwrap() - 0.75).abs() < 1e-12);
        assert_eq!(with[0].fa3_us, Some(6.0));
        let flops = Shape::new(1, 8, 512, 64).flops(false);
        assert!((with[0].fa3_tflops.unwrap() - flops / 6e-6 / 1e12).abs() < 1e-9);
        let table = summary_table(&with);
        assert!(table.contains("FA3 us") && table.contains("0.750x"), "{table}");
    }

    #[test]
    fn summary_shows_seq_k_and_kv_heads_when_they_differ() {
        let decode = Shape {
            seq_q: 1,
            seq_k: 8192,
            ..Shape::new(8, 32, 1, 128).with_heads_kv(8)
        };
        let rows = vec![
            row_on(decode, "b", None, 8.0),
            row_on(decode, "torch_flash", Some("flash"), 12.0),
        ];
        let table = summary_table(&summarise(&[(decode, false)], &rows, &pick_a));
        let line = table.lines().nth(1).unwrap();
        assert!(line.contains("[8, 32, 1, 128] k=8192 kv=8"), "{line}");
        let square = summary_table(&summarise(
            &[(Shape::new(1, 8, 512, 64), false)],
            &[row("b", None, 8.0), row("torch_flash", Some("flash"), 12.0)],
            &pick_a,
        ));
        assert!(!square.contains(" k=") && !square.contains(" kv="), "{square}");
    }

    #[test]
    fn a_decode_picks_key_slices_are_reported_with_their_source() {
        let decode = Shape {
            seq_q: 1,
            ..Shape::new(1, 32, 32768, 128)
        };
        let mut picked = row_on(decode, "a", None, 8.0);
        picked.splits = Some(8);
        picked.splits_source = Some(SplitSource::Tuned);
        let rows = vec![picked, row_on(decode, "torch_cudnn", Some("cudnn"), 9.0)];
        let s = summarise(&[(decode, false)], &rows, &pick_a);
        assert_eq!(
            (s[0].dispatch_splits, s[0].dispatch_splits_source),
            (Some(8), Some(SplitSource::Tuned))
        );
        let line = summary_table(&s).lines().nth(1).unwrap().to_string();
        assert!(line.ends_with("= fastest, splits 8 (tuned)"), "{line}");
        let json = serde_json::to_value(&s[0]).unwrap();
        assert_eq!(json["dispatch_splits_source"], "tuned");
        // A row's splits round-trip through the report (plot reads rows back), and rows of
        // reports from before they were recorded still load.
        let row_json = serde_json::to_string(&rows[0]).unwrap();
        let back: Row = serde_json::from_str(&row_json).unwrap();
        assert_eq!(
            (back.splits, back.splits_source),
            (Some(8), Some(SplitSource::Tuned))
        );
        let old: Row = serde_json::from_str(&serde_json::to_string(&rows[1]).unwrap()).unwrap();
        assert_eq!((old.splits, old.splits_source), (None, None));
        // Without a flash_decode pick the column is as before.
        let plain = summarise(&[(decode, false)], &rows[1..], &pick_a);
        assert!(plain[0].dispatch_splits.is_none());
        assert!(serde_json::to_value(&plain[0])
            .unwrap()
            .get("dispatch_splits")
            .is_none());
        assert_eq!(splits_text(None, None), "-");
    }

    #[test]
    fn a_head_dim_we_lack_keeps_the_peers_and_says_unsupported() {
        let d100 = Shape::new(2, 16, 4096, 100);
        let rows = vec![
            row_on(d100, "torch_cudnn", Some("cudnn"), 855.0),
            row_on(d100, "fa3", Some(FA3_BACKEND), 800.0),
        ];
        let no_pick = |_: Shape, _: bool| None;
        let s = summarise(
            &[(d100, false), (Shape::new(1, 8, 512, 64), false)],
            &rows,
            &no_pick,
        );
        assert_eq!(s.len(), 1, "a case where nothing ran is left out");
        assert!(s[0].ours.is_none() && s[0].ours_us.is_none() && s[0].speedup.is_none());
        assert!(s[0].speedup_vs_fa3.is_none() && s[0].dispatch.is_none());
        assert_eq!(s[0].best_peer.as_deref(), Some("fa3"));
        assert_eq!(s[0].fa3_us, Some(800.0));
        let table = summary_table(&s);
        assert!(
            table.contains("unsupported") && table.contains("800.00"),
            "{table}"
        );
        let json = serde_json::to_value(&s[0]).unwrap();
        assert!(json["ours"].is_null() && json["ours_us"].is_null(), "{json}");
    }
}
