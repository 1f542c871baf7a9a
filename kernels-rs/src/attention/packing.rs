//! `flash_decode`'s index arithmetic, pure integer code with no device instruction, so that the
//! host library compiles this same file (`#[path]` in `src/decode.rs`) and tests it on the CPU
//! against its own plan: which packed row is which query, and which KV tiles each key slice of
//! a block walks.

/// The packed rows of one KV head: the `group x seq_q` query rows of the query heads sharing it
/// (packed row `r` is query head `first_head + r / seq_q`, position `r % seq_q`).
#[derive(Clone, Copy, Debug)]
pub struct PackedRows {
    pub seq_q: u32,
    /// `group * seq_q`.
    pub count: u32,
    /// The query head (`b * H + h`) of packed row 0: `kv_head * group`.
    pub first_head: u32,
}

impl PackedRows {
    /// The packed rows of KV head `kv_head` (= `b * H_kv + h_kv`).
    #[inline(always)]
    pub fn new(kv_head: u32, group: u32, seq_q: u32) -> PackedRows {
        PackedRows {
            seq_q,
            count: group * seq_q,
            first_head: kv_head * group,
        }
    }

    /// Packed row `r`'s query head (`b * H + h`) and position.
    #[inline(always)]
    pub fn place(&self, r: u32) -> (usize, u32) {
        ((self.first_head + r / self.seq_q) as usize, r % self.seq_q)
    }

    /// The smallest query position among packed rows `first .. first + rows` (clipped to the
    /// packed rows; `first` must be one of them): what bounds where a sliding window starts.
    #[inline(always)]
    pub fn first_position(&self, first: u32, rows: u32) -> u32 {
        let last = (first + rows).min(self.count) - 1;
        if first / self.seq_q == last / self.seq_q {
            first % self.seq_q
        } else {
            0 // the block wraps into the next head: its rows start again at position 0
        }
    }

    /// The largest query position among packed rows `first .. first + rows` (clipped to the
    /// packed rows; `first` must be one of them): what bounds the keys a causal block needs.
    #[inline(always)]
    pub fn last_position(&self, first: u32, rows: u32) -> u32 {
        let last = (first + rows).min(self.count) - 1;
        if first / self.seq_q == last / self.seq_q {
            last % self.seq_q
        } else {
            self.seq_q - 1 // the block wraps into the next head: its rows reach the last position
        }
    }
}

/// The KV tiles slice `split` of `splits` walks: `(first tile, tile count)`. The block's tiles
/// start at the one holding `block_key_start` (a sliding window's first key for the block's first
/// row; 0 without one); every slice but the last takes an equal share of the tiles from there to
/// the sequence's end, in order; a block whose rows see no key at or past `block_key_end`
/// (causal) stops there, so a slice may get none.
#[inline(always)]
pub fn slice_tiles(
    seq_k: u32,
    block_n: u32,
    (splits, split): (u32, u32),
    (block_key_start, block_key_end): (u32, u32),
) -> (u32, u32) {
    let start_tile = block_key_start / block_n;
    let per_split = (seq_k.div_ceil(block_n) - start_tile).div_ceil(splits);
    let first_tile = start_tile + split * per_split;
    let end_tile = (first_tile + per_split).min(block_key_end.div_ceil(block_n));
    (first_tile, end_tile.saturating_sub(first_tile))
}
