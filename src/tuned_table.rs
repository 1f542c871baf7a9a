//! The tuned table: `tune --save` winners per (GPU, dtype, head dim, sequence bucket, causal),
//! which dispatch consults before its built-in heuristic, and `tune --splits --save` split counts
//! for `flash_decode` launches, which the decode plan consults before its own heuristic.
//!
//! The table is JSON (`tuned/h100.json`), one list of entries per GPU name exactly as the driver
//! reports it (`NVIDIA H100 80GB HBM3`): the same kernel ranks differently on an H100 PCIe and an
//! SXM part, so entries are never shared across names. A GPU or a bucket without an entry gets
//! `None` from [`TunedTable::lookup`], and the caller falls back to its heuristic.
//!
//! Kernel names are strings, not [`VariantSpec`]s, so that a table written by an older build still
//! loads when a variant is renamed or dropped from `kernels.toml`; [`TunedTable::validate`] and
//! [`TunedTable::resolve`] report such names instead of panicking.
//!
//! ```json
//! { "gpus": { "NVIDIA H100 80GB HBM3": [
//!     { "dtype": "f16", "head_dim": 128, "seq_bucket": "<=1024", "causal": false,
//!       "kernel": "flash_wgmma_m128_n128_w8_s2_light", "p50_us": 42.0,
//!       "speedup_vs_default": 1.07, "measured": "2026-05-01" } ] },
//!   "decode_splits": { "NVIDIA H100 80GB HBM3": [
//!     { "dtype": "f16", "head_dim": 128, "kernel": "flash_decode_m16_n128_w8_s3_mbarrier",
//!       "rows_bucket": 1, "blocks_bucket": 32, "seq_k_bucket": 32768, "splits": 8,
//!       "p50_us": 170.0, "speedup_vs_heuristic": 1.02, "shape": "(1, 32, 1, 32768, 128)",
//!       "measured": "2026-05-01" } ] } }
//! ```
//! (The numbers above show the form only; they are not measurements.)
//!
//! ## Split counts (`decode_splits`)
//!
//! A `flash_decode` launch cuts each row block's keys into `splits` slices (`decode.rs`). What the
//! best count depends on is the work of the launch as [`crate::decode::Work`] models it, so that
//! is what an entry is keyed by, beside the GPU and dtype:
//! - the **kernel** (the variant's name) and **head dim**: they fix the key tile (so the KV tiles
//!   of a key length), the blocks an SM holds at once (so, with the GPU, the slots the grid
//!   fills) and a block's time per tile;
//! - **blocks**, the grid without splitting (`B x H_kv x row blocks`): how much of the GPU the
//!   launch fills before any split, which is what splitting makes up for;
//! - **seq_k**, the key length: with the kernel's key tile, the KV tiles the slices share out;
//! - **rows**, the packed query rows per KV head (`group x S_q`): each slice writes every one of
//!   them to the workspace and the merge reads them back per slice, so the merge's cost per slice
//!   grows with them. Grouped-query attention enters here and through blocks (one block serves
//!   a whole group), not as a key of its own.
//!
//! The mask is not a key (a decode step's few queries see nearly every key either way), nor is
//! the layout or whether the cache is paged (the same tiles are read). Blocks, key length and rows
//! are bucketed by powers of two, each bucket named by its largest value (`seq_k_bucket: 32768`
//! covers 16385 to 32768; [`pow2_bucket`]): a batch size or a cache length rarely repeats
//! exactly, and the cost model's trade-offs (waves of blocks, tiles per slice) move with their
//! logarithms. An entry is for one GPU name only, like the kernel entries.
//!
//! An entry's count may not suit every problem of its buckets as given; the plan fits it
//! ([`crate::decode::Plan::tuned`]: 0 is ignored, a count above the problem's KV tiles or
//! [`crate::decode::MAX_SPLITS`] lowered to it, a grid that would overflow ignored) and never
//! panics. Without an entry the heuristic ([`crate::decode::choose_splits`]) decides. Tables
//! written before split counts existed have no `decode_splits` and load as before; one without
//! split counts is written without the field.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use crate::problem::{DType, Shape};
use crate::variants::VariantSpec;

/// The table shipped with the library.
static BUILTIN: &str = include_str!("../tuned/h100.json");

/// A range of sequence lengths, by `max(seq_q, seq_k)`. Powers of two from 512 to 4096 and one
/// open bucket above: the block-size trade-offs the tuner sees change with how many query blocks
/// and KV tiles a problem has, i.e. roughly with the logarithm of the length, and five buckets
/// keep a full tuning run (2 dtypes x 2 head dims x 5 x 2) small.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum SeqBucket {
    /// Lengths 0 to 512.
    #[serde(rename = "<=512")]
    Le512,
    /// Lengths 513 to 1024.
    #[serde(rename = "<=1024")]
    Le1024,
    /// Lengths 1025 to 2048.
    #[serde(rename = "<=2048")]
    Le2048,
    /// Lengths 2049 to 4096.
    #[serde(rename = "<=4096")]
    Le4096,
    /// Lengths above 4096.
    #[serde(rename = ">4096")]
    Gt4096,
}

impl SeqBucket {
    /// Every bucket, shortest first.
    pub const ALL: [SeqBucket; 5] = [
        SeqBucket::Le512,
        SeqBucket::Le1024,
        SeqBucket::Le2048,
        SeqBucket::Le4096,
        SeqBucket::Gt4096,
    ];

