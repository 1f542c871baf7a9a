//! `flash_ws`'s work items: which a block computes (`Schedule`), each item's slice of its KV tiles
//! (`Split`), and the walk over them (`for_each_item!`).

use crate::arch;
use crate::attention::varlen::Bounds;
use crate::attention::{longest_first_block, Problem};
use crate::launch::item_walk::{table, ItemWalk};

/// Runs `$body` (an expression of `$i`, the item's index in the block, `$work`, the item, and
/// `$ring`, the KV tiles of the items before, that yields the item's own KV tiles) on each of the
/// block's items; evaluates to the total of the tiles. Without `PERSISTENT` a straight call, no
/// loop: a loop around the kernel's body costs the non-persistent kernels registers (ptxas
/// spilled), and a closure in place of the macro was not inlined (its body ended up a PTX call).
macro_rules! for_each_item {
    ($schedule:expr, |$i:ident, $work:ident, $ring:ident| $body:expr) => {{
        let schedule = $schedule;
        let mut $ring: u32 = 0;
        if schedule.persistent() {
            let mut $i: u32 = 0;
            while let Some($work) = schedule.item($i) {
                $ring += $body;
                $i += 1;
            }
        } else {
            // Safety: the kernel returned at its start when the block has no item.
            let $work = unsafe { schedule.item(0).unwrap_unchecked() };
            let $i: u32 = 0;
            $ring = $body;
        }
        $ring
    }};
}

/// One work item: `BLOCK_M` query rows of a head, with all of their KV tiles or, for a slice of
/// a split item (`launch::tail_split`), a range of them.
#[derive(Clone, Copy)]
pub(super) struct Work {
    pub(super) head: usize,
    pub(super) first_row: u32,
    pub(super) split: Split,
    /// A varlen item's sequence (the persistent kernel's, from the host's table); unused (and
    /// folded away) otherwise.
    pub(super) sequence: Bounds,
}

/// Which slice of its item a work item is: `part` of `parts` (1: the whole item), the item being
/// the `tail`-th of the persistent grid's last round (its counters and workspace slots). Packed
/// in one word (`tail << 16 | part << 8 | parts`): it lives through the KV loop of the persistent
/// consumers, which have no register to spare (three words of it spilled at head dim 64).
#[derive(Clone, Copy)]
pub(super) struct Split(u32);

impl Split {
    const WHOLE: Split = Split(1);

    /// Slice `part` of `parts` of the `tail`-th item (`parts <= tail_split::MAX_SLICES`, `tail`
    /// below a grid's size).
    #[inline(always)]
    fn new(tail: u32, part: u32, parts: u32) -> Self {
        Split(tail << 16 | part << 8 | parts)
    }

    #[inline(always)]
    pub(super) fn tail(&self) -> u32 {
        self.0 >> 16
    }

    #[inline(always)]
    pub(super) fn part(&self) -> u32 {
        (self.0 >> 8) & 0xff
    }

    #[inline(always)]
    pub(super) fn parts(&self) -> u32 {
        self.0 & 0xff
    }

    #[inline(always)]
    pub(super) fn is_split(&self) -> bool {
        self.parts() > 1
    }

    /// The slice's share of an item's `tiles` KV tiles: (first tile, tiles), the parts differing
    /// by at most one tile and part 0 among the largest: it then usually finishes last and
    /// merges, its own partial result first in the slices' order (`merge_slices`).
    #[inline(always)]
    pub(super) fn range(&self, tiles: u32) -> (u32, u32) {
        if !self.is_split() {
            return (0, tiles);
        }
        // Counted from the last part, whose share `floor` makes the smallest.
        let from_end = self.parts() - 1 - self.part();
        let first = tiles - (from_end + 1) * tiles / self.parts();
        let end = tiles - from_end * tiles / self.parts();
        (first, end - first)
    }
}

