//! Decode-like problems (a few query rows per KV head, long key sequences) on `flash_decode`
//! (`kernels-rs/src/attention/decode/`): which variant the dispatch takes, how many slices the
//! key range is split into, the launch grid, the workspace the slices write their partial results
//! to and the counters that let the last slice of each row block merge them in the same launch
//! (both owned by the `Gpu`, grown as needed).
//!
//! The split count of a launch comes from the first of ([`SplitSource`]):
//! 1. the caller's [`DecodeOptions::splits`] ([`Gpu::launch_with`]), checked against the problem
//!    and refused with an error when it cannot run as given ([`Plan::forced`]);
//! 2. the tuned table's `decode_splits` entry for this GPU and problem
//!    ([`crate::tuned_table::SplitEntry`], written by `tune --splits --save`), clamped to the
//!    problem or ignored where it cannot apply ([`Plan::tuned`]);
//! 3. the heuristic, [`choose_splits`], a pure cost model.
//!
//! Dense, paged and varlen launches of a `flash_decode` kernel all take their plan this way.

use cudarc::driver::LaunchConfig;
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::problem::Shape;
use crate::tuned_table::SplitEntry;
use crate::variants::{Family, VariantSpec};

/// Most packed rows per KV head (query heads per KV head x S_q) for which the dispatch takes
/// `flash_decode`: up to two row tiles of 16, all warps sharing them.
pub const DECODE_MAX_ROWS: usize = 32;

/// Most packed rows per KV head for which the dispatch takes `flash_decode` through the copy
/// engine (sm_90) on grouped heads: up to four blocks of 16 rows, which read the group's K and V
/// about together, mostly from L2. Multi-token decode (speculative decoding's verification) on
/// an H100, bf16, (32, 32 heads on 8, 16 new tokens, 8192 keys, 128), causal: 475 us against
/// `flash_ws`'s 786 (64 rows); at 32 tokens (128 rows) `flash_ws` is ahead, 785 against 894
/// (evidence/decode/multi_token_h100.json).
pub const DECODE_MAX_GROUPED_ROWS: usize = 64;

/// The dispatch's variants: 16-row tiles when the packed rows fit, else 32. Of the 16-row ones,
/// 128-key tiles on 8 warps were the fastest or tied on every decode shape of the H100 run
/// (an H100 decode bench, in git history as evidence/bench_decode_h100.json: 190 us at (1,32,1,32768,128), 8% ahead of 3 stages of 64).
const DECODE_VARIANT_16: &str = "flash_decode_m16_n128_w8_s3_light";
const DECODE_VARIANT_32: &str = "flash_decode_m32_n64_w4_s3_light";
/// On sm_90 the same tiles through the copy engine (TMA boxes and mbarriers, no block barrier in
/// the loop): 5-6% faster on every decode shape, at cuDNN's rate (docs/kernels/flash_decode.md,
/// design: copies); a paged cache through a box per page (docs/kernels/flash_decode.md, paged
/// caches).
const DECODE_VARIANT_16_TMA: &str = "flash_decode_m16_n128_w8_s3_mbarrier";

/// Most slices of one row block's keys: bounds the workspace and the merge's loop.
pub const MAX_SPLITS: u32 = 128;

/// Fewest KV tiles a slice gets: below that, filling the pipeline and merging cost more than the
/// slice's own copies.
pub const MIN_TILES_PER_SPLIT: u32 = 2;

/// The fixed cost of a block in the split heuristic, in KV-tile times: filling the pipeline
/// before the first tile lands, and the epilogue.
const BLOCK_OVERHEAD_TILES: u64 = 1;

/// The merge of the slices' partials in the same units: the last slice's block reads every
/// slice's rows back.
const COMBINE_TILES: u64 = 1;

/// Whether `Gpu::choose` sends decode-like problems to `flash_decode` (verified on the H100 on its
/// first GPU run: every shape set, 200 random problems, sanitizers).
pub const DISPATCH: bool = true;

/// The `flash_decode` variant the library takes for `shape` on a GPU of architecture `arch` (x10)
/// with `sms` multiprocessors, or `None` when the problem is not decode-like (more packed rows
/// per KV head than one tile pair holds), the head dim has no decode variant, or the regular
/// kernels do as well: without grouped heads to pack, a grid of batch x heads blocks that fills
/// every SM leaves nothing for key splits to gain, and with `cp.async` copies flash_decode read
/// slower than flash_ws (372 against 351 us at (8,32,1,8192,128)). Through the copy engine
/// (sm_90) it reads as fast (349.7 against 350.1 us there, 689.5 against 703.0 at
/// (64,32,1,2048,128)), so on sm_90 it takes those too.
pub fn decode_variant(shape: Shape, arch: u32, sms: usize) -> Option<&'static VariantSpec> {
    let rows = shape.kv_group().checked_mul(shape.seq_q)?;
    let limit = match arch >= 90 && shape.kv_group() > 1 {
        true => DECODE_MAX_GROUPED_ROWS,
        false => DECODE_MAX_ROWS,
    };
    if arch < Family::FlashDecode.min_arch() || rows > limit {
        return None;
    }
    // 17 to 32 rows: one 32-row block where that variant is compiled (head dim 64), else two
    // 16-row blocks; past 32 (grouped, sm_90), 16-row blocks.
    let variant = (rows > 16 && rows <= DECODE_MAX_ROWS)
        .then(|| compiled(DECODE_VARIANT_32, shape.head_dim, arch))
        .flatten()
        .or_else(|| sixteen_rows(shape.head_dim, arch))?;
    let filled = shape.kv_group() == 1 && shape.batch.saturating_mul(shape.heads) >= sms;
    (!filled || variant.copy_engine()).then_some(variant)
}

/// `name` where it runs `head_dim` on `arch`.
fn compiled(name: &str, head_dim: usize, arch: u32) -> Option<&'static VariantSpec> {
    VariantSpec::by_name(name).filter(|v| v.head_dims.contains(&head_dim) && v.min_arch <= arch)
}

/// The 16-row variant: through the copy engine where it is compiled (sm_90), else `cp.async`.
fn sixteen_rows(head_dim: usize, arch: u32) -> Option<&'static VariantSpec> {
    compiled(DECODE_VARIANT_16_TMA, head_dim, arch).or_else(|| compiled(DECODE_VARIANT_16, head_dim, arch))
}

