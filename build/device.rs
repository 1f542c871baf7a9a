//! The device build: `kernels-rs` compiled to PTX in units, each unit cached by the contents of
//! what it read.
//!
//! A unit is the device crate compiled with one part of the kernel table: one variant of
//! `kernels.toml` (every head dim, dtype and twin of it), or the common kernels. It is built with
//! `--cfg flashrs_unit` and a `family` cfg for each kernel family it exports, so it reads only the
//! shared modules and its own families' bodies (`kernels-rs/src/attention/mod.rs`). Its rustc
//! writes dep-info, the list of files it read; the unit is rebuilt only when its table, the flags,
//! the compiler or the contents of one of those files change. So an edit to one family's body
//! rebuilds that family's units, a `touch` rebuilds nothing, and the host, the tests, clippy and
//! the Python wheel, which each run `build.rs` in their own `OUT_DIR`, share one set of units
//! under `target/device/`.
//!
//! Per architecture, one nested cargo (its own target dir) builds `core` with `-Zbuild-std` and
//! the common unit; the variant units are then compiled by rustc directly against that `core`,
//! as many at once as cargo's job count allows, the slowest first.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;
use std::time::Instant;
use std::{env, fs};

/// The device compilers (Debian's `rustc-web`).
pub struct Toolchain {
    pub rustc: PathBuf,
    pub cargo: PathBuf,
}

/// One part of the kernel table, compiled on its own.
pub struct Unit {
    /// A file name: the variant's name, or `common`.
    pub name: String,
    /// The kernel families whose bodies its table invokes (`family` cfg values).
    pub families: BTreeSet<&'static str>,
    /// Whether it compiles the barrier-counting twins too (`--cfg flashrs_counted`); such a unit
    /// lives in a folder of its own, so that switching back and forth rebuilds nothing.
    pub counted: bool,
    /// Its export-macro invocations.
    pub table: String,
}

/// The units of one architecture. The first is compiled by the nested cargo that also builds
/// `core`; it must need no family body.
pub struct Arch {
    /// The `sm_` name (`-C target-cpu`).
    pub name: &'static str,
    pub units: Vec<Unit>,
}

/// One architecture's PTX: each unit's name and PTX text, in unit order.
pub type ArchPtx = Vec<(String, String)>;

/// What happened to the units of one build, for the build's summary line.
#[derive(Default)]
pub struct Summary {
    pub compiled: Vec<(String, u128)>,
    pub reused: usize,
}