    /// The bucket of a sequence length (lengths below 1 count as the first bucket).
    pub fn of(seq: usize) -> SeqBucket {
        match seq {
            0..=512 => SeqBucket::Le512,
            513..=1024 => SeqBucket::Le1024,
            1025..=2048 => SeqBucket::Le2048,
            2049..=4096 => SeqBucket::Le4096,
            _ => SeqBucket::Gt4096,
        }
    }

    /// The bucket of a problem: by the longer of the query and key lengths, which sets the
    /// number of KV tiles per block or, for long queries, the number of blocks.
    pub fn of_lengths(seq_q: usize, seq_k: usize) -> SeqBucket {
        SeqBucket::of(seq_q.max(seq_k))
    }

    /// The largest length in the bucket; `None` for the open one.
    pub fn upper(self) -> Option<usize> {
        match self {
            SeqBucket::Le512 => Some(512),
            SeqBucket::Le1024 => Some(1024),
            SeqBucket::Le2048 => Some(2048),
            SeqBucket::Le4096 => Some(4096),
            SeqBucket::Gt4096 => None,
        }
    }

    /// The label used in the JSON.
    pub fn label(self) -> &'static str {
        match self {
            SeqBucket::Le512 => "<=512",
            SeqBucket::Le1024 => "<=1024",
            SeqBucket::Le2048 => "<=2048",
            SeqBucket::Le4096 => "<=4096",
            SeqBucket::Gt4096 => ">4096",
        }
    }
}

impl std::fmt::Display for SeqBucket {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.label())
    }
}

impl std::str::FromStr for SeqBucket {
    type Err = String;
    fn from_str(text: &str) -> Result<SeqBucket, String> {
        SeqBucket::ALL
            .into_iter()
            .find(|b| b.label() == text)
            .ok_or_else(|| format!("unknown sequence bucket `{text}` (<=512, <=1024, <=2048, <=4096, >4096)"))
    }
}

/// One winner. Unknown JSON fields are ignored, so a newer table still loads in an older build.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Entry {
    /// `f16` or `bf16` (`DType::name`).
    pub dtype: String,
    /// The head dim the entry applies to.
    pub head_dim: usize,
    /// The bucket of `max(seq_q, seq_k)` the entry applies to.
    pub seq_bucket: SeqBucket,
    /// Whether the entry is for the causal mask.
    pub causal: bool,
    /// The variant name (`kernels.toml`).
    pub kernel: String,
    /// Median time per call in microseconds, on the shape the tuner measured for this bucket.
    pub p50_us: f64,
    /// The default (heuristic) kernel's p50 over this kernel's, on the same shape.
    pub speedup_vs_default: f64,
    /// When it was measured (`YYYY-MM-DD`, UTC).
    pub measured: String,
}

impl Entry {
    /// What the entry is for; a GPU's list holds each key at most once.
    pub fn key(&self) -> (&str, usize, SeqBucket, bool) {
        (&self.dtype, self.head_dim, self.seq_bucket, self.causal)
    }
}

/// The bucket of a count among the powers of two: the smallest power of two at or above it (so
/// `(x/2, x]` for a power of two `x`; 0 counts as 1). `None` past the largest `u64` power of two.
pub fn pow2_bucket(count: u64) -> Option<u64> {
    count.max(1).checked_next_power_of_two()
}

/// One split count for `flash_decode` launches on a GPU (the module's documentation says why
/// these keys). Unknown JSON fields are ignored, as for [`Entry`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SplitEntry {
    /// `f16` or `bf16` (`DType::name`).
    pub dtype: String,
    /// The head dim the entry applies to.
    pub head_dim: usize,
    /// The `flash_decode` variant it was measured with (`kernels.toml`).
    pub kernel: String,
    /// The bucket of packed query rows per KV head (`group x S_q`): a power of two.
    pub rows_bucket: u64,
    /// The bucket of blocks without splitting (`B x H_kv x row blocks`): a power of two.
    pub blocks_bucket: u64,
    /// The bucket of the key length (`S_k`; a paged cache's longest sequence): a power of two.
    pub seq_k_bucket: u64,
    /// Key slices per row block.
    pub splits: u32,
    /// Median time per call in microseconds at `splits`, on `shape`.
    pub p50_us: f64,
    /// The heuristic's split count's p50 over this count's, on the same shape.
    pub speedup_vs_heuristic: f64,
    /// The problem the tuner measured (`B, H, S_q, S_k, D`, with `H_kv` when grouped); empty in
    /// an entry written by hand.
    #[serde(default)]
    pub shape: String,
    /// When it was measured (`YYYY-MM-DD`, UTC).
    pub measured: String,
}

/// What a split entry is for; a GPU's list holds each at most once.
type SplitKey<'a> = (&'a str, usize, &'a str, u64, u64, u64);

impl SplitEntry {
    /// What the entry is for: dtype, head dim, kernel and the three buckets.
    pub fn key(&self) -> SplitKey<'_> {
        (
            &self.dtype,
            self.head_dim,
            &self.kernel,
            self.rows_bucket,
            self.blocks_bucket,
            self.seq_k_bucket,
        )
    }
}