/// The `flash_decode` variant for a problem no other family runs (a paged KV cache of pages of
/// `block_size` keys: only `flash_decode` reads pages), whatever its size: [`decode_variant`]'s
/// pick with the SMs never counted as filled (there is no regular kernel to leave a full grid
/// to), else, for more packed rows than one tile pair holds, the 16-row variant over as many row
/// blocks as it takes. On pages of at most [`SHORT_PAGE_KEYS`] keys at head dim 128, where the
/// unsplit grid fills the `sms` multiprocessors, the copy-engine pick gives way to its twin of
/// three blocks per SM ([`DECODE_VARIANT_SHORT_PAGES`]). `None` on an architecture or head dim
/// without one.
pub fn paged_variant(shape: Shape, arch: u32, block_size: usize, sms: usize) -> Option<&'static VariantSpec> {
    if arch < Family::FlashDecode.min_arch() {
        return None;
    }
    let pick = decode_variant(shape, arch, usize::MAX).or_else(|| sixteen_rows(shape.head_dim, arch))?;
    let row_blocks = shape
        .kv_group()
        .saturating_mul(shape.seq_q)
        .div_ceil(pick.block_m as usize);
    let blocks = (shape.batch * shape.heads_kv).saturating_mul(row_blocks);
    let short_pages = block_size <= SHORT_PAGE_KEYS && shape.head_dim == 128 && blocks >= sms;
    if pick.name == DECODE_VARIANT_16_TMA && short_pages {
        if let Some(twin) = compiled(DECODE_VARIANT_SHORT_PAGES, shape.head_dim, arch) {
            return Some(twin);
        }
    }
    Some(pick)
}

/// Pages of at most this many keys take [`DECODE_VARIANT_SHORT_PAGES`] over a full grid.
pub const SHORT_PAGE_KEYS: usize = 32;

/// 64-key tiles in two stages, three blocks per SM (docs/kernels/flash_decode.md, paged caches;
/// H200, the same call, 16-key pages against the 128-key pick): 487 against 532 us at
/// (64,32,1,2048,128), 250 against 258 at (8,32,1,8192), 299 against 402 at the prefill chunk
/// (4,32,128,4096); level at 32-key pages except that chunk (257 against 306); behind on one-wave
/// grids (40.5 against 39.2 at grouped B=1) and on 64-key pages (510 against 487), so taken only
/// for short pages over a full grid.
const DECODE_VARIANT_SHORT_PAGES: &str = "flash_decode_m16_n64_w4_s2_mbarrier";

/// The work of one `flash_decode` launch as the split heuristic sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Work {
    /// Blocks without splitting: KV heads x row blocks.
    pub blocks: u64,
    /// KV tiles of one row block's key range.
    pub kv_tiles: u32,
    /// Blocks the GPU holds at once: SMs x resident blocks per SM.
    pub slots: u64,
}

/// How many slices to cut each row block's keys into. Each slice is a block; the cost of `s`
/// slices is the waves of blocks the GPU runs (`ceil(blocks * s / slots)`) times a block's time
/// (its tiles plus a fixed overhead), plus the merge when `s > 1`: so the split count fills the
/// SMs when the unsplit grid cannot, and avoids a last wave that leaves most SMs idle. Ties go
/// to fewer slices. The count returned leaves no slice empty (`ceil(tiles / ceil(tiles / s))`).
pub fn choose_splits(work: Work) -> u32 {
    let tiles = work.kv_tiles.max(1);
    let slots = work.slots.max(1);
    let most = (tiles / MIN_TILES_PER_SPLIT).clamp(1, MAX_SPLITS);
    let cost = |splits: u32| {
        let waves = (work.blocks * splits as u64).div_ceil(slots);
        let per_split = tiles.div_ceil(splits) as u64;
        waves * (per_split + BLOCK_OVERHEAD_TILES) + if splits > 1 { COMBINE_TILES } else { 0 }
    };
    let best = (1..=most).min_by_key(|&s| (cost(s), s)).unwrap_or(1);
    without_empty_slices(tiles, best)
}

/// The fewest slices that cut `tiles` KV tiles the way `splits` slices do: the kernel gives every
/// slice but the last `ceil(tiles / splits)` tiles, so past `ceil(tiles / that)` slices the rest
/// would walk none and only cost a block and a merge input. `splits` at least 1.
pub fn without_empty_slices(tiles: u32, splits: u32) -> u32 {
    let tiles = tiles.max(1);
    tiles.div_ceil(tiles.div_ceil(splits.max(1)))
}

/// Where a launch's split count came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SplitSource {
    /// [`choose_splits`]: no usable tuned entry for this GPU and problem, and none forced.
    Heuristic,
    /// A `decode_splits` entry of the tuned table, as [`Plan::tuned`] fits it to the problem.
    Tuned,
    /// The caller's [`DecodeOptions::splits`].
    Forced,
}

impl SplitSource {
    /// The name the JSON gives it (`heuristic`, `tuned`, `forced`).
    pub fn name(self) -> &'static str {
        match self {
            SplitSource::Heuristic => "heuristic",
            SplitSource::Tuned => "tuned",
            SplitSource::Forced => "forced",
        }
    }
}

/// What a caller may fix about a `flash_decode` launch instead of leaving it to the library
/// ([`Gpu::launch_with`]). The default fixes nothing.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DecodeOptions {
    /// Exactly this many key slices per row block, in place of the tuned table's or the
    /// heuristic's count: what `tune --splits` measures with. A count the problem cannot take
    /// as given is an error before anything is launched ([`Plan::forced`] says which).
    pub splits: Option<u32>,
}

/// One `flash_decode` launch: its key slices and grid.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Plan {
    /// Slices the key range is split into (1: the blocks write the output directly, no combine).
    pub splits: u32,
    /// Blocks of `block_m` packed rows per KV head.
    pub row_blocks: u32,
    /// `B * H_kv`, spread over the grid's y and z.
    pub kv_heads: u32,
    /// KV tiles of one row block's key range: what the slices share out.
    pub kv_tiles: u32,
    /// Who chose `splits`.
    pub source: SplitSource,
}

/// The grid's y dimension limit: KV heads beyond it go to z.
const MAX_GRID_Y: u32 = 65_535;
/// The grid's x dimension limit.
const MAX_GRID_X: u64 = i32::MAX as u64;

