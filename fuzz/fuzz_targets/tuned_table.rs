//! Any text given to the tuned table's reader (`FLASHRS_TUNED`, `tune --save`'s file) is a table
//! or a one-line error, never a panic; a table's lookups and its check against the variant table
//! answer for any problem, naming a stale entry rather than panicking.
#![no_main]

use flashrs::tuned_table::TunedTable;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    match TunedTable::parse(text) {
        Ok(table) => {
            let _ = table.validate(flashrs::VARIANTS);
            for gpu in table.gpus.keys().map(String::as_str).chain(["NVIDIA H100 80GB HBM3"]) {
                for (d, seq, causal) in [(64, 1, false), (128, 4096, true), (256, 100_000, false), (96, 0, true)] {
                    for dtype in ["f16", "bf16", "x"] {
                        if let Err(error) = table.resolve(flashrs::VARIANTS, gpu, dtype, d, seq, causal) {
                            assert_eq!(error.to_string().lines().count(), 1, "{error}");
                        }
                    }
                }
            }
        }
        Err(error) => {
            let message = error.to_string();
            assert_eq!(message.lines().count(), 1, "{message:?}");
        }
    }
});
