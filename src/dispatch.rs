//! The library's choice of kernel variant for a problem: the built-in table, measured, and the tuned table consulted before it.

use serde::Serialize;

use crate::problem::{DType, Shape};
use crate::tuned_table::TunedTable;
use crate::variants::{Family, VariantSpec, VARIANTS};

/// The library's choice of variant: by architecture, head dim, how many waves of 128-row query
/// blocks the problem fills, and the mask (the first entry whose architecture the device has, whose
/// `min_waves` the problem reaches and whose mask filter it passes wins). Measured on the H100
/// (evidence/forward/bench_h100.json and docs/history/perf-notes.md). Hopper takes the
/// warp-specialised `flash_ws`, everything else the `mma.sync` kernels.
///
/// | arch | head dim | mask       | >= 4 waves            | >= 1 wave                | less                  |
/// |------|----------|------------|-----------------------|--------------------------|-----------------------|
/// | 90   | 64       | non-causal | ws m192_n128_s2_pp_ov_ps | ws m192_n128_s2_pp_ov_ps from 2048 rows, else ws m128_n128_s2_pp_ov_ps | ws m128_n128_s2_pp_ov |
/// | 90   | 64       | non-causal, 256-row blocks in one or two full rounds | ws m256_n64_s3_pp_ov (whatever the waves) | | |
/// | 90   | 64       | causal     | ws m192_n128_s2_pp_ov_ps | ws m128_n128_s2_pp_ov_ps | ws m128_n128_s2_pp_ov |
/// | 90   | 128      | both       | (as >= 1 wave)        | ws m128_n128_s2_pp_ov_ps | ws m128_n128_s2_pp_ov |
/// | 90   | 256      | both       | (as >= 1 wave)        | ws m128_n80_s2_pp_ov     | ws m128_n80_s2_pp_ov  |
/// | 80   | 64       | both       | (as >= 1 wave)        | mma m128_n64_w4_s2       | mma m64_n64_w4_s2_b3  |
/// | 80   | 128      | both       | (as >= 1 wave)        | mma m128_n32_w4_s3_qsmem | mma m64_n64_w4_s2     |
///
/// Problems from one wave on take the persistent twins (`_ps`, one block per SM walking the work
/// items): since their item loop was made warp-converged, their KV loop is the grid kernels' and
/// the next item's loads run under each item's end: 1-11% faster than the grid at head dims 64 and
/// 128 on the non-causal shapes of one wave or more measured up to 4096 keys, a tie at 8192
/// (evidence/forward/dispatch/persistent-vs-grid/, docs/kernels/flash_ws.md, persistence). Causal
/// problems kept the grid at first: a persistent walk by positions lacks the grid's longest-first
/// order (1.46x slower at (1,16,16384,128)). A causal persistent launch now walks the host's item
/// table instead (`causal_item_table`, the grid's order dealt out ahead): 4-9% faster than the grid
/// at (2,16,4096,128) and (4,16,2048,128), 6-7% at (4,16,2048,64), 1% at (1,16,16384,128)
/// (evidence/forward/dispatch/causal-persistent/), and the README's bench (`PICKS_BENCH`) times it
/// as the pick. Causal problems at head dim 128 take the 128-key tile, not the 176-key one: 3.6-4%
/// faster at (2,16,4096,128) in both dtypes of one set of runs and 6% in another, a tie (0.3%) at
/// (1,16,16384,128) (evidence/forward/dispatch/causal-n128/, docs/kernels/flash_ws.md, tiles per
/// head dim).
///
/// Head dim 64 takes three consumer warpgroups (192-row blocks) from four waves of 128-row blocks
/// on: 6-12% faster non-causal and 10-13% causal at (4,16,2048,64), (2,16,4096,64) and
/// (1,16,8192,64), but 15% slower at (2,8,2048,64), where its 176 blocks fill 132 SMs 1.3 times
/// (evidence/forward/dispatch/three-consumers-d64/, docs/kernels/flash_ws.md, tiles per head dim).
/// Fewer, larger blocks lose to the last wave's idle SMs below about four waves (2.7 waves of
/// 192-row blocks). Since the persistent kernel splits its last round over the idle SMs
/// (`launch::tail_split`) its 192-row twin wins non-causal from one wave on where a head has 2048
/// rows or more: 2-12% faster than the 128-row one at (2,8,2048,64), (1,8,4096,64), (2,16,2048,64)
/// and (3,16,2048,64) in fp16 and bf16, a tie at (1,16,4096,64); at (1,32,1024,64), whose last row
/// block per head is a third full, 11% slower (evidence/forward/dispatch/waves-d64/).
///
/// Ahead of those, non-causal head-dim-64 problems whose 256-row blocks make one or two rounds that
/// keep three quarters of the SMs busy or more (`fills_its_rounds`) take four consumer warpgroups,
/// whose blocks then need no second item or split tail: 1.07-1.18x cuDNN and 2-14% faster than the
/// earlier picks at (2,8,2048,64), (1,8,4096,64), (1,32,1024,64), (2,7,2048,64), (1,13,2048,64),
/// (2,8,2000,64) and (2,8,2048,4096,64), 5% at (4,8,2048,64) (two rounds). At (1,12,2048,64) (96
/// blocks) the 192-row items make exactly one round and win; at four rounds ((4,16,2048,64)) the
/// persistent pick is 5% faster; causal blocks are too uneven for one round
/// (evidence/forward/dispatch/four-consumers-d64/, docs/kernels/flash_ws.md, tiles per head dim).
///
/// Small problems wanted more, smaller blocks before `flash_ws` (at (2,8,512,64) the 128-row tiles
/// give 64 blocks for 132 SMs); on Hopper it now wins there too: at (1,8,2048,128) 30 us against
/// `flash_wgmma`'s 45 (cuDNN 31.6), at (1,8,2048,64) 23 us against `flash_mma`'s 40 (cuDNN 22.6),
/// at (2,8,512,64) 8.2-8.7 us against 9.8 (evidence/forward/dispatch/small-problems/). Among
/// two-consumer kernels at head dim 64 the 128-key ping-pong pair has been ahead since the causal
/// longest-first order, 2-4% at (4,16,2048,64) and (2,16,4096,64)
/// (evidence/forward/dispatch/d64-ping-pong/). At head dim 256 ping-pong pays since the lazy
/// rescale: 4-8% at (2,16,4096,256), a tie at (1,4,2048,256) causal
/// (evidence/forward/dispatch/d256-ping-pong/). The tuned table keeps `flash_mma` for the smallest
/// head-dim-64 problems it measured faster. Decode-like problems go to `flash_decode` first
/// (`Gpu::choose`, src/decode.rs).
pub const DISPATCH: &[DispatchEntry] = &[
    DispatchEntry {
        arch: 90,
        head_dim: 64,
        min_waves: 0,
        min_seq_q: 0,
        non_causal_only: true,
        full_rounds: true,
        kernel: "flash_ws_m256_n64_s3_pp_ov_mbarrier",
    },
    DispatchEntry {
        arch: 90,
        head_dim: 64,
        min_waves: 4,
        min_seq_q: 0,
        non_causal_only: false,
        full_rounds: false,
        kernel: "flash_ws_m192_n128_s2_pp_ov_ps_mbarrier",
    },
    DispatchEntry {
        arch: 90,
        head_dim: 64,
        min_waves: 1,
        min_seq_q: 2048,
        non_causal_only: true,
        full_rounds: false,
        kernel: "flash_ws_m192_n128_s2_pp_ov_ps_mbarrier",
    },
    DispatchEntry {
        arch: 90,
        head_dim: 64,
        min_waves: 1,
        min_seq_q: 0,
        non_causal_only: false,
        full_rounds: false,
        kernel: "flash_ws_m128_n128_s2_pp_ov_ps_mbarrier",
    },
    DispatchEntry {
        arch: 90,
        head_dim: 128,
        min_waves: 1,
        min_seq_q: 0,
        non_causal_only: false,
        full_rounds: false,
        kernel: "flash_ws_m128_n128_s2_pp_ov_ps_mbarrier",
    },
    DispatchEntry {
        arch: 90,
        head_dim: 64,
        min_waves: 0,
        min_seq_q: 0,
        non_causal_only: false,
        full_rounds: false,
        kernel: "flash_ws_m128_n128_s2_pp_ov_mbarrier",
    },
    DispatchEntry {
        arch: 90,
        head_dim: 128,
        min_waves: 0,
        min_seq_q: 0,
        non_causal_only: false,
        full_rounds: false,
        kernel: "flash_ws_m128_n128_s2_pp_ov_mbarrier",
    },
    DispatchEntry {
        arch: 90,
        head_dim: 256,
        min_waves: 1,
        min_seq_q: 0,
        non_causal_only: false,
        full_rounds: false,
        kernel: "flash_ws_m128_n80_s2_pp_ov_mbarrier",
    },
    DispatchEntry {
        arch: 90,
        head_dim: 256,
        min_waves: 0,
        min_seq_q: 0,
        non_causal_only: false,
        full_rounds: false,
        kernel: "flash_ws_m128_n80_s2_pp_ov_mbarrier",
    },
    DispatchEntry {
        arch: 80,
        head_dim: 64,
        min_waves: 1,
        min_seq_q: 0,
        non_causal_only: false,
        full_rounds: false,
        kernel: "flash_mma_m128_n64_w4_s2_light",
    },
    DispatchEntry {
        arch: 80,
        head_dim: 64,
        min_waves: 0,
        min_seq_q: 0,
        non_causal_only: false,
        full_rounds: false,
        kernel: "flash_mma_m64_n64_w4_s2_b3_light",
    },
    DispatchEntry {
        arch: 80,
        head_dim: 128,
        min_waves: 1,
        min_seq_q: 0,
        non_causal_only: false,
        full_rounds: false,
        kernel: "flash_mma_m128_n32_w4_s3_qsmem_light",
    },
    DispatchEntry {
        arch: 80,
        head_dim: 128,
        min_waves: 0,
        min_seq_q: 0,
        non_causal_only: false,
        full_rounds: false,
        kernel: "flash_mma_m64_n64_w4_s2_light",
    },
];

