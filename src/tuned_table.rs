//! The tuned table: `tune --save` winners per (GPU, dtype, head dim, sequence bucket, causal),
//! which dispatch consults before its built-in heuristic.
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
//!       "speedup_vs_default": 1.07, "measured": "2026-05-01" } ] } }
//! ```

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

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

/// Errors of loading, saving and resolving a tuned table.
#[derive(Debug, thiserror::Error)]
pub enum TunedError {
    /// The table's file could not be read.
    #[error("cannot read tuned table {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The operating system's error.
        source: std::io::Error,
    },
    /// The table's file or its directory could not be written.
    #[error("cannot write tuned table {path}: {source}")]
    Write {
        /// The file.
        path: PathBuf,
        /// The operating system's error.
        source: std::io::Error,
    },
    /// The text is not JSON of the table's form.
    #[error("tuned table is not valid JSON of the expected form: {0}")]
    Parse(#[from] serde_json::Error),
    /// One GPU lists the same (dtype, head dim, bucket, mask) twice.
    #[error("tuned table lists {gpu} / {key} twice: dispatch would be ambiguous")]
    Duplicate {
        /// The GPU's name.
        gpu: String,
        /// The repeated key, as text (e.g. `f16 d128 <=1024 causal`).
        key: String,
    },
    /// An entry names a variant this build does not have.
    #[error("tuned table names unknown kernel `{kernel}` for {gpu}: not in kernels.toml (retune or remove the entry)")]
    UnknownKernel {
        /// The GPU's name.
        gpu: String,
        /// The unknown variant name.
        kernel: String,
    },
    /// An entry names a variant at a head dim it is not compiled for.
    #[error(
        "tuned table names kernel `{kernel}` for {gpu} at head dim {head_dim}, which it is not compiled for"
    )]
    HeadDim {
        /// The GPU's name.
        gpu: String,
        /// The variant name.
        kernel: String,
        /// The entry's head dim.
        head_dim: usize,
    },
}

/// The tuned table: entries per GPU name. Ordered maps and sorted lists, so that a saved table
/// diffs cleanly between tuning runs.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct TunedTable {
    /// Each GPU's entries, keyed by the GPU name the driver reports, sorted by [`Entry::key`].
    pub gpus: BTreeMap<String, Vec<Entry>>,
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

impl TunedTable {
    /// An empty table.
    pub fn new() -> TunedTable {
        TunedTable::default()
    }

    /// The table embedded at build time (`tuned/h100.json`).
    pub fn builtin() -> Result<TunedTable, TunedError> {
        TunedTable::parse(BUILTIN)
    }

    /// Parses a table; entries come back sorted, and a key listed twice for one GPU is an error.
    pub fn parse(text: &str) -> Result<TunedTable, TunedError> {
        let mut table: TunedTable = serde_json::from_str(text)?;
        for (gpu, entries) in &mut table.gpus {
            entries.sort_by(|a, b| a.key().cmp(&b.key()));
            if let Some(pair) = entries.windows(2).find(|w| w[0].key() == w[1].key()) {
                return Err(TunedError::Duplicate {
                    gpu: gpu.clone(),
                    key: key_string(&pair[0]),
                });
            }
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

    /// Writes [`TunedTable::to_json_pretty`] to `path`, creating its directory.
    pub fn save(&self, path: impl AsRef<Path>) -> Result<(), TunedError> {
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

    /// Pretty JSON with a final line break.
    pub fn to_json_pretty(&self) -> String {
        let mut text = serde_json::to_string_pretty(self).expect("the table is plain data");
        text.push('\n');
        text
    }

    /// Entries over all GPUs.
    pub fn len(&self) -> usize {
        self.gpus.values().map(Vec::len).sum()
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

    /// Inserts `entry` for `gpu`, replacing (and returning) the entry with the same key.
    pub fn upsert(&mut self, gpu: &str, entry: Entry) -> Option<Entry> {
        let entries = self.gpus.entry(gpu.to_string()).or_default();
        match entries.binary_search_by(|e| e.key().cmp(&entry.key())) {
            Ok(i) => Some(std::mem::replace(&mut entries[i], entry)),
            Err(i) => {
                entries.insert(i, entry);
                None
            }
        }
    }

    /// The kernel names the table uses that are not in `variants`, sorted and without repeats
    /// (empty when the table is consistent with the build).
    pub fn validate(&self, variants: &[VariantSpec]) -> Vec<String> {
        let mut unknown: Vec<String> = self
            .gpus
            .values()
            .flatten()
            .filter(|e| !variants.iter().any(|v| v.name == e.kernel))
            .map(|e| e.kernel.clone())
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
