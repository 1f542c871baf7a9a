//! Builds the device crate `kernels-rs` to PTX and generates the host's variant table, both from
//! `kernels.toml` read into the typed variant description of `src/spec.rs`.
//!
//! The PTX comes from rustc's own NVPTX backend (Debian's `rustc-web`, which ships the standard
//! library source that `-Zbuild-std=core` needs), through a nested cargo with its own target
//! directory, once per GPU architecture. See `scripts/setup.sh` for the toolchain.

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::{env, fs};

use serde::Deserialize;

#[path = "build/device.rs"]
mod device;
#[path = "build/merge.rs"]
mod merge;
#[path = "src/ptx_items.rs"]
mod ptx_items;

/// Architectures a PTX can be built for; the library loads the newest one the device supports.
/// Hopper's is `sm_90a`, the architecture-specific target that `wgmma` needs (it loads on sm_90
/// devices only, which is every Hopper GPU). `FLASHRS_ARCHES` (e.g. `sm_90a`) builds fewer: an
/// architecture left out has an empty module, and a GPU that needs it is a typed error.
const ARCHES: &[(&str, u32)] = &[("sm_80", 80), ("sm_90a", 90)];

/// The architectures `FLASHRS_ARCHES` names (comma-separated `sm_` names; unset or `all`: every
/// one of `ARCHES`).
fn selected_arches() -> Vec<(&'static str, u32)> {
    let value = env::var("FLASHRS_ARCHES").unwrap_or_default();
    let names: Vec<&str> = value
        .split(',')
        .map(str::trim)
        .filter(|n| !n.is_empty())
        .collect();
    if names.is_empty() || names == ["all"] {
        return ARCHES.to_vec();
    }
    for name in &names {
        if !ARCHES.iter().any(|(arch, _)| arch == name) {
            let known: Vec<&str> = ARCHES.iter().map(|(arch, _)| *arch).collect();
            fail(&format!(
                "FLASHRS_ARCHES: unknown architecture `{name}` (known: {})",
                known.join(", ")
            ));
        }
    }
    ARCHES
        .iter()
        .copied()
        .filter(|(arch, _)| names.contains(arch))
        .collect()
}
/// The head dims the backward kernels are compiled for: `backward_launch::HEAD_DIMS` (the
/// library's test `every_backward_kernel_is_compiled` holds the two lists together).
const BACKWARD_HEAD_DIMS: [u32; 3] = [64, 128, 256];
/// The head dims of the backward's `wgmma` main kernel (sm_90a): `backward_launch::warpgroup::
/// HEAD_DIMS`, held together by the same test.
const BACKWARD_WGMMA_HEAD_DIMS: [u32; 2] = [64, 128];

// The typed variant description, shared with the library.
#[path = "src/spec.rs"]
mod spec;

use spec::{Entry, Spec};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Table {
    /// Head dims a variant is compiled for unless it lists its own.
    head_dims: Vec<u32>,
    dtypes: Vec<String>,
    variant: Vec<Entry>,
}

/// A resolved variant: its parameters, its name, the head dims it is compiled for.
struct Variant {
    spec: Spec,
    name: String,
    head_dims: Vec<u32>,
    experimental: bool,
    /// Compiled by every build (`Entry::shipped`).
    shipped: bool,
}

impl Variant {
    /// The exported PTX symbol for one head dim and dtype (the library's `VariantSpec::symbol`).
    fn symbol(&self, d: u32, dtype: &str) -> String {
        format!("{}_d{d}_{dtype}", self.name)
    }
}

