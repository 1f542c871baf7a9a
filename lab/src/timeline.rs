//! The timelines that `flash_ws`'s instrumented twins record (`launch::record`): for each block,
//! the SM clock at five points of its first consumer warpgroup's work on each of its first work
//! items. Read back into per-block timelines, and summed up per item position (a persistent
//! block's first item, its second, ...) as the median over blocks of each span, which says where
//! an item's cycles go beyond its KV tiles: the wait for its Q, the KV loop, a split item's merge,
//! the epilogue, and the gap between one item's end and the next one's start.

use serde::Serialize;

use flashrs::launch::record;
use flashrs::{Error, Result};

use crate::stats::median;

/// Events per item.
const EVENTS: usize = record::EVENTS as usize;

/// One block's record: its header and the timeline of its first items.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct BlockTimeline {
    /// The block's linear index in the grid.
    pub block: usize,
    /// The SM it ran on.
    pub sm: u32,
    /// KV tiles it processed, over all of its items.
    pub tiles: u32,
    /// Per recorded item, the SM cycles at each event (`record::START` .. `record::DONE`) from the
    /// block's first item's start.
    pub items: Vec<[u32; EVENTS]>,
}

impl BlockTimeline {
    /// The cycles from the block's first item's start to its last recorded item's end.
    pub fn end(&self) -> Option<u32> {
        self.items.last().map(|item| item[record::DONE as usize])
    }
}

/// The blocks' timelines in a barrier log of whole records; blocks that recorded no item (past
/// their rows, or not a `flash_ws` kernel) are left out. An item counts as recorded when any of
/// its words is set (a clock of exactly 0 at every event cannot happen).
pub fn timelines(log: &[u32]) -> Result<Vec<BlockTimeline>> {
    let words = record::WORDS as usize;
    if !log.len().is_multiple_of(words) {
        return Err(Error::InvalidProblem(format!(
            "a barrier log of {} words is not whole records of {words}",
            log.len()
        )));
    }
    let mut blocks = Vec::new();
    for (block, chunk) in log.chunks_exact(words).enumerate() {
        let (header, trace) = chunk.split_at(record::HEADER as usize);
        let recorded: Vec<&[u32]> = trace
            .chunks_exact(EVENTS)
            .take_while(|item| item.iter().any(|&w| w != 0))
            .collect();
        let Some(first) = recorded.first().map(|item| item[record::START as usize]) else {
            continue;
        };
        let items = recorded
            .iter()
            .map(|item| core::array::from_fn(|e| item[e].wrapping_sub(first)))
            .collect();
        blocks.push(BlockTimeline {
            block,
            sm: header[3],
            tiles: header[1],
            items,
        });
    }
    Ok(blocks)
}

/// The median over blocks of the spans of their `position`-th item, in SM cycles.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ItemSpans {
    /// Which item of its block (0: the first).
    pub position: usize,
    /// Blocks that had an item there.
    pub blocks: usize,
    /// From the block's first item's start to this one's.
    pub start: f64,
    /// From the previous item's end to this one's start (0 for the first).
    pub gap: f64,
    /// From the start to its Q having landed.
    pub q_wait: f64,
    /// The KV loop: from Q to the last P V completed.
    pub kv_loop: f64,
    /// A split item's merge (or publishing its slot); about 0 for a whole item.
    pub merge: f64,
    /// The epilogue: from the merge to the output handed over.
    pub epilogue: f64,
    /// From the block's first item's start to this one's end.
    pub end: f64,
}

/// [`ItemSpans`] of every item position some block recorded.
pub fn item_spans(blocks: &[BlockTimeline]) -> Vec<ItemSpans> {
    let positions = blocks.iter().map(|b| b.items.len()).max().unwrap_or(0);
    (0..positions)
        .map(|position| {
            let having: Vec<&BlockTimeline> = blocks.iter().filter(|b| b.items.len() > position).collect();
            let span = |f: &dyn Fn(&BlockTimeline) -> u32| {
                let values: Vec<f64> = having.iter().map(|b| f(b) as f64).collect();
                median(&values).unwrap_or(0.0)
            };
            let at = |b: &BlockTimeline, event: u32| b.items[position][event as usize];
            let between = |from: u32, to: u32| span(&|b| at(b, to).wrapping_sub(at(b, from)));
            ItemSpans {
                position,
                blocks: having.len(),
                start: span(&|b| at(b, record::START)),
                gap: if position == 0 {
                    0.0
                } else {
                    span(&|b| at(b, record::START).wrapping_sub(b.items[position - 1][record::DONE as usize]))
                },
                q_wait: between(record::START, record::READY),
                kv_loop: between(record::READY, record::LOOP_END),
                merge: between(record::LOOP_END, record::MERGED),
                epilogue: between(record::MERGED, record::DONE),
                end: span(&|b| at(b, record::DONE)),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A record of `items` (absolute clocks per event) after a header of (barriers, tiles, cycles, SM).
    fn record_of(tiles: u32, sm: u32, items: &[[u32; EVENTS]]) -> Vec<u32> {
        let mut words = vec![0, tiles, 1000, sm];
        for item in items {
            words.extend_from_slice(item);
        }
        words.resize(record::WORDS as usize, 0);
        words
    }

    #[test]
    fn timelines_count_from_the_first_start_across_a_clock_wrap_and_skip_empty_blocks() {
        let near_wrap = u32::MAX - 9;
        let mut log = record_of(
            16,
            5,
            &[
                [near_wrap, near_wrap + 5, 100, 110, 130],
                [140, 150, 900, 950, 990],
            ],
        );
        log.extend(record_of(0, 6, &[]));
        log.extend(record_of(8, 7, &[[1000, 1010, 2000, 2000, 2100]]));
        let blocks = timelines(&log).unwrap();
        assert_eq!(blocks.len(), 2);
        assert_eq!((blocks[0].block, blocks[0].sm, blocks[0].tiles), (0, 5, 16));
        assert_eq!(
            blocks[0].items,
            vec![[0, 5, 110, 120, 140], [150, 160, 910, 960, 1000]]
        );
        assert_eq!(blocks[0].end(), Some(1000));
        assert_eq!(
            (blocks[1].block, blocks[1].items[0]),
            (2, [0, 10, 1000, 1000, 1100])
        );
        assert!(timelines(&log[..10]).is_err());
    }

    #[test]
    fn spans_are_medians_over_the_blocks_that_had_the_item() {
        let blocks = [
            BlockTimeline {
                block: 0,
                sm: 0,
                tiles: 3,
                items: vec![[0, 10, 100, 100, 120], [125, 130, 300, 340, 360]],
            },
            BlockTimeline {
                block: 1,
                sm: 1,
                tiles: 3,
                items: vec![[0, 20, 200, 200, 230], [240, 250, 400, 460, 500]],
            },
            BlockTimeline {
                block: 2,
                sm: 2,
                tiles: 1,
                items: vec![[0, 30, 300, 300, 330]],
            },
        ];
        let spans = item_spans(&blocks);
        assert_eq!(spans.len(), 2);
        let first = &spans[0];
        assert_eq!(
            (first.blocks, first.gap, first.q_wait, first.kv_loop),
            (3, 0.0, 20.0, 180.0)
        );
        assert_eq!((first.merge, first.epilogue, first.end), (0.0, 30.0, 230.0));
        let second = &spans[1];
        assert_eq!(
            (second.blocks, second.start, second.gap, second.q_wait),
            (2, 182.5, 7.5, 7.5)
        );
        assert_eq!(
            (second.kv_loop, second.merge, second.epilogue, second.end),
            (160.0, 50.0, 30.0, 430.0)
        );
    }
}
