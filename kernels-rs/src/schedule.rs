//! Where the overlapped `flash_ws` loop waits for the P V product it left running: a choice of
//! instruction schedule, measured per head dim. The host library includes this file too
//! (`#[path]` in `src/lib.rs`), so that the check of the machine code (`tests/sass_schedule.rs`)
//! reads the same rule the kernels follow.

/// How many registers of a tile's S (from its first key on, one exponential each) a consumer
/// turns into probabilities before it waits for the last P V, at head dim `head_dim`; `None`:
/// all of them, the wait following the whole softmax.
///
/// At head dim 128 the rest of the exponentials then share a basic block with the packing of P,
/// which ptxas interleaves with them instead of leaving 32 conversions on the critical path after
/// the last one (docs/kernels/flash_ws.md, overlap): 1-4% faster on H100. Waiting after 0
/// registers let ptxas hoist the wait above every exponential (the overlap that overlapped
/// nothing, and again in the first try of this cut); after 32, or at head dims 64 and 256 after
/// 16, it measured slower than waiting after all of them.
/// Kernels with `speculative_exponentials` take its count instead.
pub const fn exponentials_before_wait(head_dim: usize) -> Option<usize> {
    if head_dim == 128 {
        Some(16)
    } else {
        None
    }
}

/// How many registers of a tile's S the overlapped loop exponentiates before that wait from the
/// rows' kept maxima, beside the search for the tile's own
/// (`FragmentSoftmax::probabilities_speculatively`), for inputs of `input_bytes` bytes at head dim
/// `head_dim` in tiles of `keys` keys, in place of `exponentials_before_wait`'s count; `None`: the
/// exponentials wait for the maxima.
///
/// e4m3 at head dim 128 with 128-key tiles only: there a tile's exponentials take the
/// multi-function unit as long as its products take the tensor cores. The first 16 beside the
/// maxima measured 2% fewer cycles, the first 32 4% fewer and 3-4% less time; 48 and all 64 took
/// 3.5% and 7% more time than 32 (the tail then no longer shares its block with the packing of
/// P: docs/kernels/fp8.md, the softmax at head dim 128). With 16 in every kernel, the 16-bit ones
/// measured 2-6% slower and e4m3 at head dim 256 3-4% slower; the three-consumer e4m3 kernel
/// (96-key tiles, 128 registers) spills with it (docs/history/perf-notes.md, a tile's first
/// exponentials from the kept row maxima).
pub const fn speculative_exponentials(head_dim: usize, input_bytes: usize, keys: usize) -> Option<usize> {
    if head_dim == 128 && input_bytes == 1 && keys == 128 {
        Some(32)
    } else {
        None
    }
}