fn main() {
    let root = PathBuf::from(env::var("CARGO_MANIFEST_DIR").unwrap());
    let out_dir = PathBuf::from(env::var("OUT_DIR").unwrap());
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=build");
    println!("cargo:rerun-if-changed=kernels.toml");
    println!("cargo:rerun-if-changed=src/spec.rs");
    println!("cargo:rerun-if-changed=src/ptx_items.rs");
    println!("cargo:rerun-if-changed=kernels-rs/manifest.toml");
    println!("cargo:rerun-if-changed=kernels-rs/src");
    println!("cargo:rerun-if-env-changed=FLASHRS_DEVICE_RUSTC");
    println!("cargo:rerun-if-env-changed=FLASHRS_DEVICE_CARGO");
    println!("cargo:rerun-if-env-changed=FLASHRS_VARIANTS");
    println!("cargo:rerun-if-env-changed=FLASHRS_ARCHES");

    let table = match read_table(&root.join("kernels.toml")) {
        Ok(table) => table,
        Err(message) => fail(&format!("kernels.toml: {message}")),
    };
    let variants: Vec<Variant> = table
        .variant
        .iter()
        .map(|entry| resolve(entry, &table.head_dims))
        .collect::<Result<_, _>>()
        .unwrap_or_else(|message| fail(&format!("kernels.toml: {message}")));
    check_unique(&variants);

    let toolchain = device_toolchain();
    // `target/device/<arch>`, beside the host's profiles, so `cargo clean` removes it too.
    let target_root = match env::var_os("CARGO_TARGET_DIR") {
        Some(dir) => PathBuf::from(dir),
        None => root.join("target"),
    };
    let manifest_dir = device_manifest(&root, &out_dir);
    // FLASHRS_VARIANTS: which variants beyond the shipped ones to build, with their counted twins.
    let selection = Selection::from_env(&env::var("FLASHRS_VARIANTS").unwrap_or_default());
    let builds: Vec<Build> = variants.iter().map(|v| selection.build_of(v)).collect();
    let built = builds.iter().filter(|b| b.built).count();
    if built < variants.len() || matches!(selection, Selection::Named(_)) {
        println!(
            "cargo:warning={}: {built} of {} variants built ({} with instrumentation twins)",
            selection.describe(),
            variants.len(),
            builds.iter().filter(|b| b.counted).count()
        );
    }
    fs::write(
        out_dir.join("variants.rs"),
        host_table_source(&table, &variants, &builds),
    )
    .unwrap();
    let selected: Vec<(&Variant, Build)> = variants
        .iter()
        .zip(builds.iter().copied())
        .filter(|(_, b)| b.built)
        .collect();
    let built_arches = selected_arches();
    for &(arch, _) in ARCHES.iter().filter(|a| !built_arches.contains(a)) {
        // Not asked for: an empty module (`flashrs::embedded::ptx` reads it as absent).
        device::write_if_changed(&out_dir.join(format!("kernels_{arch}.ptx")), "")
            .unwrap_or_else(|e| fail(&e));
    }
    let arches: Vec<device::Arch> = built_arches
        .iter()
        .map(|&(name, number)| device::Arch {
            name,
            units: device_units(&table, &selected, number),
        })
        .collect();
    // The whole table of each architecture, every variant whatever this build compiles, for the
    // device crate's clippy (`.ci/run`), which so lints every family's body.
    let every: Vec<(&Variant, Build)> = variants
        .iter()
        .map(|v| {
            (
                v,
                Build {
                    built: true,
                    counted: true,
                },
            )
        })
        .collect();
    for &(name, number) in ARCHES {
        let whole: String = device_units(&table, &every, number)
            .iter()
            .map(|u| u.table.as_str())
            .collect();
        fs::write(out_dir.join(format!("device_kernels_{name}.rs")), whole).unwrap();
    }
    let jobs = env::var("NUM_JOBS")
        .ok()
        .and_then(|j| j.parse().ok())
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    let started = std::time::Instant::now();
    let lib_rs = root.join("kernels-rs/src/lib.rs");
    let (built, summary) = device::build(&toolchain, &manifest_dir, &lib_rs, &target_root, &arches, jobs)
        .unwrap_or_else(|message| fail(&message));
    if !summary.compiled.is_empty() {
        let slowest = summary.compiled.iter().max_by_key(|(_, ms)| *ms).unwrap();
        println!(
            "cargo:warning=device units: {} compiled, {} reused, {:.1} s (slowest {} {:.1} s)",
            summary.compiled.len(),
            summary.reused,
            started.elapsed().as_secs_f64(),
            slowest.0,
            slowest.1 as f64 / 1000.0
        );
    }
    for ((&(arch, arch_number), _), modules) in built_arches.iter().zip(&arches).zip(built) {
        let mut ptx =
            merge::merge(&modules).unwrap_or_else(|e| fail(&format!("merging the {arch} PTX: {e}")));
        // Every entry point of a variant: the plain one, and its paged and varlen twins where the
        // family has them, each with its counted twin where built. (Without `.maxntid` ptxas
        // ignores `setmaxnreg`: warning C7508.)
        let mut bounds = std::collections::HashMap::new();
        for (v, _) in selected.iter().filter(|(v, _)| v.spec.min_arch() <= arch_number) {
            let Some(blocks) = v.spec.launch_bounds() else {
                continue;
            };
            for &d in &v.head_dims {
                for dtype in &table.dtypes {
                    let symbol = v.symbol(d, dtype);
                    for suffix in [
                        "",
                        "_paged",
                        "_varlen",
                        "_counted",
                        "_paged_counted",
                        "_varlen_counted",
                    ] {
                        bounds.insert(format!("{symbol}{suffix}"), (v.spec.threads(), blocks));
                    }
                }
            }
        }
        ptx = add_launch_bounds(&ptx, &bounds);
        for (v, _) in selected.iter().filter(|(v, _)| v.spec.min_arch() <= arch_number) {
            if v.spec.launch_bounds().is_some() {
                let entry = v.symbol(v.head_dims[0], &table.dtypes[0]);
                if !ptx.contains(&format!(".visible .entry {entry}(")) {
                    fail(&format!("launch bounds: no entry {entry} in the {arch} PTX"));
                }
            }
        }
        device::write_if_changed(&out_dir.join(format!("kernels_{arch}.ptx")), &ptx)
            .unwrap_or_else(|e| fail(&e));
    }
    println!(
        "cargo:rustc-env=FLASHRS_PTX_BUILD_MS={}",
        started.elapsed().as_millis()
    );
}

