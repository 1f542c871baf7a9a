//! How a launch's blocks share the work: the persistent kernels' item walk and tables, and key slices (a tail split or flash_decode's plan) with their scratch.

use crate::gpu::launch::Launch;
use crate::gpu::Gpu;
use std::sync::Arc;

use cudarc::driver::{CudaSlice, CudaStream, DevicePtr, LaunchConfig};

use crate::error::Result;
use crate::launch::item_walk::ItemWalk;
use crate::launch::tail_split;
use crate::problem::Shape;
use crate::variants::{Family, VariantSpec};

/// The key slices of one launch and what they need: `splits` slices per row block (1: none),
/// `floats` of workspace and `counters` slice counters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct KeySlices {
    pub(crate) splits: u32,
    pub(crate) floats: usize,
    pub(crate) counters: usize,
}

impl KeySlices {
    const NONE: KeySlices = KeySlices {
        splits: 1,
        floats: 0,
        counters: 0,
    };

    /// The tail split (`launch::tail_split`) of a persistent flash_ws or flash_ws_fp8 launch of
    /// `variant` on `shape` over the grid `config`: non-causal problems only, whose items are all
    /// the same size (a causal problem's last round holds its shortest items, whose slices would
    /// save little).
    /// `enabled` is the opened GPU's `GpuOptions::tail_split` (off for measuring the split).
    pub(crate) fn tail_split(
        variant: &VariantSpec,
        shape: Shape,
        causal: bool,
        config: &LaunchConfig,
        enabled: bool,
    ) -> KeySlices {
        let warp_specialised = matches!(variant.family, Family::FlashWs | Family::FlashWsFp8);
        if !warp_specialised || !variant.persistent || causal || !enabled {
            return KeySlices::NONE;
        }
        let Ok(items) = u32::try_from(
            (shape.seq_q as u64).div_ceil(variant.block_m as u64) * (shape.batch * shape.heads) as u64,
        ) else {
            return KeySlices::NONE;
        };
        let grid = config.grid_dim.0;
        let tiles = u32::try_from((shape.seq_k as u64).div_ceil(variant.block_n as u64)).unwrap_or(u32::MAX);
        let splits = tail_split::slices(items, grid, tiles);
        let consumers = variant.block_m / 64;
        KeySlices {
            splits,
            floats: tail_split::workspace_floats(items, grid, splits, consumers, shape.head_dim as u32)
                as usize,
            counters: tail_split::counters(items, grid, splits, consumers) as usize,
        }
    }
}

/// The walk over the work items of a persistent flash_ws or flash_ws_fp8 launch of `variant` on
/// `shape` over the grid `config`, with `splits` slices per item of its last round
/// (`KeySlices::tail_split`); none for every other launch.
pub(crate) fn item_walk(variant: &VariantSpec, shape: Shape, config: &LaunchConfig, splits: u32) -> ItemWalk {
    let warp_specialised = matches!(variant.family, Family::FlashWs | Family::FlashWsFp8);
    if !warp_specialised || !variant.persistent {
        return ItemWalk::default();
    }
    let row_blocks = (shape.seq_q as u32).div_ceil(variant.block_m);
    let batch_heads = (shape.batch * shape.heads) as u32;
    ItemWalk::new(
        row_blocks,
        batch_heads,
        shape.heads as u32,
        config.grid_dim.0,
        splits,
    )
}

/// Whether a launch of `variant` walks an item table (`causal_item_table`): a persistent
/// `flash_ws` on a causal problem. Every other launch walks by positions, or has one item.
pub(crate) fn walks_item_table(variant: &VariantSpec, causal: bool) -> bool {
    variant.family == Family::FlashWs && variant.persistent && causal
}

