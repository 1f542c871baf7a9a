//! Running NVIDIA's `ptxas` on PTX text: registers, shared memory, stack frame and spills per
//! kernel, without a GPU. `scripts/setup.sh` installs ptxas into `tools/ptxas/bin`.
//!
//! With `-v`, ptxas 13.0 writes a report like this to stderr, one block per kernel:
//!
//! ```text
//! ptxas info    : Compiling entry function 'hungry' for 'sm_80'
//! ptxas info    : Function properties for hungry
//!     304 bytes stack frame, 228 bytes spill stores, 320 bytes spill loads
//! ptxas info    : Used 24 registers, used 1 barriers, 304 bytes cumulative stack size, 1024 bytes smem, 368 bytes cmem[0]
//! ```
//!
//! Non-inlined device functions get a "Function properties for NAME" block of their own (without
//! a "Compiling entry function" line), which is not a kernel and is skipped.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};

use serde::{Deserialize, Serialize};
use thiserror::Error;

/// What ptxas reports for one kernel (`.entry`).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct KernelResources {
    /// The kernel's PTX entry name.
    pub kernel: String,
    /// The architecture it was assembled for, e.g. `sm_90`.
    pub arch: String,
    /// Registers per thread.
    pub registers: u32,
    /// Named barriers used (`bar.sync` ids).
    pub barriers: u32,
    /// Static shared memory; dynamic shared memory (set at launch) is not included.
    pub shared_bytes: u64,
    /// Stack frame per thread, in bytes.
    pub stack_frame_bytes: u64,
    /// Bytes per thread stored to local memory because registers ran out (0: no spills).
    pub spill_stores_bytes: u64,
    /// Bytes per thread loaded back from those spills.
    pub spill_loads_bytes: u64,
    /// Constant bank 0 (kernel parameters and driver constants), where ptxas reports it: ptxas
    /// 13.0 does for `sm_80`, not for `sm_90`.
    pub constant_bytes: Option<u64>,
}

/// Why running or reading ptxas failed.
#[derive(Debug, Error)]
pub enum PtxasError {
    /// ptxas could not be started, or its input could not be written.
    #[error("running ptxas: {0}")]
    Io(#[from] std::io::Error),
    /// ptxas rejected the PTX; `stderr` holds its first error lines.
    #[error("ptxas rejected the PTX ({status}):\n{stderr}")]
    Failed {
        /// ptxas's exit status, as text.
        status: String,
        /// Its first error lines.
        stderr: String,
    },
    /// ptxas's report did not have the expected form; the message says what was off.
    #[error("unexpected ptxas report: {0}")]
    Parse(String),
}

/// Where ptxas is looked for, in order: `$FLASHRS_PTXAS`, `tools/ptxas/bin/ptxas` in this
/// repository, `ptxas` on `PATH`. The first that runs (`ptxas --version` succeeds) wins.
pub fn find_ptxas() -> Option<PathBuf> {
    let from_env = std::env::var_os("FLASHRS_PTXAS")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from);
    let local = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tools/ptxas/bin/ptxas");
    from_env
        .into_iter()
        .chain([local, PathBuf::from("ptxas")])
        .find(|candidate| runs(candidate))
}