/// What `FLASHRS_VARIANTS` asks to build beyond the shipped variants (`kernels.toml`'s
/// `shipped = true`: the dispatch's picks and the GPU reference), which every build compiles.
enum Selection {
    /// Unset or empty: the shipped variants alone, without instrumentation twins.
    Shipped,
    /// `all`: every variant, each with its barrier-counting twins (the lab's sweeps, `tune`).
    All,
    /// Comma-separated names or name prefixes: those variants with their counted twins.
    Named(Vec<String>),
}

/// What one variant's units compile.
#[derive(Clone, Copy)]
struct Build {
    /// Its kernels are in the PTX.
    built: bool,
    /// Its `_counted` twins are too.
    counted: bool,
}

impl Selection {
    fn from_env(value: &str) -> Selection {
        let patterns: Vec<String> = value
            .split(',')
            .map(str::trim)
            .filter(|p| !p.is_empty())
            .map(String::from)
            .collect();
        match patterns.as_slice() {
            [] => Selection::Shipped,
            [all] if all == "all" => Selection::All,
            _ => Selection::Named(patterns),
        }
    }

    fn build_of(&self, v: &Variant) -> Build {
        let asked = match self {
            Selection::Shipped => false,
            Selection::All => true,
            Selection::Named(patterns) => patterns.iter().any(|p| v.name.starts_with(p.as_str())),
        };
        Build {
            built: v.shipped || asked,
            counted: asked,
        }
    }

    fn describe(&self) -> String {
        match self {
            Selection::Shipped => "the shipped variants (FLASHRS_VARIANTS=all builds every one)".into(),
            Selection::All => "FLASHRS_VARIANTS=all".into(),
            Selection::Named(patterns) => format!("FLASHRS_VARIANTS={}", patterns.join(",")),
        }
    }
}

