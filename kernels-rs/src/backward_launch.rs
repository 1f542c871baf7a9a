//! The launch parameters of the backward kernels (`attention::backward`), declared once for both
//! sides as `launch.rs` declares the forward's: the host includes this file too (`#[path]` in
//! `src/lib.rs`). Beside them, the two layouts both sides compute: the workspace the host
//! allocates and the kernels address (`workspace`), and the main kernel's shared memory (`smem`).
//!
//! The three kernels of one backward call take the same list; each reads the part it needs.

/// Calls `$callback!` with the backward launch parameters appended to its tokens, as
/// `with_launch_params!` does for the forward's.
macro_rules! with_backward_params {
    ($callback:ident!($($prefix:tt)*)) => {
        $callback! { $($prefix)*
            /// Q, `[B, H, S_q, D]` (or `[B, S_q, H, D]` with `seq_major`), the dtype's bits.
            q: u64 as *const u16,
            /// K, `[B, H / kv_group, S_k, D]` (or `[B, S_k, H / kv_group, D]`).
            k: u64 as *const u16,
            /// V, laid out as K.
            v: u64 as *const u16,
            /// The forward's output O, laid out as Q.
            out: u64 as *const u16,
            /// The gradient of the loss by O, laid out as Q.
            d_out: u64 as *const u16,
            /// The gradient by Q, laid out as Q: written by the last kernel from the workspace's
            /// fp32 accumulator.
            d_q: u64 as *mut u16,
            /// The gradient by K, laid out as K.
            d_k: u64 as *mut u16,
            /// The gradient by V, laid out as V.
            d_v: u64 as *mut u16,
            /// The forward's log-sum-exp of each query row (natural log), `[B, H, S_q]` fp32.
            lse: u64 as *const f32,
            /// `workspace::floats` floats of scratch, laid out as `workspace` says.
            workspace: u64 as *mut f32,
            /// Query rows per head (`S_q`).
            seq_q: u32,
            /// Key/value rows per head (`S_k`).
            seq_k: u32,
            /// `scale * log2(e)`: the forward's scores as base-2 exponents.
            scale_log2: f32,
            /// The softmax scale itself, applied to dQ and dK.
            scale: f32,
            /// 1 for the bottom-right-aligned causal mask, else 0.
            causal: u32,
            /// As the forward's (`launch.rs`): the sliding window's left size plus one, 0 for none.
            window_left: u32,
            /// The right size plus one, 0 for none; 1 under the causal mask.
            window_right: u32,
            /// The logit softcap in raw-score units (`cap / scale`), 0 for none.
            softcap: f32,
            /// `1 / softcap`, 0 without a softcap.
            softcap_inverse: f32,
            /// Query heads per key/value head (1 for ordinary attention).
            kv_group: u32,
            /// Query heads per batch entry (`H`).
            heads: u32,
            /// 1 when the tensors are `[B, S, H, D]`, 0 for `[B, H, S, D]`.
            seq_major: u32,
            /// `B * H`.
            batch_heads: u32,
            /// 1: the key blocks add into dQ's accumulator in a fixed order, so that every run
            /// gives the same bits; 0: in the order they get there.
            deterministic: u32,
        }
    };
}

