//! The machine code (SASS) ptxas makes of one kernel, read without a GPU: `ptxas -e <entry>` into
//! a cubin, then `cuobjdump -sass` (with `nvdisasm`, which it calls). `scripts/setup.sh` installs
//! both disassemblers into `tools/cuobjdump/bin`.
//!
//! Why: PTX order is not SASS order. ptxas schedules within a basic block, and it hoisted
//! `flash_ws`'s `wgmma.wait_group 0` above the softmax that the PTX put under the running P V
//! products, so the "overlap" switch overlapped nothing (docs/kernels/flash_ws.md, overlap). Checks
//! of the schedule therefore have to read the SASS.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::ptxas::PtxasError;

/// Where cuobjdump is looked for, in order: `$FLASHRS_CUOBJDUMP`, `tools/cuobjdump/bin/cuobjdump`
/// in this repository, `cuobjdump` on `PATH`; nvdisasm must sit beside it or on `PATH`.
pub fn find_cuobjdump() -> Option<PathBuf> {
    let from_env = std::env::var_os("FLASHRS_CUOBJDUMP")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from);
    let local = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tools/cuobjdump/bin/cuobjdump");
    from_env
        .into_iter()
        .chain([local, PathBuf::from("cuobjdump")])
        .find(|candidate| {
            Command::new(candidate)
                .arg("--version")
                .output()
                .is_ok_and(|o| o.status.success())
        })
}

/// The SASS of kernel `entry` of `ptx`, assembled for `arch` (e.g. `sm_90a`): one instruction per
/// line, with the encodings and blank lines dropped.
pub fn disassemble(
    ptxas: &Path,
    cuobjdump: &Path,
    ptx: &str,
    arch: &str,
    entry: &str,
) -> Result<String, PtxasError> {
    static COUNTER: AtomicUsize = AtomicUsize::new(0);
    let stem = std::env::temp_dir().join(format!(
        "flashrs-sass-{}-{}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    ));
    let (ptx_file, cubin) = (stem.with_extension("ptx"), stem.with_extension("cubin"));
    std::fs::write(&ptx_file, ptx)?;
    let assembled = Command::new(ptxas)
        .arg(format!("-arch={arch}"))
        .args(["-e", entry, "-o"])
        .arg(&cubin)
        .arg(&ptx_file)
        .output();
    let _ = std::fs::remove_file(&ptx_file);
    check(assembled?, "ptxas")?;
    // cuobjdump finds nvdisasm on PATH: put its own folder first.
    let mut path = std::ffi::OsString::from(cuobjdump.parent().unwrap_or(Path::new(".")));
    path.push(":");
    path.push(std::env::var_os("PATH").unwrap_or_default());
    let dumped = Command::new(cuobjdump)
        .arg("-sass")
        .arg(&cubin)
        .env("PATH", path)
        .output();
    let _ = std::fs::remove_file(&cubin);
    let dumped = check(dumped?, "cuobjdump")?;
    Ok(instructions(&String::from_utf8_lossy(&dumped.stdout)))
}

fn check(output: std::process::Output, tool: &str) -> Result<std::process::Output, PtxasError> {
    if output.status.success() {
        Ok(output)
    } else {
        Err(PtxasError::Failed {
            status: format!("{tool}: {}", output.status),
            stderr: String::from_utf8_lossy(&output.stderr)
                .lines()
                .take(8)
                .collect::<Vec<_>>()
                .join("\n"),
        })
    }
}

/// `cuobjdump -sass` lines reduced to `opcode operands`: the `/*0a40*/` addresses, the `;` and the
/// encoding comments go.
fn instructions(dump: &str) -> String {
    dump.lines()
        .filter_map(|line| {
            let line = line.trim();
            let rest = line.strip_prefix("/*")?;
            let (_, text) = rest.split_once("*/")?;
            let text = text.split(';').next()?.trim();
            (!text.is_empty()).then(|| text.to_string())
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// For each `wgmma.wait_group 1` of `sass` (`WARPGROUP.DEPBAR.LE gsb0, 0x1`), how many
/// exponentials (`MUFU.EX2`) run before the next `wait_group 0`: the softmax work done while the
/// product left running is still in the tensor cores.
pub fn exponentials_under_running_products(sass: &str) -> Vec<usize> {
    let lines: Vec<&str> = sass.lines().collect();
    let is_wait = |line: &str, n: u32| line.contains(&format!("WARPGROUP.DEPBAR.LE gsb0, 0x{n}"));
    (0..lines.len())
        .filter(|&i| is_wait(lines[i], 1))
        .map(|i| {
            lines[i + 1..]
                .iter()
                .take_while(|line| !is_wait(line, 0))
                .filter(|line| line.contains("MUFU.EX2"))
                .count()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const DUMP: &str = "\
        Function : k
        /*0a40*/                   HGMMA.64x128x16.F32 R24, R152, gdesc[UR4].tnspB, R24, gsb0 ;   /* 0x41e0000498187df0 */
                                                                                                 /* 0x000fe60008000818 */
        /*0a50*/                   WARPGROUP.DEPBAR.LE gsb0, 0x1 ;                                  /* 0x00008000000079c5 */
        /*0a60*/                   MUFU.EX2 R15, R15 ;                                              /* 0x0000000f000f7308 */
        /*0a70*/                   FMNMX R190, R88, -INF , !PT ;                                    /* 0xff80000058be7809 */
        /*0a80*/                   MUFU.EX2 R16, R16 ;                                              /* 0x0000000f000f7308 */
        /*0a90*/                   WARPGROUP.DEPBAR.LE gsb0, 0x0 ;                                  /* 0x00008000000079c5 */
        /*0aa0*/                   MUFU.EX2 R17, R17 ;                                              /* 0x0000000f000f7308 */
        /*0ab0*/                   WARPGROUP.DEPBAR.LE gsb0, 0x1 ;                                  /* 0x00008000000079c5 */
        /*0ac0*/                   WARPGROUP.DEPBAR.LE gsb0, 0x0 ;                                  /* 0x00008000000079c5 */
    ";

    #[test]
    fn instructions_drop_addresses_encodings_and_semicolons() {
        let sass = instructions(DUMP);
        assert_eq!(sass.lines().count(), 9);
        assert_eq!(
            sass.lines().next(),
            Some("HGMMA.64x128x16.F32 R24, R152, gdesc[UR4].tnspB, R24, gsb0")
        );
        assert!(!sass.contains("0x000fe6") && !sass.contains(';'));
    }

    #[test]
    fn exponentials_are_counted_between_the_two_waits_only() {
        assert_eq!(exponentials_under_running_products(&instructions(DUMP)), [2, 0]);
        assert!(exponentials_under_running_products("MUFU.EX2 R1, R1").is_empty());
    }
}