fn read_table(path: &Path) -> Result<Table, String> {
    let text = fs::read_to_string(path).map_err(|e| e.to_string())?;
    toml::from_str(&text).map_err(|e| e.to_string())
}

fn resolve(entry: &Entry, default_head_dims: &[u32]) -> Result<Variant, String> {
    let spec = Spec::from_entry(entry)?;
    let name = spec.name();
    let head_dims = entry
        .head_dims
        .clone()
        .unwrap_or_else(|| default_head_dims.to_vec());
    if head_dims.is_empty() {
        return Err(format!("{name}: no head dims"));
    }
    for &d in &head_dims {
        spec.check_head_dim(d)?;
    }
    Ok(Variant {
        spec,
        name,
        head_dims,
        experimental: entry.experimental.unwrap_or(false),
        shipped: entry.shipped.unwrap_or(false),
    })
}

fn check_unique(variants: &[Variant]) {
    let mut seen = BTreeSet::new();
    for v in variants {
        if !seen.insert(v.name.as_str()) {
            fail(&format!("kernels.toml: variant {} is listed twice", v.name));
        }
    }
}

fn dtype_type(dtype: &str) -> &'static str {
    match dtype {
        "f16" => "F16",
        "bf16" => "Bf16",
        other => fail(&format!("kernels.toml: unknown dtype `{other}` (f16, bf16)")),
    }
}

/// The device units of architecture `arch` (`build/device.rs`): first the common kernels, then one
/// unit per variant it has, each a list of the export-macro invocations (`<family>!(...)`) that
/// `kernels-rs/src/lib.rs` includes.
fn device_units(table: &Table, variants: &[(&Variant, Build)], arch: u32) -> Vec<device::Unit> {
    let header = "// Generated by build.rs from kernels.toml.\n";
    let mut common = String::from(header);
    // V transposed for the e4m3 kernels, per head dim, and the cuBLAS-composed path's row softmax.
    common.push_str(
        "fp8_transpose_v!(fp8_transpose_v_d128, 128);\nfp8_transpose_v!(fp8_transpose_v_d256, 256);\n",
    );
    common.push_str("softmax_rows!(softmax_rows_f16, F16);\nsoftmax_rows!(softmax_rows_bf16, Bf16);\n");
    // The merge of two partial results (O, log-sum-exp), per element type.
    common.push_str("merge_states!(merge_states_f16, F16);\nmerge_states!(merge_states_bf16, Bf16);\n");
    // The backward pass's three kernels per head dim and dtype (`attention::backward`).
    let mut backward = String::from(header);
    for d in BACKWARD_HEAD_DIMS {
        for dtype in &table.dtypes {
            let names = ["flash_backward_prepare", "flash_backward", "flash_backward_dq"]
                .map(|kernel| format!("{kernel}_d{d}_{dtype}"))
                .join(" ");
            writeln!(
                backward,
                "flash_backward!({names}, {}, d = {d});",
                dtype_type(dtype)
            )
            .unwrap();
        }
    }
    // On Hopper, the backward's `wgmma` main kernel per head dim it covers and dtype.
    let mut backward_wgmma = String::from(header);
    for d in BACKWARD_WGMMA_HEAD_DIMS {
        for dtype in &table.dtypes {
            writeln!(
                backward_wgmma,
                "flash_backward_wgmma!(flash_backward_wgmma_d{d}_{dtype} \
                 flash_backward_wgmma_softcap_d{d}_{dtype}, {}, d = {d});",
                dtype_type(dtype)
            )
            .unwrap();
        }
    }
    let mut units = vec![
        device::Unit {
            name: "common".into(),
            families: BTreeSet::new(),
            counted: false,
            table: common,
        },
        device::Unit {
            name: "backward".into(),
            families: BTreeSet::from(["backward"]),
            counted: false,
            table: backward,
        },
    ];
    if arch >= 90 {
        units.push(device::Unit {
            name: "backward_wgmma".into(),
            families: BTreeSet::from(["backward", "backward_wgmma"]),
            counted: false,
            table: backward_wgmma,
        });
    }
    for &(v, build) in variants.iter().filter(|(v, _)| v.spec.min_arch() <= arch) {
        let family = v.spec.family.name();
        let mut src = String::from(header);
        for &d in &v.head_dims {
            for dtype in &table.dtypes {
                let symbol = v.symbol(d, dtype);
                let names =
                    format!("{symbol} {symbol}_counted {symbol}_smem_bytes {symbol}_barriers_per_tile");
                let args = v.spec.kernel_args(dtype_type(dtype), d);
                // The family's export macro, defined beside its body in `kernels-rs/src/attention/`.
                writeln!(src, "{family}!({names}, {args});").unwrap();
                // flash_decode's paged-cache twins (the library's `VariantSpec::paged_symbol`).
                if v.spec.has_paged() {
                    let paged = format!("{symbol}_paged {symbol}_paged_counted");
                    writeln!(src, "flash_decode_paged!({paged}, {args});").unwrap();
                }
                // Variable-length twins (the library's `VariantSpec::varlen_symbol`).
                if v.spec.has_varlen_at(d as usize) {
                    let varlen = format!("{symbol}_varlen {symbol}_varlen_counted");
                    writeln!(src, "{family}_varlen!({varlen}, {args});").unwrap();
                }
            }
        }
        let mut families = BTreeSet::from([family]);
        if v.spec.has_paged() {
            families.insert("flash_decode");
        }
        units.push(device::Unit {
            name: v.name.clone(),
            families,
            counted: build.counted,
            table: src,
        });
    }
    units
}