/// A `flash_decode` launch as the split entries see it: the values their keys bucket.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SplitProblem<'a> {
    /// The element type.
    pub dtype: DType,
    /// The variant's name.
    pub kernel: &'a str,
    /// The head dim.
    pub head_dim: usize,
    /// Packed query rows per KV head (`group x S_q`).
    pub rows: u64,
    /// Blocks without splitting (`decode::Plan::blocks`).
    pub blocks: u64,
    /// The key length.
    pub seq_k: u64,
}

impl<'a> SplitProblem<'a> {
    /// `kernel` on `shape` in `dtype`, over `blocks` blocks before splitting.
    pub fn of(dtype: DType, kernel: &'a str, shape: Shape, blocks: u64) -> SplitProblem<'a> {
        SplitProblem {
            dtype,
            kernel,
            head_dim: shape.head_dim,
            rows: shape.kv_group() as u64 * shape.seq_q as u64,
            blocks,
            seq_k: shape.seq_k as u64,
        }
    }

    /// The key of the entries for this problem; `None` for a count past every bucket.
    fn key(&self) -> Option<SplitKey<'a>> {
        Some((
            self.dtype.name(),
            self.head_dim,
            self.kernel,
            pow2_bucket(self.rows)?,
            pow2_bucket(self.blocks)?,
            pow2_bucket(self.seq_k)?,
        ))
    }

    /// An entry for this problem's buckets recording `splits` (measured as the rest says).
    pub fn entry(&self, splits: u32, p50_us: f64, speedup_vs_heuristic: f64, shape: Shape) -> SplitEntry {
        let bucket = |count| pow2_bucket(count).unwrap_or(u64::MAX);
        SplitEntry {
            dtype: self.dtype.name().to_string(),
            head_dim: self.head_dim,
            kernel: self.kernel.to_string(),
            rows_bucket: bucket(self.rows),
            blocks_bucket: bucket(self.blocks),
            seq_k_bucket: bucket(self.seq_k),
            splits,
            p50_us,
            speedup_vs_heuristic,
            shape: shape.to_string(),
            measured: today_utc(),
        }
    }
}

pub use crate::error::TunedError;

/// The tuned table: entries per GPU name. Ordered maps and sorted lists, so that a saved table
/// diffs cleanly between tuning runs.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct TunedTable {
    /// Each GPU's entries, keyed by the GPU name the driver reports, sorted by [`Entry::key`].
    pub gpus: BTreeMap<String, Vec<Entry>>,
    /// Each GPU's split counts for `flash_decode` launches, keyed like `gpus`, sorted by
    /// [`SplitEntry::key`]. Absent from older tables, and left out when empty.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub decode_splits: BTreeMap<String, Vec<SplitEntry>>,
}

fn key_string(e: &Entry) -> String {
    format!(
        "{} d{} {} {}",
        e.dtype,
        e.head_dim,
        e.seq_bucket,
        if e.causal { "causal" } else { "non-causal" }
    )
}

/// Sorts one GPU's `entries` by `order`; two that compare equal are an error naming the key
/// (`describe`d), since a lookup could not choose between them.
fn sort_unique<T>(
    gpu: &str,
    entries: &mut [T],
    order: impl Fn(&T, &T) -> std::cmp::Ordering,
    describe: fn(&T) -> String,
) -> Result<(), TunedError> {
    entries.sort_by(&order);
    match entries.windows(2).find(|w| order(&w[0], &w[1]).is_eq()) {
        Some(pair) => Err(TunedError::Duplicate {
            gpu: gpu.to_string(),
            key: describe(&pair[0]),
        }),
        None => Ok(()),
    }
}

/// Inserts `entry` into `entries` (sorted by `order`), replacing and returning the one that
/// compares equal.
fn upsert_sorted<T>(
    entries: &mut Vec<T>,
    entry: T,
    order: impl Fn(&T, &T) -> std::cmp::Ordering,
) -> Option<T> {
    match entries.binary_search_by(|e| order(e, &entry)) {
        Ok(i) => Some(std::mem::replace(&mut entries[i], entry)),
        Err(i) => {
            entries.insert(i, entry);
            None
        }
    }
}

fn split_key_string(e: &SplitEntry) -> String {
    format!(
        "decode splits {} d{} {} rows<={} blocks<={} seq_k<={}",
        e.dtype, e.head_dim, e.kernel, e.rows_bucket, e.blocks_bucket, e.seq_k_bucket
    )
}

impl TunedTable {
    /// An empty table.
    pub fn new() -> TunedTable {
        TunedTable::default()
    }

    /// The table embedded at build time (`tuned/h100.json`).
    pub fn builtin() -> Result<TunedTable, TunedError> {
        TunedTable::parse(BUILTIN)
    }

    /// Parses a table; entries come back sorted, and a key listed twice for one GPU is an error,
    /// as is a split entry's bucket that is not a power of two. A split count itself is not
    /// checked here: whether it suits a problem is the plan's to say (`decode::Plan::tuned`).
    pub fn parse(text: &str) -> Result<TunedTable, TunedError> {
        let mut table: TunedTable = serde_json::from_str(text)?;
        for (gpu, entries) in &mut table.gpus {
            sort_unique(gpu, entries, |a, b| a.key().cmp(&b.key()), key_string)?;
        }
        for (gpu, entries) in &mut table.decode_splits {
            for e in entries.iter() {
                let buckets = [
                    ("rows_bucket", e.rows_bucket),
                    ("blocks_bucket", e.blocks_bucket),
                    ("seq_k_bucket", e.seq_k_bucket),
                ];
                if let Some((field, value)) = buckets.into_iter().find(|(_, v)| !v.is_power_of_two()) {
                    return Err(TunedError::Bucket {
                        gpu: gpu.clone(),
                        field,
                        value,
                    });
                }
            }
            sort_unique(gpu, entries, |a, b| a.key().cmp(&b.key()), split_key_string)?;
        }
        Ok(table)
    }

