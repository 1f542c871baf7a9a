//! Checks of the machine code's schedule that the PTX cannot show: every `flash_ws` variant with
//! `overlap` must run its softmax (or at head dim 128 its first exponentials:
//! `flashrs::schedule`) while the P V product it left running is still in the tensor cores.
//! ptxas once hoisted `wgmma.wait_group 0` above the whole softmax (docs/kernels/flash_ws.md,
//! overlap), which the PTX, the ptxas report and `verify` all missed. Needs ptxas and cuobjdump
//! (`scripts/setup.sh` installs both); without them the test fails unless `FLASHRS_SKIP_SASS=1`.

use flashrs::schedule::exponentials_before_wait;
use flashrs::variants::EXPERIMENTAL_VARIANTS;
use flashrs::{embedded, Family, VARIANTS};
use flashrs_lab::{ptxas, sass};

#[test]
fn overlapped_variants_run_the_softmax_under_the_running_products() {
    let tools = ptxas::find_ptxas().zip(sass::find_cuobjdump());
    let Some((ptxas, cuobjdump)) = tools else {
        assert!(
            std::env::var_os("FLASHRS_SKIP_SASS").is_some(),
            "ptxas or cuobjdump missing: run scripts/setup.sh (or set FLASHRS_SKIP_SASS=1)"
        );
        return;
    };
    let modules = embedded::EntryModules::embedded(90).expect("the sm_90a module");
    let overlapped = flashrs::variants::built(VARIANTS)
        .chain(flashrs::variants::built(EXPERIMENTAL_VARIANTS))
        .filter(|v| v.family == Family::FlashWs && v.spec.overlap);
    // One ptxas and one disassembly per kernel, as many at once as there are cores.
    let entries: Vec<_> = overlapped
        .flat_map(|variant| variant.head_dims.iter().map(move |&d| (variant, d)))
        .collect();
    let next = std::sync::atomic::AtomicUsize::new(0);
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let failures: Vec<String> = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..threads)
            .map(|_| {
                scope.spawn(|| {
                    let mut failures = Vec::new();
                    while let Some(&(variant, d)) =
                        entries.get(next.fetch_add(1, std::sync::atomic::Ordering::Relaxed))
                    {
                        let entry = variant.symbol(d, "f16");
                        // Only this kernel's module: ptxas then parses a fraction of the PTX.
                        let module = modules.module(&entry).expect("the kernel's module");
                        let code = sass::disassemble(&ptxas, &cuobjdump, &module, "sm_90a", &entry).unwrap();
                        let under = sass::exponentials_under_running_products(&code);
                        // One probability per score a thread holds: block_n / 2 of them per tile,
                        // all before the wait or the first ones the schedule names.
                        let probabilities = variant.spec.block_n as usize / 2;
                        let want = exponentials_before_wait(d).map_or(probabilities, |n| n.min(probabilities));
                        if !under.iter().any(|&n| n >= want) {
                            failures.push(format!(
                                "{entry}: exponentials between wait_group 1 and wait_group 0: {under:?}, want {want} in the loop"
                            ));
                        }
                    }
                    failures
                })
            })
            .collect();
        workers.into_iter().flat_map(|w| w.join().unwrap()).collect()
    });
    assert!(failures.is_empty(), "{failures:#?}");
    let checked = entries.len();
    assert!(checked > 0, "no overlapped flash_ws variant to check");
}