/// The library's view of the table, `include!`d by `src/variants.rs`, which has `Family`'s and
/// `Policy`'s variants in scope: a `Spec` is written as its `Debug` form, so that every field is
/// written without being listed here again.
fn host_table_source(table: &Table, variants: &[Variant], builds: &[Build]) -> String {
    let mut src = String::from("// Generated by build.rs from kernels.toml.\n");
    let head_dims: BTreeSet<u32> = variants
        .iter()
        .flat_map(|v| v.head_dims.iter().copied())
        .collect();
    src.push_str("/// Every head dim some variant is compiled for, ascending.\n");
    writeln!(
        src,
        "pub const HEAD_DIMS: &[usize] = &{:?};",
        Vec::from_iter(head_dims)
    )
    .unwrap();
    src.push_str("/// The element types every variant is compiled for (`DType::name`).\n");
    writeln!(src, "pub const DTYPES: &[&str] = &{:?};", table.dtypes).unwrap();
    src.push_str("/// The PTX targets built: the `sm_` name and its compute capability (x10).\n");
    writeln!(
        src,
        "pub const ARCHES: &[(&str, u32)] = &{:?};",
        selected_arches()
    )
    .unwrap();
    type Member = fn(&Variant) -> bool;
    let lists: [(&str, &str, Member); 3] = [
        (
            "VARIANTS",
            "Trusted 16-bit variants, in `kernels.toml` order: what verify, bench, search and dispatch use.",
            |v| !v.experimental && !v.spec.family.fp8(),
        ),
        (
            "EXPERIMENTAL_VARIANTS",
            "Variants compiled but not yet trusted: reachable by name only ([`VariantSpec::by_name`]).",
            |v| v.experimental,
        ),
        (
            "FP8_VARIANTS",
            "The e4m3 variants (`crate::fp8`), in `kernels.toml` order.",
            |v| !v.experimental && v.spec.family.fp8(),
        ),
    ];
    for (list, doc, member) in lists {
        writeln!(src, "/// {doc}").unwrap();
        writeln!(src, "pub const {list}: &[VariantSpec] = &[").unwrap();
        for (v, build) in variants.iter().zip(builds).filter(|(v, _)| member(v)) {
            writeln!(
                src,
                "    VariantSpec {{ name: {:?}, spec: {:?}, head_dims: &{:?}, min_arch: {}, shipped: {}, built: {}, counted_built: {} }},",
                v.name,
                v.spec,
                v.head_dims,
                v.spec.min_arch(),
                v.shipped,
                build.built,
                build.counted
            )
            .unwrap();
        }
        src.push_str("];\n");
    }
    src
}

