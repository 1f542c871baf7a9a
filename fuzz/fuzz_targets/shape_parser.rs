//! Any text given to the CLI's shape parser gives a shape or an error, never a panic; a parsed
//! shape validates or is refused with an error, and its five-number form parses back to itself.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|text: &str| {
    if let Ok(shape) = text.parse::<flashrs::Shape>() {
        let _ = shape.validate();
        let _ = shape.to_string();
        let cli = format!(
            "{},{},{},{},{}",
            shape.batch, shape.heads, shape.seq_q, shape.seq_k, shape.head_dim
        );
        assert_eq!(cli.parse::<flashrs::Shape>(), Ok(shape));
    }
});