impl Plan {
    /// The plan for `shape` with `block_m`-row, `block_n`-key tiles on a GPU that holds `slots`
    /// blocks at once. Errors (before any launch) when the packed rows or the grid exceed what
    /// the kernel's 32-bit row indices and the grid's x dimension hold.
    pub fn new(shape: Shape, block_m: u32, block_n: u32, slots: u64) -> Result<Plan> {
        let rows = shape.kv_group() as u64 * shape.seq_q as u64;
        let row_blocks = rows.div_ceil(block_m as u64);
        if rows > u32::MAX as u64 / 2 || row_blocks > MAX_GRID_X {
            return Err(Error::InvalidProblem(format!(
                "{shape}: {rows} query rows per KV head are more than flash_decode indexes"
            )));
        }
        let kv_heads = (shape.batch * shape.heads_kv) as u64;
        let unsplit = Plan {
            splits: 1,
            row_blocks: row_blocks as u32,
            kv_heads: kv_heads as u32,
            kv_tiles: (shape.seq_k as u64).div_ceil(block_n as u64).max(1) as u32,
            source: SplitSource::Heuristic,
        };
        let splits = choose_splits(Work {
            blocks: unsplit.blocks(),
            kv_tiles: unsplit.kv_tiles,
            slots,
        });
        Ok(if unsplit.grid_fits(splits) {
            Plan { splits, ..unsplit }
        } else {
            unsplit
        })
    }

    /// Blocks without splitting: KV heads x row blocks ([`Work::blocks`]).
    pub fn blocks(&self) -> u64 {
        self.kv_heads as u64 * self.row_blocks as u64
    }

    /// Whether the grid of `splits` slices per row block fits in x.
    fn grid_fits(&self, splits: u32) -> bool {
        self.row_blocks as u64 * splits as u64 <= MAX_GRID_X
    }

    /// The plan a launch takes, from this heuristic one: `options`' forced count when there is
    /// one ([`Plan::forced`]), else the `tuned` entry's count ([`Plan::tuned`]), else this.
    pub fn chosen(self, options: DecodeOptions, tuned: Option<&SplitEntry>) -> Result<Plan> {
        match (options.splits, tuned) {
            (Some(splits), _) => self.forced(splits),
            (None, Some(entry)) => Ok(self.tuned(entry.splits)),
            (None, None) => Ok(self),
        }
    }

    /// This plan with the tuned table's count `splits` in its place, fitted to the problem:
    /// a table entry covers a range of problems (`tuned_table::SplitEntry`'s buckets), so a count
    /// measured on one may not suit another as given. The rule: 0 means nothing and leaves the
    /// plan as it is; a count above [`MAX_SPLITS`] or the problem's KV tiles is lowered to the
    /// smaller; then it becomes the fewest slices cutting the tiles the same way
    /// ([`without_empty_slices`], as the heuristic's count does); a grid that would not fit in x
    /// leaves the plan as it is. Never panics.
    pub fn tuned(self, splits: u32) -> Plan {
        if splits == 0 {
            return self;
        }
        let splits = without_empty_slices(self.kv_tiles, splits.min(MAX_SPLITS).min(self.kv_tiles));
        if !self.grid_fits(splits) {
            return self;
        }
        Plan {
            splits,
            source: SplitSource::Tuned,
            ..self
        }
    }

    /// This plan with exactly `splits` slices, or an error (one line) saying why the problem
    /// cannot take them as given: 0, more than [`MAX_SPLITS`], more than its KV tiles, a count
    /// that leaves a slice without a tile (the error names the count that cuts the tiles the
    /// same way), or a grid past x. Unlike [`Plan::tuned`] nothing is adjusted: what is forced is
    /// what is measured.
    pub fn forced(self, splits: u32) -> Result<Plan> {
        let tiles = self.kv_tiles;
        let refuse = |why: String| Err(Error::InvalidProblem(format!("{splits} key slices: {why}")));
        if splits == 0 {
            return refuse("at least 1 is needed".into());
        }
        if splits > MAX_SPLITS {
            return refuse(format!("at most {MAX_SPLITS} (the workspace and merge bound)"));
        }
        if splits > tiles {
            return refuse(format!("more than the problem's {tiles} KV tiles"));
        }
        let fewest = without_empty_slices(tiles, splits);
        if fewest != splits {
            return refuse(format!(
                "{tiles} KV tiles in slices of {} leave {} of them empty; {fewest} slices cut the tiles the same way",
                tiles.div_ceil(splits),
                splits - fewest
            ));
        }
        if !self.grid_fits(splits) {
            return refuse(format!(
                "{} row blocks x {splits} slices exceed the grid's x dimension",
                self.row_blocks
            ));
        }
        Ok(Plan {
            splits,
            source: SplitSource::Forced,
            ..self
        })
    }

    /// The grid: row blocks x slices on x, the KV heads on y (spilling into z).
    pub fn grid(&self, threads: u32, smem_bytes: u32) -> LaunchConfig {
        let y = self.kv_heads.min(MAX_GRID_Y);
        LaunchConfig {
            grid_dim: (self.row_blocks * self.splits, y, self.kv_heads.div_ceil(y)),
            block_dim: (threads, 1, 1),
            shared_mem_bytes: smem_bytes,
        }
    }

    /// Floats of workspace the slices write: per slice and query row, `D` outputs and one
    /// log-sum-exp; none without a split.
    pub fn workspace_floats(&self, shape: Shape) -> usize {
        if self.splits <= 1 {
            return 0;
        }
        self.splits as usize * shape.batch * shape.heads * shape.seq_q * (shape.head_dim + 1)
    }

    /// Slice counters the launch needs (`split_counters` in `launch.rs`): one per (KV head, row
    /// block) of the grid with a split, none without.
    pub fn counters(&self) -> usize {
        if self.splits <= 1 {
            return 0;
        }
        self.kv_heads as usize * self.row_blocks as usize
    }
}

/// The kernel's own index arithmetic (`kernels-rs/src/attention/packing.rs`), compiled here too so
/// that the tests below check it against this module's plan.
#[cfg(test)]
#[path = "../kernels-rs/src/attention/packing.rs"]
mod packing;

#[cfg(test)]
mod tests {
    use super::*;

