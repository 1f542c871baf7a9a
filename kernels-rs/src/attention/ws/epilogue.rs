//! `flash_ws`'s epilogue through shared memory.

use super::consumer::{Consumer, Item};
use super::epilogue_barrier;
use super::output::OutputPath;
use crate::arch;
use crate::attention::fragment::Fragment;
use crate::attention::shape::{Accumulator, WarpgroupShape};
use crate::attention::Problem;
use crate::tile::swizzled::{self, ROW_BYTES};
use crate::tile::Element;

impl<'a, G: WarpgroupShape, const STAGES: usize, const PINGPONG: bool, const MASKS: bool>
    Consumer<'a, G, STAGES, PINGPONG, MASKS>
{
    /// The epilogue through shared memory: the warpgroup writes its 64 normalised rows of O into
    /// its rows of Q's buffer (or of O's own tile, `Plan::o`), in the 128-byte swizzle layout the
    /// copy engine reads, and sends
    /// them out: one thread with a tensor store per 64 columns (`TensorStore`, rows past the
    /// sequence's end clipped by the copy engine), or every thread with 16-byte stores of the
    /// rows inside the sequence (`RowStores`), a warp writing two whole rows at a time. Where each
    /// thread stored 4 bytes per instruction straight to memory, the warps waited for those
    /// stores to drain before they could exit (docs/kernels/flash_ws.md, the epilogue). The LSE
    /// is written per row as before.
    ///
    /// # Safety
    /// As `run` with `staged_output` not `Registers`: every S = Q K^T of the block has completed
    /// or reads other rows of Q than this warpgroup's.
    #[inline(always)]
    pub(super) unsafe fn store_staged<T: Element, const D: usize>(
        self,
        problem: &Problem,
        out: *mut u16,
        item: &Item,
        (consumer, consumers): (u32, u32),
        path: OutputPath,
    ) {
        let block_m = 64 * consumers;
        let group_row0 = 64 * consumer;
        let barrier = epilogue_barrier(consumer);
        // O's own tile (a persistent block) is left to the copy engine after each item: before
        // it is written again, the thread that stored the last item's rows waits until the copy
        // engine has read them.
        let own_tile = path.own_tile();
        if own_tile && arch::thread_idx_x().is_multiple_of(128) {
            arch::bulk_wait_group_read_all();
        }
        // Each warp's last product has completed; this waits for the warpgroup's other warps, whose
        // products read the rows that this warp's stores overwrite (in Q's buffer), or for the
        // issuing thread's wait (in O's own).
        arch::named_barrier_sync(barrier, 128);
        // `plan.o` is `plan.q` without an own tile; chosen by the path, which folds at compile
        // time, the grid kernels' SASS stays what it was (read through `plan.o` it did not).
        let staging = if own_tile {
            self.plan.o
        } else {
            self.plan.q(self.q_buffer)
        };
        let (q, o_acc, pair) = (staging, self.o_acc, self.lane % 4);
        let head = item.head;
        // Safety: `head` is the problem's (the caller's contract; the host bound the sinks).
        let sink = unsafe { problem.sink_log2(head) };
        // Inlined by demand: at head dim 256, where each call is 32 unrolled stores, LLVM's own
        // measure left the varlen kernels' closure a function, its captures in local memory.
        self.softmax.finish_with(
            #[inline(always)]
            |_, half, row, state| {
                let (state, kept) = match problem.sinks.is_null() {
                    true => (*state, 1.0),
                    false => state.with_sink(sink, problem.scale_log2),
                };
                if pair == 0 && row < problem.seq_q {
                    // Safety: `head` and `row` are inside the problem (the caller's contract).
                    unsafe { problem.write_lse(head, row, &state) };
                }
                let norm = state.normaliser() * kept * item.value_scale;
                let tile_row = row - item.first_row;
                for j in 0..G::Output::REGS / 4 {
                    let o = o_acc.registers();
                    let (lo, hi) = (o[4 * j + 2 * half], o[4 * j + 2 * half + 1]);
                    let at = q + swizzled::chunk_offset(tile_row, j as u32, block_m) + 4 * pair;
                    // Safety: inside this warpgroup's rows of Q's buffer, which no product reads now.
                    unsafe { arch::st_shared_u32(at, T::pack(lo * norm, hi * norm)) };
                }
            },
        );
        if let OutputPath::RowStores | OutputPath::OwnTileRows = path {
            arch::named_barrier_sync(barrier, 128);
            // The output's own columns (`Problem::columns`): a padded head dim's rows are
            // narrower than the staged tile, whose chunks past them are skipped (walking the
            // tile's `D / 8` chunks per row keeps the index arithmetic shifts).
            let columns = problem.columns::<D>();
            let rows = problem.q_rows_of(out, head, columns as usize);
            let chunks_per_row = D as u32 / 8;
            for i in (arch::thread_idx_x() % 128..64 * chunks_per_row).step_by(128) {
                let (r, chunk) = (i / chunks_per_row, i % chunks_per_row);
                let row = item.first_row + group_row0 + r;
                if row < problem.seq_q && 8 * chunk < columns {
                    let at = q + swizzled::chunk_offset(group_row0 + r, chunk, block_m);
                    let dst = rows
                        .base
                        .add(row as usize * rows.stride as usize + 8 * chunk as usize);
                    // Safety: a row of the sequence's output (the caller's contract), 16 bytes
                    // aligned (its columns and the strides are multiples of 8 elements).
                    arch::st_global_v4_u32(dst as *mut u32, arch::ld_shared_v4_u32(at));
                }
            }
            return;
        }
        arch::fence_proxy_async_shared();
        arch::named_barrier_sync(barrier, 128);
        // The tensor store's coordinates. With O's own tile (the persistent kernel, whose item
        // loop runs around this) every thread works them out, before the one thread's branch:
        // in it, the division's divide-by-zero check (a call to the panic handler) sat in a
        // per-thread branch inside the item loop, ptxas no longer proved that loop
        // warp-converged, and the KV loop's descriptor arithmetic left the uniform datapath
        // (docs/kernels/flash_ws.md, persistence). The grid kernels, with no loop around it, keep
        // their code.
        let early = if own_tile {
            problem.walked_map_coordinates(head)
        } else {
            (0, 0)
        };
        if let (OutputPath::TensorStore(map) | OutputPath::OwnTile(map), true) =
            (path, arch::thread_idx_x().is_multiple_of(128))
        {
            let (batch, q_head) = if own_tile {
                early
            } else {
                problem.map_coordinates(head)
            };
            // Varlen: the sequence's rows start at its first packed row (0 otherwise).
            let first_row = (problem.varlen.q_start + item.first_row + group_row0) as i32;
            for block in 0..G::D as u32 / 64 {
                let src = q + block * swizzled::column_block_bytes(block_m) + group_row0 * ROW_BYTES;
                arch::tma_store_4d(map, src, [64 * block as i32, first_row, q_head, batch]);
            }
            arch::bulk_commit_group();
            // The block's shared memory must outlive the copy engine's reads of it; O's own tile
            // is read while the next item runs, then waited for above (or after the block's last
            // item: `flash_ws`).
            if !own_tile {
                arch::bulk_wait_group_read_all();
            }
        }
    }
}
