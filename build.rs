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

/// Architectures a PTX is built for; the library loads the newest one the device supports. Hopper's
/// is `sm_90a`, the architecture-specific target that `wgmma` needs (it loads on sm_90 devices
/// only, which is every Hopper GPU).
const ARCHES: &[(&str, u32)] = &[("sm_80", 80), ("sm_90a", 90)];

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
    println!("cargo:rerun-if-changed=kernels.toml");
    println!("cargo:rerun-if-changed=src/spec.rs");
    println!("cargo:rerun-if-changed=kernels-rs/manifest.toml");
    println!("cargo:rerun-if-changed=kernels-rs/src");
    println!("cargo:rerun-if-env-changed=FLASHRS_DEVICE_RUSTC");
    println!("cargo:rerun-if-env-changed=FLASHRS_DEVICE_CARGO");

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

    fs::write(out_dir.join("variants.rs"), host_table_source(&table, &variants)).unwrap();

    let (rustc, cargo) = device_toolchain();
    // `target/device/<arch>`, beside the host's profiles, so `cargo clean` removes it too.
    let target_root = match env::var_os("CARGO_TARGET_DIR") {
        Some(dir) => PathBuf::from(dir),
        None => root.join("target"),
    };
    let manifest_dir = device_manifest(&root, &out_dir);
    let started = std::time::Instant::now();
    // The architectures build concurrently: each nested build is one LTO'd crate, mostly one
    // core, so on a 2-core machine this halves the clean build.
    let built: Vec<(&str, u32, String)> = std::thread::scope(|scope| {
        let jobs: Vec<_> = ARCHES
            .iter()
            .map(|&(arch, arch_number)| {
                let device_table = out_dir.join(format!("device_kernels_{arch}.rs"));
                fs::write(&device_table, device_table_source(&table, &variants, arch_number)).unwrap();
                let target_dir = target_root.join("device").join(arch);
                let (manifest_dir, rustc, cargo) = (&manifest_dir, &rustc, &cargo);
                scope.spawn(move || {
                    let ptx = build_ptx(manifest_dir, rustc, cargo, arch, &target_dir, &device_table);
                    (arch, arch_number, ptx)
                })
            })
            .collect();
        jobs.into_iter()
            .map(|job| job.join().expect("PTX build thread"))
            .collect()
    });
    for (arch, arch_number, mut ptx) in built {
        for v in variants.iter().filter(|v| v.spec.min_arch() <= arch_number) {
            let Some(blocks) = v.spec.launch_bounds() else {
                continue;
            };
            for &d in &v.head_dims {
                for dtype in &table.dtypes {
                    let symbol = v.symbol(d, dtype);
                    // Every entry point of the variant: the plain one, and its paged and
                    // varlen twins where the family has them, each with its counted twin.
                    // (Without `.maxntid` ptxas ignores `setmaxnreg`: warning C7508.)
                    for suffix in ["", "_paged", "_varlen"] {
                        let entry = format!("{symbol}{suffix}");
                        if suffix.is_empty() || ptx.contains(&format!(".visible .entry {entry}(")) {
                            for name in [entry.clone(), format!("{entry}_counted")] {
                                ptx = add_launch_bounds(&ptx, &name, v.spec.threads(), blocks);
                            }
                        }
                    }
                }
            }
        }
        fs::write(out_dir.join(format!("kernels_{arch}.ptx")), ptx).unwrap();
    }
    println!(
        "cargo:rustc-env=FLASHRS_PTX_BUILD_MS={}",
        started.elapsed().as_millis()
    );
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

/// The export-macro invocations (`<family>!(...)`) that `kernels-rs/src/lib.rs` includes: the
/// variants architecture `arch` has.
fn device_table_source(table: &Table, variants: &[Variant], arch: u32) -> String {
    let mut src = String::from("// Generated by build.rs from kernels.toml.\n");
    for v in variants.iter().filter(|v| v.spec.min_arch() <= arch) {
        for &d in &v.head_dims {
            for dtype in &table.dtypes {
                let symbol = v.symbol(d, dtype);
                let names =
                    format!("{symbol} {symbol}_counted {symbol}_smem_bytes {symbol}_barriers_per_tile");
                let args = v.spec.kernel_args(dtype_type(dtype), d);
                // The family's export macro, defined beside its body in `kernels-rs/src/attention/`.
                writeln!(src, "{}!({names}, {args});", v.spec.family.name()).unwrap();
                // flash_decode's paged-cache twins (the library's `VariantSpec::paged_symbol`).
                if v.spec.has_paged() {
                    let paged = format!("{symbol}_paged {symbol}_paged_counted");
                    writeln!(src, "flash_decode_paged!({paged}, {args});").unwrap();
                }
                // Variable-length twins (the library's `VariantSpec::varlen_symbol`).
                if v.spec.has_varlen_at(d as usize) {
                    let varlen = format!("{symbol}_varlen {symbol}_varlen_counted");
                    let family = v.spec.family.name();
                    writeln!(src, "{family}_varlen!({varlen}, {args});").unwrap();
                }
            }
        }
    }
    src
}