/// 64-bit FNV-1a, the cache's content hash (the library's PTX fingerprint uses the same).
fn fnv(bytes: &[u8], mut hash: u64) -> u64 {
    for &b in bytes {
        hash = (hash ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
    }
    hash
}
const FNV_START: u64 = 0xcbf2_9ce4_8422_2325;

/// Writes `contents` to `path` unless it already holds them (keeps the file's time).
pub fn write_if_changed(path: &Path, contents: &str) -> Result<(), String> {
    if fs::read_to_string(path).is_ok_and(|old| old == contents) {
        return Ok(());
    }
    fs::write(path, contents).map_err(|e| format!("{}: {e}", path.display()))
}

/// The codegen flags of every device compile of `arch` (cargo's RUSTFLAGS for the nested build,
/// the tail of each unit's rustc command): full unrolling keeps every fragment array in registers
/// (no local memory); the link step is skipped because the PTX is taken from `--emit=asm`; sm_90a
/// needs PTX ISA 8.0 (LLVM's default for sm_90 is 7.8), and `sm90a` gates the device code sm_80
/// lacks (`kernels-rs/src/arch/grid.rs`).
fn codegen_flags(arch: &str) -> Vec<String> {
    let mut flags: Vec<String> = [
        "-C",
        &format!("target-cpu={arch}"),
        "-C",
        "linker=/bin/true",
        "-C",
        "llvm-args=-unroll-threshold=2000",
        "--cfg",
        "flashrs_unit",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    if arch.ends_with('a') {
        flags.extend(["-C", "target-feature=+ptx80", "--cfg", "sm90a"].map(String::from));
    }
    flags
}

/// A command with the outer cargo's environment removed: its variables (RUSTC, RUSTUP_TOOLCHAIN,
/// CARGO_*, flags) describe the host build and would leak into the device one.
fn clean_command(program: &Path) -> Command {
    let mut cmd = Command::new(program);
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
    // build-std and `--extern noprelude` are unstable; the opt-in is scoped to these builds.
    cmd.env("RUSTC_BOOTSTRAP", "1");
    cmd
}

/// What the nested cargo of one architecture built: the `core` a unit links, and the first
/// unit's PTX.
struct Sysroot {
    core: PathBuf,
    compiler_builtins: PathBuf,
    deps: PathBuf,
    first_unit_ptx: String,
}

/// Builds `core` (and `compiler_builtins`) for `arch` and the first unit, through cargo.
fn build_sysroot(
    toolchain: &Toolchain,
    manifest_dir: &Path,
    arch: &Arch,
    arch_dir: &Path,
) -> Result<Sysroot, String> {
    let unit = &arch.units[0];
    let unit_dir = arch_dir.join("units").join(&unit.name);
    fs::create_dir_all(&unit_dir).map_err(|e| format!("{}: {e}", unit_dir.display()))?;
    let table = unit_dir.join("table.rs");
    write_if_changed(&table, &unit.table)?;
    let mut cmd = clean_command(&toolchain.cargo);
    cmd.env("RUSTC", &toolchain.rustc)
        .env("FLASHRS_KERNEL_TABLE", &table)
        .env("RUSTFLAGS", codegen_flags(arch.name).join(" "))
        .current_dir(manifest_dir)
        .args(["rustc", "--release", "--quiet", "--message-format=json"])
        .args(["--target", "nvptx64-nvidia-cuda", "-Zbuild-std=core"])
        .arg("--target-dir")
        .arg(arch_dir)
        .args(["--", "--emit=asm"]);
    let output = cmd
        .output()
        .map_err(|e| format!("cannot run {}: {e}", toolchain.cargo.display()))?;
    if !output.status.success() {
        return Err(format!(
            "building kernels-rs for {} failed:\n{}{}",
            arch.name,
            String::from_utf8_lossy(&output.stderr),
            rendered_messages(&output.stdout)
        ));
    }
    // The artifacts cargo reports (also when they were fresh): the rlibs a unit links.
    let mut core = None;
    let mut compiler_builtins = None;
    for line in String::from_utf8_lossy(&output.stdout).lines() {
        let Ok(message) = serde_json::from_str::<serde_json::Value>(line) else {
            continue;
        };
        if message["reason"] != "compiler-artifact" {
            continue;
        }
        let rlib = message["filenames"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|f| f.as_str())
            .find(|f| f.ends_with(".rlib"))
            .map(PathBuf::from);
        match message["target"]["name"].as_str() {
            Some("core") => core = rlib,
            Some("compiler_builtins") => compiler_builtins = rlib,
            _ => {}
        }
    }
    let (Some(core), Some(compiler_builtins)) = (core, compiler_builtins) else {
        return Err(format!(
            "the {} device build reported no core/compiler_builtins rlib",
            arch.name
        ));
    };
    let deps = arch_dir.join("nvptx64-nvidia-cuda/release/deps");
    let ptx_path = deps.join("kernels_rs.s");
    let first_unit_ptx = fs::read_to_string(&ptx_path).map_err(|e| format!("{}: {e}", ptx_path.display()))?;
    Ok(Sysroot {
        core,
        compiler_builtins,
        deps,
        first_unit_ptx,
    })
}

/// The compiler messages of a `--message-format=json` run, as rustc rendered them.
fn rendered_messages(stdout: &[u8]) -> String {
    String::from_utf8_lossy(stdout)
        .lines()
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .filter_map(|m| m["message"]["rendered"].as_str().map(String::from))
        .collect()
}

/// One unit's compile job: where it lives and the command that builds it.
struct Job<'a> {
    arch: &'static str,
    unit: &'a Unit,
    dir: PathBuf,
    /// Hash of everything but the sources: compiler, flags, table, the `core` linked.
    key: u64,
    command: Vec<String>,
    /// Milliseconds it took last time (for the order), 0 when unknown.
    last_ms: u64,
}

/// The files a unit's rustc read, from its dep-info (`kernels_rs.d`: `target: dep dep ..`).
fn dep_files(dep_info: &str) -> Vec<PathBuf> {
    let Some(first) = dep_info.lines().next() else {
        return Vec::new();
    };
    let Some((_, deps)) = first.split_once(": ") else {
        return Vec::new();
    };
    // Paths with spaces are written with `\ `.
    let mut out = Vec::new();
    let mut current = String::new();
    let mut chars = deps.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\\' if chars.peek() == Some(&' ') => {
                current.push(' ');
                chars.next();
            }
            ' ' => {
                if !current.is_empty() {
                    out.push(PathBuf::from(std::mem::take(&mut current)));
                }
            }
            c => current.push(c),
        }
    }
    if !current.is_empty() {
        out.push(PathBuf::from(current));
    }
    out
}

