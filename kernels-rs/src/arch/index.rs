//! Thread, block and grid coordinates.

use core::arch::asm;

/// Emits `mov.u32 %r, %tid.x`.
#[inline(always)]
pub fn thread_idx_x() -> u32 {
    let r: u32;
    // Safety: reads a special register; touches no memory.
    unsafe { asm!("mov.u32 {r}, %tid.x;", r = out(reg32) r, options(pure, nomem, nostack)) };
    r
}

/// Emits `mov.u32 %r, %ctaid.x`.
#[inline(always)]
pub fn block_idx_x() -> u32 {
    let r: u32;
    // Safety: reads a special register; touches no memory.
    unsafe { asm!("mov.u32 {r}, %ctaid.x;", r = out(reg32) r, options(pure, nomem, nostack)) };
    r
}

/// Emits `mov.u32 %r, %ctaid.y`.
#[inline(always)]
pub fn block_idx_y() -> u32 {
    let r: u32;
    // Safety: reads a special register; touches no memory.
    unsafe { asm!("mov.u32 {r}, %ctaid.y;", r = out(reg32) r, options(pure, nomem, nostack)) };
    r
}

/// Emits `mov.u32 %r, %ctaid.z`.
#[inline(always)]
pub fn block_idx_z() -> u32 {
    let r: u32;
    // Safety: reads a special register; touches no memory.
    unsafe { asm!("mov.u32 {r}, %ctaid.z;", r = out(reg32) r, options(pure, nomem, nostack)) };
    r
}

/// Emits `mov.u32 %r, %nctaid.y`.
#[inline(always)]
pub fn grid_dim_y() -> u32 {
    let r: u32;
    // Safety: reads a special register; touches no memory.
    unsafe { asm!("mov.u32 {r}, %nctaid.y;", r = out(reg32) r, options(pure, nomem, nostack)) };
    r
}

/// Emits `mov.u32 %r, %ntid.x`.
#[inline(always)]
pub fn block_dim_x() -> u32 {
    let r: u32;
    // Safety: reads a special register; touches no memory.
    unsafe { asm!("mov.u32 {r}, %ntid.x;", r = out(reg32) r, options(pure, nomem, nostack)) };
    r
}

/// Lane index inside the warp (`%tid.x & 31`).
#[inline(always)]
pub fn lane_id() -> u32 {
    thread_idx_x() & 31
}

/// Warp index inside the block (`%tid.x >> 5`).
#[inline(always)]
pub fn warp_id() -> u32 {
    thread_idx_x() >> 5
}

/// Emits `mov.u32 %r, %nctaid.x`.
#[inline(always)]
pub fn grid_dim_x() -> u32 {
    let r: u32;
    // Safety: reads a special register; touches no memory.
    unsafe { asm!("mov.u32 {r}, %nctaid.x;", r = out(reg32) r, options(pure, nomem, nostack)) };
    r
}

/// Emits `mov.u64 %r, %clock64`: the SM's cycle counter (not pure: each read is a new value).
#[inline(always)]
pub fn clock64() -> u64 {
    let r: u64;
    // Safety: reads a special register; touches no memory.
    unsafe { asm!("mov.u64 {r}, %clock64;", r = out(reg64) r, options(nomem, nostack)) };
    r
}

/// Emits `mov.u32 %r, %smid`: the multiprocessor this thread runs on.
#[inline(always)]
pub fn sm_id() -> u32 {
    let r: u32;
    // Safety: reads a special register; touches no memory.
    unsafe { asm!("mov.u32 {r}, %smid;", r = out(reg32) r, options(nomem, nostack)) };
    r
}

/// Emits `mov.u32` that the optimiser must leave where it is (not pure): what is computed from the
/// value stays inside the loop that calls this, rather than being hoisted out into registers that
/// stay live across the loop (a tile's per-row source offsets, for instance).
#[inline(always)]
pub fn in_place(value: u32) -> u32 {
    let r: u32;
    // Safety: a register move; touches no memory.
    unsafe { asm!("mov.u32 {r}, {v};", r = out(reg32) r, v = in(reg32) value, options(nomem, nostack)) };
    r
}

/// Emits `mov.u32`: the value unchanged, but opaque to the optimiser (so a loop bounded by it
/// stays a loop instead of being unrolled, when unrolling would cost registers).
#[inline(always)]
pub fn opaque(value: u32) -> u32 {
    let r: u32;
    // Safety: a register move; touches no memory.
    unsafe {
        asm!("mov.u32 {r}, {v};", r = out(reg32) r, v = in(reg32) value, options(pure, nomem, nostack))
    };
    r
}