/// The device rustc and cargo: Debian's `rustc-web`, or what FLASHRS_DEVICE_RUSTC/CARGO name.
fn device_toolchain() -> device::Toolchain {
    let rustc = env::var_os("FLASHRS_DEVICE_RUSTC").map_or_else(|| "/usr/bin/rustc".into(), PathBuf::from);
    let cargo = env::var_os("FLASHRS_DEVICE_CARGO").map_or_else(|| "/usr/bin/cargo".into(), PathBuf::from);
    let sysroot_src = Command::new(&rustc)
        .args(["--print", "sysroot"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| {
            PathBuf::from(String::from_utf8_lossy(&o.stdout).trim()).join("lib/rustlib/src/rust/library/core")
        });
    if !cargo.exists() || !sysroot_src.is_some_and(|p| p.exists()) {
        fail(&format!(
            "device toolchain missing ({} with its library source, {}): run `bash scripts/setup.sh` \
             (installs Debian's rustc-web cargo-web rust-web-src)",
            rustc.display(),
            cargo.display()
        ));
    }
    device::Toolchain { rustc, cargo }
}

/// The device crate's manifest as cargo wants it, `OUT_DIR/kernels-rs/Cargo.toml`, from
/// `kernels-rs/manifest.toml` with the library's path made absolute (see that file for why it is
/// not `kernels-rs/Cargo.toml`), and its lock file beside it. Returns the folder.
fn device_manifest(root: &Path, out_dir: &Path) -> PathBuf {
    let source = root.join("kernels-rs/manifest.toml");
    let text = fs::read_to_string(&source).unwrap_or_else(|e| fail(&format!("{}: {e}", source.display())));
    let lib = root.join("kernels-rs/src/lib.rs");
    let relative = "path = \"src/lib.rs\"";
    if !text.contains(relative) {
        fail(&format!(
            "{}: expected `{relative}` in its [lib] section",
            source.display()
        ));
    }
    let dir = out_dir.join("kernels-rs");
    fs::create_dir_all(&dir).unwrap_or_else(|e| fail(&format!("{}: {e}", dir.display())));
    let manifest = text.replace(relative, &format!("path = {:?}", lib.display().to_string()));
    fs::write(dir.join("Cargo.toml"), manifest).unwrap_or_else(|e| fail(&format!("{}: {e}", dir.display())));
    let lock = root.join("kernels-rs/Cargo.lock");
    fs::copy(&lock, dir.join("Cargo.lock")).unwrap_or_else(|e| fail(&format!("{}: {e}", lock.display())));
    dir
}

/// Adds `.maxntid` and `.minnctapersm` (CUDA's `__launch_bounds__`) to each entry named in
/// `bounds` (threads per block, blocks per SM): the directives go between its parameter list and
/// its body. One pass over the PTX.
fn add_launch_bounds(ptx: &str, bounds: &std::collections::HashMap<String, (u32, u32)>) -> String {
    let mut out = String::with_capacity(ptx.len() + 64 * bounds.len());
    let mut pending: Option<(u32, u32)> = None;
    for line in ptx.split_inclusive('\n') {
        out.push_str(line);
        if let Some(name) = line
            .strip_prefix(".visible .entry ")
            .and_then(|rest| rest.split_once('('))
            .map(|(name, _)| name)
        {
            pending = bounds.get(name).copied();
        } else if line == ")\n" {
            if let Some((threads, blocks)) = pending.take() {
                writeln!(out, ".maxntid {threads}, 1, 1\n.minnctapersm {blocks}").unwrap();
            }
        }
    }
    out
}

fn fail(message: &str) -> ! {
    eprintln!("error: {message}");
    std::process::exit(1);
}
