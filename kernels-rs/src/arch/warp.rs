//! Warp shuffles and the reductions built from them.

use core::arch::asm;

/// Emits `shfl.sync.bfly.b32`: the value held by lane `lane ^ mask`.
#[inline(always)]
pub fn shfl_xor_f32(value: f32, mask: u32) -> f32 {
    let r: f32;
    // Safety: registers only; the kernels reach it with the whole warp converged, as `.sync` with
    // a full mask requires.
    unsafe {
        asm!("shfl.sync.bfly.b32 {r}, {v}, {m}, 0x1f, -1;",
             r = out(reg32) r, v = in(reg32) value, m = in(reg32) mask,
             options(nomem, nostack))
    };
    r
}

/// Emits `shfl.sync.idx.b32`: the value held by lane `src_lane`.
#[inline(always)]
pub fn shfl_idx_f32(value: f32, src_lane: u32) -> f32 {
    let r: f32;
    // Safety: registers only; the kernels reach it with the whole warp converged, as `.sync` with
    // a full mask requires.
    unsafe {
        asm!("shfl.sync.idx.b32 {r}, {v}, {l}, 0x1f, -1;",
             r = out(reg32) r, v = in(reg32) value, l = in(reg32) src_lane,
             options(nomem, nostack))
    };
    r
}

/// Emits `shfl.sync.idx.b32` from lane 0: `value` as lane 0 holds it. For a value that is the same
/// in every lane but that ptxas cannot prove so (anything computed from `%tid`), this makes it
/// provably warp-uniform, so that what is derived from it (shared-memory descriptors, loop
/// bounds) can live in the uniform registers that `wgmma` reads its descriptors from.
#[inline(always)]
pub fn warp_uniform(value: u32) -> u32 {
    let r: u32;
    // Safety: registers only; the kernels reach it with the whole warp converged, as `.sync` with
    // a full mask requires.
    unsafe {
        asm!("shfl.sync.idx.b32 {r}, {v}, 0, 0x1f, -1;",
             r = out(reg32) r, v = in(reg32) value,
             options(nomem, nostack))
    };
    r
}

/// Maximum over the 32 lanes of a warp (five butterfly shuffles); every lane gets the result.
#[inline(always)]
pub fn warp_max(mut value: f32) -> f32 {
    let mut mask = 16;
    while mask > 0 {
        value = max(value, shfl_xor_f32(value, mask));
        mask >>= 1;
    }
    value
}

/// Sum over the 32 lanes of a warp (five butterfly shuffles); every lane gets the result.
#[inline(always)]
pub fn warp_sum(mut value: f32) -> f32 {
    let mut mask = 16;
    while mask > 0 {
        value += shfl_xor_f32(value, mask);
        mask >>= 1;
    }
    value
}

/// Maximum over the 4 lanes of a quad (lanes `4q..4q+3`), the threads that share an accumulator
/// row of an `mma.m16n8` tile.
#[inline(always)]
pub fn quad_max(value: f32) -> f32 {
    let value = max(value, shfl_xor_f32(value, 1));
    max(value, shfl_xor_f32(value, 2))
}

/// Sum over the 4 lanes of a quad.
#[inline(always)]
pub fn quad_sum(value: f32) -> f32 {
    let value = value + shfl_xor_f32(value, 1);
    value + shfl_xor_f32(value, 2)
}

/// `max.f32`, which returns the other operand when one is NaN; -inf is its identity.
#[inline(always)]
pub fn max(a: f32, b: f32) -> f32 {
    let r: f32;
    // Safety: arithmetic on registers; touches no memory.
    unsafe {
        asm!("max.f32 {r}, {a}, {b};", r = out(reg32) r, a = in(reg32) a, b = in(reg32) b,
             options(pure, nomem, nostack))
    };
    r
}

/// Emits `vote.sync.any.pred`: true on every lane when `predicate` holds on any lane of the warp.
#[inline(always)]
pub fn warp_any(predicate: bool) -> bool {
    let r: u32;
    // Safety: registers only; the kernels reach it with the whole warp converged, as `.sync` with
    // a full mask requires.
    unsafe {
        asm!("{{ .reg .pred p, q; setp.ne.u32 p, {x}, 0; vote.sync.any.pred q, p, -1; selp.u32 {r}, 1, 0, q; }}",
             r = out(reg32) r, x = in(reg32) predicate as u32, options(nomem, nostack))
    };
    r != 0
}
