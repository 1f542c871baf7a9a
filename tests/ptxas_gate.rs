//! The ptxas gate: every kernel of the embedded PTX assembles for its architecture, and every
//! variant's kernel has no spills and no local-memory stack frame. The `_counted` twins (the
//! barrier-counting instrumentation, never used for results or timings) only have to assemble;
//! their local-memory use is printed. Runs wherever `ptxas` is found (scripts/setup.sh installs it).

use flashrs::{embedded, ptxas};

#[test]
fn every_kernel_assembles_without_spills() {
    let Some(path) = ptxas::find_ptxas() else {
        println!("ptxas not found: gate skipped (run scripts/setup.sh to install it)");
        return;
    };
    for (arch, _, text) in embedded::modules() {
        let report = ptxas::assemble(&path, text, arch).unwrap_or_else(|e| panic!("{arch}: {e}"));
        assert!(!report.is_empty(), "{arch}: ptxas reported no kernels");
        let entries = flashrs::ptx::entries(text).len();
        assert_eq!(
            report.len(),
            entries,
            "{arch}: ptxas reported {} of {entries} kernels",
            report.len()
        );
        let uses_local = |k: &&ptxas::KernelResources| {
            k.spill_stores_bytes > 0 || k.spill_loads_bytes > 0 || k.stack_frame_bytes > 0
        };
        for twin in report
            .iter()
            .filter(|k| k.kernel.ends_with("_counted"))
            .filter(uses_local)
        {
            println!(
                "{arch}: instrumentation twin {} uses {} B of stack",
                twin.kernel, twin.stack_frame_bytes
            );
        }
        let offenders: Vec<String> = report
            .iter()
            .filter(|k| !k.kernel.ends_with("_counted"))
            .filter(uses_local)
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
