//! Builds the device crate `kernels-rs` to PTX and generates the host's variant table, both from
//! `kernels.toml`.
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

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Table {
    head_dims: Vec<u32>,
    dtypes: Vec<String>,
    variant: Vec<VariantEntry>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct VariantEntry {
    family: String,
    block_m: Option<u32>,
    block_n: Option<u32>,
    warps: Option<u32>,
    vec: Option<u32>,
    stages: Option<u32>,
    policy: Option<String>,
    /// flash_mma: keep Q's fragments in registers for the whole loop (default true).
    q_in_regs: Option<bool>,
    /// Head dims to compile this variant for (default: the table's `head_dims`).
    head_dims: Option<Vec<u32>>,
    /// Launch bounds: ask ptxas to fit this many blocks per SM (`.minnctapersm`), which caps
    /// registers per thread. Part of the name (`_b<N>`).
    min_blocks_per_sm: Option<u32>,
    /// flash_mma: keys per compute step inside a KV tile (default block_n). Part of the name
    /// (`_c<N>`) when smaller than block_n.
    sub_n: Option<u32>,
    /// flash_wgmma: warpgroups take turns at the tensor cores (default false). Part of the name
    /// (`_pp`).
    pingpong: Option<bool>,
    /// flash_ws: the next tile's S = Q K^T issued with this tile's P V, both left running
    /// (default false). Part of the name (`_ov`).
    overlap: Option<bool>,
}

/// A variant with every parameter resolved and checked.
struct Variant {
    family: &'static str,
    block_m: u32,
    block_n: u32,
    warps: u32,
    vec: u32,
    stages: u32,
    policy: &'static str,
    q_in_regs: bool,
    head_dims: Vec<u32>,
    min_blocks_per_sm: Option<u32>,
    sub_n: u32,
    /// The oldest architecture (80, 90) whose PTX includes this variant.
    min_arch: u32,
    pingpong: bool,
    overlap: bool,
}

impl Variant {
    fn name(&self) -> String {
        let base = self.base_name();
        match self.min_blocks_per_sm {
            Some(blocks) => {
                let (head, policy) = base.rsplit_once('_').expect("names end in the policy");
                format!("{head}_b{blocks}_{policy}")
            }
            None => base,
        }
    }

    fn base_name(&self) -> String {
        match self.family {
            "naive" => "naive".to_string(),
            "flash_scalar" => format!(
                "flash_scalar_m{}_n{}_w{}_v{}_s{}_{}",
                self.block_m, self.block_n, self.warps, self.vec, self.stages, self.policy
            ),
            "flash_ws" => format!(
                "flash_ws_m{}_n{}_s{}{}{}_{}",
                self.block_m,
                self.block_n,
                self.stages,
                if self.pingpong { "_pp" } else { "" },
                if self.overlap { "_ov" } else { "" },
                self.policy
            ),
            "flash_wgmma" => format!(
                "flash_wgmma_m{}_n{}_w{}_s{}{}_{}",
                self.block_m,
                self.block_n,
                self.warps,
                self.stages,
                if self.pingpong { "_pp" } else { "" },
                self.policy
            ),
            _ => format!(
                "flash_mma_m{}_n{}{}_w{}_s{}{}_{}",
                self.block_m,
                self.block_n,
                if self.sub_n < self.block_n {
                    format!("_c{}", self.sub_n)
                } else {
                    String::new()
                },
                self.warps,
                self.stages,
                if self.q_in_regs { "" } else { "_qsmem" },
                self.policy
            ),
        }
    }
}

fn main() {
    let root = PathBuf::from(env::var("CARGO_MANIFEST_DIR").unwrap());
    let out_dir = PathBuf::from(env::var("OUT_DIR").unwrap());
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=kernels.toml");
    println!("cargo:rerun-if-changed=kernels-rs/Cargo.toml");
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
                let (root, rustc, cargo) = (&root, &rustc, &cargo);
                scope.spawn(move || {
                    let ptx = build_ptx(root, rustc, cargo, arch, &target_dir, &device_table);
                    (arch, arch_number, ptx)
                })
            })
            .collect();
        jobs.into_iter()
            .map(|job| job.join().expect("PTX build thread"))
            .collect()
    });
    for (arch, arch_number, mut ptx) in built {
        for v in variants
            .iter()
            // flash_ws always: setmaxnreg needs a register cap at entry.
            .filter(|v| {
                (v.min_blocks_per_sm.is_some() || v.family == "flash_ws") && v.min_arch <= arch_number
            })
        {
            for d in &v.head_dims {
                for dtype in &table.dtypes {
                    let symbol = format!("{}_d{d}_{dtype}", v.name());
                    for name in [symbol.clone(), format!("{symbol}_counted")] {
                        ptx = add_launch_bounds(&ptx, &name, v.warps * 32, v.min_blocks_per_sm.unwrap_or(1));
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

fn resolve(entry: &VariantEntry, default_head_dims: &[u32]) -> Result<Variant, String> {
    let head_dims = entry
        .head_dims
        .clone()
        .unwrap_or_else(|| default_head_dims.to_vec());
    if head_dims.is_empty() || head_dims.iter().any(|d| !default_head_dims.contains(d)) {
        return Err(format!(
            "{}: head_dims must be a non-empty subset of {default_head_dims:?}",
            entry.family
        ));
    }
    let q_in_regs = entry.q_in_regs.unwrap_or(true);
    let min_blocks_per_sm = entry.min_blocks_per_sm;
    let need = |field: Option<u32>, name: &str| {
        field.ok_or_else(|| format!("{} variant needs `{name}`", entry.family))
    };
    let policy = match entry.policy.as_deref() {
        None | Some("none") => "none",
        Some("legacy") => "legacy",
        Some("light") => "light",
        Some("mbarrier") => "mbarrier",
        Some(other) => return Err(format!("unknown policy `{other}` (legacy, light, mbarrier)")),
    };
    let variant = match entry.family.as_str() {
        "naive" => Variant {
            family: "naive",
            block_m: 4,
            block_n: 1,
            warps: 4,
            vec: 1,
            stages: 1,
            policy: "none",
            q_in_regs,
            head_dims,
            min_blocks_per_sm,
            sub_n: 0,
            min_arch: 80,
            pingpong: false,
            overlap: false,
        },
        "flash_scalar" => Variant {
            family: "flash_scalar",
            block_m: need(entry.block_m, "block_m")?,
            block_n: need(entry.block_n, "block_n")?,
            warps: need(entry.warps, "warps")?,
            vec: need(entry.vec, "vec")?,
            stages: need(entry.stages, "stages")?,
            policy,
            q_in_regs,
            head_dims,
            min_blocks_per_sm,
            sub_n: 0,
            min_arch: 80,
            pingpong: false,
            overlap: false,
        },
        "flash_mma" => Variant {
            family: "flash_mma",
            block_m: need(entry.block_m, "block_m")?,
            block_n: need(entry.block_n, "block_n")?,
            warps: need(entry.warps, "warps")?,
            vec: 8,
            stages: need(entry.stages, "stages")?,
            policy,
            q_in_regs,
            head_dims,
            min_blocks_per_sm,
            sub_n: 0,
            min_arch: 80,
            pingpong: false,
            overlap: false,
        },
        "flash_wgmma" => {
            let block_m = need(entry.block_m, "block_m")?;
            Variant {
                family: "flash_wgmma",
                block_m,
                block_n: need(entry.block_n, "block_n")?,
                warps: block_m / 16,
                vec: 8,
                stages: need(entry.stages, "stages")?,
                policy,
                q_in_regs: false,
                head_dims,
                min_blocks_per_sm,
                sub_n: 0,
                min_arch: 90,
                pingpong: false,
                overlap: false,
            }
        }
        "flash_ws" => {
            let block_m = need(entry.block_m, "block_m")?;
            Variant {
                family: "flash_ws",
                block_m,
                block_n: need(entry.block_n, "block_n")?,
                // One producer warpgroup and one consumer warpgroup per 64 rows.
                warps: block_m / 16 + 4,
                vec: 8,
                stages: need(entry.stages, "stages")?,
                policy,
                q_in_regs: false,
                head_dims,
                min_blocks_per_sm,
                sub_n: 0,
                min_arch: 90,
                pingpong: false,
                overlap: false,
            }
        }
        other => {
            return Err(format!(
                "unknown family `{other}` (naive, flash_scalar, flash_mma, flash_wgmma, flash_ws)"
            ))
        }
    };
    let mut variant = variant;
    variant.sub_n = entry.sub_n.unwrap_or(variant.block_n);
    variant.pingpong = entry.pingpong.unwrap_or(false);
    variant.overlap = entry.overlap.unwrap_or(false);
    if variant.overlap && variant.family != "flash_ws" {
        return Err(format!("{}: overlap is for flash_ws", variant.name()));
    }
    if variant.pingpong && !matches!(variant.family, "flash_wgmma" | "flash_ws") {
        return Err(format!(
            "{}: pingpong is for flash_wgmma (warpgroups)",
            variant.name()
        ));
    }
    if variant.pingpong && variant.block_m < 128 {
        return Err(format!(
            "{}: pingpong needs two warpgroups or more",
            variant.name()
        ));
    }
    let v = &variant;
    if v.sub_n != v.block_n && (v.family != "flash_mma" || v.policy != "light") {
        return Err(format!(
            "{}: sub_n is for flash_mma with the light policy (its middle sync points repeat per step)",
            v.name()
        ));
    }
    let ok = match v.family {
        "flash_scalar" => {
            v.block_m % v.warps == 0 && v.block_n % 32 == 0 && matches!(v.vec, 4 | 8) && v.stages >= 1
        }
        "flash_mma" => v.block_m % (16 * v.warps) == 0 && v.block_n % 16 == 0 && v.stages >= 1,
        // One warpgroup per 64 rows; its wgmma shapes are n64 and n128, for S (block_n) and O (the
        // head dim); only the light policy, whose block barriers are outside the warpgroup-uniform
        // branch that skips a warpgroup's fully masked tiles.
        "flash_wgmma" => {
            v.block_m % 64 == 0
                && matches!(v.block_n, 64 | 128)
                && v.head_dims.iter().all(|d| matches!(d, 64 | 128))
                && v.stages >= 1
                && v.policy == "light"
        }
        // Two consumer warpgroups (the register split assumes 384 threads); mbarriers only.
        "flash_ws" => {
            v.block_m == 128
                && matches!(v.block_n, 64 | 128)
                && v.head_dims.iter().all(|d| matches!(d, 64 | 128))
                && v.stages >= 1
                && v.policy == "mbarrier"
                && v.min_blocks_per_sm.is_none()
        }
        _ => true,
    };
    if !ok || (v.family != "naive" && v.policy == "none") {
        return Err(format!(
            "{}: inconsistent parameters (flash_scalar: warps divide block_m, block_n a multiple of \
             32, vec 4 or 8; flash_mma: block_m a multiple of 16 * warps, block_n a multiple of 16; \
             flash_wgmma: block_m a multiple of 64, block_n and head dims 64 or 128, light policy; \
             flash_ws: block_m 128, block_n and head dims 64 or 128, mbarrier policy; a policy)",
            v.name()
        ));
    }
    Ok(variant)
}

fn check_unique(variants: &[Variant]) {
    let mut seen = BTreeSet::new();
    for v in variants {
        if !seen.insert(v.name()) {
            fail(&format!("kernels.toml: variant {} is listed twice", v.name()));
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

/// `kernel!(...)` invocations for `kernels-rs/src/lib.rs`: the variants architecture `arch` has.
fn device_table_source(table: &Table, variants: &[Variant], arch: u32) -> String {
    let mut src = String::from("// Generated by build.rs from kernels.toml.\n");
    for v in variants.iter().filter(|v| v.min_arch <= arch) {
        for d in &v.head_dims {
            for dtype in &table.dtypes {
                let symbol = format!("{}_d{d}_{dtype}", v.name());
                let names =
                    format!("{symbol} {symbol}_counted {symbol}_smem_bytes {symbol}_barriers_per_tile");
                let ty = dtype_type(dtype);
                let policy = match v.policy {
                    "legacy" => "Legacy",
                    "mbarrier" => "Mbarrier",
                    _ => "Light",
                };
                let args = match v.family {
                    "naive" => format!("{ty}, d = {d}"),
                    "flash_scalar" => format!(
                        "{ty}, {policy}, d = {d}, m = {}, n = {}, w = {}, vec = {}, stages = {}",
                        v.block_m, v.block_n, v.warps, v.vec, v.stages
                    ),
                    "flash_wgmma" => format!(
                        "{ty}, {policy}, d = {d}, m = {}, n = {}, stages = {}, pingpong = {}",
                        v.block_m, v.block_n, v.stages, v.pingpong
                    ),
                    "flash_ws" => format!(
                        "{ty}, {policy}, d = {d}, m = {}, n = {}, stages = {}, pingpong = {}, overlap = {}",
                        v.block_m, v.block_n, v.stages, v.pingpong, v.overlap
                    ),
                    _ => format!(
                        "{ty}, {policy}, d = {d}, m = {}, n = {}, w = {}, stages = {}, q_in_regs = {}, \
                         sub_n = {}",
                        v.block_m, v.block_n, v.warps, v.stages, v.q_in_regs, v.sub_n
                    ),
                };
                writeln!(src, "kernel!({} {names}, {args});", v.family).unwrap();
            }
        }
    }
    src
}

/// The host's view of the table, `include!`d by `src/variants.rs`.
fn host_table_source(table: &Table, variants: &[Variant]) -> String {
    let mut src = String::from("// Generated by build.rs from kernels.toml.\n");
    writeln!(src, "pub const HEAD_DIMS: &[usize] = &{:?};", table.head_dims).unwrap();
    writeln!(src, "pub const DTYPES: &[&str] = &{:?};", table.dtypes).unwrap();
    writeln!(src, "pub const ARCHES: &[(&str, u32)] = &{ARCHES:?};").unwrap();
    src.push_str("pub const VARIANTS: &[VariantSpec] = &[\n");
    for v in variants {
        let family = match v.family {
            "naive" => "Naive",
            "flash_scalar" => "FlashScalar",
            "flash_wgmma" => "FlashWgmma",
            "flash_ws" => "FlashWs",
            _ => "FlashMma",
        };
        let policy = match v.policy {
            "legacy" => "Some(Policy::Legacy)",
            "light" => "Some(Policy::Light)",
            "mbarrier" => "Some(Policy::Mbarrier)",
            _ => "None",
        };
        writeln!(
            src,
            "    VariantSpec {{ name: {:?}, family: Family::{family}, block_m: {}, block_n: {}, \
             warps: {}, vec: {}, stages: {}, policy: {policy}, q_in_regs: {}, head_dims: &{:?}, \
             min_arch: {} }},",
            v.name(),
            v.block_m,
            v.block_n,
            v.warps,
            v.vec,
            v.stages,
            v.q_in_regs,
            v.head_dims,
            v.min_arch
        )
        .unwrap();
    }
    src.push_str("];\n");
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

fn build_ptx(root: &Path, rustc: &Path, cargo: &Path, arch: &str, target_dir: &Path, table: &Path) -> String {
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
            // sm_90a needs PTX ISA 8.0 (LLVM's default for sm_90 is 7.8).
            format!(
                "-C target-cpu={arch} -C linker=/bin/true -C llvm-args=-unroll-threshold=2000{}",
                if arch.ends_with('a') {
                    " -C target-feature=+ptx80"
                } else {
                    ""
                }
            ),
        )
        .current_dir(root.join("kernels-rs"))
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
