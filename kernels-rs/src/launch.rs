//! The launch parameters of every attention kernel, declared once. The host library includes this
//! file too (`#[path]` in `src/lib.rs`): [`LaunchArgs`] is what the host fills in, and the
//! device's entry points take the same list as their parameters (`kernel!` in `lib.rs`). A new
//! parameter is one new line in `with_launch_params!`.
//!
//! Why a generated parameter list rather than the struct passed by value (tried first): rustc
//! passes a `ptx-kernel` struct argument as one array of integers as wide as the struct's
//! alignment, so (1) the pointers in it reach LLVM as integers, which it cannot mark as pointers
//! to global memory (the sm_90a PTX got 96 generic `ld` and 432 generic `st` in place of `.global`
//! ones), and (2) at alignment 8 pairs of `u32` arrive in one 64-bit word that the kernel shifts
//! apart (`packed(4)` instead splits each pointer in two). Either way ptxas's register counts moved
//! by up to 32 per thread (the `flash_wgmma` d128 kernels up by 4 to 6). Separate parameters,
//! generated from one list, keep the PTX as it was.

/// Calls `$callback!` with the launch parameters appended to its tokens, in the order every
/// kernel declares them: `name: host type [as device type]`, each after its doc comment. The host
/// type is what [`LaunchArgs`] holds (device pointers as `u64`); the device type, when given, is
/// the entry point's parameter type.
macro_rules! with_launch_params {
    ($callback:ident!($($prefix:tt)*)) => {
        $callback! { $($prefix)*
            /// Q, `[B, H, S_q, D]` (or `[B, S_q, H, D]` with `seq_major`), the dtype's bits.
            q: u64 as *const u16,
            /// K, `[B, H / kv_group, S_k, D]` (or `[B, S_k, H / kv_group, D]`).
            k: u64 as *const u16,
            /// V, laid out as K.
            v: u64 as *const u16,
            /// The output, laid out as Q.
            out: u64 as *mut u16,
            /// Query rows per head (`S_q`).
            seq_q: u32,
            /// Key/value rows per head (`S_k`).
            seq_k: u32,
            /// `scale * log2(e)`: scores become base-2 exponents with one multiply.
            scale_log2: f32,
            /// 1 for the bottom-right-aligned causal mask, else 0.
            causal: u32,
            /// The sliding window's left size plus one: query row `i` sees no key before
            /// `i + seq_k - seq_q - left`; 0 for no left bound (`Problem::key_start`).
            window_left: u32,
            /// The right size plus one: no key after `i + seq_k - seq_q + right`; 0 for no right
            /// bound. A causal launch sends 1 (the kernels mask by this alone).
            window_right: u32,
            /// The logit softcap in raw-score units (`cap / scale`): scores `s` become
            /// `softcap * tanh(s / softcap)` before the softmax; 0 for none.
            softcap: f32,
            /// `1 / softcap` (0 without a softcap): the kernels' tanh takes it.
            softcap_inverse: f32,
            /// Query heads per key/value head (1 for ordinary attention).
            kv_group: u32,
            /// Where each row's log-sum-exp goes (`[B, H, S_q]` fp32), or 0 for none.
            lse: u64 as *mut f32,
            /// Attention sinks: one logit per query head (`[H]` fp32, in the units of the scaled
            /// scores) that joins each row's softmax denominator and adds no value (GPT-OSS's
            /// sinks); 0 for none.
            sinks: u64 as *const f32,
            /// Query heads per batch entry (`H`).
            heads: u32,
            /// The tensors' head dim where it is below the kernel's compiled `D` (a multiple of 8):
            /// `flash_ws` reads the columns past it as the copy engine's zeros and writes none of
            /// them (`Problem::columns`); 0 for `D`, which every other family takes.
            head_dim: u32,
            /// 1 when the tensors are `[B, S, H, D]`, 0 for `[B, H, S, D]`.
            seq_major: u32,
            /// `B * H`, spread over the grid's y and z.
            batch_heads: u32,
            /// Four `u32` per block written by a `_counted` twin, or 0 (the plain kernels ignore it).
            barrier_log: u64 as *mut u32,
            /// flash_ws and the copy-engine flash_decode variants: the TMA descriptors the host
            /// builds for this call (`maps`); 0 for every other kernel.
            tensor_maps: u64,
            /// flash_decode: slices the key range is split into (1: the blocks write the output
            /// directly); the persistent flash_ws: slices of each item of its last round
            /// (`tail_split`); 1 for every other family.
            kv_splits: u32,
            /// flash_decode with `kv_splits > 1` (and its combine kernel): fp32 partial outputs
            /// `[kv_splits, B*H, S_q, D]`, then their base-2 log-sum-exps `[kv_splits, B*H, S_q]`;
            /// the persistent flash_ws with `kv_splits > 1`: `tail_split::workspace_floats`
            /// floats; 0 otherwise.
            workspace: u64 as *mut f32,
            /// flash_decode with `kv_splits > 1`: one `u32` per (KV head, row block) of the grid
            /// (the persistent flash_ws: `tail_split::counters` of them), 0 between launches,
            /// counting the slices whose partials are written; the block that completes the count
            /// merges the slices and sets it back to 0. 0 otherwise.
            split_counters: u64 as *mut u32,
            /// flash_decode's paged entry points: the block table `[B, max_blocks]` (int32), the
            /// cache page holding each `block_size` keys of each sequence; 0 for every other kernel.
            block_table: u64 as *const u32,
            /// Paged: each sequence's key count, `[B]` int32; 0 otherwise.
            seqlens_k: u64 as *const u32,
            /// Paged: keys per page, a power of two from 16 to 256; 0 otherwise.
            block_size: u32,
            /// Paged: entries per block-table row (`max_blocks`); 0 otherwise.
            max_blocks: u32,
            /// Variable-length entry points (`_varlen`): `[B + 1]` int32 prefix sums of the
            /// sequences' query counts in the packed `[total_q, H, D]` Q and output (then `seq_q`
            /// is `total_q`, `seq_major` 1); 0 for every other kernel.
            cu_seqlens_q: u64 as *const u32,
            /// Varlen: the same for the keys of the packed `[total_k, H_kv, D]` K and V (`seq_k`
            /// is `total_k`); 0 otherwise.
            cu_seqlens_k: u64 as *const u32,
            /// flash_ws_fp8: the e4m3 inputs' descale factors, `[3, B, H_kv]` fp32 (Q's, K's,
            /// V's; a query head uses its KV head's entry); 0 for every other kernel.
            descale: u64 as *const f32,
            /// The persistent flash_ws: the positions of its walk over the work items that are
            /// whole items (`item_walk::ItemWalk`); 0 for every other kernel.
            walk_whole_items: u32,
            /// The persistent flash_ws: the positions of the walk, whole items and slices.
            walk_length: u32,
            /// The persistent flash_ws: `item_walk::Divisor` bits of the query row blocks per head.
            walk_row_blocks: u64,
            /// The persistent flash_ws: `item_walk::Divisor` bits of the slices per split item.
            walk_slices: u64,
            /// The persistent flash_ws: `item_walk::Divisor` bits of the query heads (`H`).
            walk_heads: u64,
            /// The persistent flash_ws on a causal problem: the device address of the table of
            /// each block's items (`item_walk::table`); 0 for the walk by positions.
            walk_table: u64,
        }
    };
}