    /// Every variant the library can run without being named is shipped (compiled by every build,
    /// `kernels.toml`): the dense dispatch's, the decode picks, the first e4m3 variant of each
    /// head dim, and the built-in tuned table's entries.
    #[test]
    fn every_variant_the_dispatch_can_pick_is_shipped() {
        let mut names: Vec<String> = crate::dispatch::DISPATCH
            .iter()
            .map(|e| e.kernel.to_string())
            .collect();
        names.extend(
            [
                DECODE_VARIANT_16,
                DECODE_VARIANT_32,
                DECODE_VARIANT_16_TMA,
                DECODE_VARIANT_SHORT_PAGES,
            ]
            .map(String::from),
        );
        let table = crate::tuned_table::TunedTable::builtin().unwrap();
        names.extend(table.gpus.values().flatten().map(|e| e.kernel.clone()));
        names.extend(table.decode_splits.values().flatten().map(|e| e.kernel.clone()));
        for name in &names {
            let variant = VariantSpec::by_name(name).unwrap_or_else(|| panic!("{name}: not in kernels.toml"));
            assert!(
                variant.shipped,
                "{name} is picked by the library but not `shipped = true`"
            );
        }
        for &d in crate::variants::HEAD_DIMS {
            let first = crate::FP8_VARIANTS.iter().find(|v| v.head_dims.contains(&d));
            if let Some(first) = first {
                assert!(
                    first.shipped,
                    "{}: the e4m3 pick at head dim {d} is not shipped",
                    first.name
                );
            }
        }
        let naive = VariantSpec::by_name("naive").unwrap();
        assert!(naive.shipped, "the GPU reference must be in every build");
    }

    /// The H100: 132 SMs, two decode blocks each (3 stages of 64 keys at head dim 128).
    const H100_SLOTS: u64 = 264;

    fn plan(shape: Shape) -> Plan {
        Plan::new(shape, 16, 64, H100_SLOTS).unwrap()
    }

    #[test]
    fn a_few_long_heads_are_split_to_fill_the_gpu() {
        // (1, 32, 1, 32768): 32 blocks for 264 slots unsplit.
        let p = plan(Shape {
            seq_q: 1,
            ..Shape::new(1, 32, 32768, 128)
        });
        assert!(p.splits >= 8, "{p:?}");
        assert!(32 * p.splits as u64 <= 2 * H100_SLOTS, "at most two waves: {p:?}");
        assert!(512u32.div_ceil(p.splits) >= MIN_TILES_PER_SPLIT);
        // Grouped: 8 KV heads, the 4 query heads of each packed into one block.
        let g = plan(Shape {
            seq_q: 1,
            ..Shape::new(1, 32, 32768, 128).with_heads_kv(8)
        });
        assert_eq!(g.kv_heads, 8);
        assert_eq!(g.row_blocks, 1);
        assert!(8 * g.splits as u64 >= H100_SLOTS / 2, "{g:?}");
    }

    #[test]
    fn a_grid_that_fills_the_gpu_is_not_split() {
        for shape in [Shape::new(64, 32, 2048, 128), Shape::new(8, 32, 8192, 128)] {
            let p = plan(Shape { seq_q: 1, ..shape });
            assert_eq!(p.splits, 1, "{shape}: {p:?}");
            assert_eq!(p.workspace_floats(shape), 0);
        }
    }

    #[test]
    fn short_keys_are_never_cut_below_the_minimum_slice() {
        for seq_k in 1..=300 {
            let p = plan(Shape {
                seq_q: 1,
                seq_k,
                ..Shape::new(1, 1, 1, 64)
            });
            let tiles = (seq_k as u32).div_ceil(64);
            assert!(
                p.splits == 1 || tiles.div_ceil(p.splits) >= MIN_TILES_PER_SPLIT,
                "{seq_k}: {p:?}"
            );
        }
    }

    #[test]
    fn no_slice_is_left_empty_and_the_count_is_bounded() {
        for tiles in 1..600 {
            for blocks in [1, 3, 32, 300] {
                let splits = choose_splits(Work {
                    blocks,
                    kv_tiles: tiles,
                    slots: 132,
                });
                assert!((1..=MAX_SPLITS).contains(&splits));
                // The kernel gives slice s tiles [s * per, (s + 1) * per): the last one non-empty.
                let per = tiles.div_ceil(splits);
                assert!(
                    (splits - 1) * per < tiles,
                    "tiles {tiles} blocks {blocks}: {splits}"
                );
            }
        }
    }

    #[test]
    fn the_split_count_minimises_the_modelled_time() {
        // 32 blocks of 512 tiles on 264 slots: splitting by 8 runs one wave of 64-tile blocks
        // (65 + 1), where 1 slice takes 513 and 33 slices four waves of 16 (68 + 1).
        let work = Work {
            blocks: 32,
            kv_tiles: 512,
            slots: 264,
        };
        assert_eq!(choose_splits(work), 8);
        // One block already covers the GPU many times over: no split.
        assert_eq!(
            choose_splits(Work {
                blocks: 2048,
                kv_tiles: 32,
                slots: 264
            }),
            1
        );
    }

    #[test]
    fn grids_cover_the_row_blocks_and_kv_heads() {
        // Three queries of a group of 2 (6 rows) in one 16-row block; 2 x 2 KV heads.
        let shape = Shape {
            seq_q: 3,
            seq_k: 777,
            ..Shape::new(2, 4, 3, 64).with_heads_kv(2)
        };
        let p = plan(shape);
        assert_eq!((p.row_blocks, p.kv_heads), (1, 4));
        let grid = p.grid(128, 1000);
        assert_eq!(grid.grid_dim, (p.splits, 4, 1));
        assert_eq!(grid.block_dim, (128, 1, 1));
        // 40 rows: three 16-row blocks.
        let tall = Plan::new(
            Shape {
                seq_q: 5,
                ..Shape::new(1, 8, 5, 128).with_heads_kv(1)
            },
            16,
            64,
            H100_SLOTS,
        )
        .unwrap();
        assert_eq!(tall.row_blocks, 3);
        // More KV heads than y holds spill into z.
        let many = plan(Shape {
            seq_q: 1,
            ..Shape::new(70_000, 1, 64, 64)
        });
        assert_eq!(many.grid(128, 0).grid_dim.1, 65_535);
        assert_eq!(many.grid(128, 0).grid_dim.2, 2);
    }

    #[test]
    fn workspace_holds_outputs_and_lses_of_every_slice() {
        let shape = Shape {
            seq_q: 2,
            ..Shape::new(3, 4, 2, 64)
        };
        let p = Plan {
            splits: 5,
            row_blocks: 1,
            kv_heads: 12,
            kv_tiles: 5,
            source: SplitSource::Forced,
        };
        assert_eq!(p.workspace_floats(shape), 5 * 3 * 4 * 2 * 65);
    }

    /// (1, 32, 1, 32768, 128) in 64-key tiles on the H100: 512 tiles, 32 blocks.
    fn long_decode() -> Plan {
        plan(Shape {
            seq_q: 1,
            ..Shape::new(1, 32, 32768, 128)
        })
    }

