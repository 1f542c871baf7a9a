//! `flash_decode`'s merges: the warps' results (`Merge`), then the key slices' (`merge_if_last`).

use crate::arch::{self, SharedAddr};
use crate::attention::fragment::FragmentSoftmax;
use crate::attention::packing::PackedRows;
use crate::attention::shape::Tiles;
use crate::attention::Problem;
use crate::softmax::{self, RowState};
use crate::tile::Element;

/// Bytes of one warp's partial output row in the merge buffer: `D` floats plus 16 bytes, so the
/// eight rows a fragment store touches at one column fall into different banks.
const fn merge_row_bytes(d: usize) -> u32 {
    (4 * d + 16) as u32
}

/// Shared memory for the cross-warp merge: every warp's (scaled max, sum) per row, then every
/// warp's partial output rows. It reuses the K/V slots once the loop is done.
pub(super) const fn merge_bytes(d: usize, block_m: usize, warps: usize) -> u32 {
    (warps * block_m) as u32 * (8 + merge_row_bytes(d))
}

/// A row state's running maximum in the exponent's units (`max * scale_log2`), `-inf` for a row
/// that has seen no key (unlike `RowState::offset`, which is 0 there so that no NaN appears).
#[inline(always)]
fn scaled_max(state: &RowState, scale_log2: f32) -> f32 {
    if state.row_max == f32::NEG_INFINITY {
        f32::NEG_INFINITY
    } else {
        state.row_max * scale_log2
    }
}

/// `2^(max - total_max)`: how much a partial result with maximum `max` weighs against the merged
/// maximum; 0 for a part that saw no key.
#[inline(always)]
fn weight(max: f32, total_max: f32) -> f32 {
    if max == f32::NEG_INFINITY {
        0.0
    } else {
        arch::exp2(max - total_max)
    }
}

/// The cross-warp merge buffers in shared memory: per warp and row a (scaled max, sum) pair, then
/// per warp and row `D` partial output floats (rows `merge_row_bytes` apart).
pub(super) struct Merge<const D: usize> {
    stats: SharedAddr,
    partials: SharedAddr,
    block_m: u32,
    warps: u32,
}

impl<const D: usize> Merge<D> {
    /// The buffers from `base` on (the K/V slots, free once the loop is done), for `warps` warps
    /// of `block_m` rows each.
    #[inline(always)]
    pub(super) fn new(base: SharedAddr, block_m: u32, warps: u32) -> Self {
        Merge {
            stats: base,
            partials: base + warps * block_m * 8,
            block_m,
            warps,
        }
    }

    /// Puts this warp's rows into the buffers: each row's (scaled max, sum), then, once every
    /// warp's are visible, its accumulators rescaled to the block's row maximum; ends with the
    /// partial rows visible to the block.
    ///
    /// # Safety
    /// Called by every thread of the block (it holds two block barriers), after a barrier that
    /// follows the last read of the memory the buffers reuse and with no copy into it in flight.
    #[inline(always)]
    pub(super) unsafe fn gather<O: Tiles<f32>, const ROW_TILES: usize>(
        &self,
        softmax: FragmentSoftmax<ROW_TILES>,
        o_acc: &[O; ROW_TILES],
        scale_log2: f32,
    ) {
        let (lane, warp) = (arch::lane_id(), arch::warp_id());
        let mut warp_max = [[f32::NEG_INFINITY; 2]; ROW_TILES];
        softmax.finish_with(|mt, half, row, state| {
            warp_max[mt][half] = scaled_max(state, scale_log2);
            if lane % 4 == 0 {
                // Safety: row < block_m, warp < warps: inside the stats buffer.
                unsafe { self.put_stats(warp, row, warp_max[mt][half], state.row_sum) };
            }
        });
        arch::sync_threads(); // every warp's row statistics visible

        let (group_lane, pair) = (lane / 4, lane % 4);
        for mt in 0..ROW_TILES {
            for half in 0..2 {
                let row = (16 * mt + 8 * half) as u32 + group_lane;
                let (row_max, _) = self.row_totals(row);
                let weight = weight(warp_max[mt][half], row_max);
                for j in 0..O::LEN {
                    let col = (8 * j) as u32 + 2 * pair;
                    let x = o_acc[mt].tile(j);
                    self.put_partial(warp, row, col, x[2 * half] * weight, x[2 * half + 1] * weight);
                }
            }
        }
        arch::sync_threads(); // every warp's partial rows visible
    }