/// The library's view of the table, `include!`d by `src/variants.rs`, which has `Family`'s and
/// `Policy`'s variants in scope: a `Spec` is written as its `Debug` form, so that every field is
/// written without being listed here again.
fn host_table_source(table: &Table, variants: &[Variant]) -> String {
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
    writeln!(src, "pub const ARCHES: &[(&str, u32)] = &{ARCHES:?};").unwrap();
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
        for v in variants.iter().filter(|v| member(v)) {
            writeln!(
                src,
                "    VariantSpec {{ name: {:?}, spec: {:?}, head_dims: &{:?}, min_arch: {} }},",
                v.name,
                v.spec,
                v.head_dims,
                v.spec.min_arch()
            )
            .unwrap();
        }
        src.push_str("];\n");
    }
    src
}

/// The device rustc and cargo: Debian's `rustc-web`, or what FLASHRS_DEVICE_RUSTC/CARGO name.
fn device_toolchain() -> (PathBuf, PathBuf) {
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
    (rustc, cargo)
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

fn build_ptx(
    manifest_dir: &Path,
    rustc: &Path,
    cargo: &Path,
    arch: &str,
    target_dir: &Path,
    table: &Path,
) -> String {
    let mut cmd = Command::new(cargo);
    // A clean environment: the outer cargo's variables (RUSTC, RUSTUP_TOOLCHAIN, CARGO_*, flags)
    // describe the host build and would leak into this one.
    cmd.env_clear();
    for (key, value) in env::vars_os() {
        let key_str = key.to_string_lossy();
        let keep = matches!(key_str.as_ref(), "PATH" | "HOME" | "CARGO_HOME" | "TMPDIR")
            || key_str.to_ascii_lowercase().ends_with("_proxy")
            || key_str.starts_with("SSL_CERT")
            || key_str.starts_with("CARGO_NET_")
            || key_str.starts_with("CARGO_HTTP_")
            || key_str.starts_with("CARGO_REGISTRIES_");
        if keep {
            cmd.env(key, value);
        }
    }
    cmd.env("RUSTC", rustc)
        // build-std is unstable; the opt-in is scoped to this one nested build.
        .env("RUSTC_BOOTSTRAP", "1")
        .env("FLASHRS_KERNEL_TABLE", table)
        .env(
            "RUSTFLAGS",
            // Full unrolling keeps every fragment array in registers (no local memory); the link
            // step is skipped because the PTX is taken from --emit=asm.
            // sm_90a needs PTX ISA 8.0 (LLVM's default for sm_90 is 7.8); `sm90a` gates the
            // device code sm_80 lacks (kernels-rs/src/arch/grid.rs).
            format!(
                "-C target-cpu={arch} -C linker=/bin/true -C llvm-args=-unroll-threshold=2000{}",
                if arch.ends_with('a') {
                    " -C target-feature=+ptx80 --cfg sm90a"
                } else {
                    ""
                }
            ),
        )
        .current_dir(manifest_dir)
        .args([
            "rustc",
            "--release",
            "--quiet",
            "--target",
            "nvptx64-nvidia-cuda",
            "-Zbuild-std=core",
        ])
        .arg("--target-dir")
        .arg(target_dir)
        .args(["--", "--emit=asm"]);
    let output = cmd
        .output()
        .unwrap_or_else(|e| fail(&format!("cannot run {}: {e}", cargo.display())));
    if !output.status.success() {
        eprintln!("{}", String::from_utf8_lossy(&output.stderr));
        fail(&format!(
            "building kernels-rs for {arch} failed (compiler output above)"
        ));
    }
    let ptx_path = target_dir.join("nvptx64-nvidia-cuda/release/deps/kernels_rs.s");
    fs::read_to_string(&ptx_path).unwrap_or_else(|e| fail(&format!("{}: {e}", ptx_path.display())))
}

/// Adds `.maxntid` and `.minnctapersm` (CUDA's `__launch_bounds__`) to the entry `name`: the
/// directives go between its parameter list and its body.
fn add_launch_bounds(ptx: &str, name: &str, threads: u32, blocks: u32) -> String {
    let header = format!(".visible .entry {name}(");
    let Some(start) = ptx.find(&header) else {
        fail(&format!("launch bounds: no entry {name} in the PTX"));
    };
    let Some(close) = ptx[start..].find("\n)\n").map(|i| start + i + 2) else {
        fail(&format!(
            "launch bounds: cannot find the end of {name}'s parameters"
        ));
    };
    format!(
        "{}.maxntid {threads}, 1, 1\n.minnctapersm {blocks}\n{}",
        &ptx[..close + 1],
        &ptx[close + 1..]
    )
}

fn fail(message: &str) -> ! {
    eprintln!("error: {message}");
    std::process::exit(1);
}