    /// A plan whose 2^30 one-row blocks leave no room in the grid's x for a second slice.
    fn grid_filling() -> Plan {
        let shape = Shape {
            seq_q: 1 << 30,
            seq_k: 4096,
            ..Shape::new(1, 1, 1, 64)
        };
        let p = Plan::new(shape, 1, 64, H100_SLOTS).unwrap();
        assert_eq!((p.splits, p.row_blocks), (1, 1 << 30));
        p
    }

    #[test]
    fn split_sources_are_named_as_the_json_names_them() {
        for source in [SplitSource::Heuristic, SplitSource::Tuned, SplitSource::Forced] {
            let json = serde_json::to_string(&source).unwrap();
            assert_eq!(json, format!("\"{}\"", source.name()));
            assert_eq!(serde_json::from_str::<SplitSource>(&json).unwrap(), source);
        }
    }

    #[test]
    fn the_fewest_slices_cut_the_tiles_as_the_count_does() {
        for tiles in 1..600u32 {
            for splits in 1..=tiles + 3 {
                let fewest = without_empty_slices(tiles, splits);
                let per = tiles.div_ceil(splits);
                assert!(fewest <= splits.min(tiles), "{tiles} {splits}: {fewest}");
                assert_eq!(tiles.div_ceil(fewest), per, "{tiles} {splits}: {fewest}");
                assert!(
                    (fewest - 1) * per < tiles,
                    "{tiles} {splits}: the last slice empty"
                );
            }
        }
        assert_eq!(without_empty_slices(10, 6), 5);
        assert_eq!(without_empty_slices(512, 8), 8);
        assert_eq!(without_empty_slices(0, 0), 1);
    }

    #[test]
    fn a_tuned_count_is_fitted_to_the_problem_or_ignored() {
        let heuristic = long_decode();
        assert_eq!((heuristic.kv_tiles, heuristic.blocks()), (512, 32));
        assert_eq!(heuristic.source, SplitSource::Heuristic);
        let tuned = heuristic.tuned(16);
        assert_eq!((tuned.splits, tuned.source), (16, SplitSource::Tuned));
        assert_eq!((tuned.row_blocks, tuned.kv_heads, tuned.kv_tiles), (1, 32, 512));
        // 0 means nothing: the heuristic's plan stands.
        assert_eq!(heuristic.tuned(0), heuristic);
        // Past the bound: the bound.
        assert_eq!(heuristic.tuned(u32::MAX).splits, MAX_SPLITS);
        // 5 tiles: at most 5 slices; 4 would leave one empty (slices of 2), so 3.
        let short = plan(Shape {
            seq_q: 1,
            seq_k: 300,
            ..Shape::new(1, 8, 1, 128)
        });
        assert_eq!(short.kv_tiles, 5);
        assert_eq!(short.tuned(8).splits, 5);
        assert_eq!(short.tuned(4).splits, 3);
        assert_eq!(
            short.tuned(1),
            Plan {
                splits: 1,
                source: SplitSource::Tuned,
                ..short
            }
        );
        // A split grid past x: the table's count is ignored, never a panic.
        let full = grid_filling();
        assert_eq!(full.tuned(2), full);
        for splits in [0, 1, 2, 7, 64, MAX_SPLITS, MAX_SPLITS + 1, u32::MAX] {
            for p in [heuristic, short, full] {
                let fitted = p.tuned(splits);
                assert!(
                    (1..=MAX_SPLITS.min(p.kv_tiles)).contains(&fitted.splits),
                    "{splits}: {fitted:?}"
                );
                assert_eq!(without_empty_slices(p.kv_tiles, fitted.splits), fitted.splits);
                assert!(fitted.grid_fits(fitted.splits));
            }
        }
    }

    #[test]
    fn forced_counts_run_as_given_or_are_refused_in_one_line() {
        let heuristic = long_decode();
        for splits in [1, 2, 8, 64, 128] {
            let p = heuristic.forced(splits).unwrap();
            assert_eq!((p.splits, p.source), (splits, SplitSource::Forced));
        }
        let refused = |p: Plan, splits: u32| {
            let message = p.forced(splits).unwrap_err().to_string();
            assert!(
                message.starts_with(&format!("invalid problem: {splits} key slices: "))
                    && message.lines().count() == 1,
                "{message}"
            );
            message
        };
        assert!(refused(heuristic, 0).contains("at least 1"));
        assert!(refused(heuristic, MAX_SPLITS + 1).contains("at most 128"));
        let short = plan(Shape {
            seq_q: 1,
            seq_k: 640,
            ..Shape::new(1, 8, 1, 128)
        });
        assert_eq!(short.kv_tiles, 10);
        assert!(refused(short, 11).contains("more than the problem's 10 KV tiles"));
        let empty = refused(short, 6);
        assert!(
            empty.contains("slices of 2 leave 1 of them empty; 5 slices"),
            "{empty}"
        );
        assert_eq!(short.forced(5).unwrap().splits, 5);
        assert!(refused(grid_filling(), 2).contains("grid's x dimension"));
    }

    #[test]
    fn a_forced_count_comes_first_then_the_tuned_entry_then_the_heuristic() {
        let heuristic = long_decode();
        let entry = |splits: u32| crate::tuned_table::SplitEntry {
            dtype: "f16".into(),
            head_dim: 128,
            kernel: DECODE_VARIANT_16_TMA.into(),
            rows_bucket: 1,
            blocks_bucket: 32,
            seq_k_bucket: 32768,
            splits,
            p50_us: 1.0,
            speedup_vs_heuristic: 1.0,
            shape: String::new(),
            measured: "2026-01-01".into(),
        };
        let forced = DecodeOptions { splits: Some(4) };
        let auto = DecodeOptions::default();
        let chosen = |options, tuned: Option<&crate::tuned_table::SplitEntry>| {
            let p = heuristic.chosen(options, tuned).unwrap();
            (p.splits, p.source)
        };
        assert_eq!(chosen(forced, Some(&entry(16))), (4, SplitSource::Forced));
        assert_eq!(chosen(auto, Some(&entry(16))), (16, SplitSource::Tuned));
        assert_eq!(chosen(auto, None), (heuristic.splits, SplitSource::Heuristic));
        // An entry the problem cannot use falls back to the heuristic.
        assert_eq!(
            chosen(auto, Some(&entry(0))),
            (heuristic.splits, SplitSource::Heuristic)
        );
        // A forced count the problem cannot take is an error, whatever the table says.
        let bad = DecodeOptions { splits: Some(0) };
        assert!(heuristic.chosen(bad, Some(&entry(16))).is_err());
    }

