//! Shared memory, vector loads and stores, and asynchronous global-to-shared copies.
//!
//! Shared-memory addresses are 32-bit offsets in the shared window (`SharedAddr`); global memory
//! is reached through ordinary raw pointers, which the NVPTX backend lowers to `ld.global` for
//! kernel arguments.

use core::arch::{asm, global_asm};

// The block's dynamic shared memory; its size is set at launch.
global_asm!(".extern .shared .align 128 .b8 DYNAMIC_SMEM[];");

// One u32 per block for the instrumented (barrier-counting) kernels. A named shared variable has
// a constant address, so counting costs no register in the kernel's loop.
global_asm!(".shared .align 4 .u32 BARRIER_COUNTER;");

/// A byte address in the shared-memory window.
pub type SharedAddr = u32;

/// Emits `mov.u32 %r, DYNAMIC_SMEM`: the shared-window address of the dynamic shared memory.
#[inline(always)]
pub fn dynamic_smem_base() -> SharedAddr {
    let r: u32;
    unsafe { asm!("mov.u32 {r}, DYNAMIC_SMEM;", r = out(reg32) r, options(pure, nomem, nostack)) };
    r
}

/// Emits `ld.shared.f32`.
#[inline(always)]
pub fn ld_shared_f32(addr: SharedAddr) -> f32 {
    let r: f32;
    unsafe {
        asm!("ld.shared.f32 {r}, [{a}];", r = out(reg32) r, a = in(reg32) addr,
             options(pure, readonly, nostack))
    };
    r
}

/// Emits `st.shared.f32`.
#[inline(always)]
pub fn st_shared_f32(addr: SharedAddr, value: f32) {
    unsafe { asm!("st.shared.f32 [{a}], {v};", a = in(reg32) addr, v = in(reg32) value, options(nostack)) };
}

/// Emits `ld.shared.b32`.
#[inline(always)]
pub fn ld_shared_u32(addr: SharedAddr) -> u32 {
    let r: u32;
    unsafe {
        asm!("ld.shared.b32 {r}, [{a}];", r = out(reg32) r, a = in(reg32) addr,
             options(pure, readonly, nostack))
    };
    r
}

/// Emits `ld.shared.v2.b32` (8 bytes, `addr` 8-byte aligned).
#[inline(always)]
pub fn ld_shared_v2_u32(addr: SharedAddr) -> [u32; 2] {
    let (a, b): (u32, u32);
    unsafe {
        asm!("ld.shared.v2.b32 {{{a}, {b}}}, [{p}];", a = out(reg32) a, b = out(reg32) b,
             p = in(reg32) addr, options(pure, readonly, nostack))
    };
    [a, b]
}

/// Emits `ld.shared.v4.b32` (16 bytes, `addr` 16-byte aligned).
#[inline(always)]
pub fn ld_shared_v4_u32(addr: SharedAddr) -> [u32; 4] {
    let (a, b, c, d): (u32, u32, u32, u32);
    unsafe {
        asm!("ld.shared.v4.b32 {{{a}, {b}, {c}, {d}}}, [{p}];", a = out(reg32) a, b = out(reg32) b,
             c = out(reg32) c, d = out(reg32) d, p = in(reg32) addr, options(pure, readonly, nostack))
    };
    [a, b, c, d]
}

/// Emits `st.shared.v4.b32` (16 bytes, `addr` 16-byte aligned).
#[inline(always)]
pub fn st_shared_v4_u32(addr: SharedAddr, v: [u32; 4]) {
    unsafe {
        asm!("st.shared.v4.b32 [{p}], {{{a}, {b}, {c}, {d}}};", p = in(reg32) addr, a = in(reg32) v[0],
             b = in(reg32) v[1], c = in(reg32) v[2], d = in(reg32) v[3], options(nostack))
    };
}

/// Emits `st.global.b32`.
#[inline(always)]
pub unsafe fn st_global_u32(ptr: *mut u32, value: u32) {
    asm!("st.global.b32 [{p}], {v};", p = in(reg64) ptr, v = in(reg32) value, options(nostack));
}

/// Emits `st.global.b16`.
#[inline(always)]
pub unsafe fn st_global_u16(ptr: *mut u16, value: u16) {
    asm!("st.global.b16 [{p}], {v};", p = in(reg64) ptr, v = in(reg16) value, options(nostack));
}

/// Emits `cp.async.cg.shared.global [dst], [src], 16, src_bytes`: copies `src_bytes` (0 or 16)
/// bytes and zero-fills the rest of the 16, without passing through registers. `src_bytes = 0`
/// reads nothing, which is how tiles past the end of a sequence become zeros.
#[inline(always)]
pub unsafe fn cp_async_16(dst: SharedAddr, src: *const u8, src_bytes: u32) {
    asm!("cp.async.cg.shared.global [{d}], [{s}], 16, {n};", d = in(reg32) dst, s = in(reg64) src,
         n = in(reg32) src_bytes, options(nostack));
}

/// Emits `cp.async.commit_group`: closes the group of copies issued since the last commit.
#[inline(always)]
pub fn cp_async_commit() {
    unsafe { asm!("cp.async.commit_group;", options(nostack)) };
}

/// Emits `cp.async.wait_group N`: waits until at most `N` committed groups are still in flight
/// (for this thread; a barrier is still needed before other threads read the data).
#[inline(always)]
pub fn cp_async_wait<const N: u32>() {
    unsafe { asm!("cp.async.wait_group {n};", n = const N, options(nostack)) };
}

/// Emits `cp.async.wait_group STAGES-1`: with `STAGES - 1` tiles prefetched ahead, waits until the
/// oldest outstanding one (the tile about to be used) has landed, for this thread's copies.
#[inline(always)]
pub fn cp_async_wait_stage<const STAGES: usize>() {
    unsafe { asm!("cp.async.wait_group {n};", n = const STAGES - 1, options(nostack)) };
}

/// Emits `st.shared.u32 [BARRIER_COUNTER], value`.
#[inline(always)]
pub fn barrier_counter_store(value: u32) {
    unsafe { asm!("st.shared.u32 [BARRIER_COUNTER], {v};", v = in(reg32) value, options(nostack)) };
}

/// Emits `ld.shared.u32 %r, [BARRIER_COUNTER]`.
#[inline(always)]
pub fn barrier_counter_load() -> u32 {
    let r: u32;
    unsafe { asm!("ld.shared.u32 {r}, [BARRIER_COUNTER];", r = out(reg32) r, options(nostack)) };
    r
}
