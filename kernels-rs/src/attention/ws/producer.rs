//! `flash_ws`'s producer warpgroup: the copies of Q, K and V into the ring, and the transpose of
//! V where it comes in its own rows.

use super::item_problem;
use super::schedule::Schedule;
use super::smem::{slot, Plan, K_EMPTY, K_FULL, V_EMPTY, V_FULL};
use crate::arch::{self, SharedAddr};
use crate::attention::shape::WarpgroupShape;
use crate::attention::Problem;
use crate::attention::{fp8, FP8_K_BOX_ROWS, FP8_MAP_V_ROWS, FP8_Q_BOX_ROWS, MAP_BYTES, MAP_K, MAP_Q, MAP_V};
use crate::tile::swizzled;
use crate::tile::Operand;

/// The producer: one thread issues every copy of the block. The ring's slots and phases run on
/// across work items (`ring` counts the KV tiles issued so far).
#[inline(always)]
unsafe fn produce<G: WarpgroupShape, const STAGES: usize, const PERSISTENT: bool, const VARLEN: bool>(
    plan: &Plan<G, STAGES>,
    problem: &Problem,
    maps: *const u8,
    schedule: &Schedule<PERSISTENT, VARLEN>,
) {
    let map = |i: usize| maps.add(i * MAP_BYTES);
    let map_v = if G::Input::TRANSPOSES_V {
        FP8_MAP_V_ROWS
    } else {
        MAP_V
    };
    for i in [MAP_Q, MAP_K, map_v] {
        arch::prefetch_tensormap(map(i));
    }
    let block_m = schedule.block_m;
    let (k_bytes, v_bytes) = (Plan::<G, STAGES>::K_TILE, Plan::<G, STAGES>::V_TILE);
    // A box is 128 bytes of a row (the swizzle span) by a tile's rows (`128 / BYTES` elements),
    // but for 8-bit Q and K: by `FP8_Q_BOX_ROWS` and `FP8_K_BOX_ROWS` rows.
    let box_columns = 128 / G::Input::BYTES as i32;
    let (q_box_rows, k_box_rows) = if G::Input::BYTES == 1 {
        (FP8_Q_BOX_ROWS, FP8_K_BOX_ROWS)
    } else {
        (block_m, G::KEYS as u32)
    };
    for_each_item!(schedule, |i, work, ring| {
        schedule.prefetch(i + 1);
        let (head, first_row) = (work.head, work.first_row);
        // A persistent varlen item's sequence as a batch of one.
        // Safety: the table's bounds were checked inside the packed tensors (`Schedule::item`).
        let problem = &unsafe { item_problem::<PERSISTENT, VARLEN>(problem, &work) };
        // The maps are 4-d, innermost first: (head dim, sequence, head, batch), in either layout.
        let (batch, q_head) = if PERSISTENT {
            problem.walked_map_coordinates(head)
        } else {
            problem.map_coordinates(head)
        };
        let kv_head = q_head / problem.kv_group as i32;
        // A tile of Q or K is a box per 128 bytes of its rows (one column block each) and
        // `box_rows` of its rows (rows are 128-byte lines inside a column block).
        let row_bytes = Plan::<G, STAGES>::ROW_BYTES;
        let load =
            |dst: SharedAddr, rows: u32, box_rows: u32, m: usize, bar: SharedAddr, row: u32, head: i32| {
                for block in 0..row_bytes / 128 {
                    for part in 0..rows / box_rows {
                        let at = [
                            box_columns * block as i32,
                            (row + part * box_rows) as i32,
                            head,
                            batch,
                        ];
                        let to = dst + block * swizzled::column_block_bytes(rows) + part * box_rows * 128;
                        arch::tma_load_4d(to, map(m), bar, at);
                    }
                }
            };
        // Transposed V (`[D, keys]` per head): a box per 128 keys (or part of 128), D rows each.
        let load_transposed = |dst: SharedAddr, bar: SharedAddr, first_key: u32, head: i32| {
            for block in 0..G::KEYS.div_ceil(128) as u32 {
                let at = [first_key as i32 + box_columns * block as i32, 0, head, batch];
                arch::tma_load_4d(
                    dst + block * swizzled::column_block_bytes(G::D as u32),
                    map(MAP_V),
                    bar,
                    at,
                );
            }
        };
        let (q_buffer, q_parity) = plan.q_slot(i);
        if PERSISTENT {
            // Parity flipped, as for the ring's slots: the first items find Q's buffers free.
            arch::mbarrier_wait(plan.q_empty(q_buffer), q_parity ^ 1);
        }
        let q_full = plan.q_full(q_buffer);
        arch::mbarrier_arrive_expect_tx(q_full, block_m * row_bytes);
        // Varlen: the sequence's rows start at its first packed row (0 otherwise).
        let q_row = problem.varlen.q_start + first_row;
        load(
            plan.q(q_buffer),
            block_m,
            q_box_rows,
            MAP_Q,
            q_full,
            q_row,
            q_head,
        );
        let (window_tile, window_tiles) = problem.kv_tile_range(first_row, block_m, G::KEYS as u32);
        let (first_tile, tiles) = work.split.range(window_tiles);
        let first_tile = window_tile + first_tile;
        for t in 0..tiles {
            let (stage, parity) = slot::<STAGES>(ring + t);
            let first_key = problem.varlen.k_start + (first_tile + t) * G::KEYS as u32;
            arch::mbarrier_wait(plan.barrier(K_EMPTY, stage), parity ^ 1);
            arch::mbarrier_arrive_expect_tx(plan.barrier(K_FULL, stage), k_bytes);
            let k_full = plan.barrier(K_FULL, stage);
            load(
                plan.k(stage),
                G::KEYS as u32,
                k_box_rows,
                MAP_K,
                k_full,
                first_key,
                kv_head,
            );
            if G::Input::TRANSPOSES_V {
                // V's rows into a row tile, for the producer's other warps to transpose.
                let (tile, tile_parity) = plan.v_rows_slot(ring + t);
                arch::mbarrier_wait(plan.v_rows_empty(tile), tile_parity ^ 1);
                let rows_full = plan.v_rows_full(tile);
                arch::mbarrier_arrive_expect_tx(rows_full, k_bytes);
                let keys = G::KEYS as u32;
                load(
                    plan.v_rows(tile),
                    keys,
                    k_box_rows,
                    map_v,
                    rows_full,
                    first_key,
                    kv_head,
                );
                continue;
            }
            arch::mbarrier_wait(plan.barrier(V_EMPTY, stage), parity ^ 1);
            arch::mbarrier_arrive_expect_tx(plan.barrier(V_FULL, stage), v_bytes);
            let v_full = plan.barrier(V_FULL, stage);
            if G::Input::V_TRANSPOSED {
                load_transposed(plan.v(stage), v_full, first_key, kv_head);
            } else {
                let keys = G::KEYS as u32;
                load(plan.v(stage), keys, keys, MAP_V, v_full, first_key, kv_head);
            }
        }
        tiles
    });
}