    #[test]
    fn too_many_rows_per_kv_head_are_refused_in_one_line() {
        let shape = Shape {
            seq_q: 1 << 30,
            seq_k: 1,
            ..Shape::new(1, 8, 1, 64).with_heads_kv(1)
        };
        let err = Plan::new(shape, 16, 64, H100_SLOTS).unwrap_err().to_string();
        assert!(err.contains("flash_decode") && err.lines().count() == 1, "{err}");
    }

    #[test]
    fn paged_problems_of_any_size_get_a_decode_variant() {
        let paged = |shape: Shape| paged_variant(shape, 90, 256, 132).map(|v| v.name);
        let one = Shape {
            seq_q: 1,
            ..Shape::new(64, 32, 2048, 128)
        };
        // A batch that fills the SMs, which the dense dispatch of sm_80 leaves to the regular
        // kernels; the paged one takes flash_decode there too, through the copy engine on sm_90.
        assert_eq!(decode_variant(one, 80, 108), None);
        assert_eq!(
            decode_variant(one, 90, 132).map(|v| v.name),
            Some(DECODE_VARIANT_16_TMA)
        );
        assert_eq!(paged(one), Some(DECODE_VARIANT_16_TMA));
        assert_eq!(
            paged_variant(one, 80, 256, 108).map(|v| v.name),
            Some(DECODE_VARIANT_16)
        );
        // A prefill chunk: more rows than one tile pair.
        assert_eq!(paged(Shape { seq_q: 128, ..one }), Some(DECODE_VARIANT_16_TMA));
        assert_eq!(
            paged_variant(Shape { seq_q: 128, ..one }, 80, 256, 108).map(|v| v.name),
            Some(DECODE_VARIANT_16)
        );
        // Where decode_variant packs 32 rows, so does the paged path.
        let rows_32 = Shape {
            seq_q: 4,
            head_dim: 64,
            ..one.with_heads_kv(4)
        };
        assert_eq!(paged(rows_32), Some(DECODE_VARIANT_32));
        assert_eq!(paged(Shape { head_dim: 256, ..one }), None);
        assert_eq!(paged_variant(one, 75, 256, 132), None);
    }

    #[test]
    fn short_pages_over_a_full_grid_take_the_three_per_sm_twin() {
        let paged = |shape: Shape, block_size| paged_variant(shape, 90, block_size, 132).map(|v| v.name);
        let many = Shape {
            seq_q: 1,
            ..Shape::new(64, 32, 2048, 128)
        };
        assert_eq!(paged(many, 16), Some(DECODE_VARIANT_SHORT_PAGES));
        assert_eq!(paged(many, 32), Some(DECODE_VARIANT_SHORT_PAGES));
        assert_eq!(paged(many, 64), Some(DECODE_VARIANT_16_TMA));
        // One wave of KV heads (8 here): the pick, which splits the keys over the SMs.
        let grouped_one = Shape {
            seq_q: 1,
            ..Shape::new(1, 32, 32768, 128).with_heads_kv(8)
        };
        assert_eq!(paged(grouped_one, 16), Some(DECODE_VARIANT_16_TMA));
        // A prefill chunk: 8 row blocks per head, 1,024 blocks.
        let chunk = Shape {
            seq_q: 128,
            ..Shape::new(4, 32, 4096, 128)
        };
        assert_eq!(paged(chunk, 16), Some(DECODE_VARIANT_SHORT_PAGES));
        // Measured at head dim 128 only; and sm_80 has no copy-engine variant.
        assert_eq!(
            paged(Shape { head_dim: 64, ..many }, 16),
            Some(DECODE_VARIANT_16_TMA)
        );
        assert_eq!(
            paged_variant(many, 80, 16, 108).map(|v| v.name),
            Some(DECODE_VARIANT_16)
        );
    }

    #[test]
    fn dispatch_takes_decode_for_few_packed_rows_only() {
        let decode = |shape: Shape| decode_variant(shape, 90, 132).map(|v| v.name);
        let one = Shape {
            seq_q: 1,
            ..Shape::new(1, 32, 32768, 128)
        };
        // On sm_90 through the copy engine; on sm_80 with cp.async.
        assert_eq!(decode(one), Some(DECODE_VARIANT_16_TMA));
        assert_eq!(decode(one.with_heads_kv(8)), Some(DECODE_VARIANT_16_TMA));
        let sm80 = decode_variant(one, 80, 108).map(|v| v.name);
        assert_eq!(sm80, Some(DECODE_VARIANT_16));
        // 4 queries x a group of 8: 32 rows, one block at head dim 64, two at 128.
        let rows_32 = Shape {
            seq_q: 4,
            ..one.with_heads_kv(4)
        };
        assert_eq!(decode(rows_32), Some(DECODE_VARIANT_16_TMA));
        assert_eq!(
            decode(Shape {
                head_dim: 64,
                ..rows_32
            }),
            Some(DECODE_VARIANT_32)
        );
        assert_eq!(decode(Shape::new(2, 16, 4096, 128)), None);
        assert_eq!(decode(Shape { seq_q: 128, ..one }), None);
        assert_eq!(decode_variant(one, 75, 132), None, "sm_80 and newer only");
        // Without grouped heads, a batch that fills the SMs stays on the regular kernels where
        // flash_decode copies with cp.async (sm_80), not where the copy engine brings its tiles.
        assert_eq!(decode_variant(Shape { batch: 8, ..one }, 80, 108), None);
        assert_eq!(decode(Shape { batch: 8, ..one }), Some(DECODE_VARIANT_16_TMA));
        assert_eq!(
            decode(Shape {
                batch: 8,
                seq_q: 20,
                head_dim: 64,
                ..one
            }),
            None,
            "the 32-row variant copies with cp.async"
        );
        assert_eq!(
            decode(Shape { batch: 8, ..one }.with_heads_kv(8)),
            Some(DECODE_VARIANT_16_TMA)
        );
        assert_eq!(
            decode(Shape { head_dim: 256, ..one }),
            None,
            "no decode variant at head dim 256"
        );
        // Every decode-like shape of a compiled head dim finds a variant for it.
        for d in [64, 128] {
            for rows in 1..=DECODE_MAX_ROWS {
                let shape = Shape {
                    seq_q: rows,
                    head_dim: d,
                    ..one
                };
                let v = decode(shape).and_then(VariantSpec::by_name);
                assert!(v.is_some_and(|v| v.family == Family::FlashDecode && v.head_dims.contains(&d)));
            }
        }
        assert!(VariantSpec::by_name(DECODE_VARIANT_32).unwrap().block_m as usize >= DECODE_MAX_ROWS);
        // Grouped heads on sm_90 keep flash_decode's 16-row blocks up to 64 packed rows (16 new
        // tokens on groups of 4), at either head dim; without groups, or on sm_80, 32 rows.
        let grouped = one.with_heads_kv(one.heads / 4);
        for (seq_q, d, expected) in [
            (9, 128, Some(DECODE_VARIANT_16_TMA)),
            (16, 128, Some(DECODE_VARIANT_16_TMA)),
            (16, 64, Some(DECODE_VARIANT_16_TMA)),
            (17, 128, None),
        ] {
            let shape = Shape { seq_q, head_dim: d, ..grouped };
            assert_eq!(decode(shape), expected, "{shape}");
        }
        let multi = Shape { seq_q: 16, ..grouped };
        assert_eq!(decode_variant(multi, 80, 108), None, "sm_80: 32 rows");
        assert_eq!(decode(Shape { seq_q: 48, ..one }), None, "no groups: 32 rows");
    }

