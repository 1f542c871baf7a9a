//! Shared-memory barriers with a transaction count (`mbarrier`, sm_90): the producer/consumer
//! hand-over of the warp-specialised kernels.
//!
//! An mbarrier completes a *phase* when its expected arrivals have arrived and, when a copy
//! announced bytes with `expect_tx`, those bytes have landed. Waiters name the phase by its parity
//! (0, 1, 0, ...), so a barrier is reused every time its ring slot comes round without re-arming.
//! A fresh barrier is in phase 0; waiting for parity 1 on it returns at once, which is how a
//! producer starts with every slot free.

use core::arch::asm;

use super::SharedAddr;

/// Emits `mbarrier.init.shared::cta.b64 [bar], arrivals`: the barrier at `bar` (8-byte aligned)
/// completes a phase after `arrivals` arrivals (plus the bytes announced by `expect_tx`).
///
/// # Safety
/// `bar` is 8-byte aligned shared memory of this block that no other thread uses as anything but
/// this barrier, initialised once before any thread waits on it or arrives at it.
#[inline(always)]
pub unsafe fn mbarrier_init(bar: SharedAddr, arrivals: u32) {
    asm!("mbarrier.init.shared::cta.b64 [{b}], {n};", b = in(reg32) bar.0, n = in(reg32) arrivals,
         options(nostack));
}

/// Emits `fence.mbarrier_init.release.cluster`: publishes this thread's `mbarrier_init`s to the
/// copy engine before a block barrier hands them to the other threads.
#[inline(always)]
pub fn fence_mbarrier_init() {
    // Safety: a fence touches no memory of its own.
    unsafe { asm!("fence.mbarrier_init.release.cluster;", options(nostack)) };
}

/// Emits `mbarrier.arrive.shared::cta.b64 _, [bar]`: one arrival.
///
/// # Safety
/// `bar` is an initialised mbarrier of this block whose current phase still expects this arrival.
#[inline(always)]
pub unsafe fn mbarrier_arrive(bar: SharedAddr) {
    asm!("mbarrier.arrive.shared::cta.b64 _, [{b}];", b = in(reg32) bar.0, options(nostack));
}

/// Emits `mbarrier.arrive.expect_tx.shared::cta.b64 _, [bar], bytes`: one arrival, and the phase
/// now also waits for `bytes` more bytes of asynchronous copies signalling this barrier.
///
/// # Safety
/// As `mbarrier_arrive`; and copies of exactly `bytes` bytes are issued to complete on `bar`.
#[inline(always)]
pub unsafe fn mbarrier_arrive_expect_tx(bar: SharedAddr, bytes: u32) {
    asm!("mbarrier.arrive.expect_tx.shared::cta.b64 _, [{b}], {n};", b = in(reg32) bar.0,
         n = in(reg32) bytes, options(nostack));
}

/// Emits `mbarrier.try_wait.parity.shared::cta.b64`: true once the phase of parity `parity` has
/// completed (the hardware suspends the thread for a while before answering false).
///
/// # Safety
/// `bar` is an initialised mbarrier of this block; `parity` is that of its current phase or of the
/// one before.
#[inline(always)]
pub unsafe fn mbarrier_try_wait(bar: SharedAddr, parity: u32) -> bool {
    let done: u32;
    asm!(
        "{{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [{b}], {parity};\n\
         selp.u32 {done}, 1, 0, p;\n}}",
        b = in(reg32) bar.0, parity = in(reg32) parity, done = out(reg32) done,
        options(nostack)
    );
    done != 0
}

/// Emits `mbarrier.test_wait.parity.shared::cta.b64`: true once the phase of parity `parity` has
/// completed; never suspends the thread.
///
/// # Safety
/// As `mbarrier_try_wait`.
#[inline(always)]
pub unsafe fn mbarrier_test_wait(bar: SharedAddr, parity: u32) -> bool {
    let done: u32;
    asm!(
        "{{\n.reg .pred p;\nmbarrier.test_wait.parity.shared::cta.b64 p, [{b}], {parity};\n\
         selp.u32 {done}, 1, 0, p;\n}}",
        b = in(reg32) bar.0, parity = in(reg32) parity, done = out(reg32) done,
        options(nostack)
    );
    done != 0
}

/// SM clock cycles a wait may take before the kernel gives up: about 10 s at 1.7 GHz, thousands of
/// times longer than any copy takes even under compute-sanitizer.
const WAIT_LIMIT_CYCLES: u64 = 1 << 34;

/// Waits until the phase of parity `parity` of the barrier at `bar` has completed; what the
/// arrivals and copies of that phase wrote to shared memory is visible afterwards. A phase that
/// never completes (a bug: a lost arrival, a copy that was never issued) traps after
/// `WAIT_LIMIT_CYCLES` instead of hanging the GPU, so the host sees a launch failure.
///
/// # Safety
/// As `mbarrier_try_wait`.
#[inline(always)]
pub unsafe fn mbarrier_wait(bar: SharedAddr, parity: u32) {
    // The first look never suspends the thread: ptxas may issue it well before the wait's place
    // in the program. It moved a first `try_wait` above a softmax's exponentials, which then sat
    // suspended until a copy that they did not need had landed (12% slower per tile at head dim
    // 64; docs/kernels/flash_ws.md, the first look at an mbarrier).
    if mbarrier_test_wait(bar, parity) {
        return;
    }
    let started = super::clock64();
    while !mbarrier_try_wait(bar, parity) {
        if super::clock64().wrapping_sub(started) > WAIT_LIMIT_CYCLES {
            super::trap();
        }
    }
}