    /// Reads and parses the table at `path` (as [`TunedTable::parse`]).
    pub fn load(path: impl AsRef<Path>) -> Result<TunedTable, TunedError> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path).map_err(|source| TunedError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        TunedTable::parse(&text)
    }

    lab_pub! {
        /// Writes [`TunedTable::to_json_pretty`] to `path`, creating its directory.
        fn save(&self, path: impl AsRef<Path>) -> Result<(), TunedError> {
            let path = path.as_ref();
            let write_error = |source| TunedError::Write {
                path: path.to_path_buf(),
                source,
            };
            if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
                std::fs::create_dir_all(dir).map_err(write_error)?;
            }
            std::fs::write(path, self.to_json_pretty()).map_err(write_error)
        }
    }

    /// Pretty JSON with a final line break.
    pub fn to_json_pretty(&self) -> String {
        let mut text = serde_json::to_string_pretty(self).expect("the table is plain data");
        text.push('\n');
        text
    }

    /// Entries over all GPUs, kernel winners and split counts.
    pub fn len(&self) -> usize {
        self.gpus.values().map(Vec::len).sum::<usize>()
            + self.decode_splits.values().map(Vec::len).sum::<usize>()
    }

    /// Whether the table has no entries at all.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The winner for a problem, or `None` (unknown GPU, or no entry for this dtype, head dim,
    /// bucket and mask): then dispatch uses its heuristic. `seq` is `max(seq_q, seq_k)`; the GPU
    /// name must match the driver's exactly.
    pub fn lookup(
        &self,
        gpu: &str,
        dtype: &str,
        head_dim: usize,
        seq: usize,
        causal: bool,
    ) -> Option<&Entry> {
        let bucket = SeqBucket::of(seq);
        self.gpus
            .get(gpu)?
            .iter()
            .find(|e| e.key() == (dtype, head_dim, bucket, causal))
    }

    /// [`TunedTable::lookup`], resolved to a compiled variant of `variants`: `Ok(None)` without an
    /// entry, an error when the entry names a kernel that is unknown or not compiled for the head
    /// dim (a stale table must be reported, not silently run or panic).
    pub fn resolve(
        &self,
        variants: &'static [VariantSpec],
        gpu: &str,
        dtype: &str,
        head_dim: usize,
        seq: usize,
        causal: bool,
    ) -> Result<Option<&'static VariantSpec>, TunedError> {
        let Some(entry) = self.lookup(gpu, dtype, head_dim, seq, causal) else {
            return Ok(None);
        };
        let v =
            variants
                .iter()
                .find(|v| v.name == entry.kernel)
                .ok_or_else(|| TunedError::UnknownKernel {
                    gpu: gpu.to_string(),
                    kernel: entry.kernel.clone(),
                })?;
        if !v.head_dims.contains(&head_dim) {
            return Err(TunedError::HeadDim {
                gpu: gpu.to_string(),
                kernel: entry.kernel.clone(),
                head_dim,
            });
        }
        Ok(Some(v))
    }

    lab_pub! {
        /// Inserts `entry` for `gpu`, replacing (and returning) the entry with the same key.
        fn upsert(&mut self, gpu: &str, entry: Entry) -> Option<Entry> {
            let entries = self.gpus.entry(gpu.to_string()).or_default();
            upsert_sorted(entries, entry, |a, b| a.key().cmp(&b.key()))
        }
    }

    /// The split count for a `flash_decode` launch of `problem` on GPU `gpu`, or `None` (unknown
    /// GPU, or no entry for its dtype, head dim, kernel and buckets): then the plan's heuristic
    /// decides. The count is as the table holds it, for the plan to fit to the problem.
    pub fn decode_splits(&self, gpu: &str, problem: &SplitProblem) -> Option<&SplitEntry> {
        let key = problem.key()?;
        let entries = self.decode_splits.get(gpu)?;
        entries
            .binary_search_by(|e| e.key().cmp(&key))
            .ok()
            .map(|i| &entries[i])
    }

    lab_pub! {
        /// Inserts `entry` into `gpu`'s split counts, replacing (and returning) the entry with the
        /// same key.
        fn upsert_splits(&mut self, gpu: &str, entry: SplitEntry) -> Option<SplitEntry> {
            let entries = self.decode_splits.entry(gpu.to_string()).or_default();
            upsert_sorted(entries, entry, |a, b| a.key().cmp(&b.key()))
        }
    }

    /// The kernel names the table uses (winners and split counts) that are not in `variants`,
    /// sorted and without repeats (empty when the table is consistent with the build).
    pub fn validate(&self, variants: &[VariantSpec]) -> Vec<String> {
        let winners = self.gpus.values().flatten().map(|e| &e.kernel);
        let splits = self.decode_splits.values().flatten().map(|e| &e.kernel);
        let mut unknown: Vec<String> = winners
            .chain(splits)
            .filter(|kernel| !variants.iter().any(|v| v.name == **kernel))
            .cloned()
            .collect();
        unknown.sort();
        unknown.dedup();
        unknown
    }
}