/// Where `Gpu::choose` found its variant.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Choice {
    /// An entry of the tuned table for this GPU.
    Tuned,
    /// The built-in `DISPATCH` table (no tuned entry for this GPU, dtype, head dim, bucket, mask).
    Heuristic,
}

/// Every variant the dispatch weighs for a problem on a GPU named `device` (architecture `arch`
/// x10, `sms` multiprocessors) with the tuned table `tuned`, best first, each once:
/// `flash_decode` when the problem is decode-like, then the tuned table's entry, then the
/// built-in `DISPATCH` entry, each being
/// what the dispatch falls back to when the one before does not apply. Never empty; the first
/// is [`Gpu::choose`]'s pick. `bench` times them all, so the pick is measured beside what it
/// was preferred to.
pub fn dispatch_candidates(
    tuned: Option<&TunedTable>,
    device: &str,
    arch: u32,
    sms: usize,
    shape: Shape,
    dtype: DType,
    causal: bool,
) -> Vec<(&'static VariantSpec, Choice)> {
    // The tuned table's buckets are by sequence length, which for decode-like problems is the
    // key length alone: they go to flash_decode before the table is asked.
    // A padded head dim or a head dim of V's own runs on flash_ws alone (`Shape::needs_flash_ws`):
    // neither flash_decode nor a tuned entry of another family takes it.
    let takes = |v: &&'static VariantSpec| !shape.needs_flash_ws() || v.family == Family::FlashWs;
    let decode = crate::decode::DISPATCH
        .then(|| crate::decode::decode_variant(shape, arch, sms))
        .flatten()
        .filter(takes);
    let seq = shape.seq_q.max(shape.seq_k);
    let tuned = tuned.and_then(|table| {
        table
            .resolve(VARIANTS, device, dtype.name(), shape.head_dim, seq, causal)
            .ok()
            .flatten()
            .filter(|v| v.min_arch <= arch)
            .filter(takes)
    });
    let ranked = decode
        .map(|v| (v, Choice::Heuristic))
        .into_iter()
        .chain(tuned.map(|v| (v, Choice::Tuned)))
        .chain([(default_variant(shape, causal, sms, arch), Choice::Heuristic)]);
    let mut candidates: Vec<(&'static VariantSpec, Choice)> = Vec::with_capacity(3);
    for (variant, source) in ranked {
        if !candidates.iter().any(|(v, _)| v.name == variant.name) {
            candidates.push((variant, source));
        }
    }
    candidates
}

/// The tuned table compiled into the library (`tuned/h100.json`), parsed once; a unit test
/// keeps an unparsable one from shipping. A `Gpu` consults its own copy, or the file its
/// options name (`GpuOptions::tuned_table`).
pub fn builtin_tuned() -> Option<&'static TunedTable> {
    static TABLE: std::sync::OnceLock<Option<TunedTable>> = std::sync::OnceLock::new();
    TABLE.get_or_init(|| TunedTable::builtin().ok()).as_ref()
}