    /// Sums the gathered rows over the warps, normalises and writes them, four columns per step
    /// spread over the block's `threads` threads: into the output (and the log-sum-exp) with one
    /// key slice, else into slice `split`'s partials of the workspace. Rows past the packed ones
    /// are skipped.
    ///
    /// # Safety
    /// After `gather`; `out` holds the problem's output, `problem.lse` (when not null) its
    /// log-sum-exp and, with `splits > 1`, `problem.workspace` the split partials.
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    pub(super) unsafe fn store<T: Element>(
        &self,
        out: *mut u16,
        problem: &Problem,
        rows: &PackedRows,
        first_row: u32,
        (split, splits): (u32, u32),
        thread: u32,
        threads: u32,
    ) {
        let quads = D as u32 / 4;
        for item in (thread..self.block_m * quads).step_by(threads as usize) {
            let (row, quad) = (item / quads, item % quads);
            if first_row + row >= rows.count {
                continue;
            }
            let (head, position) = rows.place(first_row + row);
            let (row_max, row_sum) = self.row_totals(row);
            // With one slice the row is complete here and takes its attention sink; with more,
            // the merge adds it once (`Partials::merge_row`).
            let (row_max, row_sum, kept) = match splits == 1 && !problem.sinks.is_null() {
                true => softmax::with_sink(row_max, row_sum, problem.sink_log2(head)),
                false => (row_max, row_sum, 1.0),
            };
            let sum = self.summed(row, 4 * quad).map(|x| x * kept);
            let norm = if row_sum > 0.0 { arch::recip(row_sum) } else { 0.0 };
            // Base 2; -inf for a row that saw no key in this slice.
            let lse2 = if row_sum > 0.0 {
                row_max + arch::log2(row_sum)
            } else {
                f32::NEG_INFINITY
            };
            // Safety: the caller's contract; `head` and `position` are a packed row's, inside
            // the problem.
            unsafe {
                if splits == 1 {
                    let o = problem.out_row::<D>(out, head, position) as *mut u32;
                    arch::st_global_u32(o.add(2 * quad as usize), T::pack(sum[0] * norm, sum[1] * norm));
                    arch::st_global_u32(
                        o.add(2 * quad as usize + 1),
                        T::pack(sum[2] * norm, sum[3] * norm),
                    );
                    if quad == 0 && !problem.lse.is_null() {
                        *problem.lse.add(problem.lse_index(head, position)) = lse2 * core::f32::consts::LN_2;
                    }
                } else {
                    let partial = Partials::new(problem, split);
                    let o = partial.output_row::<D>(head, position).add(4 * quad as usize);
                    for i in 0..4 {
                        *o.add(i) = sum[i] * norm;
                    }
                    if quad == 0 {
                        *partial.lse2::<D>(head, position) = lse2;
                    }
                }
            }
        }
    }

    /// # Safety
    /// `warp < warps`, `row < block_m`; the buffers lie in this block's shared memory, and a
    /// barrier separates this write from the reads.
    #[inline(always)]
    unsafe fn put_stats(&self, warp: u32, row: u32, max: f32, sum: f32) {
        let at = self.stats + (warp * self.block_m + row) * 8;
        arch::st_shared_f32(at, max);
        arch::st_shared_f32(at + 4, sum);
    }

    /// Row `row`'s maximum over the warps and its sum of probabilities relative to it.
    #[inline(always)]
    fn row_totals(&self, row: u32) -> (f32, f32) {
        let stat = |warp: u32| {
            let at = self.stats + (warp * self.block_m + row) * 8;
            // Safety: inside the stats buffer, written before the barrier that precedes this read.
            unsafe { (arch::ld_shared_f32(at), arch::ld_shared_f32(at + 4)) }
        };
        let mut max = f32::NEG_INFINITY;
        for warp in 0..self.warps {
            max = arch::max(max, stat(warp).0);
        }
        let mut sum = 0.0;
        for warp in 0..self.warps {
            let (warp_max, warp_sum) = stat(warp);
            sum += warp_sum * weight(warp_max, max);
        }
        (max, sum)
    }