macro_rules! define_backward_args {
    ($($(#[$doc:meta])* $field:ident: $host:ty $(as $device:ty)?,)*) => {
        /// One backward kernel call's parameters as the host fills them in (device pointers as
        /// `u64`), in kernel parameter order.
        #[derive(Clone, Copy, Debug, Default, PartialEq)]
        pub struct BackwardArgs {
            $($(#[$doc])* pub $field: $host,)*
        }

        impl BackwardArgs {
            /// Each kernel parameter's size in bytes, in order: what every backward entry point's
            /// PTX declares.
            pub const PARAM_BYTES: &'static [usize] = &[$(core::mem::size_of::<$host>()),*];
        }
    };
}

with_backward_params!(define_backward_args!());

/// The head dims the backward kernels are compiled for (`build.rs` writes their entry points).
pub const HEAD_DIMS: &[u32] = &[64, 128, 256];

/// Query rows per tile of the main kernel.
pub const BLOCK_M: u32 = 64;
/// Keys per block of the main kernel: one block per `BLOCK_N` keys of a KV head.
pub const BLOCK_N: u32 = 64;
/// Threads of every backward kernel's block: eight warps.
pub const THREADS: u32 = 256;
/// Query rows per block of the row kernels (`prepare`, `finish_dq`): a warp per row.
pub const ROWS_PER_BLOCK: u32 = THREADS / 32;

/// The mask's bounds as the kernels take them (`attention::Problem`'s `seq_q`, `seq_k`,
/// `window_left`, `window_right`: 0 for no bound, otherwise one more than the keys a row sees
/// before its diagonal, or after it; the causal mask is `window_right` 1, and row `r`'s diagonal
/// is key `r + seq_k - seq_q`), and from them which query tiles a key block of the backward's
/// main kernels walks and where a tile's deterministic order of dQ additions starts. Shared with
/// the host, so that a CPU test checks over many problems that the walks cover every visible
/// (row, key) pair and that the key blocks walking a tile are consecutive from that start (the
/// order waits on each block in turn: a gap would hang it).
pub mod mask {
    use super::BLOCK_M;

    /// See the module.
    #[derive(Clone, Copy, Debug)]
    pub struct Mask {
        /// Query rows.
        pub seq_q: u32,
        /// Keys.
        pub seq_k: u32,
        /// One more than the keys a row sees before its diagonal; 0 for all of them.
        pub window_left: u32,
        /// One more than the keys a row sees after its diagonal (1 under the causal mask); 0 for
        /// all of them.
        pub window_right: u32,
    }

    impl Mask {
        /// The first key that query `row` may attend (`window_left - 1` keys before its diagonal;
        /// 0 without a left bound). Grows with the row. `Problem::key_start` is the forward's own
        /// copy: routed through here, the forward kernels compiled to different (if equivalent)
        /// PTX.
        #[inline(always)]
        pub fn key_start(self, row: u32) -> u32 {
            if self.window_left == 0 {
                return 0;
            }
            let start = row as i64 + 1 + self.seq_k as i64 - self.seq_q as i64 - self.window_left as i64;
            start.clamp(0, self.seq_k as i64) as u32
        }

        /// The query rows that see key `key`: `first..end` (both at most `seq_q`; empty for a key
        /// past `seq_k`). The inverse of `key_start` and the mask's last key (`Problem::key_end`);
        /// both ends grow with the key.
        #[inline(always)]
        pub fn rows_seeing(self, key: u32) -> (u32, u32) {
            if key >= self.seq_k {
                return (0, 0);
            }
            let seq_q = self.seq_q as i64;
            // Row r's diagonal is key r + offset.
            let offset = self.seq_k as i64 - seq_q;
            // key < key_end(r) = r + offset + window_right.
            let first = match self.window_right {
                0 => 0,
                right => (key as i64 + 1 - offset - right as i64).clamp(0, seq_q),
            };
            // key_start(r) = r + 1 + offset - window_left <= key.
            let end = match self.window_left {
                0 => seq_q,
                left => (key as i64 - offset + left as i64).clamp(0, seq_q),
            };
            (first as u32, end.max(first) as u32)
        }

        /// The query tiles the key block of `block_n` keys from `key0` walks: `(first, count)`,
        /// from the first row that sees its first key to the last row that sees its last.
        #[inline(always)]
        pub fn walked_tiles(self, key0: u32, block_n: u32) -> (u32, u32) {
            let last_key = (key0 + block_n).min(self.seq_k).saturating_sub(1);
            let first_tile = self.rows_seeing(key0).0 / BLOCK_M;
            let end_tile = self.rows_seeing(last_key).1.div_ceil(BLOCK_M);
            (first_tile, end_tile.saturating_sub(first_tile))
        }

        /// The first key block (of `block_n` keys) that walks query tile `tile`: the one holding
        /// the first key the tile's first row sees. Step 0 of the tile's deterministic order.
        #[inline(always)]
        pub fn first_block(self, tile: u32, block_n: u32) -> u32 {
            self.key_start(tile * BLOCK_M) / block_n
        }
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        /// Whether row `r` sees key `k`, from the window's definition (bottom-right aligned,
        /// FlashAttention's `window_size = (left, right)`), not from the functions above.
        fn sees(q: u32, k: u32, left: Option<u32>, right: Option<u32>, r: u32, key: u32) -> bool {
            let diagonal = r as i64 + k as i64 - q as i64;
            let key = key as i64;
            left.is_none_or(|l| key >= diagonal - l as i64)
                && right.is_none_or(|w| key <= diagonal + w as i64)
        }

        #[test]
        fn walks_cover_every_visible_pair_and_blocks_of_a_tile_are_consecutive_from_its_start() {
            let sizes = [1, 2, 63, 64, 65, 100, 128, 129, 200, 300];
            let bounds = [None, Some(0), Some(1), Some(37), Some(64), Some(200)];
            let mut checked = 0;
            for &q in &sizes {
                for &k in &sizes {
                    for &left in &bounds {
                        for &right in &bounds {
                            let mask = Mask {
                                seq_q: q,
                                seq_k: k,
                                window_left: left.map_or(0, |l| l + 1),
                                window_right: right.map_or(0, |w| w + 1),
                            };
                            for block_n in [64, 128] {
                                check(mask, (left, right), block_n);
                                checked += 1;
                            }
                        }
                    }
                }
            }
            assert!(checked > 4000);
        }

        fn check(mask: Mask, (left, right): (Option<u32>, Option<u32>), block_n: u32) {
            let (q, k) = (mask.seq_q, mask.seq_k);
            let blocks = k.div_ceil(block_n);
            let tiles = q.div_ceil(BLOCK_M);
            let walks: Vec<(u32, u32)> = (0..blocks)
                .map(|j| mask.walked_tiles(j * block_n, block_n))
                .collect();
            let walks_tile = |j: u32, t: u32| {
                let (first, count) = walks[j as usize];
                t >= first && t < first + count
            };
            for r in 0..q {
                for key in 0..k {
                    let visible = sees(q, k, left, right, r, key);
                    if visible {
                        assert!(key >= mask.key_start(r), "{mask:?}: key_start at ({r}, {key})");
                    }
                    let (first, end) = mask.rows_seeing(key);
                    assert_eq!(
                        visible,
                        r >= first && r < end,
                        "{mask:?}: rows_seeing at ({r}, {key})"
                    );
                    if visible {
                        assert!(
                            walks_tile(key / block_n, r / BLOCK_M),
                            "{mask:?}: ({r}, {key}) not walked"
                        );
                    }
                }
            }
            for t in 0..tiles {
                let walking: Vec<u32> = (0..blocks).filter(|&j| walks_tile(j, t)).collect();
                if let (Some(&first), Some(&last)) = (walking.first(), walking.last()) {
                    assert_eq!(
                        walking.len() as u32,
                        last - first + 1,
                        "{mask:?} n {block_n}: tile {t} has a gap"
                    );
                    assert_eq!(
                        first,
                        mask.first_block(t, block_n),
                        "{mask:?} n {block_n}: tile {t}'s start"
                    );
                }
            }
        }
    }
}

/// The backward's scratch, in units of 4 bytes, for `batch_heads` query heads of `seq_q` rows of
/// head dim `d`. Each head's rows are padded to whole query tiles (`padded_rows`), so that the
/// main kernel copies a tile's statistics in 16-byte pieces and adds into dQ without bounds
/// checks; the padding rows get a log-sum-exp of `+inf`, which makes their probabilities 0.
///
/// In order: dQ's fp32 accumulator `[B*H, rows, D]`; the rows' log-sum-exps in base 2
/// `[B*H, rows]`; their `delta = rowsum(dO * O)` `[B*H, rows]`; and one `u32` per (head, query
/// tile) counting the key blocks that have added into that tile under the deterministic order.
pub mod workspace {
    use super::BLOCK_M;

    /// A head's rows rounded up to whole query tiles.
    pub const fn padded_rows(seq_q: u32) -> u64 {
        seq_q.div_ceil(BLOCK_M) as u64 * BLOCK_M as u64
    }

    /// Where the base-2 log-sum-exps start.
    pub const fn lse2(batch_heads: u32, seq_q: u32, d: u32) -> u64 {
        batch_heads as u64 * padded_rows(seq_q) * d as u64
    }

    /// Where the deltas start.
    pub const fn delta(batch_heads: u32, seq_q: u32, d: u32) -> u64 {
        lse2(batch_heads, seq_q, d) + batch_heads as u64 * padded_rows(seq_q)
    }

    /// Where the turn counters start.
    pub const fn turns(batch_heads: u32, seq_q: u32, d: u32) -> u64 {
        delta(batch_heads, seq_q, d) + batch_heads as u64 * padded_rows(seq_q)
    }

    /// The whole workspace.
    pub const fn floats(batch_heads: u32, seq_q: u32, d: u32) -> u64 {
        turns(batch_heads, seq_q, d) + batch_heads as u64 * (padded_rows(seq_q) / BLOCK_M as u64)
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        #[test]
        fn the_parts_follow_each_other_without_overlap() {
            // 2 heads of 100 rows pad to 128: accumulator 2*128*64, two row arrays, 2*2 turns.
            assert_eq!(padded_rows(100), 128);
            assert_eq!(lse2(2, 100, 64), 2 * 128 * 64);
            assert_eq!(delta(2, 100, 64), 2 * 128 * 64 + 256);
            assert_eq!(turns(2, 100, 64), 2 * 128 * 64 + 512);
            assert_eq!(floats(2, 100, 64), 2 * 128 * 64 + 512 + 4);
            // Each row array starts on a 256-byte boundary: the kernel copies a tile's 64
            // statistics in 16-byte pieces.
            for (bh, s, d) in [(1u32, 1u32, 64u32), (3, 65, 128), (7, 4095, 256)] {
                assert_eq!(lse2(bh, s, d) % 64, 0);
                assert_eq!(delta(bh, s, d) % 64, 0);
            }
        }
    }
}

/// The Hopper main kernel (`attention::backward::warpgroup`, sm_90a): its head dims, its block,
/// the order of its dQ accumulator, and its shared memory (bytes from the first 1024-byte
/// boundary after the dynamic base, the 16-bit tiles in the 128-byte swizzle layout that `wgmma`
/// reads): K and V of the block's keys, per stage Q and dO of a query tile, dS^T of the current
/// tile (`[key][query]`), the tile's part of dQ in fp32 (in `dq_index` order), then per stage the
/// tile's base-2 log-sum-exps and deltas.
pub mod warpgroup {
    use super::BLOCK_M;

    /// The head dims it is compiled for (others take the `mma.sync` kernel).
    pub const HEAD_DIMS: &[u32] = &[64, 128];

    /// Whether a backward call at head dim `d` runs this kernel: on Hopper (`hopper`) at its head
    /// dims. The host picks the main kernel by it, and the row kernels of an architecture's
    /// module lay out dQ's accumulator by it (`dq_index`).
    pub const fn covers(d: u32, hopper: bool) -> bool {
        let mut i = 0;
        while i < HEAD_DIMS.len() {
            if HEAD_DIMS[i] == d {
                return hopper;
            }
            i += 1;
        }
        false
    }

    /// Where element `(row, col)` of a query tile's `BLOCK_M x d` block of dQ's accumulator sits
    /// (in floats from the block's start) when this kernel adds into it. The order is that of
    /// the `wgmma` accumulators that hold it, so that each thread stores its registers to shared
    /// memory as consecutive pairs (no bank conflicts) and the block is added into global memory
    /// by one bulk reduction of the copy engine: thread `t` (of 128) of warpgroup `w` puts its
    /// register pair `e` at `4096 w + 256 e + 2 t`. At head dim 128 warpgroup `w` holds columns
    /// `64 w ..`; at 64 both hold all of them (each adds its own keys' sums). `rows::finish_dq`
    /// reads it back through this function.
    pub const fn dq_index(row: u32, col: u32, d: u32) -> u32 {
        let (warpgroup, col) = if d == 128 { (col / 64, col % 64) } else { (0, col) };
        // The accumulator layout: warp row / 16 holds rows g and g + 8 of its 16 (lane 4g + q),
        // columns 8j + 2q and 8j + 2q + 1 in registers 4j + 2h and 4j + 2h + 1.
        let (warp, g, h) = (row / 16, row % 8, (row % 16) / 8);
        let (j, q, p) = (col / 8, (col % 8) / 2, col % 2);
        let thread = 32 * warp + 4 * g + q;
        warpgroup * 4096 + (2 * j + h) * 256 + 2 * thread + p
    }
    /// Keys per block: 64 per warpgroup, two warpgroups.
    pub const BLOCK_N: u32 = 128;
    /// Query tiles in flight.
    pub const STAGES: u32 = 2;

    /// Bytes of a swizzled `rows x d` 16-bit tile.
    const fn tile(rows: u32, d: u32) -> u32 {
        2 * rows * d
    }
    /// Where V starts.
    pub const fn v(d: u32) -> u32 {
        tile(BLOCK_N, d)
    }
    /// Where stage `stage`'s Q tile starts.
    pub const fn q(d: u32, stage: u32) -> u32 {
        2 * tile(BLOCK_N, d) + stage * 2 * tile(BLOCK_M, d)
    }
    /// Where stage `stage`'s dO tile starts.
    pub const fn d_out(d: u32, stage: u32) -> u32 {
        q(d, stage) + tile(BLOCK_M, d)
    }
    /// Where dS^T starts: `BLOCK_N` rows of `BLOCK_M` queries.
    pub const fn d_scores(d: u32) -> u32 {
        q(d, STAGES)
    }
    /// Bytes of one warpgroup's part of a tile's dQ: `BLOCK_M x 64` fp32 (half the head dim at
    /// 128, all of it over the warpgroup's own keys at 64).
    pub const WARPGROUP_DQ_BYTES: u32 = 4 * BLOCK_M * 64;
    /// Where warpgroup `warpgroup`'s part of the tile's dQ starts, in `dq_index` order: each
    /// warpgroup stages and adds its own, so that neither waits for the other.
    pub const fn d_q(d: u32, warpgroup: u32) -> u32 {
        d_scores(d) + tile(BLOCK_N, BLOCK_M) + warpgroup * WARPGROUP_DQ_BYTES
    }
    /// Where stage `stage`'s base-2 log-sum-exps start (its deltas follow them).
    pub const fn lse2(d: u32, stage: u32) -> u32 {
        d_q(d, 2) + stage * 2 * BLOCK_M * 4
    }
    /// Where stage `stage`'s deltas start.
    pub const fn delta(d: u32, stage: u32) -> u32 {
        lse2(d, stage) + BLOCK_M * 4
    }
    /// The whole of it, with the slack that aligns the first tile to 1024 bytes.
    pub const fn bytes(d: u32) -> u32 {
        lse2(d, STAGES) + 1024
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        #[test]
        fn tiles_stay_on_swizzle_atoms_and_fit_an_sm90_block() {
            for &d in HEAD_DIMS {
                for stage in 0..STAGES {
                    assert_eq!(q(d, stage) % 1024, 0);
                    assert_eq!(d_out(d, stage) % 1024, 0);
                    assert_eq!(lse2(d, stage) % 16, 0);
                }
                assert_eq!((v(d) % 1024, d_scores(d) % 1024, d_q(d, 0) % 1024), (0, 0, 0));
                assert_eq!(d_q(d, 1) % 1024, 0);
                assert!(bytes(d) <= 227 * 1024, "d {d}: {} bytes", bytes(d));
            }
            // Head dim 128: K and V (32 KiB each), two stages of Q and dO (16 KiB each), dS^T
            // (16 KiB), the warpgroups' parts of dQ (16 KiB each), the statistics, the slack.
            assert_eq!(bytes(128), 4 * 32768 + 16384 + 32768 + 1024 + 1024);
            assert_eq!(bytes(64), 4 * 16384 + 16384 + 32768 + 1024 + 1024);
        }

        #[test]
        fn the_dq_order_is_a_permutation_of_the_tile() {
            for &d in HEAD_DIMS {
                let mut seen = vec![false; (BLOCK_M * d) as usize];
                for row in 0..BLOCK_M {
                    for col in 0..d {
                        let i = dq_index(row, col, d) as usize;
                        assert!(i < seen.len() && !seen[i], "d {d}: ({row}, {col}) -> {i}");
                        seen[i] = true;
                        // Pairs stay adjacent: one 8-byte load reads columns 2c and 2c + 1.
                        if col % 2 == 1 {
                            assert_eq!(i, dq_index(row, col - 1, d) as usize + 1);
                        }
                    }
                }
            }
            // Thread 5 of warpgroup 1 (warp 0, g 1, q 1), register pair 0: row 1, column 64 + 2.
            assert_eq!(dq_index(1, 66, 128), 4096 + 2 * 5);
            assert!(covers(128, true) && !covers(128, false) && !covers(256, true));
        }
    }
}

/// The main kernel's shared memory (bytes from the dynamic base), for head dim `d` and `stages`
/// query tiles in flight: K and V of the block's keys, then per stage Q and dO of a query tile,
/// then P^T and dS^T of the current tile (16-bit, `[key][query]`), then per stage the tile's
/// base-2 log-sum-exps and deltas. Rows are padded by 16 bytes, as `tile.rs` pads them.
pub mod smem {
    use super::{BLOCK_M, BLOCK_N};

    /// Bytes per row of a `[rows][d]` 16-bit tile.
    pub const fn row_bytes(d: u32) -> u32 {
        2 * d + 16
    }
    /// Where V starts.
    pub const fn v(d: u32) -> u32 {
        BLOCK_N * row_bytes(d)
    }
    /// Where stage `stage`'s Q tile starts (its dO tile follows it).
    pub const fn q(d: u32, stage: u32) -> u32 {
        2 * BLOCK_N * row_bytes(d) + stage * 2 * BLOCK_M * row_bytes(d)
    }
    /// Where stage `stage`'s dO tile starts.
    pub const fn d_out(d: u32, stage: u32) -> u32 {
        q(d, stage) + BLOCK_M * row_bytes(d)
    }
    /// Bytes per row of the `[key][query]` tiles P^T and dS^T.
    pub const fn scores_row_bytes() -> u32 {
        2 * BLOCK_M + 16
    }
    /// Where P^T starts.
    pub const fn probs(d: u32, stages: u32) -> u32 {
        q(d, stages)
    }
    /// Where dS^T starts.
    pub const fn d_scores(d: u32, stages: u32) -> u32 {
        probs(d, stages) + BLOCK_N * scores_row_bytes()
    }
    /// Where stage `stage`'s base-2 log-sum-exps start (its deltas follow them).
    pub const fn lse2(d: u32, stages: u32, stage: u32) -> u32 {
        d_scores(d, stages) + BLOCK_N * scores_row_bytes() + stage * 2 * BLOCK_M * 4
    }
    /// Where stage `stage`'s deltas start.
    pub const fn delta(d: u32, stages: u32, stage: u32) -> u32 {
        lse2(d, stages, stage) + BLOCK_M * 4
    }
    /// The whole of it.
    pub const fn bytes(d: u32, stages: u32) -> u32 {
        lse2(d, stages, stages)
    }

    /// Query tiles in flight at head dim `d`: two where both fit the 227 KiB of an sm_90 block
    /// beside K and V, else one.
    pub const fn stages(d: u32) -> u32 {
        if d <= 128 {
            2
        } else {
            1
        }
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        #[test]
        fn every_head_dim_fits_an_sm90_block_and_pieces_stay_aligned() {
            for d in [64u32, 128, 256] {
                let s = stages(d);
                assert!(bytes(d, s) <= 227 * 1024, "d {d}: {} bytes", bytes(d, s));
                for stage in 0..s {
                    assert_eq!(q(d, stage) % 16, 0);
                    assert_eq!(d_out(d, stage) % 16, 0);
                    assert_eq!(lse2(d, s, stage) % 16, 0);
                }
                assert_eq!(d_scores(d, s) % 16, 0);
            }
            // Head dim 128: K, V, two stages of Q and dO, P^T and dS^T, the statistics.
            assert_eq!(
                bytes(128, 2),
                2 * 64 * 272 + 4 * 64 * 272 + 2 * 64 * 144 + 2 * 2 * 256
            );
        }
    }
}