/// One row of `DISPATCH`.
#[derive(Clone, Copy, Debug)]
pub struct DispatchEntry {
    /// The oldest architecture (x10) the entry applies to.
    pub arch: u32,
    /// The head dim the entry applies to.
    pub head_dim: usize,
    /// At least this many waves of 128-row query blocks (blocks per multiprocessor).
    pub min_waves: usize,
    /// At least this many query rows per head (0: any).
    pub min_seq_q: usize,
    /// The entry applies to non-causal problems only (a causal one reads on to the next).
    pub non_causal_only: bool,
    /// The entry applies only where the picked variant's own blocks (of its `block_m` rows) make
    /// one or two rounds on the multiprocessors that leave at most a quarter of them idle
    /// (`fills_its_rounds`).
    pub full_rounds: bool,
    /// The variant the entry picks, by name.
    pub kernel: &'static str,
}

/// Why the dispatch has nothing for head dim `d`: only experimental variants have it (they run
/// when named).
pub(crate) fn no_listed_kernel(d: usize) -> String {
    let named: Vec<&str> = crate::variants::EXPERIMENTAL_VARIANTS
        .iter()
        .filter(|v| v.head_dims.contains(&d))
        .map(|v| v.name)
        .collect();
    format!(
        "head dim {d} has no tested kernel yet; experimental variants that have it, run only when named: {}",
        named.join(", ")
    )
}