/// The buffer behind the `tensor_maps` parameter, for kernels that read through the copy engine:
/// the encoded maps (`src/tma.rs`), `MAP_BYTES` apart, in these places: Q, K, V, and the output
/// in boxes of 64 rows. A kernel that reads only some (flash_decode: K and V) leaves the others
/// unread.
pub mod maps {
    /// Q's map, in boxes of a query tile's rows.
    pub const MAP_Q: usize = 0;
    /// K's map (or a paged K cache's), in boxes of a key tile's rows (or a page's).
    pub const MAP_K: usize = 1;
    /// V's, as K's.
    pub const MAP_V: usize = 2;
    /// The output's, in boxes of 64 rows.
    pub const MAP_O: usize = 3;
    /// Places in the buffer.
    pub const MAPS: usize = 4;
    /// The e4m3 kernels' fifth map: V in its own rows, as K's (`FP8_K_BOX_ROWS`), for the kernels
    /// that transpose V's tiles themselves; `MAP_V` is then the transposed copy's, for the others.
    pub const FP8_MAP_V_ROWS: usize = 4;
    /// Places in an e4m3 call's buffer.
    pub const FP8_MAPS: usize = 5;
    /// Bytes of one encoded map (`CUtensorMap`).
    pub const MAP_BYTES: usize = 128;
    /// Rows of Q's box for the e4m3 kernels, whose maps are encoded once for every variant
    /// (`flash_ws_fp8`: 128 or 192 query rows, each a whole number of boxes).
    pub const FP8_Q_BOX_ROWS: u32 = 64;
    /// Rows of K's box for the e4m3 kernels (key tiles of 96 to 224 keys). Transposed V's box is
    /// 128 keys (one 128-byte swizzle span) by the head dim.
    pub const FP8_K_BOX_ROWS: u32 = 32;
}

