//! Barriers and traps.

use core::arch::asm;

/// Emits `bar.sync 0`: every thread of the block waits here, and shared-memory writes made before
/// it are visible to every thread after it. This is the only CTA-wide barrier the kernels use, so
/// counting `bar.sync` in the PTX counts the kernels' barriers.
#[inline(always)]
pub fn sync_threads() {
    // Safety: touches no memory; the kernels reach it in block-uniform control flow, so every
    // thread of the block arrives.
    unsafe { asm!("bar.sync 0;", options(nostack)) };
}

/// Emits `bar.warp.sync 0xffffffff`: the 32 lanes of this warp reconverge and order their
/// shared-memory accesses; other warps are not involved.
#[inline(always)]
pub fn sync_warp() {
    // Safety: touches no memory; the kernels reach it with every lane of the warp.
    unsafe { asm!("bar.warp.sync -1;", options(nostack)) };
}

/// Emits `fence.acq_rel.gpu`: this thread's memory accesses before it are ordered before those
/// after it for every thread of the GPU that synchronises with it (through an atomic, a barrier).
#[inline(always)]
pub fn fence_acq_rel_gpu() {
    // Safety: touches no memory.
    unsafe { asm!("fence.acq_rel.gpu;", options(nostack)) };
}

/// Named-barrier ids. PTX has 16 per block; id 0 is the block barrier of `sync_threads` (and of
/// `policy::sync`), so the kernel families share 1..=15 out in fixed ranges, which keeps two
/// families' barriers apart even in one block:
/// - 1..=4 (`PINGPONG_RING ..`): `flash_wgmma`'s ping-pong ring, id `PINGPONG_RING + g` being
///   warpgroup `g`'s turn at the tensor cores;
/// - 5..=15 (`WARP_SPECIALISED_FIRST ..= WARP_SPECIALISED_LAST`): reserved for the
///   warp-specialised Hopper family (`attention/ws/`).
pub mod barrier_id {
    /// The block barrier, `bar.sync 0`.
    pub const BLOCK: u32 = 0;
    /// The first id of `flash_wgmma`'s ping-pong ring.
    pub const PINGPONG_RING: u32 = 1;
    /// The ring's ids, one per warpgroup: at most this many warpgroups take turns.
    pub const PINGPONG_RING_LEN: u32 = 4;
    /// The backward's `wgmma` kernel (a kernel of its own, so it shares the ring's ids): both
    /// warpgroups meet there once dS^T is whole in shared memory.
    pub const BACKWARD_DS_WHOLE: u32 = 1;
    /// The backward's `wgmma` kernel: warpgroup `w` meets at `BACKWARD_DQ_STAGED + w` once its
    /// part of dQ is in shared memory, for its first thread to add it into the workspace.
    pub const BACKWARD_DQ_STAGED: u32 = 2;
    /// The first id reserved for the warp-specialised Hopper family.
    pub const WARP_SPECIALISED_FIRST: u32 = 5;
    /// The last id reserved for the warp-specialised Hopper family (the last id PTX has).
    pub const WARP_SPECIALISED_LAST: u32 = 15;

    const _: () = assert!(
        BLOCK < PINGPONG_RING
            && PINGPONG_RING + PINGPONG_RING_LEN <= WARP_SPECIALISED_FIRST
            && WARP_SPECIALISED_FIRST <= WARP_SPECIALISED_LAST
            && WARP_SPECIALISED_LAST <= 15
    );
}

/// Emits `bar.sync id, threads`: waits at named barrier `id` (1-15, see `barrier_id`) until `threads` threads, this
/// warp's included, have arrived there by `named_barrier_sync` or `named_barrier_arrive`. A
/// barrier among some warps only, for scheduling warpgroups rather than publishing memory.
#[inline(always)]
pub fn named_barrier_sync(id: u32, threads: u32) {
    // Safety: touches no memory; the id is one of `barrier_id`'s, and the `threads` named arrive
    // there (the caller's protocol, e.g. `flash_wgmma`'s ring).
    unsafe { asm!("bar.sync {id}, {n};", id = in(reg32) id, n = in(reg32) threads, options(nostack)) };
}

/// Emits `bar.arrive id, threads`: counts this warp's arrival at named barrier `id` and goes on
/// without waiting.
#[inline(always)]
pub fn named_barrier_arrive(id: u32, threads: u32) {
    // Safety: touches no memory; the id is one of `barrier_id`'s, and the `threads` named arrive
    // there (the caller's protocol, e.g. `flash_wgmma`'s ring).
    unsafe { asm!("bar.arrive {id}, {n};", id = in(reg32) id, n = in(reg32) threads, options(nostack)) };
}

/// Emits `bar.red.or.pred id, threads`: `named_barrier_sync` that also returns, to every thread,
/// whether any of the `threads` passed `true`.
#[inline(always)]
pub fn named_barrier_any(id: u32, threads: u32, value: bool) -> bool {
    let any: u32;
    // Safety: touches no memory; as `named_barrier_sync`.
    unsafe {
        asm!(
            "{{ .reg .pred %p_in, %p_any;",
            "setp.ne.u32 %p_in, {v}, 0;",
            "bar.red.or.pred %p_any, {id}, {n}, %p_in;",
            "selp.u32 {any}, 1, 0, %p_any; }}",
            id = in(reg32) id,
            n = in(reg32) threads,
            v = in(reg32) value as u32,
            any = out(reg32) any,
            options(nostack)
        )
    };
    any != 0
}

/// Emits `trap`: aborts the kernel; the host sees a launch failure.
#[inline(always)]
pub fn trap() -> ! {
    // Safety: aborts the kernel; there is nothing to uphold.
    unsafe { asm!("trap;", options(noreturn, nostack)) }
}