    /// Writes columns `col, col + 1` of warp `warp`'s partial row `row`.
    #[inline(always)]
    fn put_partial(&self, warp: u32, row: u32, col: u32, lo: f32, hi: f32) {
        let at = self.partials + (warp * self.block_m + row) * merge_row_bytes(D) + col * 4;
        // Safety: inside the partial buffer (row < block_m, col + 1 < D); read after a barrier.
        unsafe {
            arch::st_shared_f32(at, lo);
            arch::st_shared_f32(at + 4, hi);
        }
    }

    /// Columns `col .. col + 4` of row `row`, summed over the warps.
    #[inline(always)]
    fn summed(&self, row: u32, col: u32) -> [f32; 4] {
        let mut sum = [0.0f32; 4];
        for warp in 0..self.warps {
            let at = self.partials + (warp * self.block_m + row) * merge_row_bytes(D) + col * 4;
            // Safety: 16 aligned bytes inside the partial buffer, written before the barrier.
            let words = unsafe { arch::ld_shared_v4_u32(at) };
            // Indexed, not zipped: an array's by-value iterator lands in local memory here.
            for i in 0..4 {
                sum[i] += f32::from_bits(words[i]);
            }
        }
        sum
    }
}

/// Slices whose partial rows one warp's merge loads at once (`Partials::merge_row`).
const MERGE_BATCH: usize = 8;

/// The workspace of a split launch: `[kv_splits, B*H, S_q, D]` fp32 partial outputs, then
/// `[kv_splits, B*H, S_q]` base-2 log-sum-exps, one slice per split (varlen: `[kv_splits, H,
/// total_q, ..]`, the packed sequences as a batch of one of `total_q` rows).
#[derive(Clone, Copy)]
struct Partials {
    base: *mut f32,
    /// `B * H * S_q`: rows per split.
    rows: usize,
    /// Rows per head (`S_q`, varlen `total_q`) and the sequence's first (0 unless varlen).
    seq_q: usize,
    q_start: usize,
    split: usize,
    splits: usize,
}

impl Partials {
    #[inline(always)]
    fn new(problem: &Problem, split: u32) -> Partials {
        Partials {
            base: problem.workspace,
            rows: problem.batch_heads as usize * problem.varlen.lse_rows as usize,
            seq_q: problem.varlen.lse_rows as usize,
            q_start: problem.varlen.q_start as usize,
            split: split as usize,
            splits: problem.kv_splits as usize,
        }
    }

    /// # Safety
    /// The workspace holds `splits` slices; `head < B*H`, `position < S_q`, `split < splits`.
    #[inline(always)]
    unsafe fn output_row<const D: usize>(&self, head: usize, position: u32) -> *mut f32 {
        let row = self.split * self.rows + head * self.seq_q + self.q_start + position as usize;
        self.base.add(row * D)
    }

    /// # Safety
    /// As `output_row`.
    #[inline(always)]
    unsafe fn lse2<const D: usize>(&self, head: usize, position: u32) -> *mut f32 {
        let lse = self.base.add(self.splits * self.rows * D);
        lse.add(self.split * self.rows + head * self.seq_q + self.q_start + position as usize)
    }

    /// Slice `split`'s view of the same workspace.
    #[inline(always)]
    fn slice(&self, split: usize) -> Partials {
        Partials { split, ..*self }
    }