fn runs(ptxas: &Path) -> bool {
    Command::new(ptxas)
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

/// Assembles `ptx` for `arch` (e.g. `sm_90`) with `ptxas -arch=<arch> -v -o /dev/null` and
/// returns one entry per kernel, in the report's order.
pub fn assemble(ptxas: &Path, ptx: &str, arch: &str) -> Result<Vec<KernelResources>, PtxasError> {
    static COUNTER: AtomicUsize = AtomicUsize::new(0);
    let file = std::env::temp_dir().join(format!(
        "flashrs-ptxas-{}-{}.ptx",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::write(&file, ptx)?;
    let output = Command::new(ptxas)
        .arg(format!("-arch={arch}"))
        .arg("-v")
        .args(["-o", "/dev/null"])
        .arg(&file)
        .output();
    let _ = std::fs::remove_file(&file);
    let output = output?;
    let stderr = String::from_utf8_lossy(&output.stderr);
    if !output.status.success() {
        return Err(PtxasError::Failed {
            status: output.status.to_string(),
            stderr: first_errors(&stderr, &file.to_string_lossy()),
        });
    }
    // The report goes to stderr; stdout is read too in case a version moves it.
    let stdout = String::from_utf8_lossy(&output.stdout);
    parse_report(&format!("{stderr}{stdout}"), arch)
}

/// [`assemble`] of a whole PTX module (rustc's, as `flashrs::embedded` holds them), cut into as
/// many parts as there are cores and assembled at once: ptxas is single-threaded, and a module's
/// kernels are assembled independently. The entries come back in name order.
pub fn assemble_parallel(
    ptxas: &Path,
    ptx: &'static str,
    arch: &str,
) -> Result<Vec<KernelResources>, PtxasError> {
    let Some(modules) = flashrs::embedded::EntryModules::new(ptx) else {
        return assemble(ptxas, ptx, arch);
    };
    let mut names: Vec<&str> = modules.entry_names().collect();
    names.sort_unstable();
    let parts = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(names.len().max(1));
    // Round-robin over the sorted names, so that each part gets a share of every family.
    let groups: Vec<Vec<&str>> = (0..parts)
        .map(|p| names.iter().skip(p).step_by(parts).copied().collect())
        .collect();
    let results: Vec<Result<Vec<KernelResources>, PtxasError>> = std::thread::scope(|scope| {
        let handles: Vec<_> = groups
            .iter()
            .map(|group| {
                let text = modules.module_of(group).expect("the module's own entries");
                scope.spawn(move || assemble(ptxas, &text, arch))
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("ptxas thread"))
            .collect()
    });
    let mut all = Vec::new();
    for result in results {
        all.extend(result?);
    }
    all.sort_by(|a, b| a.kernel.cmp(&b.kernel));
    Ok(all)
}

/// The first few lines of a failed run that are not `info` lines, with the temporary file's
/// path replaced by `<ptx>`.
fn first_errors(stderr: &str, file: &str) -> String {
    const SHOWN: usize = 8;
    let lines: Vec<&str> = stderr
        .lines()
        .filter(|l| !l.trim().is_empty() && !l.starts_with("ptxas info"))
        .collect();
    let mut text: Vec<String> = lines
        .iter()
        .take(SHOWN)
        .map(|l| l.replace(file, "<ptx>"))
        .collect();
    if lines.len() > SHOWN {
        text.push(format!("... ({} more lines)", lines.len() - SHOWN));
    }
    if text.is_empty() {
        text.push("(no error message)".to_string());
    }
    text.join("\n")
}

/// Parses the report of `ptxas -v` (see the module docs): one entry per "Compiling entry
/// function" block, which must have its stack-frame line and its "Used N registers" line.
pub fn parse_report(report: &str, arch: &str) -> Result<Vec<KernelResources>, PtxasError> {
    /// A kernel being read, and which of its lines have been seen.
    struct Partial {
        resources: KernelResources,
        saw_frame: bool,
        saw_used: bool,
    }
    let mut kernels: Vec<Partial> = Vec::new();
    // Whether the lines being read belong to the last kernel's block (`false` in a device
    // function's "Function properties" block, and before the first kernel).
    let mut in_kernel = false;
    for line in report.lines() {
        let text = line
            .strip_prefix("ptxas info")
            .and_then(|rest| rest.trim_start().strip_prefix(':'))
            .map_or(line.trim(), str::trim);
        if let Some(rest) = text.strip_prefix("Compiling entry function '") {
            let name = rest
                .split('\'')
                .next()
                .filter(|n| !n.is_empty())
                .ok_or_else(|| PtxasError::Parse(format!("no kernel name in `{line}`")))?;
            kernels.push(Partial {
                resources: KernelResources {
                    kernel: name.to_string(),
                    arch: arch.to_string(),
                    registers: 0,
                    barriers: 0,
                    shared_bytes: 0,
                    stack_frame_bytes: 0,
                    spill_stores_bytes: 0,
                    spill_loads_bytes: 0,
                    constant_bytes: None,
                },
                saw_frame: false,
                saw_used: false,
            });
            in_kernel = true;
        } else if let Some(name) = text.strip_prefix("Function properties for ") {
            in_kernel = kernels
                .last()
                .is_some_and(|k| !k.saw_frame && k.resources.kernel == name.trim());
        } else if text.contains("bytes stack frame") {
            let Some(current) = kernels.last_mut().filter(|k| in_kernel && !k.saw_frame) else {
                continue;
            };
            for (value, what) in fields(text)? {
                let r = &mut current.resources;
                match what {
                    "bytes stack frame" => r.stack_frame_bytes = value,
                    "bytes spill stores" => r.spill_stores_bytes = value,
                    "bytes spill loads" => r.spill_loads_bytes = value,
                    _ => {}
                }
            }
            current.saw_frame = true;
        } else if text.starts_with("Used ") && text.contains("registers") {
            let Some(current) = kernels.last_mut().filter(|k| in_kernel && !k.saw_used) else {
                continue;
            };
            let r = &mut current.resources;
            for (value, what) in fields(text)? {
                match what {
                    "registers" => {
                        r.registers = u32::try_from(value)
                            .map_err(|_| PtxasError::Parse(format!("register count in `{line}`")))?
                    }
                    "barriers" => {
                        r.barriers = u32::try_from(value)
                            .map_err(|_| PtxasError::Parse(format!("barrier count in `{line}`")))?
                    }
                    "bytes smem" => r.shared_bytes = value,
                    "bytes cmem[0]" => r.constant_bytes = Some(value),
                    _ => {}
                }
            }
            current.saw_used = true;
        }
    }
    kernels
        .into_iter()
        .map(|k| match (k.saw_frame, k.saw_used) {
            (true, true) => Ok(k.resources),
            (false, _) => Err(PtxasError::Parse(format!(
                "no stack frame line for kernel `{}`",
                k.resources.kernel
            ))),
            (true, false) => Err(PtxasError::Parse(format!(
                "no register count for kernel `{}`",
                k.resources.kernel
            ))),
        })
        .collect()
}

/// The comma-separated `<number> <what>` fields of a report line, with a leading `Used` or
/// `used` dropped: `"Used 24 registers, used 1 barriers"` -> `[(24, "registers"), (1, "barriers")]`.
fn fields(text: &str) -> Result<Vec<(u64, &str)>, PtxasError> {
    text.split(',')
        .map(|field| {
            let field = field.trim();
            let field = field
                .strip_prefix("Used ")
                .or_else(|| field.strip_prefix("used "))
                .unwrap_or(field);
            let (number, what) = field.split_once(' ').unwrap_or((field, ""));
            number
                .parse()
                .map(|n| (n, what.trim()))
                .map_err(|_| PtxasError::Parse(format!("no number in `{field}` of `{text}`")))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    // Real ptxas 13.0.88 output (`ptxas -arch=sm_90 -v`) for the project's kernels, built by
    // rustc's NVPTX backend (abridged to three kernels).
    const KERNELS_SM90: &str = "\
ptxas info    : 24 bytes gmem
ptxas info    : Compiling entry function 'naive_d64_f16' for 'sm_90'
ptxas info    : Function properties for naive_d64_f16
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 27 registers, used 0 barriers
ptxas info    : Compile time = 10.381 ms
ptxas info    : Compiling entry function 'flash_scalar_m32_n64_w4_v8_s2_light_d64_f16' for 'sm_90'
ptxas info    : Function properties for flash_scalar_m32_n64_w4_v8_s2_light_d64_f16
    256 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 63 registers, used 1 barriers, 256 bytes cumulative stack size
ptxas info    : Compile time = 114.386 ms
ptxas info    : Compiling entry function 'flash_mma_n64_w4_s2_light_d128_f16' for 'sm_90'
ptxas info    : Function properties for flash_mma_n64_w4_s2_light_d128_f16
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 168 registers, used 1 barriers
ptxas info    : Compile time = 88.789 ms
";

    // Real ptxas 13.0.88 output (`ptxas -arch=sm_80 -v --maxrregcount 24`) for a hand-written
    // register-hungry kernel with 1 KiB of static shared memory that calls a non-inlined device
    // function `helper` (whose properties block follows the kernel's and must not overwrite it).
    const SPILLS_SM80: &str = "\
ptxas info    : Overriding maximum register limit 256 for 'tiny' with  24 of maxrregcount option
ptxas info    : Overriding maximum register limit 256 for 'hungry' with  24 of maxrregcount option
ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function 'tiny' for 'sm_80'
ptxas info    : Function properties for tiny
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 8 registers, used 0 barriers, 360 bytes cmem[0]
ptxas info    : Compile time = 1.652 ms
ptxas info    : Compiling entry function 'hungry' for 'sm_80'
ptxas info    : Function properties for hungry
    304 bytes stack frame, 228 bytes spill stores, 320 bytes spill loads
ptxas info    : Used 24 registers, used 1 barriers, 304 bytes cumulative stack size, 1024 bytes smem, 368 bytes cmem[0]
ptxas info    : Compile time = 16.804 ms
ptxas info    : Function properties for helper
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
";

    // The same kernel for sm_90 (no cmem reported).
    const SPILLS_SM90: &str = "\
ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function 'hungry' for 'sm_90'
ptxas info    : Function properties for hungry
    288 bytes stack frame, 216 bytes spill stores, 316 bytes spill loads
ptxas info    : Used 24 registers, used 1 barriers, 288 bytes cumulative stack size, 1024 bytes smem
ptxas info    : Compile time = 17.636 ms
ptxas info    : Function properties for helper
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
";

    fn resources(kernel: &str, arch: &str, r: [u64; 6], cmem: Option<u64>) -> KernelResources {
        KernelResources {
            kernel: kernel.to_string(),
            arch: arch.to_string(),
            registers: r[0] as u32,
            barriers: r[1] as u32,
            shared_bytes: r[2],
            stack_frame_bytes: r[3],
            spill_stores_bytes: r[4],
            spill_loads_bytes: r[5],
            constant_bytes: cmem,
        }
    }

    #[test]
    fn parses_the_projects_kernels() {
        let kernels = parse_report(KERNELS_SM90, "sm_90").unwrap();
        assert_eq!(
            kernels,
            [
                resources("naive_d64_f16", "sm_90", [27, 0, 0, 0, 0, 0], None),
                resources(
                    "flash_scalar_m32_n64_w4_v8_s2_light_d64_f16",
                    "sm_90",
                    [63, 1, 0, 256, 0, 0],
                    None
                ),
                resources(
                    "flash_mma_n64_w4_s2_light_d128_f16",
                    "sm_90",
                    [168, 1, 0, 0, 0, 0],
                    None
                ),
            ]
        );
    }

    #[test]
    fn parses_spills_smem_and_cmem_and_skips_device_functions() {
        let kernels = parse_report(SPILLS_SM80, "sm_80").unwrap();
        assert_eq!(
            kernels,
            [
                resources("tiny", "sm_80", [8, 0, 0, 0, 0, 0], Some(360)),
                resources("hungry", "sm_80", [24, 1, 1024, 304, 228, 320], Some(368)),
            ]
        );
        let kernels = parse_report(SPILLS_SM90, "sm_90").unwrap();
        assert_eq!(
            kernels,
            [resources("hungry", "sm_90", [24, 1, 1024, 288, 216, 316], None)]
        );
    }

    #[test]
    fn a_report_without_kernels_is_empty() {
        assert_eq!(
            parse_report("ptxas info    : 0 bytes gmem\n", "sm_90").unwrap(),
            []
        );
    }

    #[test]
    fn incomplete_or_garbled_reports_are_errors() {
        let no_used = "\
ptxas info    : Compiling entry function 'k' for 'sm_90'
ptxas info    : Function properties for k
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
";
        let no_frame = "\
ptxas info    : Compiling entry function 'k' for 'sm_90'
ptxas info    : Used 8 registers, used 0 barriers
";
        let garbled = "\
ptxas info    : Compiling entry function 'k' for 'sm_90'
ptxas info    : Function properties for k
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used many registers, used 0 barriers
";
        for report in [no_used, no_frame, garbled] {
            assert!(
                matches!(parse_report(report, "sm_90"), Err(PtxasError::Parse(_))),
                "{report}"
            );
        }
    }

    #[test]
    fn failure_text_keeps_the_errors_and_hides_the_temp_path() {
        let stderr = "\
ptxas /tmp/flashrs-ptxas-1-0.ptx, line 7; error   : Unknown symbol '%r5'
ptxas fatal   : Ptx assembly aborted due to errors
";
        assert_eq!(
            first_errors(stderr, "/tmp/flashrs-ptxas-1-0.ptx"),
            "ptxas <ptx>, line 7; error   : Unknown symbol '%r5'\n\
             ptxas fatal   : Ptx assembly aborted due to errors"
        );
    }

    #[test]
    fn assembles_a_small_kernel_when_ptxas_is_present() {
        let Some(ptxas) = find_ptxas() else {
            println!("ptxas not found: skipped (run scripts/setup.sh)");
            return;
        };
        let ptx = "\
.version 7.8
.target sm_80
.address_size 64
.visible .entry store_tid(.param .u64 out)
{
\t.reg .b32 %r<2>;
\t.reg .b64 %rd<5>;
\tld.param.u64 %rd1, [out];
\tcvta.to.global.u64 %rd2, %rd1;
\tmov.u32 %r1, %tid.x;
\tmul.wide.u32 %rd3, %r1, 4;
\tadd.s64 %rd4, %rd2, %rd3;
\tst.global.u32 [%rd4], %r1;
\tret;
}
";
        for arch in ["sm_80", "sm_90"] {
            let kernels = assemble(&ptxas, ptx, arch).unwrap();
            assert_eq!(kernels.len(), 1, "{arch}: {kernels:?}");
            let k = &kernels[0];
            assert_eq!((k.kernel.as_str(), k.arch.as_str()), ("store_tid", arch));
            assert!(k.registers > 0, "{k:?}");
            assert_eq!(
                (k.stack_frame_bytes, k.spill_stores_bytes, k.spill_loads_bytes),
                (0, 0, 0)
            );
        }
        let broken = ".version 7.8\n.target sm_90\n.address_size 64\n\
                      .visible .entry bad()\n{\n\tmov.b32 %r5, 1;\n\tret;\n}\n";
        match assemble(&ptxas, broken, "sm_90") {
            Err(PtxasError::Failed { stderr, .. }) => {
                assert!(stderr.contains("error"), "{stderr}");
                assert!(!stderr.contains("flashrs-ptxas-"), "{stderr}");
            }
            other => panic!("broken PTX: {other:?}"),
        }
    }
}