/// `shape`'s blocks of `block_m` query rows, over every batch and head.
pub(crate) fn query_blocks(shape: Shape, block_m: usize) -> usize {
    shape.seq_q.div_ceil(block_m) * shape.batch * shape.heads
}

/// Whether `shape`'s blocks of `block_m` query rows make one or two rounds on `sms`
/// multiprocessors that leave at most a quarter of them idle: then no round is a short tail that
/// a persistent kernel would have to split.
pub(crate) fn fills_its_rounds(shape: Shape, block_m: usize, sms: usize) -> bool {
    let blocks = query_blocks(shape, block_m);
    let rounds = blocks.div_ceil(sms);
    rounds <= 2 && 4 * blocks >= 3 * rounds * sms
}

/// The variant `DISPATCH` picks for `shape` on a GPU with `sms` multiprocessors whose PTX is
/// architecture `arch` (80 or 90). A padded head dim ([`crate::problem::kernel_head_dim`]) takes
/// the entry of the head dim that pads it, a `flash_ws` kernel on sm_90 (elsewhere the launch
/// refuses it in one line).
pub fn default_variant(shape: Shape, causal: bool, sms: usize, arch: u32) -> &'static VariantSpec {
    let blocks = query_blocks(shape, 128);
    let d = shape.kernel_head_dim();
    DISPATCH
        .iter()
        .filter(|e| {
            e.arch <= arch
                && e.head_dim == d
                && blocks >= e.min_waves * sms
                && shape.seq_q >= e.min_seq_q
                && !(causal && e.non_causal_only)
        })
        .filter_map(|e| Some((e, VariantSpec::by_name(e.kernel)?)))
        .find(|(e, v)| !e.full_rounds || fills_its_rounds(shape, v.block_m as usize, sms))
        .map(|(_, v)| v)
        .or_else(|| {
            crate::variants::built(VARIANTS)
                .find(|v| v.family == Family::FlashMma && v.head_dims.contains(&d))
        })
        // A head dim only a newer architecture's family has (256 on sm_80): that variant, so that
        // the launch fails with the architecture it needs rather than a wrong head dim.
        .or_else(|| crate::variants::built(VARIANTS).find(|v| v.head_dims.contains(&d)))
        .unwrap_or(&VARIANTS[0])
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The bench run the README's results table comes from (`scripts/readme_table.py`).
    const PICKS_BENCH: &str = "evidence/forward/bench_h200.json";

    /// The README's column of the library's picks is what this tree's dispatch picks on that
    /// bench's GPU (variant, and whether the tuned table chose it), with the speed relative to
    /// cuDNN that the bench measured for that variant in the same run. Checked against the
    /// dispatch rather than the run's record of its pick, which a later change to the dispatch or
    /// the tuned table leaves stale: such a change fails here until the bench is run again.
    #[test]
    fn the_readme_shows_the_picks_this_dispatch_makes_as_the_bench_measured_them() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
        let read = |path: &str| std::fs::read_to_string(root.join(path)).unwrap();
        let readme = read("README.md");
        assert!(
            readme.contains(PICKS_BENCH),
            "the README names the file its picks come from"
        );
        let bench: serde_json::Value = serde_json::from_str(&read(PICKS_BENCH)).unwrap();
        let gpu_name = bench["gpu"].as_str().unwrap();
        let results = bench["results"].as_array().unwrap();
        let cases = bench["summary"].as_array().unwrap();
        assert!(!cases.is_empty());
        for case in cases {
            let dims: [usize; 4] = serde_json::from_value(case["shape"].clone()).unwrap();
            let causal = case["causal"].as_bool().unwrap();
            let shape = Shape {
                seq_k: case["seq_k"].as_u64().unwrap() as usize,
                heads_kv: case["heads_kv"].as_u64().unwrap() as usize,
                ..Shape::new(dims[0], dims[1], dims[2], dims[3])
            };
            // The run's GPU: an H200 (132 multiprocessors) loading the sm_90a PTX, with the
            // library's tuned table.
            let (variant, how) =
                dispatch_candidates(builtin_tuned(), gpu_name, 90, 132, shape, DType::F16, causal)[0];
            let picked = variant.name;
            let p50 = |kernel: &str| {
                results
                    .iter()
                    .find(|r| {
                        r["kernel"] == kernel
                            && r["dtype"] == "float16"
                            && ["shape", "seq_k", "heads_kv", "causal"]
                                .iter()
                                .all(|k| r[k] == case[k])
                    })
                    .and_then(|r| r["p50_us"].as_f64())
                    .unwrap_or_else(|| {
                        panic!(
                            "{PICKS_BENCH} has no time of {kernel} on {shape} causal={causal}: bench again"
                        )
                    })
            };
            let ratio = p50("torch_cudnn") / p50(picked);
            let tuned_note = if how == Choice::Tuned { " (tuned)" } else { "" };
            let [b, h, s, d] = dims;
            let row_start = format!("| ({b}, {h}, {s}, {d}) | {} |", if causal { "yes" } else { "no" });
            let row = readme
                .lines()
                .find(|line| line.starts_with(&row_start))
                .unwrap_or_else(|| panic!("the README's results table has no row {row_start}"));
            let cell = format!("| `{picked}`{tuned_note}, {ratio:.2}x |");
            assert!(row.ends_with(&cell), "{row}\n should end with {cell}");
        }
    }

    #[test]
    fn dispatch_candidates_start_with_the_pick_and_end_with_the_heuristic() {
        let h100 = |shape: Shape| {
            dispatch_candidates(
                builtin_tuned(),
                "NVIDIA H100 80GB HBM3",
                90,
                132,
                shape,
                DType::F16,
                false,
            )
        };
        let decode = Shape {
            seq_q: 1,
            ..Shape::new(1, 32, 32768, 128)
        };
        let chunk = Shape {
            seq_q: 128,
            ..Shape::new(4, 32, 4096, 128)
        };
        for shape in [decode, decode.with_heads_kv(8), chunk, Shape::new(2, 8, 512, 64)] {
            let candidates = h100(shape);
            let names: Vec<&str> = candidates.iter().map(|(v, _)| v.name).collect();
            let mut unique = names.clone();
            unique.dedup();
            assert_eq!(unique.len(), names.len(), "{shape}: {names:?}");
            let last = candidates.last().unwrap();
            assert_eq!(
                last.0.name,
                default_variant(shape, false, 132, 90).name,
                "{shape}"
            );
            assert!(candidates
                .iter()
                .all(|(v, _)| v.head_dims.contains(&shape.head_dim)));
        }
        // A decode step goes to flash_decode first, and the regular kernel it was preferred to
        // is a candidate too.
        let one = h100(decode);
        assert_eq!(
            one[0],
            (
                crate::decode::decode_variant(decode, 90, 132).unwrap(),
                Choice::Heuristic
            )
        );
        assert!(
            one.iter().any(|(v, _)| v.family != Family::FlashDecode),
            "{one:?}"
        );
        // A prefill chunk has too many rows for flash_decode: none is weighed.
        assert!(h100(chunk).iter().all(|(v, _)| v.family != Family::FlashDecode));
    }

    #[test]
    fn padded_head_dims_take_flash_ws_at_the_head_dim_that_pads_them() {
        for (d, tiles) in [(96, 128), (192, 256), (32, 64), (160, 256)] {
            for (batch, seq, causal) in [(1, 128, false), (4, 4096, true), (16, 2048, false)] {
                let shape = Shape::new(batch, 8, seq, d);
                let v = default_variant(shape, causal, 132, 90);
                assert_eq!(v.family, Family::FlashWs, "{shape}");
                assert!(v.head_dims.contains(&tiles), "{} at {shape}", v.name);
                assert_eq!(v.entry_head_dim(d), tiles);
                // The tuned table has no padded head dim: the candidates are the heuristic's.
                let candidates =
                    dispatch_candidates(builtin_tuned(), "NVIDIA H100 80GB HBM3", 90, 132, shape, DType::Bf16, causal);
                assert_eq!(candidates[0].0.name, v.name, "{shape}");
            }
            // A decode step whose v has a head dim of its own goes to flash_ws too, not flash_decode.
            for d in [d, 128] {
                let decode = Shape::new(8, 32, 1, d).with_heads_kv(8).with_head_dim_v(64);
                let decode = Shape { seq_k: 8192, ..decode };
                let candidates =
                    dispatch_candidates(builtin_tuned(), "NVIDIA H100 80GB HBM3", 90, 132, decode, DType::Bf16, true);
                assert!(candidates.iter().all(|(v, _)| v.family == Family::FlashWs), "{decode}");
            }
            // Another family's entry points keep the head dim they are asked for (and, not being
            // compiled for it, refuse it).
            let mma = VARIANTS.iter().find(|v| v.family == Family::FlashMma).unwrap();
            assert_eq!(mma.entry_head_dim(d), d);
        }
    }

    #[test]
    fn dispatch_names_compiled_variants_for_their_head_dims_and_arch() {
        for e in DISPATCH {
            let v = VariantSpec::by_name(e.kernel)
                .unwrap_or_else(|| panic!("{} is not in kernels.toml", e.kernel));
            assert!(
                v.head_dims.contains(&e.head_dim),
                "{} lacks head dim {}",
                e.kernel,
                e.head_dim
            );
            assert!(v.min_arch <= e.arch, "{} needs sm_{}", e.kernel, v.min_arch);
        }
        for arch in [80, 90] {
            for &d in crate::variants::HEAD_DIMS {
                for big in [false, true] {
                    let shape = Shape::new(if big { 8 } else { 1 }, 16, 4096, d);
                    let v = default_variant(shape, big, 132, arch);
                    if !VARIANTS.iter().any(|v| v.head_dims.contains(&d)) {
                        // Only experimental variants have this head dim: `forward` says so.
                        assert!(no_listed_kernel(d).contains("flash_ws"), "d={d}");
                        continue;
                    }
                    if !VARIANTS
                        .iter()
                        .any(|v| v.min_arch <= arch && v.head_dims.contains(&d))
                    {
                        // Only a newer architecture has this head dim: its variant, so that the
                        // launch names the architecture needed.
                        assert!(
                            v.head_dims.contains(&d) && v.min_arch > arch,
                            "{} for d={d}",
                            v.name
                        );
                        continue;
                    }
                    assert!(
                        v.min_arch <= arch && v.head_dims.contains(&d),
                        "{} for d={d} sm_{arch}",
                        v.name
                    );
                    assert!(
                        v.family != Family::Naive,
                        "no entry for d={d} big={big} sm_{arch}"
                    );
                }
            }
        }
    }

    #[test]
    fn hopper_takes_the_warp_specialised_kernel_for_big_problems_and_others_mma() {
        let big = Shape::new(2, 16, 4096, 128);
        assert_eq!(default_variant(big, false, 132, 90).family, Family::FlashWs);
        assert_eq!(
            default_variant(big, false, 132, 80).name,
            "flash_mma_m128_n32_w4_s3_qsmem_light"
        );
        // From one wave on the persistent twins (causal ones walk the host's item table, in the
        // grid's longest-first order). Head dim 64: three consumer warpgroups from four waves of
        // 128-row blocks on. Below one wave the grid kernel (a persistent block would have one item).
        let cases = [
            (
                (2, 16, 4096, 128, false),
                "flash_ws_m128_n128_s2_pp_ov_ps_mbarrier",
            ),
            (
                (2, 16, 4096, 128, true),
                "flash_ws_m128_n128_s2_pp_ov_ps_mbarrier",
            ),
            (
                (2, 16, 4096, 64, false),
                "flash_ws_m192_n128_s2_pp_ov_ps_mbarrier",
            ),
            ((2, 16, 4096, 64, true), "flash_ws_m192_n128_s2_pp_ov_ps_mbarrier"),
            // One or two rounds of 256-row blocks that keep three quarters of the SMs busy or
            // more: four consumers, no split tail (128 blocks here, 256 at (4,8,2048,64); 64 at
            // (1,8,2048,64) and 96 at (1,12,2048,64) leave too many SMs idle, 512 at
            // (4,16,2048,64) are four rounds). Non-causal only.
            ((2, 8, 2048, 64, false), "flash_ws_m256_n64_s3_pp_ov_mbarrier"),
            ((1, 8, 4096, 64, false), "flash_ws_m256_n64_s3_pp_ov_mbarrier"),
            ((1, 32, 1024, 64, false), "flash_ws_m256_n64_s3_pp_ov_mbarrier"),
            ((4, 8, 2048, 64, false), "flash_ws_m256_n64_s3_pp_ov_mbarrier"),
            ((1, 8, 2048, 64, false), "flash_ws_m128_n128_s2_pp_ov_mbarrier"),
            // From one wave on, at 2048 rows or more, the 192-row twin (its last round split).
            (
                (1, 12, 2048, 64, false),
                "flash_ws_m192_n128_s2_pp_ov_ps_mbarrier",
            ),
            (
                (4, 16, 2048, 64, false),
                "flash_ws_m192_n128_s2_pp_ov_ps_mbarrier",
            ),
            ((2, 8, 2048, 64, true), "flash_ws_m128_n128_s2_pp_ov_ps_mbarrier"),
            ((2, 8, 512, 64, true), "flash_ws_m128_n128_s2_pp_ov_mbarrier"),
            ((1, 8, 2048, 128, false), "flash_ws_m128_n128_s2_pp_ov_mbarrier"),
            ((2, 16, 4096, 256, false), "flash_ws_m128_n80_s2_pp_ov_mbarrier"),
            ((2, 16, 4096, 256, true), "flash_ws_m128_n80_s2_pp_ov_mbarrier"),
        ];
        for ((b, h, s, d, causal), expected) in cases {
            let shape = Shape::new(b, h, s, d);
            assert_eq!(
                default_variant(shape, causal, 132, 90).name,
                expected,
                "{shape} causal={causal}"
            );
        }
    }

    #[test]
    fn small_problems_get_small_blocks_except_on_hopper() {
        let small = Shape::new(2, 8, 512, 64);
        assert_eq!(
            default_variant(small, false, 132, 80).name,
            "flash_mma_m64_n64_w4_s2_b3_light"
        );
        // flash_ws beats the small-block kernels at small sizes too (the table's documentation).
        for d in [64, 128] {
            for shape in [Shape::new(2, 8, 512, d), Shape::new(1, 8, 2048, d)] {
                assert_eq!(
                    default_variant(shape, false, 132, 90).name,
                    "flash_ws_m128_n128_s2_pp_ov_mbarrier",
                    "{shape}"
                );
            }
        }
    }
}
