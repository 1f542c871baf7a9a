//! CPU-only checks of the real embedded PTX: every variant is exported for every head dim and
//! architecture, and the barriers its policy declares are the barriers in its KV-tile loop.

use flashrs::variants::DTYPES;
use flashrs::variants::{built, VARIANTS};
use flashrs::{embedded, Family, Policy};
use flashrs_lab::ptx;

fn modules() -> impl Iterator<Item = (&'static str, u32, &'static str)> {
    embedded::modules()
}

#[test]
fn every_variant_is_exported_with_its_counted_twin() {
    for (arch, arch_number, text) in modules() {
        let names: Vec<&str> = ptx::entries(text).iter().map(|e| e.name).collect();
        for v in built(VARIANTS).filter(|v| v.min_arch <= arch_number) {
            for (&d, &dtype) in v
                .head_dims
                .iter()
                .flat_map(|d| DTYPES.iter().map(move |t| (d, t)))
            {
                assert!(
                    names.contains(&v.symbol(d, dtype).as_str()),
                    "{arch}: {} missing",
                    v.symbol(d, dtype)
                );
                // The counted twins exist exactly where this build asked for them.
                assert_eq!(
                    names.contains(&v.counted_symbol(d, dtype).as_str()),
                    v.counted_built,
                    "{arch}: counted twin of {}",
                    v.name
                );
            }
        }
        assert!(
            text.contains(&format!(".target {arch}")),
            "{arch} PTX targets another architecture"
        );
    }
}

/// Local memory in a kernel is an array the compiler could not keep in registers: it happened to
/// the row maximum's chains when they were folded through an array's by-value iterator (a loop
/// over a stack copy, 4-18% slower everywhere: docs/kernels/sm80-families.md, fragment softmax).
/// ptxas reports spills, not this, so the PTX is checked for it.
#[test]
fn no_kernel_keeps_values_in_local_memory() {
    for (arch, _, text) in modules() {
        let with_local: Vec<&str> = ptx::entries(text)
            .iter()
            .filter(|e| {
                e.body
                    .iter()
                    .any(|line| line.contains("__local_depot") || line.contains(".local"))
            })
            .map(|e| e.name)
            .collect();
        assert!(with_local.is_empty(), "{arch}: local memory in {with_local:?}");
    }
}

#[test]
fn declared_barriers_match_the_ptx_loop() {
    for (arch, arch_number, text) in modules() {
        let globals = ptx::u32_globals(text);
        let entries = ptx::entries(text);
        for v in built(VARIANTS).filter(|v| v.min_arch <= arch_number) {
            for (&d, &dtype) in v
                .head_dims
                .iter()
                .flat_map(|d| DTYPES.iter().map(move |t| (d, t)))
            {
                let symbol = v.symbol(d, dtype);
                let declared = globals[format!("{symbol}_barriers_per_tile").as_str()];
                let counted = v.counted_built.then(|| v.counted_symbol(d, dtype));
                for name in [Some(symbol.clone()), counted].into_iter().flatten() {
                    let entry = entries.iter().find(|e| e.name == name).unwrap();
                    let in_loop = ptx::barriers_in_loop(entry).unwrap_or(0);
                    assert_eq!(
                        in_loop as u32, declared,
                        "{arch} {name}: {in_loop} bar.sync in the loop, policy declares {declared}"
                    );
                }
                match (v.family, v.policy) {
                    (Family::Naive, _) => assert_eq!(declared, 0),
                    (_, Some(Policy::Light)) => {
                        assert!((2..=4).contains(&declared), "{symbol}: Light declares {declared}")
                    }
                    (_, Some(Policy::Legacy)) => assert_eq!(declared, 6, "{symbol}"),
                    (_, Some(Policy::Mbarrier)) => assert_eq!(declared, 0, "{symbol}"),
                    (_, None) => panic!("{symbol}: a tiled kernel without a policy"),
                }
            }
        }
    }
}

