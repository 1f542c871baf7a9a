//! Any block size, page count, block table and lengths given to `PagedKv::new` (what a paged call
//! takes from its caller) are accepted or refused in one line, never a panic; when accepted,
//! every key of every sequence, found through the table as the kernels find it (page
//! `table[b][key / block_size]`, slot `page * block_size + key % block_size`), lies inside the
//! cache the library sizes (`cache_len`), for every KV head and column.
#![no_main]

use flashrs::PagedKv;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if data.len() < 4 {
        return;
    }
    let block_size = 1usize << (data[0] % 10);
    let num_blocks = usize::from(data[1]) + usize::from(data[2] & 1) * 100_000;
    let batch = usize::from(data[3] % 6).max(1);
    let words: Vec<i32> = data[4..]
        .chunks(2)
        .map(|c| i32::from(i16::from_le_bytes([c[0], *c.get(1).unwrap_or(&0)])))
        .collect();
    let (lens, table) = words.split_at(batch.min(words.len()));
    let Ok(cache) = PagedKv::new(block_size, num_blocks, table.to_vec(), lens.to_vec()) else {
        return;
    };
    let (heads_kv, head_dim) = (2, 64);
    let Ok(shape) = cache.shape(4, heads_kv, 1, head_dim) else {
        return;
    };
    let cache_len = cache.cache_len(shape).expect("the shape was accepted with this cache");
    let max_blocks = cache.max_blocks();
    for (b, &len) in cache.seqlens_k().iter().enumerate() {
        for key in 0..len as usize {
            let page = cache.block_table()[b * max_blocks + key / cache.block_size()];
            assert!((0..num_blocks as i32).contains(&page), "sequence {b}, key {key}: page {page}");
            let slot = page as usize * cache.block_size() + key % cache.block_size();
            let last = ((slot * heads_kv) + heads_kv - 1) * head_dim + head_dim - 1;
            assert!(last < cache_len, "sequence {b}, key {key}: element {last} of {cache_len}");
        }
    }
});
