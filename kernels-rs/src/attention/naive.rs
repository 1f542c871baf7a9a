//! `naive`: one warp per query row, one key at a time. Simple enough to be obviously right, and
//! the GPU reference for problems too big for the CPU reference.
//!
//! Each lane owns `D / 32` consecutive output dims. For every key the warp forms the dot product
//! with a `warp_sum`, then updates the row's online softmax and the lane's slice of the output.

use super::{Buffers, Problem};
use crate::arch;
use crate::softmax::{self, RowState};
use crate::tile::Element;

/// Warps per block; each block covers this many query rows.
pub const WARPS: usize = 4;

/// Exports one `naive` variant of `kernels.toml`: the invocation `build.rs` writes for it (symbol
/// names, then `Spec::kernel_args`), expanded through `kernel!` in `lib.rs`.
macro_rules! naive {
    ($name:ident $counted:ident $smem:ident $barriers:ident, $t:ty, d = $d:literal) => {
        kernel!(@export $name, $counted, $smem, 0, $barriers, 0, wait_at_entry = true,
            |io, p, COUNT| {
                let _ = COUNT;
                $crate::attention::naive::naive::<$t, $d, { $d / 32 }>(io, p)
            });
    };
}

/// # Safety
/// Launched as `attention`'s calling convention says, with `WARPS` warps per block: `q`, `k`,
/// `v` and `out` hold the tensors `problem` describes (and `problem.lse`, when not null, its
/// log-sum-exp rows).
#[inline(always)]
pub unsafe fn naive<T: Element, const D: usize, const DIMS_PER_LANE: usize>(io: Buffers, problem: Problem) {
    const { assert!(DIMS_PER_LANE * 32 == D) };
    let row = arch::block_idx_x() * WARPS as u32 + arch::warp_id();
    if row >= problem.seq_q {
        return;
    }
    let Some(head) = problem.head() else {
        return; // past the last head (the grid's z slices round B*H up): before any barrier
    };
    let dim0 = arch::lane_id() as usize * DIMS_PER_LANE;
    let (q_rows, k_rows, v_rows) = io.rows::<D>(&problem, head);
    let q_row = q_rows.base.add(row as usize * q_rows.stride as usize + dim0);
    let (k_head, v_head, kv_stride) = (
        k_rows.base.add(dim0),
        v_rows.base.add(dim0),
        k_rows.stride as usize,
    );

    let mut query = [0.0f32; DIMS_PER_LANE];
    for (i, x) in query.iter_mut().enumerate() {
        *x = T::to_f32(*q_row.add(i));
    }
    let mut acc = [0.0f32; DIMS_PER_LANE];
    let mut state = RowState::EMPTY;
    for key in problem.key_start(row) as usize..problem.key_end(row) as usize {
        let mut partial = 0.0f32;
        for (i, x) in query.iter().enumerate() {
            partial = arch::fma(*x, T::to_f32(*k_head.add(key * kv_stride + i)), partial);
        }
        let mut score = arch::warp_sum(partial);
        if problem.has_softcap() {
            score = problem.soft_capped(score);
        }
        let correction = state.rescale(score, problem.scale_log2);
        let p = softmax::probability(score, problem.scale_log2, state.offset(problem.scale_log2));
        state.row_sum += p;
        for (i, a) in acc.iter_mut().enumerate() {
            *a = arch::fma(p, T::to_f32(*v_head.add(key * kv_stride + i)), *a * correction);
        }
    }
    let (state, kept) = problem.with_sink(head, &state);
    if arch::lane_id() == 0 {
        problem.write_lse(head, row, &state);
    }
    let norm = state.normaliser() * kept;
    let o_row = problem.out_row::<D>(io.out, head, row).add(dim0);
    for (i, a) in acc.iter().enumerate() {
        arch::st_global_u16(o_row.add(i), T::from_f32(*a * norm));
    }
}
