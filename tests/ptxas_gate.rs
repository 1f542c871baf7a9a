//! The ptxas gate: every kernel of the embedded PTX assembles for its architecture with no spills
//! and no local-memory stack frame. Runs wherever `ptxas` is found (scripts/setup.sh installs it).

use flashrs::{embedded, ptxas};

#[test]
fn every_kernel_assembles_without_spills() {
    let Some(path) = ptxas::find_ptxas() else {
        println!("ptxas not found: gate skipped (run scripts/setup.sh to install it)");
        return;
    };
    for (arch, text) in [("sm_80", embedded::PTX_SM80), ("sm_90", embedded::PTX_SM90)] {
        let report = ptxas::assemble(&path, text, arch).unwrap_or_else(|e| panic!("{arch}: {e}"));
        assert!(!report.is_empty(), "{arch}: ptxas reported no kernels");
        let entries = flashrs::ptx::entries(text).len();
        assert_eq!(
            report.len(),
            entries,
            "{arch}: ptxas reported {} of {entries} kernels",
            report.len()
        );
        let offenders: Vec<String> = report
            .iter()
            .filter(|k| k.spill_stores_bytes > 0 || k.spill_loads_bytes > 0 || k.stack_frame_bytes > 0)
            .map(|k| {
                format!(
                    "{} ({} B spill stores, {} B stack)",
                    k.kernel, k.spill_stores_bytes, k.stack_frame_bytes
                )
            })
            .collect();
        assert!(
            offenders.is_empty(),
            "{arch}: kernels using local memory: {offenders:?}"
        );
        println!(
            "{arch}: {} kernels, zero spills, max {} registers",
            report.len(),
            report.iter().map(|k| k.registers).max().unwrap_or(0)
        );
    }
}
