//! Any prefix sums given to `VarlenBatch::new` (a varlen call's `cu_seqlens`) are accepted or
//! refused in one line, never a panic; when accepted, every sequence's rows lie inside the
//! packed tensors the library sizes (`lens`) and the packed shape validates.
#![no_main]

use flashrs::VarlenBatch;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let words: Vec<i32> = data
        .chunks(4)
        .map(|c| i32::from_le_bytes([c[0], *c.get(1).unwrap_or(&0), *c.get(2).unwrap_or(&0), *c.get(3).unwrap_or(&0)]))
        .collect();
    let (q, k) = words.split_at(words.len() / 2);
    match VarlenBatch::new(q.to_vec(), k.to_vec()) {
        Ok(batch) => {
            let (heads, heads_kv, d) = (4, 2, 64);
            let (q_len, kv_len, lse_len) = batch.lens(heads, heads_kv, d);
            for b in 0..batch.batch() {
                let (rows_q, rows_k) = (batch.q_range(b), batch.k_range(b));
                assert!(rows_q.end * heads * d <= q_len.max(1) || rows_q.is_empty(), "sequence {b}");
                assert!(rows_k.end * heads_kv * d <= kv_len.max(1) || rows_k.is_empty(), "sequence {b}");
                assert!(rows_q.end * heads <= lse_len.max(1) || rows_q.is_empty(), "sequence {b}");
            }
            if let Err(error) = batch.packed_shape(heads, heads_kv, d) {
                assert_eq!(error.to_string().lines().count(), 1, "{error}");
            }
        }
        Err(error) => {
            let message = error.to_string();
            assert_eq!(message.lines().count(), 1, "{message:?}");
        }
    }
});