/// The tail split of the persistent `flash_ws` (`attention::ws`), planned the same way by the
/// host (which sizes the workspace and passes `kv_splits`) and the device (which derives its
/// items from the grid).
///
/// A persistent grid of `grid` blocks walks `items` work items of equal size in rounds of `grid`.
/// When the last round holds only `items % grid` of them, most blocks sit idle while those few
/// run a whole item (at head dim 64, 704 items of 192 rows on 132 SMs: 5.33 rounds take 6 item
/// times). The split cuts each item of that last round into `slices` key ranges, one per block,
/// and the last slice of an item to finish merges the others' partial results into the output
/// (as `flash_decode` merges its slices): the last round takes about `1 / slices` of an item.
pub mod tail_split {
    /// Fewest KV tiles a slice gets: below that, its pipeline fill, Q copy and the merge cost
    /// more than the tiles it takes off the last round.
    pub const MIN_TILES: u32 = 2;

    /// Most slices of one item (bounds the merge's loop).
    pub const MAX_SLICES: u32 = 8;

    /// Slices per item of the last round, for a grid of `grid` blocks over `items` items of
    /// `tiles` KV tiles each: as many as the idle blocks allow; 1 (no split) when the rounds are
    /// full or a slice would get fewer than `MIN_TILES` tiles.
    pub const fn slices(items: u32, grid: u32, tiles: u32) -> u32 {
        let tail = tail_items(items, grid);
        if tail == 0 {
            return 1;
        }
        let slices = grid / tail;
        let slices = if slices < tiles / MIN_TILES {
            slices
        } else {
            tiles / MIN_TILES
        };
        let slices = if slices < MAX_SLICES { slices } else { MAX_SLICES };
        if slices < 2 {
            1
        } else {
            slices
        }
    }

    /// Items of the last, partial round (0 when every round is full or there is no grid).
    pub const fn tail_items(items: u32, grid: u32) -> u32 {
        if grid == 0 {
            0
        } else {
            items % grid
        }
    }

    /// Floats one consumer warpgroup's slice writes: for each of its 128 threads, the
    /// `head_dim / 2` accumulators of O it holds (64 rows x `head_dim` over 128 threads) and the
    /// (maximum, sum) of its two rows.
    pub const fn slot_floats(head_dim: u32) -> u32 {
        128 * (head_dim / 2 + 4)
    }

    /// The workspace of a split launch, in floats: every slice's slot of every consumer
    /// warpgroup (`consumers = block_m / 64`); 0 without a split.
    pub const fn workspace_floats(items: u32, grid: u32, slices: u32, consumers: u32, head_dim: u32) -> u64 {
        if slices < 2 {
            return 0;
        }
        tail_items(items, grid) as u64 * slices as u64 * consumers as u64 * slot_floats(head_dim) as u64
    }

    /// Slice counters of a split launch: one per (item of the last round, consumer warpgroup).
    pub const fn counters(items: u32, grid: u32, slices: u32, consumers: u32) -> u32 {
        if slices < 2 {
            0
        } else {
            tail_items(items, grid) * consumers
        }
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        #[test]
        fn splits_only_a_short_last_round() {
            // Head dim 64, 192-row blocks: 704 items on 132 SMs leave 44 for the last round.
            assert_eq!(slices(704, 132, 16), 3);
            assert_eq!(slices(704, 132, 32), 3);
            // 1024 items of 128 rows: the last round is 100 of 132, nothing to gain.
            assert_eq!(slices(1024, 132, 16), 1);
            // Full rounds, fewer items than blocks.
            assert_eq!(slices(660, 132, 16), 1);
            assert_eq!(slices(100, 132, 16), 1);
            // Few tiles bound the slices; so does MAX_SLICES.
            assert_eq!(slices(704, 132, 4), 2);
            assert_eq!(slices(704, 132, 3), 1);
            assert_eq!(slices(133, 132, 64), MAX_SLICES);
            assert_eq!(slices(0, 0, 16), 1);
        }

        #[test]
        fn workspace_holds_every_slot_and_a_counter_per_warpgroup() {
            assert_eq!(workspace_floats(704, 132, 3, 3, 64), 44 * 3 * 3 * 128 * 36);
            assert_eq!(counters(704, 132, 3, 3), 44 * 3);
            assert_eq!(workspace_floats(704, 132, 1, 3, 64), 0);
            assert_eq!(counters(704, 132, 1, 3), 0);
            // Every block of the last round has at most one slice.
            for (items, grid, tiles) in [(704u32, 132u32, 16u32), (300, 132, 64), (133, 132, 64)] {
                let s = slices(items, grid, tiles);
                assert!(tail_items(items, grid) * s <= grid);
            }
        }
    }
}