/// The work items one block computes: (query head, first query row) pairs of `BLOCK_M` rows.
///
/// Without `PERSISTENT` the grid has one block per item (`attention`'s convention: row block x,
/// head y and z; a causal problem's in the order of `longest_first_block`). With it, one block per
/// SM walks items `block, block + grid, ...`, so that the producer copies the next item's Q and
/// first K/V tiles while the consumers still finish this one's products and epilogue. Its items
/// run head by head, so that the blocks working at once share their heads' K and V in L2 (causal
/// items ordered longest first across all heads made every block read another head's K and V: 13%
/// slower at (1,16,16384,128), docs/kernels/flash_ws.md, persistence); inside a causal head the
/// last row blocks, which see the most keys, go first. (Not `longest_first_block`'s groups:
/// striding through those, the blocks whose first items were a group's longest got the longest of
/// every group, 1.5x slower: docs/history/perf-notes.md, causal blocks longest first.) With
/// `kv_splits > 1` the items of the last round, `launch::tail_split`'s tail, are cut into that
/// many slices each, and the walk takes the slices after the whole items.
#[derive(Clone, Copy)]
pub(super) struct Schedule<const PERSISTENT: bool, const VARLEN: bool> {
    pub(super) block_m: u32,
    block_n: u32,
    row_blocks: u32,
    batch_heads: u32,
    causal: bool,
    /// With `PERSISTENT`: the slices of each item of the last round (1 without a split).
    slices: u32,
    /// With `PERSISTENT`: the walk over the items, as the host prepared it for this grid.
    walk: ItemWalk,
    /// With `PERSISTENT` and `VARLEN`: the packed tensors' query and key rows.
    total_q: u32,
    total_k: u32,
    /// Without `PERSISTENT`: the block's one head (`None` past the last) and its KV tiles.
    head: Option<usize>,
    tiles: u32,
    /// Without `PERSISTENT`, for a causal problem that is not varlen: the most heads in a group of
    /// `longest_first_block`, whose item the block takes (0: the grid's order). The item is worked
    /// out again where it is needed (a few integer divisions), as the grid's item is, rather than
    /// carried from the kernel's start (docs/history/perf-notes.md, causal blocks longest first).
    longest_first: u32,
}

impl<const PERSISTENT: bool, const VARLEN: bool> Schedule<PERSISTENT, VARLEN> {
    /// The schedule of a warpgroup, made after `setmaxnreg` (values made before it and carried
    /// into the loops cost the persistent consumers spills). `single_tiles`: without
    /// `PERSISTENT`, the block's one item's KV tiles, counted before the warpgroups part (counted
    /// after it, they cost the head-dim-256 consumers spills: ptxas is that close to the edge).
    #[inline(always)]
    /// `head`: without `PERSISTENT`, the block's one head (the in-sequence head of a varlen
    /// block).
    pub(super) fn new<const D: usize>(
        problem: &Problem,
        block_m: u32,
        block_n: u32,
        single_tiles: u32,
        head: Option<usize>,
        longest_first: bool,
    ) -> Self {
        Schedule {
            block_m,
            block_n,
            row_blocks: problem.seq_q.div_ceil(block_m),
            // A varlen table's heads are in-sequence ones.
            batch_heads: if PERSISTENT && VARLEN {
                problem.heads
            } else {
                problem.batch_heads
            },
            causal: problem.causal,
            // The host's plan (`launch::tail_split::slices`) for this grid, or 1.
            slices: if PERSISTENT { problem.kv_splits.max(1) } else { 1 },
            walk: problem.walk,
            total_q: problem.seq_q,
            total_k: problem.seq_k,
            head: if PERSISTENT { None } else { head },
            tiles: single_tiles,
            longest_first: if longest_first {
                problem.causal_group::<D>()
            } else {
                0
            },
        }
    }

    /// The KV tiles of `work`: (first tile, tiles), from the first a sliding window reaches
    /// (`Problem::kv_tile_range`, as the producer counts them).
    #[inline(always)]
    pub(super) fn tiles(&self, problem: &Problem, work: &Work) -> (u32, u32) {
        let (window_tile, tiles) = if PERSISTENT {
            problem.kv_tile_range(work.first_row, self.block_m, self.block_n)
        } else {
            (problem.key_start(work.first_row) / self.block_n, self.tiles)
        };
        let (first, tiles) = work.split.range(tiles);
        (window_tile + first, tiles)
    }

    #[inline(always)]
    pub(super) fn persistent(&self) -> bool {
        PERSISTENT
    }

    /// Which slice of its item the block's `i`-th item is (`Split::WHOLE` for all of them
    /// without a split).
    #[inline(always)]
    pub(super) fn split_of(&self, i: u32) -> Split {
        if !PERSISTENT || self.slices == 1 {
            return Split::WHOLE;
        }
        self.item(i).map_or(Split::WHOLE, |work| work.split)
    }

    /// The block's `i`-th item in the host's table (`launch::item_walk::table`): (query head, row
    /// block), `None` past its last.
    ///
    /// # Safety
    /// `walk.table` is the address of the table the host built for this grid.
    #[inline(always)]
    unsafe fn listed_item(&self, i: u32) -> Option<(u32, u32)> {
        let [head, row_block] = arch::ld_global_v2_u32(self.listed_entry(i)?);
        Some((head, row_block))
    }

    /// The block's `i`-th item in the host's varlen table (`item_walk::table::varlen_entry`):
    /// (in-sequence query head, row block, its sequence), `None` past its last.
    ///
    /// # Safety
    /// `walk.table` is the address of the varlen table the host built for this grid.
    #[inline(always)]
    unsafe fn listed_varlen_item(&self, i: u32) -> Option<(u32, u32, Bounds)> {
        let entry = self.listed_entry(i)?;
        let [head, row_block, q_start, seq_q] = arch::ld_global_v4_u32(entry);
        let [k_start, seq_k, _, _] = arch::ld_global_v4_u32(entry.add(4));
        let sequence = Bounds {
            q_start,
            seq_q,
            k_start,
            seq_k,
        };
        Some((head, row_block, sequence))
    }