/// The stamp a unit's build leaves: its key, each file it read with that file's hash, its time.
fn stamp_text(key: u64, files: &[(PathBuf, u64)], ms: u128) -> String {
    let mut text = format!("key {key:016x}\nms {ms}\n");
    for (path, hash) in files {
        text.push_str(&format!("dep {hash:016x} {}\n", path.display()));
    }
    text
}

/// Whether the unit's PTX in `dir` is what compiling it now would give: the same key, and every
/// file it read last time unchanged in content.
fn is_fresh(dir: &Path, key: u64) -> bool {
    let Ok(stamp) = fs::read_to_string(dir.join("stamp")) else {
        return false;
    };
    if !dir.join("kernels_rs.s").exists() {
        return false;
    }
    let mut lines = stamp.lines();
    if lines.next() != Some(&format!("key {key:016x}")) {
        return false;
    }
    lines.filter_map(|l| l.strip_prefix("dep ")).all(|dep| {
        let Some((hash, path)) = dep.split_once(' ') else {
            return false;
        };
        fs::read(path).is_ok_and(|bytes| format!("{:016x}", fnv(&bytes, FNV_START)) == hash)
    })
}

fn last_ms(dir: &Path) -> u64 {
    fs::read_to_string(dir.join("stamp"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("ms ").and_then(|v| v.parse().ok()))
        })
        .unwrap_or(0)
}

/// Compiles one unit (its rustc, then its stamp).
fn compile(job: &Job) -> Result<u128, String> {
    let started = Instant::now();
    // The command, for a person rebuilding one unit by hand (with FLASHRS_KERNEL_TABLE and
    // RUSTC_BOOTSTRAP=1 set as here).
    write_if_changed(&job.dir.join("command.txt"), &(job.command.join(" ") + "\n"))?;
    let (program, args) = job.command.split_first().unwrap();
    let output = clean_command(Path::new(program))
        .env("FLASHRS_KERNEL_TABLE", job.dir.join("table.rs"))
        .args(args)
        .output()
        .map_err(|e| format!("cannot run {program}: {e}"))?;
    if !output.status.success() {
        return Err(format!(
            "building the device unit {} for {} failed:\n{}",
            job.unit.name,
            job.arch,
            String::from_utf8_lossy(&output.stderr)
        ));
    }
    let ms = started.elapsed().as_millis();
    let dep_info = fs::read_to_string(job.dir.join("kernels_rs.d"))
        .map_err(|e| format!("{}: {e}", job.dir.join("kernels_rs.d").display()))?;
    let files = dep_files(&dep_info)
        .into_iter()
        .map(|path| {
            let bytes = fs::read(&path).map_err(|e| format!("{}: {e}", path.display()))?;
            Ok((path, fnv(&bytes, FNV_START)))
        })
        .collect::<Result<Vec<_>, String>>()?;
    write_if_changed(&job.dir.join("stamp"), &stamp_text(job.key, &files, ms))?;
    Ok(ms)
}