/// The persistent `flash_ws`'s walk over its work items, prepared by the host for each launch so
/// that the device finds a block's next item with multiplies: a division by a value known only at
/// run time is ~20 instructions through the reciprocal unit on the GPU, and the item loop did six
/// or more of them between two items (~1k cycles, docs/kernels/flash_ws.md, persistence).
pub mod item_walk {
    use super::tail_split;

    /// Division by a divisor `d` fixed for a launch: `n / d` as a multiply-high, an add and a
    /// shift, exact for every `u32` `n` (Granlund and Montgomery's round-up method: a 33-bit
    /// multiplier `2^32 + multiplier`, `shift = ceil(log2 d)`).
    #[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
    pub struct Divisor {
        multiplier: u32,
        shift: u32,
    }

    impl Divisor {
        /// Division by `d` (`d = 0` divides by 1: a launch that has no such divisor).
        pub const fn new(d: u32) -> Self {
            let d = if d == 0 { 1 } else { d as u64 };
            // ceil(log2 d): 0 for d = 1.
            let shift = 64 - (d - 1).leading_zeros();
            // floor(2^32 (2^shift - d) / d) + 1, below 2^32 as 2^shift - d < d.
            let multiplier = ((1u64 << 32) * ((1u64 << shift) - d) / d + 1) as u32;
            Divisor { multiplier, shift }
        }

        /// `n / d`.
        #[inline(always)]
        pub fn quotient(self, n: u32) -> u32 {
            let high = (n as u64 * self.multiplier as u64) >> 32;
            ((high + n as u64) >> self.shift) as u32
        }

        /// `(n / d, n % d)`, `d` being this divisor's.
        #[inline(always)]
        pub fn div_rem(self, n: u32, d: u32) -> (u32, u32) {
            let q = self.quotient(n);
            (q, n - q * d)
        }

        /// As a launch parameter.
        pub const fn to_bits(self) -> u64 {
            self.multiplier as u64 | (self.shift as u64) << 32
        }

        /// From a launch parameter.
        #[inline(always)]
        pub const fn from_bits(bits: u64) -> Self {
            Divisor {
                multiplier: bits as u32,
                shift: (bits >> 32) as u32,
            }
        }
    }

    /// A persistent launch's walk: position `w` (block `b`'s `i`-th item is `b + i * grid`) is
    /// item `w` while `w < whole_items`, then slice `(w - whole_items) % slices` of item
    /// `whole_items + (w - whole_items) / slices` (`tail_split`), up to `length`; an item is
    /// (head, row block) = `(item / row_blocks, item % row_blocks)`.
    #[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
    pub struct ItemWalk {
        /// Positions that are whole items.
        pub whole_items: u32,
        /// Positions of the walk: whole items, then the slices of the last round's.
        pub length: u32,
        /// Query row blocks per head.
        pub row_blocks: Divisor,
        /// Slices per item of the last round.
        pub slices: Divisor,
        /// Query heads per batch entry: a head's coordinates in the tensor maps.
        pub heads: Divisor,
        /// The device address of the host's list of each block's items (`table`), 0 for none:
        /// then the positions above say them.
        pub table: u64,
    }

