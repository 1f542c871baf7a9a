//! Running NVIDIA's `ptxas` on the embedded PTX: registers, shared memory, stack frame and spills
//! per kernel, without a GPU. `scripts/setup.sh` installs ptxas into `tools/ptxas/bin`.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};

use serde::Serialize;
use thiserror::Error;

/// What ptxas reports for one kernel.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct KernelResources {
    pub kernel: String,
    pub arch: String,
    pub registers: u32,
    /// Static shared memory (the kernels here use dynamic shared memory, so usually 0).
    pub shared_bytes: u64,
    pub stack_frame_bytes: u64,
    pub spill_stores_bytes: u64,
    pub spill_loads_bytes: u64,
}

#[derive(Debug, Error)]
pub enum PtxasError {
    #[error("running ptxas: {0}")]
    Io(#[from] std::io::Error),
    #[error("ptxas rejected the PTX ({status}): {stderr}")]
    Failed { status: String, stderr: String },
    #[error("unexpected ptxas report: {0}")]
    Parse(String),
}

/// Where ptxas is looked for, in order: `$FLASHRS_PTXAS`, `tools/ptxas/bin/ptxas` in this
/// repository, `ptxas` on `PATH`.
pub fn find_ptxas() -> Option<PathBuf> {
    let runs = |p: &Path| {
        Command::new(p)
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success())
    };
    if let Some(path) = std::env::var_os("FLASHRS_PTXAS").map(PathBuf::from) {
        return runs(&path).then_some(path);
    }
    let local = Path::new(env!("CARGO_MANIFEST_DIR")).join("tools/ptxas/bin/ptxas");
    if runs(&local) {
        return Some(local);
    }
    let on_path = PathBuf::from("ptxas");
    runs(&on_path).then_some(on_path)
}

/// Assembles `ptx` for `arch` (e.g. `sm_90`) with `-v` and returns one entry per kernel.
pub fn assemble(ptxas: &Path, ptx: &str, arch: &str) -> Result<Vec<KernelResources>, PtxasError> {
    static COUNTER: AtomicUsize = AtomicUsize::new(0);
    let file = std::env::temp_dir().join(format!(
        "flashrs-{}-{}.ptx",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::write(&file, ptx)?;
    let output = Command::new(ptxas)
        .arg(format!("-arch={arch}"))
        .arg("-v")
        .arg("-o")
        .arg("/dev/null")
        .arg(&file)
        .output();
    let _ = std::fs::remove_file(&file);
    let output = output?;
    let stderr = String::from_utf8_lossy(&output.stderr);
    if !output.status.success() {
        let first: Vec<&str> = stderr
            .lines()
            .filter(|l| !l.contains("ptxas info"))
            .take(5)
            .collect();
        return Err(PtxasError::Failed {
            status: output.status.to_string(),
            stderr: first.join("\n"),
        });
    }
    parse_report(&stderr, arch)
}

/// Parses the `-v` report: per kernel a "Compiling entry function 'NAME'" line, a "N bytes stack
/// frame, N bytes spill stores, N bytes spill loads" line and a "Used N registers, ..." line.
pub fn parse_report(report: &str, arch: &str) -> Result<Vec<KernelResources>, PtxasError> {
    let mut out: Vec<KernelResources> = Vec::new();
    for line in report.lines() {
        if let Some(rest) = line.split("Compiling entry function '").nth(1) {
            let name = rest.split('\'').next().unwrap_or_default();
            out.push(KernelResources {
                kernel: name.to_string(),
                arch: arch.to_string(),
                registers: 0,
                shared_bytes: 0,
                stack_frame_bytes: 0,
                spill_stores_bytes: 0,
                spill_loads_bytes: 0,
            });
            continue;
        }
        let Some(current) = out.last_mut() else {
            continue;
        };
        if line.contains("bytes stack frame") {
            current.stack_frame_bytes = number_before(line, "bytes stack frame")?;
            current.spill_stores_bytes = number_before(line, "bytes spill stores")?;
            current.spill_loads_bytes = number_before(line, "bytes spill loads")?;
        } else if line.contains("Used") && line.contains("registers") {
            current.registers = number_before(line, "registers")? as u32;
            if line.contains("bytes smem") {
                current.shared_bytes = number_before(line, "bytes smem")?;
            }
        }
    }
    if out.iter().any(|k| k.registers == 0) {
        return Err(PtxasError::Parse("a kernel without a register count".into()));
    }
    Ok(out)
}

/// The integer just before `unit` in `line` (`"... 24 bytes spill stores"` -> 24).
fn number_before(line: &str, unit: &str) -> Result<u64, PtxasError> {
    line.split(unit)
        .next()
        .and_then(|head| head.split(|c: char| !c.is_ascii_digit()).rfind(|s| !s.is_empty()))
        .and_then(|n| n.parse().ok())
        .ok_or_else(|| PtxasError::Parse(format!("no number before `{unit}` in `{line}`")))
}

#[cfg(test)]
mod tests {
    use super::*;

    // Real ptxas 13.0 output (-arch=sm_90 -v), one kernel clean and one forced to spill.
    const REPORT: &str = "\
ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function 'flash_mma_m64_n64_w4_s2_light_d128_f16' for 'sm_90'
ptxas info    : Function properties for flash_mma_m64_n64_w4_s2_light_d128_f16
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 169 registers, used 1 barriers
ptxas info    : Compiling entry function 'squeezed' for 'sm_90'
ptxas info    : Function properties for squeezed
    40 bytes stack frame, 36 bytes spill stores, 44 bytes spill loads
ptxas info    : Used 24 registers, used 0 barriers, 1024 bytes smem
";

    #[test]
    fn parses_a_real_report() {
        let kernels = parse_report(REPORT, "sm_90").unwrap();
        assert_eq!(kernels.len(), 2);
        assert_eq!(kernels[0].kernel, "flash_mma_m64_n64_w4_s2_light_d128_f16");
        assert_eq!((kernels[0].registers, kernels[0].spill_stores_bytes), (169, 0));
        assert_eq!(
            (
                kernels[1].registers,
                kernels[1].stack_frame_bytes,
                kernels[1].spill_stores_bytes,
                kernels[1].spill_loads_bytes
            ),
            (24, 40, 36, 44)
        );
        assert_eq!(kernels[1].shared_bytes, 1024);
    }

    #[test]
    fn a_kernel_without_registers_is_an_error() {
        let truncated = "ptxas info    : Compiling entry function 'k' for 'sm_90'\n";
        assert!(parse_report(truncated, "sm_90").is_err());
    }

    #[test]
    fn assembles_a_small_kernel_when_ptxas_is_present() {
        let Some(ptxas) = find_ptxas() else {
            println!("ptxas not found: skipped (run scripts/setup.sh)");
            return;
        };
        let ptx = ".version 7.8\n.target sm_90\n.address_size 64\n.visible .entry store_one(.param .u64 p)\n{\n\t.reg .b64 %rd<3>;\n\t.reg .b32 %r<2>;\n\tld.param.u64 %rd1, [p];\n\tcvta.to.global.u64 %rd2, %rd1;\n\tmov.b32 %r1, 1;\n\tst.global.u32 [%rd2], %r1;\n\tret;\n}\n";
        let kernels = assemble(&ptxas, ptx, "sm_90").unwrap();
        assert_eq!(kernels.len(), 1);
        assert!(kernels[0].registers > 0);
        assert_eq!(kernels[0].spill_stores_bytes, 0);
        let broken = assemble(&ptxas, ".version 7.8\n.target sm_90\nnonsense", "sm_90");
        assert!(matches!(broken, Err(PtxasError::Failed { .. })));
    }
}