#[test]
fn light_has_fewer_barriers_than_legacy_for_the_same_tiles() {
    let globals = ptx::u32_globals(embedded::PTX_SM90);
    let per_tile = |name: &str| globals[format!("{name}_d64_f16_barriers_per_tile").as_str()];
    let mut pairs = 0;
    if !built(VARIANTS).any(|v| v.policy == Some(Policy::Legacy)) {
        println!("no Legacy variant in this build (FLASHRS_VARIANTS=all compiles the pair): skipped");
        return;
    }
    for legacy in built(VARIANTS).filter(|v| v.policy == Some(Policy::Legacy)) {
        let light_name = legacy.name.replace("_legacy", "_light");
        if built(VARIANTS).any(|v| v.name == light_name) {
            assert!(per_tile(&light_name) < per_tile(legacy.name));
            pairs += 1;
        }
    }
    assert!(
        pairs > 0,
        "kernels.toml should keep a Legacy/Light pair with the same tiles"
    );
}

#[test]
fn shared_memory_is_declared_for_every_tiled_variant() {
    let globals = ptx::u32_globals(embedded::PTX_SM90);
    for v in built(VARIANTS).filter(|v| v.family != Family::Naive) {
        for (&d, &dtype) in v
            .head_dims
            .iter()
            .flat_map(|d| DTYPES.iter().map(move |t| (d, t)))
        {
            let smem = globals[format!("{}_smem_bytes", v.symbol(d, dtype)).as_str()];
            // The H100 allows 227 KiB per block; every compiled tile must fit.
            assert!(
                smem > 0 && smem <= 227 * 1024,
                "{}: {smem} bytes",
                v.symbol(d, dtype)
            );
        }
    }
}

/// Every flash_decode variant has its paged entry points (and counted twin), with as many block
/// barriers as the contiguous entry and at least the declared ones inside its KV loop. (The
/// loop-nest count itself can be larger: in the paged PTX, LLVM places a block of the epilogue
/// so that a backward branch spans the loop and the merge, whose barriers then count too; the
/// `_counted` twin's run-time count, which `tests/gpu.rs` and `verify` check, is exact.)
#[test]
fn every_decode_variant_has_paged_entry_points_with_its_barriers() {
    let mut checked = 0;
    let barriers = |e: &ptx::Entry| e.body.iter().filter(|l| ptx::is_block_barrier(l)).count();
    for (arch, arch_number, text) in modules() {
        let globals = ptx::u32_globals(text);
        let entries = ptx::entries(text);
        let find = |name: &str| {
            entries
                .iter()
                .find(|e| e.name == name)
                .unwrap_or_else(|| panic!("{arch}: {name} missing"))
        };
        for v in built(VARIANTS).filter(|v| v.min_arch <= arch_number) {
            for (&d, &dtype) in v
                .head_dims
                .iter()
                .flat_map(|d| DTYPES.iter().map(move |t| (d, t)))
            {
                let declared = globals[format!("{}_barriers_per_tile", v.symbol(d, dtype)).as_str()] as usize;
                for counted in [false, true].into_iter().filter(|&c| !c || v.counted_built) {
                    let Some(name) = v.paged_symbol(d, dtype, counted) else {
                        let paged = format!("{}_paged", v.symbol(d, dtype));
                        assert!(!entries.iter().any(|e| e.name.starts_with(&paged)));
                        continue;
                    };
                    let contiguous = if counted {
                        v.counted_symbol(d, dtype)
                    } else {
                        v.symbol(d, dtype)
                    };
                    let entry = find(&name);
                    assert_eq!(barriers(entry), barriers(find(&contiguous)), "{arch} {name}");
                    assert!(
                        ptx::barriers_in_loop(entry).unwrap_or(0) >= declared,
                        "{arch} {name}"
                    );
                    checked += 1;
                }
            }
        }
    }
    assert!(checked >= 16, "only {checked} paged entry points");
}