    /// The merge's arithmetic (`Partials::merge_row` in the device crate), modelled on the CPU: the
    /// merge of slices' normalised outputs by their base-2 log-sum-exps equals attention over
    /// all keys, and slices that saw no key weigh nothing.
    #[test]
    fn merging_slices_by_their_log_sum_exps_equals_attention_over_all_keys() {
        let scores = [0.3f64, -1.2, 2.5, 0.0, 1.1, -0.4, 3.0];
        let values = [1.0f64, -2.0, 0.5, 4.0, -1.0, 2.0, 0.25];
        let full = {
            let m = scores.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
            let w: Vec<f64> = scores.iter().map(|s| (s - m).exp2()).collect();
            let sum: f64 = w.iter().sum();
            (
                w.iter().zip(values).map(|(w, v)| w * v).sum::<f64>() / sum,
                m + sum.log2(),
            )
        };
        // Slices as the split kernel writes them: (normalised output, base-2 LSE); an empty slice
        // is (0, -inf).
        let slice = |range: std::ops::Range<usize>| {
            if range.is_empty() {
                return (0.0, f64::NEG_INFINITY);
            }
            let m = scores[range.clone()]
                .iter()
                .cloned()
                .fold(f64::NEG_INFINITY, f64::max);
            let sum: f64 = scores[range.clone()].iter().map(|s| (s - m).exp2()).sum();
            let out: f64 = range
                .clone()
                .map(|i| (scores[i] - m).exp2() * values[i])
                .sum::<f64>()
                / sum;
            (out, m + sum.log2())
        };
        let merge = |parts: &[(f64, f64)]| {
            let m = parts.iter().map(|p| p.1).fold(f64::NEG_INFINITY, f64::max);
            let weight = |lse: f64| {
                if lse == f64::NEG_INFINITY {
                    0.0
                } else {
                    (lse - m).exp2()
                }
            };
            let total: f64 = parts.iter().map(|p| weight(p.1)).sum();
            let out = parts.iter().map(|p| weight(p.1) * p.0).sum::<f64>() / total;
            (out, m + total.log2())
        };
        for cuts in [
            vec![0, 7],
            vec![0, 3, 7],
            vec![0, 2, 2, 5, 7],
            vec![0, 1, 2, 3, 4, 5, 6, 7],
        ] {
            let parts: Vec<_> = cuts.windows(2).map(|w| slice(w[0]..w[1])).collect();
            let (out, lse) = merge(&parts);
            assert!((out - full.0).abs() < 1e-12, "{cuts:?}: {out} vs {}", full.0);
            assert!((lse - full.1).abs() < 1e-12, "{cuts:?}: {lse} vs {}", full.1);
        }
    }

    /// The keys query `position` sees (`Shape::causal_key_end`, or all of them).
    fn key_end(shape: Shape, causal: bool, position: u32) -> u32 {
        if causal {
            shape.causal_key_end(position)
        } else {
            shape.seq_k as u32
        }
    }

    /// The whole split path modelled in float64 on the CPU with the kernel's index arithmetic:
    /// every block of the plan's grid (KV head, row block, slice) computes its packed rows'
    /// normalised partial output and base-2 log-sum-exp over the keys its slice walks; the
    /// merge combines them. The result must equal the float64 reference (with the same causal
    /// alignment), every (slice, query row) slot must be written exactly once, and the slices of
    /// a row must cover its visible keys exactly once.
    #[test]
    fn the_split_path_modelled_on_the_cpu_equals_the_reference() {
        // The lab's reference (a dev-dependency) links the non-test build of this crate, so its
        // `Shape` is not this one's: its dims are built by field.
        use flashrs_lab::reference::{self, Dims};
        let dims = |shape: Shape| Dims {
            batch: shape.batch,
            heads: shape.heads,
            heads_kv: shape.heads_kv,
            seq_q: shape.seq_q,
            seq_k: shape.seq_k,
            head_dim: shape.head_dim,
        };
        // (B, H, H_kv, S_q, S_k) at head dim 64, and the rows per block.
        let decode = |b, h, h_kv, seq_q, seq_k| Shape {
            seq_q,
            seq_k,
            ..Shape::new(b, h, seq_q, 64).with_heads_kv(h_kv)
        };
        let shapes = [
            (decode(1, 8, 8, 1, 5000), 16),
            (decode(2, 4, 2, 3, 777), 16),
            (decode(1, 8, 1, 4, 2500), 16),
            (decode(1, 8, 1, 4, 2500), 32),
            (decode(1, 6, 3, 7, 65), 16),
            (decode(1, 2, 2, 1, 1), 16),
            (decode(1, 2, 1, 9, 5), 16),
        ];
        let block_n = 64u32;
        let value = |i: usize, salt: usize| (((i * 7919 + salt * 104_729) % 2003) as f32 / 1001.0) - 1.0;
        for (shape, block_m) in shapes {
            let q: Vec<f32> = (0..shape.q_len()).map(|i| value(i, 1)).collect();
            let k: Vec<f32> = (0..shape.kv_len()).map(|i| value(i, 2)).collect();
            let v: Vec<f32> = (0..shape.kv_len()).map(|i| value(i, 3)).collect();
            for causal in [false, true] {
                // A GPU of very many slots: every sequence of a few tiles is split. Then every
                // count a caller may force on it (`Plan::forced`): the same cover of the keys.
                let heuristic = Plan::new(shape, block_m, block_n, 100_000).unwrap();
                assert_eq!(heuristic.splits > 1, shape.seq_k >= 256, "{shape}: {heuristic:?}");
                let forced =
                    (1..=heuristic.kv_tiles.min(MAX_SPLITS)).filter_map(|s| heuristic.forced(s).ok());
                let expected = reference::attention_f64(&q, &k, &v, dims(shape), causal, 0.3);
                for plan in std::iter::once(heuristic).chain(forced) {
                    let split = SplitModel {
                        shape,
                        plan,
                        block_m,
                        block_n,
                        causal,
                    };
                    let merged = split.merge(&split.slices([&q, &k, &v], 0.3));
                    let worst = merged
                        .iter()
                        .zip(&expected)
                        .map(|(a, b)| (a - b).abs())
                        .fold(0.0, f64::max);
                    assert!(
                        worst < 1e-9,
                        "{shape} causal={causal} splits={}: {worst}",
                        plan.splits
                    );
                }
            }
        }
    }

