//! `merge_states`: two attention results over disjoint sets of keys, each a normalised output row
//! `O` with its log-sum-exp `L` (natural log), into the result over the union of the keys:
//! `L = log(e^La + e^Lb)` and `O = e^(La - L) Oa + e^(Lb - L) Ob`, in fp32. What context
//! parallelism, cascade attention and split decoding combine chunk by chunk. A row neither side
//! saw a key of (`La = Lb = -inf`) merges to zeros and `-inf`, as attention writes for it.

use crate::arch;
use crate::merge_launch::{MergeArgs, ROWS_PER_BLOCK};
use crate::tile::Element;

/// Merges the rows of a `(ceil(rows / ROWS_PER_BLOCK), 1, 1)` grid of `THREADS` threads, a warp
/// per row, each lane a strided share of the row's elements.
///
/// # Safety
/// The buffers of `a` hold what its dims say (`rows` rows of `head_dim` elements, `rows`
/// log-sum-exps); `out` and `lse` are either distinct from the inputs or exactly `out_a` and
/// `lse_a`.
#[inline(always)]
pub unsafe fn merge_states<T: Element>(a: MergeArgs) {
    let row = arch::block_idx_x() * ROWS_PER_BLOCK + arch::warp_id();
    if row >= a.rows {
        return;
    }
    let (heads, seq) = (a.heads, a.seq);
    // The output row of log-sum-exp row `row` (`[B, H, S]` order).
    let out_row = match a.seq_major != 0 {
        true => ((row / (heads * seq)) * seq + row % seq) * heads + (row / seq) % heads,
        false => row,
    } as usize;
    let (la, lb) = (
        *(a.lse_a as *const f32).add(row as usize),
        *(a.lse_b as *const f32).add(row as usize),
    );
    let top = arch::max(la, lb);
    let (wa, wb) = match top == f32::NEG_INFINITY {
        true => (0.0, 0.0),
        false => (exp(la - top), exp(lb - top)),
    };
    let total = wa + wb;
    let norm = if total > 0.0 { arch::recip(total) } else { 0.0 };
    let (ca, cb) = (wa * norm, wb * norm);
    let d = a.head_dim as usize;
    let base = out_row * d;
    let (out_a, out_b, out) = (a.out_a as *const u16, a.out_b as *const u16, a.out as *mut u16);
    let mut j = arch::lane_id() as usize;
    while j < d {
        let x = ca * T::to_f32(*out_a.add(base + j)) + cb * T::to_f32(*out_b.add(base + j));
        arch::st_global_u16(out.add(base + j), T::from_f32(x));
        j += 32;
    }
    // Every lane has read `lse_a` before lane 0 may overwrite it (an in-place merge).
    arch::sync_warp();
    if arch::lane_id() == 0 {
        let merged = if total > 0.0 {
            top + arch::log2(total) * core::f32::consts::LN_2
        } else {
            f32::NEG_INFINITY
        };
        *(a.lse as *mut f32).add(row as usize) = merged;
    }
}

/// `e^x` through the hardware's base-2 exponential.
#[inline(always)]
fn exp(x: f32) -> f32 {
    arch::exp2(x * core::f32::consts::LOG2_E)
}
