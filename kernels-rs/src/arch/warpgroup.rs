//! Register budgets of warpgroups (`setmaxnreg`, sm_90a): a warp-specialised block gives its
//! copy-issuing warpgroup few registers and its tensor-core warpgroups many, out of one pool.
//! It takes effect only in a kernel with a register cap at entry (`.maxntid` and `.minnctapersm`).

use core::arch::asm;

/// Emits `setmaxnreg.dec.sync.aligned.u32 N`: this warpgroup gives registers back to the pool, down
/// to `N` per thread (all four warps execute it together; `N` a multiple of 8 in 24..=256).
#[inline(always)]
pub fn setmaxnreg_dec<const N: u32>() {
    // Safety: changes no memory; the compiler keeps every value in the registers it allows.
    unsafe { asm!("setmaxnreg.dec.sync.aligned.u32 {n};", n = const N, options(nostack)) };
}

/// Emits `setmaxnreg.inc.sync.aligned.u32 N`: this warpgroup takes registers from the pool, up to
/// `N` per thread; waits until the pool has them.
#[inline(always)]
pub fn setmaxnreg_inc<const N: u32>() {
    // Safety: changes no memory; waits only for the pool to hold the registers.
    unsafe { asm!("setmaxnreg.inc.sync.aligned.u32 {n};", n = const N, options(nostack)) };
}