    /// The words of one entry of the host's table: a (query head, row block) pair, or a varlen
    /// item's `table::varlen_entry`.
    const ENTRY_WORDS: u32 = if VARLEN { table::VARLEN_ENTRY_WORDS } else { 2 };

    /// The address of the block's `i`-th entry in the host's table (`launch::item_walk::table`),
    /// `None` past its last.
    ///
    /// # Safety
    /// `walk.table` is the address of the table the host built for this grid.
    #[inline(always)]
    unsafe fn listed_entry(&self, i: u32) -> Option<*const u32> {
        let (table, block) = (self.walk.table as *const u32, arch::block_idx_x() as usize);
        let (first, end) = (*table.add(block), *table.add(block + 1));
        let at = first.checked_add(i).filter(|&at| at < end)?;
        let grid = arch::grid_dim_x();
        let start = if VARLEN {
            table::varlen_entries_start(grid)
        } else {
            table::pairs_start(grid)
        };
        Some(table.add((start + Self::ENTRY_WORDS * at) as usize))
    }

    /// Brings the host table's entry of the block's `i`-th item (if it has one) into the SM's
    /// L1 cache, so that its lookups (`item`) find it there instead of a round trip to L2 away.
    /// The producer, which runs tiles ahead of the consumers, asks for the next item's at the
    /// start of each one (docs/kernels/varlen-paged.md, the persistent walk's table).
    #[inline(always)]
    pub(super) fn prefetch(&self, i: u32) {
        if !PERSISTENT || (!VARLEN && self.walk.table == 0) {
            return;
        }
        // Safety: a persistent walk with a table (the branch above) has the host's.
        if let Some(entry) = unsafe { self.listed_entry(i) } {
            // Its first and last word: an entry's 16-byte halves may lie in two lines.
            // Safety: both inside the block's entry of the table.
            unsafe {
                arch::prefetch_global_l1(entry);
                arch::prefetch_global_l1(entry.add(Self::ENTRY_WORDS as usize - 1));
            }
        }
    }

    /// The block's `i`-th item, `None` past its last.
    #[inline(always)]
    pub(super) fn item(&self, i: u32) -> Option<Work> {
        let whole = |head: usize, row_block: u32| Work {
            head,
            first_row: row_block * self.block_m,
            split: Split::WHOLE,
            sequence: Bounds::default(),
        };
        if !PERSISTENT {
            let head = self.head.filter(|_| i == 0)?;
            if self.longest_first > 0 {
                let (head, row_block) = longest_first_block(self.batch_heads, self.longest_first)?;
                return Some(whole(head, row_block));
            }
            return Some(whole(head, arch::block_idx_x()));
        }
        if VARLEN {
            // Safety: the host's varlen table for this grid (`item_walk::table`), read only.
            let (head, row_block, sequence) = unsafe { self.listed_varlen_item(i)? };
            // Every item inside the packed tensors whatever the table says.
            let first_row = row_block.checked_mul(self.block_m)?;
            let inside = sequence.inside(self.total_q, self.total_k);
            if head >= self.batch_heads || first_row >= sequence.seq_q || !inside {
                return None;
            }
            return Some(Work {
                sequence,
                ..whole(head as usize, row_block)
            });
        }
        if self.walk.table != 0 {
            // Safety: the host's table for this grid (`item_walk::table`), read only.
            let (head, row_block) = unsafe { self.listed_item(i)? };
            // Two compares keep every item inside the problem whatever the table says.
            if head >= self.batch_heads || row_block >= self.row_blocks {
                return None;
            }
            return Some(whole(head as usize, row_block));
        }
        // The walk's divisions are multiplies by the host's reciprocals (`ItemWalk`).
        let (w, walk) = (arch::block_idx_x() + i * arch::grid_dim_x(), self.walk);
        if w >= walk.length {
            return None;
        }
        let (item, split) = if w < walk.whole_items {
            (w, Split::WHOLE)
        } else {
            // The last round's items, a slice per block.
            let (tail, part) = walk.slices.div_rem(w - walk.whole_items, self.slices);
            (walk.whole_items + tail, Split::new(tail, part, self.slices))
        };
        let (head, row_block) = walk.row_blocks.div_rem(item, self.row_blocks);
        // Two compares keep every item inside the problem whatever the walk says.
        if head >= self.batch_heads || row_block >= self.row_blocks {
            return None;
        }
        // Causal: a head's last row blocks, which see the most keys, first.
        let row_block = if self.causal {
            self.row_blocks - 1 - row_block
        } else {
            row_block
        };
        Some(Work {
            split,
            ..whole(head as usize, row_block)
        })
    }
}