    impl ItemWalk {
        /// The walk over `row_blocks * batch_heads` items on `grid` blocks, each item of the last
        /// round cut into `slices` (1: none), the heads `heads` per batch entry.
        pub const fn new(row_blocks: u32, batch_heads: u32, heads: u32, grid: u32, slices: u32) -> Self {
            let items = row_blocks.saturating_mul(batch_heads);
            let (whole_items, length) = if slices > 1 {
                let tail = tail_split::tail_items(items, grid);
                (items - tail, items - tail + tail * slices)
            } else {
                (items, items)
            };
            ItemWalk {
                whole_items,
                length,
                row_blocks: Divisor::new(row_blocks),
                slices: Divisor::new(slices),
                heads: Divisor::new(heads),
                table: 0,
            }
        }
    }

    /// The layout of a walk's item table (`ItemWalk::table`), which the host builds where the
    /// positions would deal the blocks unequal work (causal problems, whose items see from one to
    /// all of the keys): `u32` words, first `grid + 1` offsets (block `b`'s items are the
    /// `offsets[b] .. offsets[b + 1]`-th), padded to an even count, then one (query head, row
    /// block) pair per item, each block's in the order it takes them.
    pub mod table {
        /// The word where the pairs start: after the offsets, at an 8-byte boundary (a pair is
        /// one 8-byte load).
        pub const fn pairs_start(grid: u32) -> u32 {
            (grid + 2) / 2 * 2
        }

        /// Words of the table of `items` items on `grid` blocks.
        pub const fn words(grid: u32, items: u32) -> usize {
            pairs_start(grid) as usize + 2 * items as usize
        }

        /// A varlen launch's table (`_varlen` entry points of the persistent `flash_ws`) has
        /// the same offsets, then per item the words of `varlen_entry`, from a 16-byte boundary:
        /// an entry is two 16-byte loads.
        pub const fn varlen_entries_start(grid: u32) -> u32 {
            (grid + 4) / 4 * 4
        }

        /// Words of a varlen item's entry.
        pub const VARLEN_ENTRY_WORDS: u32 = 8;

        /// A varlen item's entry: its in-sequence query head, its row block, then where its
        /// sequence sits (`attention::varlen::Bounds`): first query row, query rows, first key
        /// row, key rows; two words of padding.
        pub const fn varlen_entry(head: u32, row_block: u32, bounds: [u32; 4]) -> [u32; 8] {
            let [q_start, seq_q, k_start, seq_k] = bounds;
            [head, row_block, q_start, seq_q, k_start, seq_k, 0, 0]
        }

        /// Words of a varlen table of `items` items on `grid` blocks.
        pub const fn varlen_words(grid: u32, items: u32) -> usize {
            varlen_entries_start(grid) as usize + VARLEN_ENTRY_WORDS as usize * items as usize
        }
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        fn check(d: u32, n: u32) {
            assert_eq!(Divisor::new(d).quotient(n), n / d, "{n} / {d}");
        }

        #[test]
        fn divides_exactly() {
            // Every numerator up to 2^16 for the small divisors, the edges for all of them.
            for d in 1..=300u32 {
                for n in 0..=1 << 16 {
                    check(d, n);
                }
            }
            let edges = |d: u32| {
                let m = d.wrapping_mul(u32::MAX / d);
                [
                    0,
                    1,
                    d - 1,
                    d,
                    d.saturating_add(1),
                    m.wrapping_sub(1),
                    m,
                    u32::MAX - 1,
                    u32::MAX,
                ]
            };
            let mut divisors: Vec<u32> = (1..=5000).collect();
            for k in 1..32 {
                divisors.extend([(1u32 << k) - 1, 1 << k, (1u32 << k) + 1]);
            }
            divisors.extend([u32::MAX, u32::MAX - 1, 641, 6_700_417, 2_147_483_647]);
            // A fixed pseudo-random sequence (splitmix64) of numerators.
            let mut state = 0x9e37_79b9_7f4a_7c15u64;
            let mut next = || {
                state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
                let mut z = state;
                z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
                z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
                (z ^ (z >> 31)) as u32
            };
            for d in divisors {
                for n in edges(d) {
                    check(d, n);
                }
                for _ in 0..200 {
                    check(d, next());
                }
            }
            // A launch without the divisor divides by 1.
            assert_eq!(Divisor::new(0).quotient(12345), 12345);
            let d = Divisor::new(192);
            assert_eq!(Divisor::from_bits(d.to_bits()), d);
        }