/// `YYYY-MM-DD` (UTC) of `time`, for [`Entry::measured`], without a date crate: days since the
/// epoch to a proleptic Gregorian date (eras of 400 years, March-based years).
pub fn utc_date(time: SystemTime) -> String {
    let secs = time.duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0);
    let days = (secs / 86_400) as i64;
    // Shift the epoch to 0000-03-01 so that the leap day ends each year.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let day_of_era = z.rem_euclid(146_097);
    let year_of_era = (day_of_era - day_of_era / 1_460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let mp = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02}")
}

/// Today's date, UTC.
pub fn today_utc() -> String {
    utc_date(SystemTime::now())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::variants::VARIANTS;
    use std::time::Duration;

    const H100: &str = "NVIDIA H100 80GB HBM3";

    fn entry(dtype: &str, head_dim: usize, bucket: SeqBucket, causal: bool, kernel: &str) -> Entry {
        Entry {
            dtype: dtype.into(),
            head_dim,
            seq_bucket: bucket,
            causal,
            kernel: kernel.into(),
            p50_us: 12.5,
            speedup_vs_default: 1.04,
            measured: "2026-05-01".into(),
        }
    }

    #[test]
    fn bucket_boundaries() {
        let cases = [
            (0, SeqBucket::Le512),
            (1, SeqBucket::Le512),
            (512, SeqBucket::Le512),
            (513, SeqBucket::Le1024),
            (1024, SeqBucket::Le1024),
            (1025, SeqBucket::Le2048),
            (2048, SeqBucket::Le2048),
            (2049, SeqBucket::Le4096),
            (4096, SeqBucket::Le4096),
            (4097, SeqBucket::Gt4096),
            (1 << 20, SeqBucket::Gt4096),
        ];
        for (seq, bucket) in cases {
            assert_eq!(SeqBucket::of(seq), bucket, "{seq}");
        }
        assert_eq!(SeqBucket::of_lengths(100, 3000), SeqBucket::Le4096);
        assert_eq!(SeqBucket::of_lengths(5000, 1), SeqBucket::Gt4096);
        // Every bucket's upper bound falls in it and the next length in the next bucket.
        for w in SeqBucket::ALL.windows(2) {
            let upper = w[0].upper().unwrap();
            assert_eq!(SeqBucket::of(upper), w[0]);
            assert_eq!(SeqBucket::of(upper + 1), w[1]);
        }
        for b in SeqBucket::ALL {
            assert_eq!(b.label().parse::<SeqBucket>(), Ok(b));
            assert_eq!(serde_json::to_string(&b).unwrap(), format!("\"{}\"", b.label()));
        }
        assert!("<=999".parse::<SeqBucket>().is_err());
    }

    #[test]
    fn lookup_finds_the_entry_or_falls_back_to_none() {
        let mut table = TunedTable::new();
        let kernel = "flash_mma_m128_n32_w4_s3_qsmem_light";
        assert!(table
            .upsert(H100, entry("f16", 128, SeqBucket::Le2048, false, kernel))
            .is_none());
        let hit = table.lookup(H100, "f16", 128, 2048, false).unwrap();
        assert_eq!(hit.kernel, kernel);
        assert!(table.lookup(H100, "f16", 128, 1025, false).is_some());
        // Another bucket, mask, dtype, head dim or GPU: no entry.
        assert!(table.lookup(H100, "f16", 128, 1024, false).is_none());
        assert!(table.lookup(H100, "f16", 128, 2049, false).is_none());
        assert!(table.lookup(H100, "f16", 128, 2048, true).is_none());
        assert!(table.lookup(H100, "bf16", 128, 2048, false).is_none());
        assert!(table.lookup(H100, "f16", 64, 2048, false).is_none());
        assert!(table
            .lookup("NVIDIA A100-SXM4-80GB", "f16", 128, 2048, false)
            .is_none());
        assert_eq!(
            table
                .resolve(VARIANTS, H100, "f16", 128, 2048, false)
                .unwrap()
                .map(|v| v.name),
            Some(kernel)
        );
        assert!(table
            .resolve(VARIANTS, H100, "f16", 128, 100, false)
            .unwrap()
            .is_none());
    }

    #[test]
    fn upsert_replaces_the_same_key_and_keeps_entries_sorted() {
        let mut table = TunedTable::new();
        table.upsert(H100, entry("f16", 64, SeqBucket::Gt4096, true, "a"));
        table.upsert(H100, entry("bf16", 128, SeqBucket::Le512, false, "b"));
        table.upsert(H100, entry("f16", 64, SeqBucket::Le512, false, "c"));
        let old = table.upsert(H100, entry("f16", 64, SeqBucket::Gt4096, true, "d"));
        assert_eq!(old.unwrap().kernel, "a");
        assert_eq!(table.len(), 3);
        let kernels: Vec<&str> = table.gpus[H100].iter().map(|e| e.kernel.as_str()).collect();
        assert_eq!(kernels, ["b", "c", "d"]);
    }

    #[test]
    fn round_trip_through_json_and_a_file() {
        let mut table = TunedTable::new();
        for (i, b) in SeqBucket::ALL.into_iter().enumerate() {
            let mut e = entry("f16", 64, b, i % 2 == 0, "flash_mma_m64_n64_w4_s2_light");
            e.p50_us = 1.0 / 3.0 + i as f64;
            table.upsert(H100, e);
        }
        table.upsert(
            "NVIDIA A100-SXM4-80GB",
            entry("bf16", 128, SeqBucket::Le1024, true, "x"),
        );
        let text = table.to_json_pretty();
        assert!(text.ends_with("}\n"));
        assert_eq!(TunedTable::parse(&text).unwrap(), table);

        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tuned").join("h100.json");
        table.save(&path).unwrap();
        assert_eq!(TunedTable::load(&path).unwrap(), table);
        assert!(matches!(
            TunedTable::load(dir.path().join("missing.json")),
            Err(TunedError::Read { .. })
        ));
    }

    #[test]
    fn parse_follows_the_documented_schema() {
        let text = r#"{ "gpus": { "NVIDIA H100 80GB HBM3": [
            { "dtype": "f16", "head_dim": 128, "seq_bucket": ">4096", "causal": true,
              "kernel": "flash_wgmma_m128_n128_w8_s2_light", "p50_us": 500.0,
              "speedup_vs_default": 1.0, "measured": "2026-05-01", "note": "ignored" } ] } }"#;
        let table = TunedTable::parse(text).unwrap();
        let e = table.lookup(H100, "f16", 128, 16384, true).unwrap();
        assert_eq!(e.seq_bucket, SeqBucket::Gt4096);
        assert_eq!(e.p50_us, 500.0);
        assert!(matches!(
            TunedTable::parse(&text.replace(">4096", "<=8192")),
            Err(TunedError::Parse(_))
        ));
        assert!(matches!(
            TunedTable::parse(r#"{"gpus": {"x": [{"dtype": "f16"}]}}"#),
            Err(TunedError::Parse(_))
        ));
        assert!(matches!(TunedTable::parse("[]"), Err(TunedError::Parse(_))));
    }

    #[test]
    fn duplicate_keys_are_rejected() {
        let mut table = TunedTable::new();
        table.upsert(H100, entry("f16", 64, SeqBucket::Le512, false, "a"));
        let one = serde_json::to_string(&table.gpus[H100][0]).unwrap();
        let text = format!(
            "{{\"gpus\": {{\"{H100}\": [{one}, {}]}}}}",
            one.replace("\"a\"", "\"b\"")
        );
        let err = TunedTable::parse(&text).unwrap_err();
        assert!(matches!(err, TunedError::Duplicate { .. }), "{err}");
        assert!(err.to_string().contains("f16 d64 <=512 non-causal"), "{err}");
    }

    #[test]
    fn validate_and_resolve_report_unknown_kernels() {
        let mut table = TunedTable::new();
        table.upsert(
            H100,
            entry(
                "f16",
                64,
                SeqBucket::Le512,
                false,
                "flash_mma_m64_n64_w4_s2_b3_light",
            ),
        );
        assert!(table.validate(VARIANTS).is_empty());
        table.upsert(H100, entry("f16", 64, SeqBucket::Le1024, false, "gone_kernel"));
        table.upsert(H100, entry("bf16", 64, SeqBucket::Le1024, false, "gone_kernel"));
        table.upsert("other", entry("f16", 64, SeqBucket::Le512, true, "also_gone"));
        assert_eq!(table.validate(VARIANTS), ["also_gone", "gone_kernel"]);
        let err = table.resolve(VARIANTS, H100, "f16", 64, 1000, false).unwrap_err();
        assert!(matches!(err, TunedError::UnknownKernel { .. }), "{err}");
        // A known kernel at a head dim it is not compiled for.
        table.upsert(
            H100,
            entry(
                "f16",
                128,
                SeqBucket::Le512,
                false,
                "flash_mma_m64_n64_w4_s2_b3_light",
            ),
        );
        assert!(matches!(
            table.resolve(VARIANTS, H100, "f16", 128, 512, false),
            Err(TunedError::HeadDim { head_dim: 128, .. })
        ));
    }

    #[test]
    fn builtin_parses_and_names_only_compiled_kernels() {
        let table = TunedTable::builtin().unwrap();
        assert!(table.validate(VARIANTS).is_empty());
        // Split counts name flash_decode variants at head dims they are compiled for, with a
        // count some problem can use.
        for (gpu, entries) in &table.decode_splits {
            for e in entries {
                let variant = crate::VariantSpec::by_name(&e.kernel).unwrap();
                assert!(
                    variant.family == crate::Family::FlashDecode
                        && variant.head_dims.contains(&e.head_dim)
                        && (1..=crate::decode::MAX_SPLITS).contains(&e.splits),
                    "{gpu}: {e:?}"
                );
            }
        }
        for (gpu, entries) in &table.gpus {
            for e in entries {
                assert!(
                    table
                        .resolve(
                            VARIANTS,
                            gpu,
                            &e.dtype,
                            e.head_dim,
                            e.seq_bucket.upper().unwrap_or(8192),
                            e.causal
                        )
                        .is_ok(),
                    "{gpu}: {e:?}"
                );
            }
        }
    }

    const DECODE_KERNEL: &str = "flash_decode_m16_n128_w8_s3_mbarrier";

    /// (1, 32, 1, 32768, 128): 32 KV heads of one row block each.
    fn long_decode() -> Shape {
        Shape {
            seq_q: 1,
            ..Shape::new(1, 32, 32768, 128)
        }
    }

    fn split_entry(kernel: &str, rows: u64, blocks: u64, seq_k: u64, splits: u32) -> SplitEntry {
        SplitEntry {
            dtype: "f16".into(),
            head_dim: 128,
            kernel: kernel.into(),
            rows_bucket: rows,
            blocks_bucket: blocks,
            seq_k_bucket: seq_k,
            splits,
            p50_us: 170.5,
            speedup_vs_heuristic: 1.03,
            shape: "(1, 32, 1, 32768, 128)".into(),
            measured: "2026-05-01".into(),
        }
    }

    #[test]
    fn buckets_are_the_power_of_two_at_or_above() {
        let cases = [
            (0, 1),
            (1, 1),
            (2, 2),
            (3, 4),
            (32, 32),
            (33, 64),
            (32768, 32768),
            (30000, 32768),
        ];
        for (count, bucket) in cases {
            assert_eq!(pow2_bucket(count), Some(bucket), "{count}");
        }
        assert_eq!(pow2_bucket(u64::MAX), None);
    }

    #[test]
    fn split_lookup_finds_the_entry_of_the_problems_buckets() {
        let mut table = TunedTable::new();
        assert!(table
            .upsert_splits(H100, split_entry(DECODE_KERNEL, 1, 32, 32768, 8))
            .is_none());
        let shape = long_decode();
        let problem = |shape: Shape, blocks: u64| SplitProblem::of(DType::F16, DECODE_KERNEL, shape, blocks);
        assert_eq!(table.decode_splits(H100, &problem(shape, 32)).unwrap().splits, 8);
        // Anywhere in the buckets: 17 to 32 blocks, 16385 to 32768 keys.
        assert!(table.decode_splits(H100, &problem(shape, 17)).is_some());
        assert!(table
            .decode_splits(
                H100,
                &problem(
                    Shape {
                        seq_k: 16385,
                        ..shape
                    },
                    32
                )
            )
            .is_some());
        // Another bucket, rows, dtype, head dim, kernel or GPU: none.
        let misses = [
            problem(shape, 16),
            problem(shape, 33),
            problem(
                Shape {
                    seq_k: 16384,
                    ..shape
                },
                32,
            ),
            problem(
                Shape {
                    seq_k: 32769,
                    ..shape
                },
                32,
            ),
            problem(shape.with_heads_kv(8), 32),
            SplitProblem::of(DType::Bf16, DECODE_KERNEL, shape, 32),
            SplitProblem::of(DType::F16, "flash_decode_m16_n128_w8_s3_light", shape, 32),
            SplitProblem {
                head_dim: 64,
                ..problem(shape, 32)
            },
        ];
        for miss in misses {
            assert!(table.decode_splits(H100, &miss).is_none(), "{miss:?}");
        }
        assert!(table
            .decode_splits("NVIDIA A100-SXM4-80GB", &problem(shape, 32))
            .is_none());
        // A count past every bucket finds nothing rather than wrapping.
        assert!(table.decode_splits(H100, &problem(shape, u64::MAX)).is_none());
        // The grouped problem's own entry: 4 packed rows per KV head, 8 blocks.
        table.upsert_splits(H100, split_entry(DECODE_KERNEL, 4, 8, 32768, 32));
        let grouped = Shape {
            seq_q: 1,
            ..Shape::new(1, 32, 32768, 128).with_heads_kv(8)
        };
        assert_eq!(
            table.decode_splits(H100, &problem(grouped, 8)).unwrap().splits,
            32
        );
        // Upsert replaces the same key.
        let old = table.upsert_splits(H100, split_entry(DECODE_KERNEL, 1, 32, 32768, 16));
        assert_eq!(old.unwrap().splits, 8);
        assert_eq!(table.decode_splits[H100].len(), 2);
        assert_eq!(table.len(), 2);
    }

    #[test]
    fn an_entry_recorded_for_a_problem_is_found_for_it() {
        let shape = Shape {
            seq_q: 1,
            seq_k: 30000,
            ..Shape::new(3, 32, 1, 128).with_heads_kv(8)
        };
        let problem = SplitProblem::of(DType::Bf16, DECODE_KERNEL, shape, 24);
        let entry = problem.entry(16, 99.0, 1.1, shape);
        assert_eq!(
            (entry.rows_bucket, entry.blocks_bucket, entry.seq_k_bucket),
            (4, 32, 32768)
        );
        assert_eq!(
            (entry.dtype.as_str(), entry.shape.as_str()),
            ("bf16", shape.to_string().as_str())
        );
        assert_eq!(entry.measured.len(), 10);
        let mut table = TunedTable::new();
        table.upsert_splits(H100, entry.clone());
        assert_eq!(table.decode_splits(H100, &problem), Some(&entry));
    }

    #[test]
    fn tables_round_trip_with_and_without_split_counts() {
        let mut table = TunedTable::new();
        table.upsert(H100, entry("f16", 64, SeqBucket::Le512, false, "a"));
        // Without split counts the JSON has no `decode_splits` at all: an older build's form.
        let text = table.to_json_pretty();
        assert!(!text.contains("decode_splits"), "{text}");
        assert_eq!(TunedTable::parse(&text).unwrap(), table);
        table.upsert_splits(H100, split_entry(DECODE_KERNEL, 1, 32, 32768, 8));
        table.upsert_splits(H100, split_entry(DECODE_KERNEL, 1, 8, 2048, 2));
        table.upsert_splits("NVIDIA A100-SXM4-80GB", split_entry("k", 8, 64, 4096, 4));
        let text = table.to_json_pretty();
        assert!(text.contains("\"decode_splits\""), "{text}");
        assert_eq!(TunedTable::parse(&text).unwrap(), table);
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.json");
        table.save(&path).unwrap();
        assert_eq!(TunedTable::load(&path).unwrap(), table);
        // Sorted by key whatever the order they came in.
        let blocks: Vec<u64> = table.decode_splits[H100]
            .iter()
            .map(|e| e.blocks_bucket)
            .collect();
        assert_eq!(blocks, [8, 32]);
    }

    #[test]
    fn the_shipped_table_loads_unchanged_and_old_tables_still_parse() {
        // The shipped file has no split counts; it parses and writes back byte for byte.
        let table = TunedTable::builtin().unwrap();
        assert_eq!(table.to_json_pretty(), BUILTIN);
        // A table of the form before split counts (no field) and one with an empty map.
        let old = r#"{ "gpus": {} }"#;
        assert!(TunedTable::parse(old).unwrap().decode_splits.is_empty());
        let empty = r#"{ "gpus": {}, "decode_splits": {} }"#;
        assert!(TunedTable::parse(empty).unwrap().is_empty());
        // A hand-written entry without the optional shape, and with a field this build ignores.
        let by_hand = format!(
            r#"{{ "gpus": {{}}, "decode_splits": {{ "{H100}": [
                {{ "dtype": "f16", "head_dim": 128, "kernel": "{DECODE_KERNEL}", "rows_bucket": 1,
                  "blocks_bucket": 32, "seq_k_bucket": 32768, "splits": 8, "p50_us": 1.0,
                  "speedup_vs_heuristic": 1.0, "measured": "2026-05-01", "note": "x" }} ] }} }}"#
        );
        let parsed = TunedTable::parse(&by_hand).unwrap();
        assert_eq!(parsed.decode_splits[H100][0].shape, "");
    }

    #[test]
    fn split_entries_with_repeated_keys_or_stray_buckets_are_refused() {
        let mut table = TunedTable::new();
        table.upsert_splits(H100, split_entry(DECODE_KERNEL, 1, 32, 32768, 8));
        let one = serde_json::to_string(&table.decode_splits[H100][0]).unwrap();
        let twice = format!(
            r#"{{"gpus": {{}}, "decode_splits": {{"{H100}": [{one}, {}]}}}}"#,
            one.replace("\"splits\":8", "\"splits\":16")
        );
        let err = TunedTable::parse(&twice).unwrap_err();
        assert!(matches!(err, TunedError::Duplicate { .. }), "{err}");
        assert!(
            err.to_string().contains(
                "decode splits f16 d128 flash_decode_m16_n128_w8_s3_mbarrier rows<=1 blocks<=32 seq_k<=32768"
            ),
            "{err}"
        );
        let stray = format!(
            r#"{{"gpus": {{}}, "decode_splits": {{"{H100}": [{}]}}}}"#,
            one.replace("\"blocks_bucket\":32", "\"blocks_bucket\":24")
        );
        let err = TunedTable::parse(&stray).unwrap_err();
        assert!(
            matches!(
                err,
                TunedError::Bucket {
                    field: "blocks_bucket",
                    value: 24,
                    ..
                }
            ),
            "{err}"
        );
        // A split count no problem can use still loads: the plan ignores or fits it
        // (`decode::Plan::tuned`), it is no reason to drop the whole table.
        let zero = format!(
            r#"{{"gpus": {{}}, "decode_splits": {{"{H100}": [{}]}}}}"#,
            one.replace("\"splits\":8", "\"splits\":0")
        );
        assert_eq!(TunedTable::parse(&zero).unwrap().decode_splits[H100][0].splits, 0);
    }

    #[test]
    fn validate_reports_unknown_kernels_of_split_entries() {
        let mut table = TunedTable::new();
        table.upsert_splits(H100, split_entry(DECODE_KERNEL, 1, 32, 32768, 8));
        assert!(table.validate(VARIANTS).is_empty());
        table.upsert_splits(H100, split_entry("flash_decode_gone", 1, 32, 32768, 8));
        assert_eq!(table.validate(VARIANTS), ["flash_decode_gone"]);
    }

    #[test]
    fn utc_dates() {
        let at = |secs: u64| utc_date(UNIX_EPOCH + Duration::from_secs(secs));
        assert_eq!(at(0), "1970-01-01");
        assert_eq!(at(86_399), "1970-01-01");
        assert_eq!(at(86_400), "1970-01-02");
        assert_eq!(at(951_782_400), "2000-02-29");
        assert_eq!(at(951_868_800), "2000-03-01");
        assert_eq!(at(1_709_164_800), "2024-02-29");
        assert_eq!(at(1_735_689_599), "2024-12-31");
        assert_eq!(at(1_735_689_600), "2025-01-01");
        assert_eq!(today_utc().len(), 10);
    }
}