/// The producer warpgroup: its first thread issues the copies (`produce`); where V comes in its
/// own rows, its other three warps transpose V's tiles (`transpose_v_tiles`); the rest is idle.
///
/// # Safety
/// Run by the producer warpgroup's threads, with `flash_ws`'s plan, problem, maps and schedule
/// (its contract).
#[inline(always)]
pub(super) unsafe fn producer_warpgroup<
    G: WarpgroupShape,
    const STAGES: usize,
    const PERSISTENT: bool,
    const VARLEN: bool,
>(
    plan: &Plan<G, STAGES>,
    problem: &Problem,
    maps: *const u8,
    schedule: &Schedule<PERSISTENT, VARLEN>,
) {
    let warp = arch::warp_uniform(arch::warp_id());
    if arch::thread_idx_x() == 0 {
        produce::<G, STAGES, PERSISTENT, VARLEN>(plan, problem, maps, schedule);
    } else if G::Input::TRANSPOSES_V && warp > 0 {
        transpose_v_tiles::<G, STAGES, PERSISTENT, VARLEN>(plan, problem, schedule, warp - 1);
    }
}

/// The producer warpgroup's other warps where V comes in its own rows (`Operand::TRANSPOSES_V`),
/// `part` of `fp8::TRANSPOSER_WARPS`: each KV tile the producer copies, once its rows have landed
/// and the consumers have read the slot's V before, turned around into the slot
/// (`fp8::transpose_tile`). Their writes are made visible to the products (the async proxy)
/// before they count on the slot's V full barrier.
#[inline(always)]
unsafe fn transpose_v_tiles<
    G: WarpgroupShape,
    const STAGES: usize,
    const PERSISTENT: bool,
    const VARLEN: bool,
>(
    plan: &Plan<G, STAGES>,
    problem: &Problem,
    schedule: &Schedule<PERSISTENT, VARLEN>,
    part: u32,
) {
    // Whole 128-key tiles of V, one item per block.
    const { assert!(!G::Input::TRANSPOSES_V || (G::KEYS as u32 == fp8::TRANSPOSED_KEYS && !PERSISTENT)) };
    let block_m = schedule.block_m;
    for_each_item!(schedule, |i, work, ring| {
        let _ = i;
        let (_, tiles) = work
            .split
            .range(problem.kv_tile_range(work.first_row, block_m, G::KEYS as u32).1);
        for t in 0..tiles {
            let (stage, parity) = slot::<STAGES>(ring + t);
            let (tile, tile_parity) = plan.v_rows_slot(ring + t);
            arch::mbarrier_wait(plan.v_rows_full(tile), tile_parity);
            arch::mbarrier_wait(plan.barrier(V_EMPTY, stage), parity ^ 1);
            fp8::transpose_tile(plan.v_rows(tile), plan.v(stage), part, G::D as u32);
            // Each lane's writes to the async proxy, the warp's to its first lane, which counts
            // the warp once (96 arrivals on one barrier word cost more than the transpose).
            arch::fence_proxy_async_shared();
            arch::sync_warp();
            if arch::lane_id() == 0 {
                arch::mbarrier_arrive(plan.barrier(V_FULL, stage));
                arch::mbarrier_arrive(plan.v_rows_empty(tile));
            }
        }
        tiles
    });
}