    /// One decode launch's key slices as the kernel's own index arithmetic (`packing`) deals
    /// them, computed in float64 on the CPU.
    struct SplitModel {
        shape: Shape,
        plan: Plan,
        block_m: u32,
        block_n: u32,
        causal: bool,
    }

    /// Every slice's partial output and base-2 log-sum-exp, per (slice, row).
    struct Partials {
        outputs: Vec<f64>,
        lse2: Vec<f64>,
    }

    impl SplitModel {
        fn rows(&self) -> usize {
            self.shape.batch * self.shape.heads * self.shape.seq_q
        }

        /// Every (slice, row)'s partial result, checking that each slot is written once and that
        /// every key a row sees is seen by exactly one slice.
        fn slices(&self, [q, k, v]: [&[f32]; 3], scale: f64) -> Partials {
            let (shape, plan, d) = (self.shape, self.plan, self.shape.head_dim);
            let (rows_per_split, splits) = (self.rows(), plan.splits as usize);
            let mut outputs = vec![f64::NAN; splits * rows_per_split * d];
            let mut lse2 = vec![f64::NAN; splits * rows_per_split];
            let mut written = vec![0u32; splits * rows_per_split];
            let mut seen = vec![0u32; rows_per_split * shape.seq_k];
            let grid = plan.grid(128, 0).grid_dim;
            for kv_head in 0..plan.kv_heads {
                let rows = packing::PackedRows::new(kv_head, shape.kv_group() as u32, shape.seq_q as u32);
                for x in 0..grid.0 {
                    let (row_block, split) = (x % plan.row_blocks, x / plan.row_blocks);
                    let first_row = row_block * self.block_m;
                    let block_end = key_end(shape, self.causal, rows.last_position(first_row, self.block_m));
                    let (first_tile, tiles) =
                        packing::slice_tiles(shape.seq_k as u32, self.block_n, (plan.splits, split), (0, block_end));
                    let keys = (first_tile * self.block_n)
                        ..((first_tile + tiles) * self.block_n).min(shape.seq_k as u32);
                    // The block's positions bound its rows' (what the kernel's window and causal
                    // trims take).
                    let positions = rows.first_position(first_row, self.block_m)
                        ..=rows.last_position(first_row, self.block_m);
                    for r in first_row..(first_row + self.block_m).min(rows.count) {
                        let (head, position) = rows.place(r);
                        assert!(positions.contains(&position), "row {r} at {position}, {positions:?}");
                        let row = head * shape.seq_q + position as usize;
                        let visible = keys.start
                            ..keys
                                .end
                                .min(key_end(shape, self.causal, position))
                                .max(keys.start);
                        let kv_base = (head / shape.kv_group()) * shape.seq_k;
                        let scores: Vec<f64> = visible
                            .clone()
                            .map(|j| {
                                seen[row * shape.seq_k + j as usize] += 1;
                                let kj = &k[(kv_base + j as usize) * d..][..d];
                                let qi = &q[row * d..][..d];
                                qi.iter().zip(kj).map(|(a, b)| *a as f64 * *b as f64).sum::<f64>() * scale
                                    / std::f64::consts::LN_2
                            })
                            .collect();
                        let slot = split as usize * rows_per_split + row;
                        written[slot] += 1;
                        let max = scores.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                        let sum: f64 = scores.iter().map(|s| (s - max).exp2()).sum();
                        for c in 0..d {
                            let acc: f64 = visible
                                .clone()
                                .zip(&scores)
                                .map(|(j, s)| (s - max).exp2() * v[(kv_base + j as usize) * d + c] as f64)
                                .sum();
                            outputs[slot * d + c] = if sum > 0.0 { acc / sum } else { 0.0 };
                        }
                        lse2[slot] = if sum > 0.0 {
                            max + sum.log2()
                        } else {
                            f64::NEG_INFINITY
                        };
                    }
                }
            }
            assert!(
                written.iter().all(|&n| n == 1),
                "{shape} causal={}: slots written {written:?}",
                self.causal
            );
            for row in 0..rows_per_split {
                let end = key_end(shape, self.causal, (row % shape.seq_q) as u32) as usize;
                let counts = &seen[row * shape.seq_k..][..shape.seq_k];
                assert!(counts[..end].iter().all(|&n| n == 1) && counts[end..].iter().all(|&n| n == 0));
            }
            Partials { outputs, lse2 }
        }

        /// The merge of the slices' partial results, as `Partials::merge_row` does it.
        fn merge(&self, partials: &Partials) -> Vec<f64> {
            let (rows_per_split, splits, d) = (self.rows(), self.plan.splits as usize, self.shape.head_dim);
            let mut merged = vec![0.0f64; rows_per_split * d];
            for row in 0..rows_per_split {
                let lse2 = |s: usize| partials.lse2[s * rows_per_split + row];
                let max = (0..splits).map(lse2).fold(f64::NEG_INFINITY, f64::max);
                let weight = |s: usize| match lse2(s) {
                    l if l == f64::NEG_INFINITY => 0.0,
                    l => (l - max).exp2(),
                };
                let total: f64 = (0..splits).map(weight).sum();
                for c in 0..d {
                    let acc: f64 = (0..splits)
                        .map(|s| weight(s) * partials.outputs[(s * rows_per_split + row) * d + c])
                        .sum();
                    merged[row * d + c] = if total > 0.0 { acc / total } else { 0.0 };
                }
            }
            merged
        }
    }
}