/// Builds every architecture's units (the stale ones) and returns each architecture's units'
/// PTX, in unit order, with a summary.
pub fn build(
    toolchain: &Toolchain,
    manifest_dir: &Path,
    lib_rs: &Path,
    target_root: &Path,
    arches: &[Arch],
    jobs: usize,
) -> Result<(Vec<ArchPtx>, Summary), String> {
    let version = clean_command(&toolchain.rustc)
        .arg("-vV")
        .output()
        .map_err(|e| format!("cannot run {}: {e}", toolchain.rustc.display()))?
        .stdout;
    // 1. Per architecture, concurrently: core and the first unit, through cargo.
    let sysroots: Vec<Result<Sysroot, String>> = std::thread::scope(|scope| {
        let handles: Vec<_> = arches
            .iter()
            .map(|arch| {
                let arch_dir = target_root.join("device").join(arch.name);
                scope.spawn(move || build_sysroot(toolchain, manifest_dir, arch, &arch_dir))
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("device build thread"))
            .collect()
    });
    let sysroots = sysroots.into_iter().collect::<Result<Vec<_>, _>>()?;

    // 2. Every other unit, as a job with its key and command.
    let mut all_jobs = Vec::new();
    for (arch, sysroot) in arches.iter().zip(&sysroots) {
        let core_id = format!(
            "{}\n{}",
            sysroot.core.display(),
            sysroot.compiler_builtins.display()
        );
        for unit in &arch.units[1..] {
            let folder = match unit.counted {
                true => format!("{}+counted", unit.name),
                false => unit.name.clone(),
            };
            let dir = target_root
                .join("device")
                .join(arch.name)
                .join("units")
                .join(folder);
            fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
            write_if_changed(&dir.join("table.rs"), &unit.table)?;
            let mut command: Vec<String> = [
                toolchain.rustc.display().to_string(),
                "--crate-name".into(),
                "kernels_rs".into(),
                "--edition=2021".into(),
                lib_rs.display().to_string(),
                "--crate-type".into(),
                "cdylib".into(),
                "--emit=dep-info,link,asm".into(),
            ]
            .into();
            command.extend(
                [
                    "-C",
                    "opt-level=3",
                    "-C",
                    "panic=abort",
                    "-C",
                    "lto=fat",
                    "-C",
                    "codegen-units=1",
                    "-C",
                    "strip=debuginfo",
                    "-C",
                    "metadata=flashrs-device",
                    "--cap-lints",
                    "allow",
                    "--target",
                    "nvptx64-nvidia-cuda",
                    "-Z",
                    "unstable-options",
                ]
                .map(String::from),
            );
            command.push("--out-dir".into());
            command.push(dir.display().to_string());
            command.push("-L".into());
            command.push(format!("dependency={}", sysroot.deps.display()));
            command.push("--extern".into());
            command.push(format!("noprelude,nounused:core={}", sysroot.core.display()));
            command.push("--extern".into());
            command.push(format!(
                "noprelude,nounused:compiler_builtins={}",
                sysroot.compiler_builtins.display()
            ));
            command.extend(codegen_flags(arch.name));
            if unit.counted {
                command.push("--cfg".into());
                command.push("flashrs_counted".into());
            }
            for family in &unit.families {
                command.push("--cfg".into());
                command.push(format!("family=\"{family}\""));
            }
            let mut key = fnv(&version, FNV_START);
            key = fnv(command.join("\0").as_bytes(), key);
            key = fnv(core_id.as_bytes(), key);
            key = fnv(unit.table.as_bytes(), key);
            let last_ms = last_ms(&dir);
            all_jobs.push(Job {
                arch: arch.name,
                unit,
                dir,
                key,
                command,
                last_ms,
            });
        }
    }

    // 3. The stale units, slowest first, `jobs` at a time.
    let mut summary = Summary::default();
    let mut stale: Vec<&Job> = all_jobs.iter().filter(|j| !is_fresh(&j.dir, j.key)).collect();
    summary.reused = all_jobs.len() - stale.len() + arches.len();
    stale.sort_by_key(|j| std::cmp::Reverse(j.last_ms));
    let queue = Mutex::new(stale.into_iter());
    let results = Mutex::new(Vec::new());
    std::thread::scope(|scope| {
        for _ in 0..jobs.max(1) {
            scope.spawn(|| loop {
                let Some(job) = queue.lock().unwrap().next() else {
                    break;
                };
                let result = compile(job).map(|ms| (format!("{}/{}", job.arch, job.unit.name), ms));
                let failed = result.is_err();
                results.lock().unwrap().push(result);
                if failed {
                    // Stop taking work: the first error is the one reported.
                    queue.lock().unwrap().by_ref().for_each(drop);
                    break;
                }
            });
        }
    });
    for result in results.into_inner().unwrap() {
        summary.compiled.push(result?);
    }

    // 4. Each architecture's PTX, in unit order.
    let mut out = Vec::new();
    for (arch, sysroot) in arches.iter().zip(sysroots) {
        let mut modules = vec![(arch.units[0].name.clone(), sysroot.first_unit_ptx)];
        for job in all_jobs.iter().filter(|j| j.arch == arch.name) {
            let path = job.dir.join("kernels_rs.s");
            let ptx = fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
            modules.push((job.unit.name.clone(), ptx));
        }
        out.push(modules);
    }
    Ok((out, summary))
}