        #[test]
        fn walks_every_item_and_slice_once() {
            // (2,8,2048,64) in 192-row items on 132 SMs: 132 whole items, 44 cut in three.
            let walk = ItemWalk::new(11, 16, 8, 132, 3);
            assert_eq!((walk.whole_items, walk.length), (132, 132 + 44 * 3));
            let walk = ItemWalk::new(11, 16, 8, 132, 1);
            assert_eq!((walk.whole_items, walk.length), (176, 176));
            let (q, r) = walk.row_blocks.div_rem(175, 11);
            assert_eq!((q, r), (15, 10));
        }
    }
}

/// What an instrumented (counted) twin records per block of its launch, in the barrier log at
/// `block * WORDS` (the block's linear index): a header of `HEADER` words (the block barriers
/// counted, the KV tiles, the SM cycles of the consumers' work, the SM), then the timeline of
/// its first `TRACED_ITEMS` work items (`flash_ws` only; zeros elsewhere): for each, the low 32
/// bits of the SM clock at each of `EVENTS` points of the first consumer warpgroup's work on it.
pub mod record {
    /// Words (`u32`) of the header.
    pub const HEADER: u32 = 4;
    /// Work items whose timeline a block records (a persistent block's first ones).
    pub const TRACED_ITEMS: u32 = 12;
    /// Points of an item's timeline, in the order they happen (the constants below).
    pub const EVENTS: u32 = 5;
    /// The consumer is ready for the item.
    pub const START: u32 = 0;
    /// Its Q has landed.
    pub const READY: u32 = 1;
    /// Its last P V has completed.
    pub const LOOP_END: u32 = 2;
    /// A split item's slices merged (or this slice's slot published); for a whole item, right
    /// after `LOOP_END`.
    pub const MERGED: u32 = 3;
    /// Its output stored, or handed to the copy engine.
    pub const DONE: u32 = 4;
    /// Where the tile timelines start: after the items'.
    pub const TILES_AT: u32 = HEADER + TRACED_ITEMS * EVENTS;
    /// KV tiles of the block's first item whose timeline each traced consumer records (the
    /// overlapped loop's, `flash_ws` and `flash_ws_fp8`).
    pub const TRACED_TILES: u32 = 32;
    /// Consumer warpgroups whose tiles are traced: the first two (the ping-pong pair).
    pub const TRACED_CONSUMERS: u32 = 2;
    /// Points of a traced tile, in the order they happen (the constants below); a consumer's
    /// tiles follow one another, consumer 0's first.
    pub const TILE_EVENTS: u32 = 6;
    /// The consumer has the turn at the tensor cores: the clock read that follows the turn's
    /// barrier. ptxas emits that barrier as `BAR.SYNC.DEFER_BLOCKING`, which lets the read issue
    /// before the barrier completes, so this can precede the other consumer's hand-over; the span
    /// to `TILE_ISSUED` then holds the wait for the turn (docs/history/perf-notes.md, the per-tile
    /// timelines of the consumers).
    pub const TILE_TURN: u32 = 0;
    /// Its products (the tile's S = Q K^T, the tile before's P V) are issued, the turn passed on.
    pub const TILE_ISSUED: u32 = 1;
    /// The tile's S has landed.
    pub const TILE_SCORES: u32 = 2;
    /// The softmax's part before the wait for the tile's V and the last P V
    /// (`schedule::exponentials_before_wait`; all of it where that says none) is issued.
    pub const TILE_HEAD: u32 = 3;
    /// The tile's V has landed and the tile before's P V has completed.
    pub const TILE_RETIRED: u32 = 4;
    /// Its P is packed for the product with V.
    pub const TILE_PACKED: u32 = 5;
    /// Words per block.
    pub const WORDS: u32 = TILES_AT + TRACED_CONSUMERS * TRACED_TILES * TILE_EVENTS;
}

/// The geometry of `fp8_transpose_v` (e4m3 V transposed before `flash_ws_fp8`), which the host
/// launches with these numbers: blocks of `TILE` keys by `TILE` columns, `THREADS` threads,
/// `SMEM_BYTES` of dynamic shared memory.
pub mod fp8_transpose {
    /// Keys one block transposes: eight groups of 16, one per four lanes of a warp.
    pub const KEYS_PER_BLOCK: u32 = 128;
    /// Head-dim columns one warp moves: 16 bytes of each key.
    pub const COLUMNS_PER_WARP: u32 = 16;
    /// Threads per block.
    pub const THREADS: u32 = 256;
    /// Head-dim columns one block moves (its warps side by side): 128, so head dims 128 and 256
    /// are one and two blocks wide.
    pub const COLUMNS_PER_BLOCK: u32 = THREADS / 32 * COLUMNS_PER_WARP;
}

