//! The timelines that `flash_ws`'s instrumented twins record (`launch::record`): for each block,
//! the SM clock at five points of its first consumer warpgroup's work on each of its first work
//! items. Read back into per-block timelines, and summed up per item position (a persistent
//! block's first item, its second, ...) as the median over blocks of each span, which says where
//! an item's cycles go beyond its KV tiles: the wait for its Q, the KV loop, a split item's merge,
//! the epilogue, and the gap between one item's end and the next one's start.
//!
//! Beside them, the first two consumer warpgroups' timelines of each KV tile of the block's first
//! item (the overlapped loop's: the turn taken, the products issued, S landed, the softmax's part
//! before the wait for V and the last P V, that wait over, P packed), summed up per tile as
//! [`TileSpans`]: how the ping-pong pair's chains interleave.

use serde::Serialize;

use flashrs::launch::record;
use flashrs::{Error, Result};

use crate::stats::median;

/// Events per item.
const EVENTS: usize = record::EVENTS as usize;
/// Events per traced KV tile.
const TILE_EVENTS: usize = record::TILE_EVENTS as usize;

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
    /// Per traced consumer (`record::TRACED_CONSUMERS`), per recorded KV tile of the first item,
    /// the SM cycles at each event (`record::TILE_TURN` .. `record::TILE_PACKED`) from the block's
    /// first item's start (`None`: not recorded, as past a causal row's last key, where only the
    /// turn is); a tile counts as recorded when its turn was (tiles are a prefix).
    pub tile_events: Vec<Vec<[Option<u32>; TILE_EVENTS]>>,
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
        let (trace, tile_trace) = trace.split_at((record::TILES_AT - record::HEADER) as usize);
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
        let tile_events = tile_trace
            .chunks_exact(record::TRACED_TILES as usize * TILE_EVENTS)
            .map(|consumer| {
                consumer
                    .chunks_exact(TILE_EVENTS)
                    .take_while(|tile| tile[record::TILE_TURN as usize] != 0)
                    .map(|tile| core::array::from_fn(|e| (tile[e] != 0).then(|| tile[e].wrapping_sub(first))))
                    .collect()
            })
            .collect();
        blocks.push(BlockTimeline {
            block,
            sm: header[3],
            tiles: header[1],
            items,
            tile_events,
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

/// The median over blocks of one KV tile's spans for one traced consumer, in SM cycles: its chain
/// from the turn at the tensor cores to its P packed, and where the other consumer stood. NaN
/// (`null` in JSON) where no block recorded both ends of a span.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct TileSpans {
    /// Which consumer warpgroup (0 goes first at each turn).
    pub consumer: usize,
    /// Which KV tile of the block's first item.
    pub tile: usize,
    /// Blocks that recorded it.
    pub blocks: usize,
    /// From the block's first item's start to the turn taken.
    pub turn: f64,
    /// From this consumer's P of the tile before packed to the turn taken (the wait for the K
    /// tile and for the turn); 0 for the first tile.
    pub turn_wait: f64,
    /// From the turn taken to the products issued and the turn passed on.
    pub issue: f64,
    /// From the products issued to the tile's S landed.
    pub scores_wait: f64,
    /// From S landed to P packed: the softmax (with the wait for the tile before's P V).
    pub softmax: f64,
    /// The softmax's part before the wait for V and the last P V (S landed to `TILE_HEAD`).
    pub head: f64,
    /// That wait (`TILE_HEAD` to `TILE_RETIRED`).
    pub retire: f64,
    /// The rest of the softmax and the packing of P (`TILE_RETIRED` to `TILE_PACKED`).
    pub tail: f64,
    /// From this consumer's turn to the other consumer's next turn (consumer 0) or to consumer
    /// 0's turn on the next tile (consumer 1): where in its period the other starts.
    pub other_turn_after: f64,
}

/// [`TileSpans`] of every (consumer, tile) some block recorded, consumer 0's tiles first.
pub fn tile_spans(blocks: &[BlockTimeline]) -> Vec<TileSpans> {
    let consumers = blocks.iter().map(|b| b.tile_events.len()).max().unwrap_or(0);
    let mut spans = Vec::new();
    for consumer in 0..consumers {
        let tiles_of = |b: &BlockTimeline| b.tile_events.get(consumer).map_or(0, |t| t.len());
        let tiles = blocks.iter().map(tiles_of).max().unwrap_or(0);
        for tile in 0..tiles {
            let having: Vec<&BlockTimeline> = blocks.iter().filter(|b| tiles_of(b) > tile).collect();
            let span = |f: &dyn Fn(&BlockTimeline) -> Option<u32>| {
                let values: Vec<f64> = having.iter().filter_map(|b| f(b).map(f64::from)).collect();
                median(&values).unwrap_or(f64::NAN)
            };
            let at =
                |b: &BlockTimeline, tile: usize, event: u32| b.tile_events[consumer][tile][event as usize];
            let between =
                |from: u32, to: u32| span(&|b| Some(at(b, tile, to)?.wrapping_sub(at(b, tile, from)?)));
            // The other consumer's next turn after this one's: consumer 1's on the same tile, or
            // consumer 0's on the next.
            let (other, other_tile) = if consumer == 0 { (1, tile) } else { (0, tile + 1) };
            spans.push(TileSpans {
                consumer,
                tile,
                blocks: having.len(),
                turn: span(&|b| at(b, tile, record::TILE_TURN)),
                turn_wait: if tile == 0 {
                    0.0
                } else {
                    span(&|b| {
                        Some(at(b, tile, record::TILE_TURN)?.wrapping_sub(at(
                            b,
                            tile - 1,
                            record::TILE_PACKED,
                        )?))
                    })
                },
                issue: between(record::TILE_TURN, record::TILE_ISSUED),
                scores_wait: between(record::TILE_ISSUED, record::TILE_SCORES),
                softmax: between(record::TILE_SCORES, record::TILE_PACKED),
                head: between(record::TILE_SCORES, record::TILE_HEAD),
                retire: between(record::TILE_HEAD, record::TILE_RETIRED),
                tail: between(record::TILE_RETIRED, record::TILE_PACKED),
                other_turn_after: span(&|b| {
                    let theirs = b.tile_events.get(other)?.get(other_tile)?;
                    Some(theirs[record::TILE_TURN as usize]?.wrapping_sub(at(b, tile, record::TILE_TURN)?))
                }),
            });
        }
    }
    spans
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
    fn tile_timelines_are_read_per_consumer_up_to_the_first_tile_without_a_turn() {
        let mut log = record_of(4, 3, &[[1000, 1010, 5000, 5000, 5100]]);
        let tile = |consumer: u32, tile: u32| {
            (record::TILES_AT + (consumer * record::TRACED_TILES + tile) * record::TILE_EVENTS) as usize
        };
        log[tile(0, 0)..tile(0, 2)].copy_from_slice(&[
            1020, 1030, 1300, 1500, 1600, 1900, 2000, 2010, 2300, 2500, 2600, 2900,
        ]);
        log[tile(1, 0)..tile(1, 1)].copy_from_slice(&[1040, 1050, 1600, 1800, 1850, 2200]);
        // A tile past the first unrecorded one is not read.
        log[tile(1, 2)] = 7;
        let blocks = timelines(&log).unwrap();
        assert_eq!(blocks[0].items, vec![[0, 10, 4000, 4000, 4100]]);
        assert_eq!(
            blocks[0].tile_events,
            [
                vec![[20, 30, 300, 500, 600, 900], [1000, 1010, 1300, 1500, 1600, 1900]],
                vec![[40, 50, 600, 800, 850, 1200]]
            ]
            .map(|consumer| consumer
                .into_iter()
                .map(|tile| tile.map(Some))
                .collect::<Vec<_>>())
        );
        let spans = tile_spans(&blocks);
        assert_eq!(spans.len(), 3);
        let (c0t0, c0t1, c1t0) = (&spans[0], &spans[1], &spans[2]);
        assert_eq!((c0t0.consumer, c0t0.tile, c0t0.turn_wait), (0, 0, 0.0));
        assert_eq!((c0t0.issue, c0t0.scores_wait, c0t0.softmax), (10.0, 270.0, 600.0));
        assert_eq!((c0t0.head, c0t0.retire, c0t0.tail), (200.0, 100.0, 300.0));
        assert_eq!(c0t0.other_turn_after, 20.0);
        assert_eq!(c0t1.turn_wait, 100.0);
        assert!(c0t1.other_turn_after.is_nan(), "consumer 1 recorded no tile 1");
        assert_eq!(
            (c1t0.consumer, c1t0.tile, c1t0.scores_wait, c1t0.softmax),
            (1, 0, 550.0, 600.0)
        );
        // Consumer 0's turn on tile 1 came 960 cycles after consumer 1's on tile 0.
        assert_eq!(c1t0.other_turn_after, 960.0);
    }

    #[test]
    fn spans_are_medians_over_the_blocks_that_had_the_item() {
        let blocks = [
            BlockTimeline {
                block: 0,
                sm: 0,
                tiles: 3,
                items: vec![[0, 10, 100, 100, 120], [125, 130, 300, 340, 360]],
                tile_events: vec![],
            },
            BlockTimeline {
                block: 1,
                sm: 1,
                tiles: 3,
                items: vec![[0, 20, 200, 200, 230], [240, 250, 400, 460, 500]],
                tile_events: vec![],
            },
            BlockTimeline {
                block: 2,
                sm: 2,
                tiles: 1,
                items: vec![[0, 30, 300, 300, 330]],
                tile_events: vec![],
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
