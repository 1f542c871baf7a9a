//! Barriers and traps.

use core::arch::asm;

/// Emits `bar.sync 0`: every thread of the block waits here, and shared-memory writes made before
/// it are visible to every thread after it. This is the only CTA-wide barrier the kernels use, so
/// counting `bar.sync` in the PTX counts the kernels' barriers.
#[inline(always)]
pub fn sync_threads() {
    unsafe { asm!("bar.sync 0;", options(nostack)) };
}

/// Emits `bar.warp.sync 0xffffffff`: the 32 lanes of this warp reconverge and order their
/// shared-memory accesses; other warps are not involved.
#[inline(always)]
pub fn sync_warp() {
    unsafe { asm!("bar.warp.sync -1;", options(nostack)) };
}

/// Emits `bar.sync id, threads`: waits at named barrier `id` (1-15) until `threads` threads, this
/// warp's included, have arrived there by `named_barrier_sync` or `named_barrier_arrive`. A
/// barrier among some warps only, for scheduling warpgroups rather than publishing memory.
#[inline(always)]
pub fn named_barrier_sync(id: u32, threads: u32) {
    unsafe { asm!("bar.sync {id}, {n};", id = in(reg32) id, n = in(reg32) threads, options(nostack)) };
}

/// Emits `bar.arrive id, threads`: counts this warp's arrival at named barrier `id` and goes on
/// without waiting.
#[inline(always)]
pub fn named_barrier_arrive(id: u32, threads: u32) {
    unsafe { asm!("bar.arrive {id}, {n};", id = in(reg32) id, n = in(reg32) threads, options(nostack)) };
}

/// Emits `trap`: aborts the kernel; the host sees a launch failure.
#[inline(always)]
pub fn trap() -> ! {
    unsafe { asm!("trap;", options(noreturn, nostack)) }
}
