//! Any text given to the CLI's shape parser gives a shape or an error, never a panic; a parsed
//! shape validates or is refused with a one-line error, and its five-number form parses back to
//! itself.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|text: &str| {
    match text.parse::<flashrs::Shape>() {
        Ok(shape) => {
            if let Err(error) = shape.validate() {
                assert_eq!(error.to_string().lines().count(), 1);
            }
            assert_eq!(shape.heads_kv, shape.heads);
            let _ = shape.to_string();
            let cli = format!(
                "{},{},{},{},{}",
                shape.batch, shape.heads, shape.seq_q, shape.seq_k, shape.head_dim
            );
            assert_eq!(cli.parse::<flashrs::Shape>(), Ok(shape));
        }
        Err(message) => assert!(!message.is_empty()),
    }
});