    /// Merges query row (`head`, `position`) over every slice into the output (and the
    /// log-sum-exp, when asked), one warp, `D / 32` columns per lane: weights `2^(lse_i - max)`,
    /// the normalised sum, the log-sum-exp `(max + log2(sum)) ln 2`. Slices that saw no key weigh
    /// nothing; a row that saw none gives 0 and `-inf`.
    ///
    /// The slices come in batches of `MERGE_BATCH` whose loads are all issued before any is used:
    /// one trip to L2 per batch, where a slice at a time (its weight, then its row) took two per
    /// slice, and this merge is the launch's tail (32 slices at grouped decode).
    ///
    /// # Safety
    /// Every slice's row is written and visible to this warp; `out` and `problem.lse` are the
    /// problem's, `head` and `position` inside it.
    #[inline(always)]
    unsafe fn merge_row<T: Element, const D: usize>(
        &self,
        out: *mut u16,
        problem: &Problem,
        (head, position): (usize, u32),
        lane: u32,
    ) {
        const { assert!(D == 64 || D == 128) };
        let cols = D / 32;
        let mut max = f32::NEG_INFINITY;
        for split in (lane as usize..self.splits).step_by(32) {
            max = arch::max(max, *self.slice(split).lse2::<D>(head, position));
        }
        // An attention sink joins the merged denominator once, as one more slice with no value.
        let sink = problem.sink_log2(head);
        let max = arch::max(arch::warp_max(max), sink);
        let mut total = 0.0f32;
        let mut acc = [0.0f32; 4];
        let last = self.splits - 1;
        for first in (0..self.splits).step_by(MERGE_BATCH) {
            // Past the last slice the batch reads the last one again and weighs it 0: every
            // load stays inside the workspace and none waits on a branch.
            let slice = |i: usize| self.slice((first + i).min(last));
            let lse: [f32; MERGE_BATCH] = core::array::from_fn(|i| *slice(i).lse2::<D>(head, position));
            let rows: [[f32; 4]; MERGE_BATCH] = core::array::from_fn(|i| {
                // Every slice wrote its row (0 where it saw no key), so the unweighted read of a
                // slice with weight 0 is finite and adds nothing.
                let part = slice(i).output_row::<D>(head, position).add(lane as usize * cols) as *const u32;
                let words = if D == 128 {
                    arch::ld_global_v4_u32(part)
                } else {
                    let [a, b] = arch::ld_global_v2_u32(part);
                    [a, b, 0, 0]
                };
                words.map(f32::from_bits)
            });
            for i in 0..MERGE_BATCH {
                let w = if first + i < self.splits {
                    weight(lse[i], max)
                } else {
                    0.0
                };
                total += w;
                for c in 0..cols {
                    acc[c] = arch::fma(w, rows[i][c], acc[c]);
                }
            }
        }
        total += weight(sink, max);
        let norm = if total > 0.0 { arch::recip(total) } else { 0.0 };
        let o = problem.out_row::<D>(out, head, position) as *mut u32;
        for c in 0..cols / 2 {
            let packed = T::pack(acc[2 * c] * norm, acc[2 * c + 1] * norm);
            arch::st_global_u32(o.add(lane as usize * cols / 2 + c), packed);
        }
        if lane == 0 && !problem.lse.is_null() {
            *problem.lse.add(problem.lse_index(head, position)) = if total > 0.0 {
                (max + arch::log2(total)) * core::f32::consts::LN_2
            } else {
                f32::NEG_INFINITY
            };
        }
    }
}

/// With the keys split over several blocks: once this block's partial rows are out, counts its
/// slice done on `counter`; the block whose count completes the row block's slices merges them
/// into the output (`Partials::merge_row`, one warp per row) and sets the counter back to 0 for
/// the next launch. The last slice to finish does the merge, so no second kernel (and no launch
/// gap) follows the split one.
///
/// # Safety
/// Called by every thread of the block after `Merge::store` with `splits > 1`; `counter` is the
/// grid's (KV head, row block) counter, 0 before the launch's first slice of it counted, and
/// `flag` a word of this block's shared memory nobody reads now.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
pub(super) unsafe fn merge_if_last<T: Element, const D: usize>(
    out: *mut u16,
    problem: &Problem,
    rows: &PackedRows,
    (first_row, block_m): (u32, u32),
    counter: *mut u32,
    flag: SharedAddr,
    thread: u32,
    warps: u32,
) {
    // Every thread's partial rows before thread 0's fence (the barrier), which releases them all
    // before the count (a release is cumulative): one `MEMBAR.GPU` per block, not one per thread
    // (as flash_ws's tail split: docs/kernels/flash_ws.md, the split-KV merge).
    arch::sync_threads();
    if thread == 0 {
        arch::fence_acq_rel_gpu();
        let last = arch::atomic_add_u32(counter, 1) + 1 == problem.kv_splits;
        if last {
            // The other slices' rows, written before their counts that ours followed: acquired
            // here, and by every thread through the barrier below.
            arch::fence_acq_rel_gpu();
            arch::st_global_u32(counter, 0); // every slice has counted: nobody adds any more
        }
        arch::st_shared_u32(flag, last as u32);
    }
    arch::sync_threads();
    if arch::ld_shared_u32(flag) == 0 {
        return;
    }
    let partials = Partials::new(problem, 0);
    let lane = arch::lane_id();
    for row in (arch::warp_id()..block_m).step_by(warps as usize) {
        if first_row + row < rows.count {
            partials.merge_row::<T, D>(out, problem, rows.place(first_row + row), lane);
        }
    }
}