/// Every variant with varlen entry points (`Spec::has_varlen_at`: flash_decode, flash_ws without
/// persistent, the persistent 128 x 128 flash_ws at head dim 128) has them
/// and their counted twins, with as many block barriers as the contiguous entry and at least the
/// declared ones inside its KV loop (the same rule as the paged ones); the others have none.
#[test]
fn varlen_entry_points_exist_with_their_barriers() {
    let mut checked = 0;
    let barriers = |e: &ptx::Entry| e.body.iter().filter(|l| ptx::is_block_barrier(l)).count();
    for (arch, arch_number, text) in modules() {
        let globals = ptx::u32_globals(text);
        let entries = ptx::entries(text);
        let find = |name: &str| {
            entries
                .iter()
                .find(|e| e.name == name)
                .unwrap_or_else(|| panic!("{arch}: {name} missing"))
        };
        for v in built(VARIANTS).filter(|v| v.min_arch <= arch_number) {
            for (&d, &dtype) in v
                .head_dims
                .iter()
                .flat_map(|d| DTYPES.iter().map(move |t| (d, t)))
            {
                let declared = globals[format!("{}_barriers_per_tile", v.symbol(d, dtype)).as_str()] as usize;
                for counted in [false, true].into_iter().filter(|&c| !c || v.counted_built) {
                    let Some(name) = v.varlen_symbol(d, dtype, counted) else {
                        let varlen = format!("{}_varlen", v.symbol(d, dtype));
                        assert!(!entries.iter().any(|e| e.name.starts_with(&varlen)), "{varlen}");
                        continue;
                    };
                    let contiguous = if counted {
                        v.counted_symbol(d, dtype)
                    } else {
                        v.symbol(d, dtype)
                    };
                    let entry = find(&name);
                    assert_eq!(barriers(entry), barriers(find(&contiguous)), "{arch} {name}");
                    assert!(
                        ptx::barriers_in_loop(entry).unwrap_or(0) >= declared,
                        "{arch} {name}"
                    );
                    checked += 1;
                }
            }
        }
    }
    assert!(checked >= 16, "only {checked} varlen entry points");
}

/// The library launches every sm_90a entry point as dependent on the kernel before it
/// (programmatic dependent launch, `flashrs::Gpu`), which may then still be writing this one's
/// inputs or reading its outputs: no entry may touch memory other than its parameters and its
/// own shared memory (`flash_ws` sets up its barriers first) before its first
/// `griddepcontrol.wait`. The sm_80 PTX, whose launches stay serialised, has none; nor has
/// `softmax_rows_<dtype>`, which the lab's composed paths launch through cudarc, serialised.
#[test]
fn sm90_entries_wait_for_the_kernel_before_them_first() {
    for (arch, arch_number, text) in modules() {
        for entry in ptx::entries(text) {
            let wait = entry
                .body
                .iter()
                .position(|line| line.starts_with("griddepcontrol.wait"));
            if arch_number < 90 {
                assert!(wait.is_none(), "{arch}: {} has griddepcontrol", entry.name);
                continue;
            }
            if entry.name.starts_with("softmax_rows_") {
                continue;
            }
            let wait = wait.unwrap_or_else(|| panic!("{arch}: {} never waits", entry.name));
            // flash_ws waits after its set-up, once in each warpgroup's role (the producer's and
            // the consumers' branches), so the first wait in the text is one of two or more.
            if entry.name.starts_with("flash_ws") {
                let waits = entry
                    .body
                    .iter()
                    .filter(|line| line.starts_with("griddepcontrol.wait"))
                    .count();
                assert!(
                    waits >= 2,
                    "{arch}: {} waits in {waits} place(s), not in each role",
                    entry.name
                );
            }
            let memory = |line: &str| {
                let op = line.split_whitespace().next().unwrap_or("");
                let is_access = [
                    "ld.",
                    "st.",
                    "cp.",
                    "atom.",
                    "red.",
                    "prefetch",
                    "mbarrier.",
                    "wgmma.",
                ]
                .iter()
                .any(|p| op.starts_with(p));
                let own = op.starts_with("ld.param") || op.contains(".shared");
                is_access && !own
            };
            let early: Vec<&str> = entry.body[..wait]
                .iter()
                .copied()
                .filter(|line| memory(line))
                .collect();
            assert!(
                early.is_empty(),
                "{arch}: {} touches memory before its wait: {early:?}",
                entry.name
            );
        }
    }
}