/// The order in which a causal grid's blocks take their work items (`Problem::block_item` and the
/// persistent `flash_ws` schedule on the device); here so that the host's tests check it.
///
/// A causal row block sees more keys the later it is. In the grid's own order (row block x of
/// head y, the hardware starting blocks in x, then y order) the last heads' last row blocks, the
/// longest items, start last and the other SMs wait for them. The blocks that start last should
/// be short ones (longest processing time first: docs/kernels/flash_ws.md, persistence). Taken
/// across all heads at once, though, the blocks working together read every head's K and V, which
/// overflow L2 (13% slower at (1,16,16384,128)); so the heads go in groups whose K and V fit in a
/// share of L2, and each group's row blocks run last to first across its heads.
pub mod causal_order {
    /// The share of L2 (a quarter of the H100's 50 MB) that a group's K and V may fill: Q and the
    /// output stream through L2 as well.
    pub const L2_SHARE_BYTES: u64 = 12 << 20;

    /// The most query heads a group may have: a power of two of them whose K and V (`seq_k` rows
    /// of `head_dim` 16-bit elements, shared by `kv_group` query heads) fit in `L2_SHARE_BYTES`
    /// together; at least 1. (A power of two, because head counts are: groups of three or six made
    /// an odd group out at the end, which left SMs idle in the model of docs/history/perf-notes.md,
    /// causal blocks longest first.)
    #[inline(always)]
    pub fn max_heads_per_group(seq_k: u32, head_dim: u32, kv_group: u32) -> u32 {
        // p heads fit when p x (one KV head's bytes) <= share x kv_group; no division (a
        // 64-bit one is a long software routine on the GPU).
        let kv_bytes = (seq_k as u64 * head_dim as u64 * 4).max(1);
        let budget = L2_SHARE_BYTES * kv_group.max(1) as u64;
        if kv_bytes > budget {
            return 1;
        }
        // log2(budget / kv_bytes) is this or one less.
        let mut log2 = budget.ilog2() - kv_bytes.ilog2();
        if kv_bytes << log2 > budget {
            log2 -= 1;
        }
        1 << log2.min(16)
    }