/// The item table (`launch::item_walk::table`) of a persistent `flash_ws` launch of `variant` on
/// a causal `shape` over `grid` blocks (`walks_item_table`); `None` when the items do not count
/// in a `u32` or there is no block.
///
/// A causal item sees from one tile of keys to all of them, so the positions' walk (block `b`
/// takes items `b, b + grid, ...`) deals the blocks unequal work: 1.46x slower than the grid
/// kernel at (1,16,16384,128) (docs/kernels/flash_ws.md, persistence). The grid kernel's blocks
/// take their items in the longest-first order of `launch::causal_order` as SMs come free; here
/// the host deals that order out the same way ahead of time (list scheduling: each item to the
/// block whose items so far end first, by their KV tiles and a fixed cost per item), so that a
/// persistent block runs the grid kernel's schedule without its per-block start and end
/// (docs/kernels/flash_ws.md, persistence: causal problems walk a table). Under a sliding window
/// of `window_left` keys before each diagonal an item's tiles start where the window of its
/// first row does (the kernels skip the ones before): dealt by causal lengths, the blocks given
/// the many short early items carry twice the windowed work of others at (1,16,16384,128) with a
/// 4096-key window (272..544 tiles per block; dealt by windowed lengths 445..475, a predicted
/// 13% off the launch; not measured yet).
pub(crate) fn causal_item_table(
    variant: &VariantSpec,
    shape: Shape,
    grid: u32,
    window_left: Option<u32>,
) -> Option<Vec<u32>> {
    use crate::launch::{causal_order, item_walk::table};
    let (block_m, block_n) = (variant.block_m, variant.block_n);
    let (seq_q, seq_k) = (shape.seq_q as u32, shape.seq_k as u32);
    let row_blocks = seq_q.div_ceil(block_m);
    let batch_heads = u32::try_from(shape.batch * shape.heads).ok()?;
    let items = row_blocks.checked_mul(batch_heads)?;
    let group = causal_order::max_heads_per_group(seq_k, shape.head_dim as u32, shape.kv_group() as u32);
    // The KV tiles of the keys a row block's rows see: to the last row's causal end, from the
    // tile where the first row's window starts.
    let window = crate::Window {
        left: window_left,
        right: Some(0),
    };
    let tiles = |row_block: u32| {
        let first_row = row_block * block_m;
        let last_row = (first_row + block_m).min(seq_q) - 1;
        let end = (shape.causal_key_end(last_row) as u64).div_ceil(block_n as u64);
        let start = (window.keys(&shape, true, first_row).start / block_n) as u64;
        end.saturating_sub(start)
    };
    let entries = (0..items).map(|item| {
        let (head, row_block) = causal_order::item(item, row_blocks, batch_heads, group);
        ([head, row_block], tiles(row_block))
    });
    dealt_item_table(grid, table::pairs_start(grid), entries)
}

/// An item table (`launch::item_walk::table`) of `entries` (each item's words and its KV tiles)
/// dealt in their order to `grid` blocks by list scheduling: each item to the block whose items so
/// far end first, by their KV tiles and a fixed cost per item. The words: the `grid + 1` offsets,
/// zeros up to `entries_start`, then each block's entries in the order it takes them. `None`
/// without a block or when the items do not count in a `u32`.
pub(crate) fn dealt_item_table<const W: usize>(
    grid: u32,
    entries_start: u32,
    entries: impl Iterator<Item = ([u32; W], u64)>,
) -> Option<Vec<u32>> {
    use std::cmp::Reverse;
    // An item's cost in quarter tiles: its KV tiles and the fixed cost of starting it.
    const QUARTERS_PER_TILE: u64 = 4;
    const ITEM_QUARTERS: u64 = 1;
    let mut ends: std::collections::BinaryHeap<Reverse<(u64, u32)>> =
        (0..grid).map(|b| Reverse((0, b))).collect();
    let mut lists = vec![Vec::new(); grid as usize];
    for (entry, tiles) in entries {
        let Reverse((end, block)) = ends.pop()?;
        lists[block as usize].push(entry);
        ends.push(Reverse((end + QUARTERS_PER_TILE * tiles + ITEM_QUARTERS, block)));
    }
    let items = u32::try_from(lists.iter().map(Vec::len).sum::<usize>()).ok()?;
    let mut words = Vec::with_capacity(entries_start as usize + W * items as usize);
    words.push(0);
    for list in &lists {
        words.push(words.last().copied().unwrap_or(0) + list.len() as u32);
    }
    words.resize(entries_start as usize, 0);
    words.extend(lists.iter().flatten().flatten());
    Some(words)
}

/// The workspace and counters of a launch's key slices.
pub(crate) enum SliceBuffers<'a> {
    /// Kept workspace and counters (address and length; 0 for none): the GPU's own, ordered on
    /// its stream, or a capture's own (`Permanents::capture_scratch`).
    Cached((u64, usize), (u64, usize)),
    /// Allocated (the counters zeroed) and freed (after the launch) in the order of the caller's
    /// stream.
    Own(CudaSlice<f32>, CudaSlice<u32>),
    /// Lent by the GPU's pool for callers' streams (outside capture).
    Pooled(crate::gpu::scratch::PoolLease<'a>),
}

impl<'a> SliceBuffers<'a> {
    /// Binds the workspace and counters `slices` needs to `launch`'s `workspace` and
    /// `split_counters` (nothing when the launch does not split its keys).
    pub(crate) fn bind<'l>(&'l self, launch: &mut Launch<'l>, slices: KeySlices, stream: &'l CudaStream) {
        let ((workspace, floats), (counters, count)) = match self {
            SliceBuffers::Cached(workspace, counters) => (*workspace, *counters),
            SliceBuffers::Pooled(lease) => (lease.workspace, lease.counters),
            SliceBuffers::Own(partials, counters) => (
                (partials.device_ptr(stream).0, partials.len()),
                (counters.device_ptr(stream).0, counters.len()),
            ),
        };
        if slices.floats > 0 {
            launch.scratch(
                "split workspace",
                workspace,
                4 * floats,
                4 * slices.floats,
                |a, p| a.workspace = p,
            );
        }
        if slices.counters > 0 {
            launch.scratch(
                "split counters",
                counters,
                4 * count,
                4 * slices.counters,
                |a, p| a.split_counters = p,
            );
        }
    }
}