    /// Work item `item` (`0 .. row_blocks * heads`) as (query head, row block): the heads split into
    /// `ceil(heads / max_group)` groups of sizes that differ by at most one (the larger first), and
    /// each group's items run row block by row block, last to first, across the group's heads.
    #[inline(always)]
    pub fn item(item: u32, row_blocks: u32, heads: u32, max_group: u32) -> (u32, u32) {
        let groups = heads.div_ceil(max_group);
        let (size, larger) = (heads / groups, heads % groups);
        // The `larger` groups of `size + 1` heads come first.
        let larger_items = larger * (size + 1) * row_blocks;
        let (first_head, heads_here, at) = if item < larger_items {
            let per_group = (size + 1) * row_blocks;
            (item / per_group * (size + 1), size + 1, item % per_group)
        } else {
            let (rest, per_group) = (item - larger_items, size * row_blocks);
            (
                larger * (size + 1) + rest / per_group * size,
                size,
                rest % per_group,
            )
        };
        (first_head + at % heads_here, row_blocks - 1 - at / heads_here)
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        #[test]
        fn every_item_once_and_longest_first_within_a_group() {
            for (row_blocks, heads, max_group) in [
                (32u32, 32u32, 8u32),
                (128, 16, 1),
                (5, 7, 4),
                (1, 1, 1),
                (9, 6, 4),
                (3, 5, 8),
            ] {
                let groups = heads.div_ceil(max_group);
                let (size, larger) = (heads / groups, heads % groups);
                assert!(size >= 1 && size + (larger > 0) as u32 <= max_group.max(1));
                let group_of = |head: u32| {
                    let split = larger * (size + 1);
                    if head < split {
                        head / (size + 1)
                    } else {
                        larger + (head - split) / size
                    }
                };
                let mut seen = vec![false; (row_blocks * heads) as usize];
                let mut last: Option<(u32, u32)> = None; // (group, row block) of the previous item
                for i in 0..row_blocks * heads {
                    let (head, row_block) = item(i, row_blocks, heads, max_group);
                    assert!(
                        head < heads && row_block < row_blocks,
                        "{i}: ({head}, {row_block})"
                    );
                    let slot = &mut seen[(head * row_blocks + row_block) as usize];
                    assert!(!*slot, "item {i} repeats ({head}, {row_block})");
                    *slot = true;
                    // Groups in order; inside one, row blocks never grow.
                    let now = (group_of(head), row_block);
                    if let Some((g, rb)) = last {
                        assert!(
                            now.0 == g + 1 || (now.0 == g && now.1 <= rb),
                            "item {i}: {last:?} then {now:?}"
                        );
                    }
                    last = Some(now);
                }
                assert!(seen.iter().all(|&s| s));
            }
        }

        #[test]
        fn groups_fit_the_l2_share() {
            // (2,16,4096,128): 2 MiB of K and V per head, 6 would fit in 12 MiB: 4.
            assert_eq!(max_heads_per_group(4096, 128, 1), 4);
            // (1,16,16384,128): 8 MiB per head.
            assert_eq!(max_heads_per_group(16384, 128, 1), 1);
            // Grouped-query heads share theirs: 8 query heads per KV head.
            assert_eq!(max_heads_per_group(16384, 128, 8), 8);
            // Never fewer than one; short sequences: capped, a power of two.
            assert_eq!(max_heads_per_group(u32::MAX, 256, 1), 1);
            assert_eq!(max_heads_per_group(1, 64, 1024), 1 << 16);
            assert_eq!(max_heads_per_group(128, 64, 1), 256);
            // The largest power of two p (up to 2^16) with p x K and V bytes <= share x kv_group.
            for seq_k in [1, 7, 100, 1000, 3000, 4096, 5000, 65_536, 1 << 20, u32::MAX] {
                for (head_dim, kv_group) in [(64, 1), (128, 1), (256, 1), (128, 3), (64, 8), (256, 64)] {
                    let p = max_heads_per_group(seq_k, head_dim, kv_group) as u64;
                    let kv = seq_k as u64 * head_dim as u64 * 4;
                    let budget = L2_SHARE_BYTES * kv_group as u64;
                    assert!(
                        p.is_power_of_two() && p <= 1 << 16,
                        "{seq_k} {head_dim} {kv_group}: {p}"
                    );
                    assert!(p == 1 || p * kv <= budget, "{seq_k} {head_dim} {kv_group}: {p}");
                    assert!(
                        p == 1 << 16 || 2 * p * kv > budget,
                        "{seq_k} {head_dim} {kv_group}: {p}"
                    );
                }
            }
        }
    }
}

/// The parameter type of a `with_launch_params!` entry on the device: its device type if it has
/// one, else its host type.
#[allow(unused_macros)]
macro_rules! launch_param_type {
    ($host:ty as $device:ty) => {
        $device
    };
    ($host:ty) => {
        $host
    };
}

macro_rules! define_launch_args {
    ($($(#[$doc:meta])* $field:ident: $host:ty $(as $device:ty)?,)*) => {
        /// One kernel call's parameters as the host fills them in (device pointers as `u64`), in
        /// kernel parameter order. Grid: `(ceil(seq_q / BLOCK_M), min(B*H, 65535),
        /// ceil(B*H / 65535))`.
        #[derive(Clone, Copy, Debug, Default, PartialEq)]
        pub struct LaunchArgs {
            $($(#[$doc])* pub $field: $host,)*
        }

        impl LaunchArgs {
            /// Each kernel parameter's size in bytes, in order: what every entry point's PTX
            /// declares.
            pub const PARAM_BYTES: &'static [usize] = &[$(core::mem::size_of::<$host>()),*];
        }
    };
}

with_launch_params!(define_launch_args!());

impl LaunchArgs {
    /// These parameters with the persistent flash_ws's walk over its items (`item_walk`).
    pub fn walking(self, walk: item_walk::ItemWalk) -> Self {
        LaunchArgs {
            walk_whole_items: walk.whole_items,
            walk_length: walk.length,
            walk_row_blocks: walk.row_blocks.to_bits(),
            walk_slices: walk.slices.to_bits(),
            walk_heads: walk.heads.to_bits(),
            walk_table: walk.table,
            ..self
        }
    }
}