impl Gpu {
    /// The buffers `slices` needs for a launch on `stream`. The cached workspace and counters are
    /// ordered on this GPU's stream only, so a caller's stream gets its own.
    pub(crate) fn slice_buffers(
        &self,
        slices: KeySlices,
        stream: &Arc<CudaStream>,
    ) -> Result<SliceBuffers<'_>> {
        let (floats, counters) = (slices.floats, slices.counters);
        if floats > 0 && **stream != *self.stream {
            // Under capture, the capture's own pair (kept, so that a replay allocates nothing);
            // outside it the pool lends a pair.
            if let Some((workspace, counters)) = self.permanents.capture_scratch(stream, floats, counters)? {
                return Ok(SliceBuffers::Cached(workspace, counters));
            }
            if let Some(lease) = self.stream_pool.lease(floats, counters, stream)? {
                return Ok(SliceBuffers::Pooled(lease));
            }
            // Only the counters must start at 0: each slice writes its part of the workspace
            // before the merge reads it (the cached workspace is reused as the last launch left
            // it). Under capture a zeroed workspace would be a memset node run at every replay.
            // Safety: `floats` f32 of device memory, allocated in the stream's order, never read
            // before a launch wrote it (above).
            let workspace = unsafe { stream.alloc::<f32>(floats) }?;
            return Ok(SliceBuffers::Own(workspace, stream.alloc_zeros::<u32>(counters)?));
        }
        Ok(SliceBuffers::Cached(
            self.decode_workspace(floats)?,
            self.decode_counters(counters)?,
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn causal_item_table_deals_every_item_once_and_evenly() {
        use crate::launch::item_walk::table;
        let persistent = VariantSpec::by_name("flash_ws_m128_n128_s2_pp_ov_ps_mbarrier").unwrap();
        let cross = Shape {
            seq_q: 300,
            seq_k: 1000,
            ..Shape::new(2, 3, 0, 128).with_heads_kv(1)
        };
        for (shape, grid) in [
            (Shape::new(2, 16, 4096, 128), 132u32),
            (Shape::new(1, 3, 1000, 128), 5),
            (cross, 4),
            (Shape::new(1, 1, 1, 128), 1),
        ] {
            let words = causal_item_table(persistent, shape, grid, None).unwrap();
            let row_blocks = (shape.seq_q as u32).div_ceil(persistent.block_m);
            let heads = (shape.batch * shape.heads) as u32;
            let items = row_blocks * heads;
            assert_eq!(words.len(), table::words(grid, items), "{shape}");
            let offsets = &words[..=grid as usize];
            assert_eq!((offsets[0], offsets[grid as usize]), (0, items), "{shape}");
            assert!(offsets.windows(2).all(|w| w[0] <= w[1]), "{shape}");
            let pairs: Vec<[u32; 2]> = words[table::pairs_start(grid) as usize..]
                .chunks(2)
                .map(|p| [p[0], p[1]])
                .collect();
            let mut seen = vec![false; items as usize];
            for &[head, row_block] in &pairs {
                assert!(head < heads && row_block < row_blocks, "{shape}");
                let at = (head * row_blocks + row_block) as usize;
                assert!(!seen[at], "{shape}: item ({head}, {row_block}) twice");
                seen[at] = true;
            }
            assert!(seen.iter().all(|&s| s), "{shape}");
            // No block's work past the lightest's by more than the longest item (list
            // scheduling's bound), in the table's cost (quarter tiles; a self-attention row
            // block `r` of 128 rows sees `r + 1` tiles of 128 keys).
            if shape.seq_q == shape.seq_k {
                let cost = |row_block: u32| 4 * (row_block as usize + 1) + 1;
                let loads: Vec<usize> = offsets
                    .windows(2)
                    .map(|w| {
                        pairs[w[0] as usize..w[1] as usize]
                            .iter()
                            .map(|p| cost(p[1]))
                            .sum()
                    })
                    .collect();
                let (least, most) = (loads.iter().min().unwrap(), loads.iter().max().unwrap());
                assert!(
                    most - least <= cost(row_blocks - 1),
                    "{shape}: loads {least}..{most}"
                );
            }
        }
        // Under a 128-key window every item of (2,16,4096) sees two tiles (three where the window
        // reaches back past a tile's start): dealt by those, each block gets about as many items
        // (within two of each other), where the causal lengths gave the blocks of short items
        // several times as many.
        let shape = Shape::new(2, 16, 4096, 128);
        let count = |window: Option<u32>| {
            let words = causal_item_table(persistent, shape, 132, window).unwrap();
            let items: Vec<u32> = words[..=132].windows(2).map(|w| w[1] - w[0]).collect();
            (*items.iter().min().unwrap(), *items.iter().max().unwrap())
        };
        let (least, most) = count(Some(127));
        assert!(most - least <= 2, "windowed: {least}..{most} items per block");
        let (least, most) = count(None);
        assert!(most >= 2 * least, "causal: {least}..{most} items per block");
        assert!(walks_item_table(persistent, true));
        assert!(!walks_item_table(persistent, false));
        let grid_kernel = VariantSpec::by_name("flash_ws_m128_n128_s2_pp_ov_mbarrier").unwrap();
        assert!(!walks_item_table(grid_kernel, true));
    }
}
