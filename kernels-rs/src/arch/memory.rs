//! Shared memory, vector loads and stores, and asynchronous global-to-shared copies.
//!
//! Shared-memory addresses are 32-bit offsets in the shared window (`SharedAddr`); global memory
//! is reached through ordinary raw pointers, which the NVPTX backend lowers to `ld.global` for
//! kernel arguments.

use core::arch::{asm, global_asm};
use core::ops::{Add, BitAnd, Sub};

// The block's dynamic shared memory; its size is set at launch.
global_asm!(".extern .shared .align 128 .b8 DYNAMIC_SMEM[];");

// One u32 per block for the instrumented (barrier-counting) kernels. A named shared variable has
// a constant address, so counting costs no register in the kernel's loop.
global_asm!(".shared .align 4 .u32 BARRIER_COUNTER;");

/// A byte address in the shared-memory window.
///
/// A newtype, so that a shared address is made only from `dynamic_smem_base` (and offsets added
/// to it), never from a bare `u32` such as an offset, an index or a count; the raw wrappers below
/// still trust the caller that it lies inside the block's shared memory and is aligned.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
#[repr(transparent)]
pub struct SharedAddr(pub(in crate::arch) u32);

impl SharedAddr {
    /// The address as the 32-bit number PTX takes.
    #[inline(always)]
    pub const fn get(self) -> u32 {
        self.0
    }
}

impl SharedAddr {
    /// Emits nothing (a PTX comment naming the register): the same address, which the compiler
    /// can no longer see through. Taken inside a loop, the addresses and descriptors derived from
    /// it are computed where they are used (an add each) instead of hoisted out of the loop and
    /// held in registers across it.
    #[inline(always)]
    pub fn opaque(self) -> SharedAddr {
        let mut value = self.0;
        // Safety: emits nothing; only hides the value.
        unsafe { core::arch::asm!("// opaque {v}", v = inout(reg32) value, options(nostack, nomem)) };
        SharedAddr(value)
    }
}

impl Add<u32> for SharedAddr {
    type Output = SharedAddr;
    #[inline(always)]
    fn add(self, bytes: u32) -> SharedAddr {
        SharedAddr(self.0 + bytes)
    }
}

impl Sub<u32> for SharedAddr {
    type Output = SharedAddr;
    #[inline(always)]
    fn sub(self, bytes: u32) -> SharedAddr {
        SharedAddr(self.0 - bytes)
    }
}

/// Clears address bits, to align down (`addr & !(align - 1)`).
impl BitAnd<u32> for SharedAddr {
    type Output = SharedAddr;
    #[inline(always)]
    fn bitand(self, mask: u32) -> SharedAddr {
        SharedAddr(self.0 & mask)
    }
}

/// Emits `mov.u32 %r, DYNAMIC_SMEM`: the shared-window address of the dynamic shared memory.
#[inline(always)]
pub fn dynamic_smem_base() -> SharedAddr {
    let r: u32;
    // Safety: reads the address of a symbol; touches no memory.
    unsafe { asm!("mov.u32 {r}, DYNAMIC_SMEM;", r = out(reg32) r, options(pure, nomem, nostack)) };
    SharedAddr(r)
}

/// Emits `ld.shared.f32`.
///
/// # Safety
/// `addr` must lie in this block's shared memory, 4-byte aligned, and no other thread may write
/// it concurrently (the kernel's barriers order the accesses).
#[inline(always)]
pub unsafe fn ld_shared_f32(addr: SharedAddr) -> f32 {
    let r: f32;
    asm!("ld.shared.f32 {r}, [{a}];", r = out(reg32) r, a = in(reg32) addr.0,
         options(pure, readonly, nostack));
    r
}

/// Emits `st.shared.f32`.
///
/// # Safety
/// `addr` must lie in this block's shared memory, 4-byte aligned, and no other thread may read
/// or write it concurrently.
#[inline(always)]
pub unsafe fn st_shared_f32(addr: SharedAddr, value: f32) {
    asm!("st.shared.f32 [{a}], {v};", a = in(reg32) addr.0, v = in(reg32) value, options(nostack));
}

/// Emits `ld.shared.b32`.
///
/// # Safety
/// As `ld_shared_f32`.
#[inline(always)]
pub unsafe fn ld_shared_u32(addr: SharedAddr) -> u32 {
    let r: u32;
    asm!("ld.shared.b32 {r}, [{a}];", r = out(reg32) r, a = in(reg32) addr.0,
         options(pure, readonly, nostack));
    r
}

/// Emits `ld.shared.v2.b32` (8 bytes).
///
/// # Safety
/// As `ld_shared_f32`, for 8 bytes at an 8-byte aligned `addr`.
#[inline(always)]
pub unsafe fn ld_shared_v2_u32(addr: SharedAddr) -> [u32; 2] {
    let (a, b): (u32, u32);
    asm!("ld.shared.v2.b32 {{{a}, {b}}}, [{p}];", a = out(reg32) a, b = out(reg32) b,
         p = in(reg32) addr.0, options(pure, readonly, nostack));
    [a, b]
}

/// Emits `ld.shared.v4.b32` (16 bytes).
///
/// # Safety
/// As `ld_shared_f32`, for 16 bytes at a 16-byte aligned `addr`.
#[inline(always)]
pub unsafe fn ld_shared_v4_u32(addr: SharedAddr) -> [u32; 4] {
    let (a, b, c, d): (u32, u32, u32, u32);
    asm!("ld.shared.v4.b32 {{{a}, {b}, {c}, {d}}}, [{p}];", a = out(reg32) a, b = out(reg32) b,
         c = out(reg32) c, d = out(reg32) d, p = in(reg32) addr.0, options(pure, readonly, nostack));
    [a, b, c, d]
}

/// Emits `st.shared.v2.b32` (8 bytes).
///
/// # Safety
/// As `st_shared_u32`, for 8 bytes at an 8-byte aligned `addr`.
#[inline(always)]
pub unsafe fn st_shared_v2_u32(addr: SharedAddr, v: [u32; 2]) {
    asm!("st.shared.v2.b32 [{p}], {{{a}, {b}}};", p = in(reg32) addr.0, a = in(reg32) v[0],
         b = in(reg32) v[1], options(nostack));
}

/// Emits `st.shared.b32`.
///
/// # Safety
/// As `st_shared_f32`.
#[inline(always)]
pub unsafe fn st_shared_u32(addr: SharedAddr, value: u32) {
    asm!("st.shared.b32 [{a}], {v};", a = in(reg32) addr.0, v = in(reg32) value, options(nostack));
}

/// Emits `st.shared.v4.b32` (16 bytes).
///
/// # Safety
/// As `st_shared_f32`, for 16 bytes at a 16-byte aligned `addr`.
#[inline(always)]
pub unsafe fn st_shared_v4_u32(addr: SharedAddr, v: [u32; 4]) {
    asm!("st.shared.v4.b32 [{p}], {{{a}, {b}, {c}, {d}}};", p = in(reg32) addr.0, a = in(reg32) v[0],
         b = in(reg32) v[1], c = in(reg32) v[2], d = in(reg32) v[3], options(nostack));
}

/// Emits `ld.global.v2.b32`: 8 bytes of global memory into registers.
///
/// # Safety
/// `ptr` must be valid for an 8-byte aligned read of global memory that no thread writes
/// concurrently.
#[inline(always)]
pub unsafe fn ld_global_v2_u32(ptr: *const u32) -> [u32; 2] {
    let (a, b): (u32, u32);
    asm!("ld.global.v2.b32 {{{a}, {b}}}, [{p}];", a = out(reg32) a, b = out(reg32) b,
         p = in(reg64) ptr, options(pure, readonly, nostack));
    [a, b]
}

/// Emits `ld.global.v4.b32`: 16 bytes of global memory into registers.
///
/// # Safety
/// As `ld_global_v2_u32`, for 16 bytes at a 16-byte aligned `ptr`.
#[inline(always)]
pub unsafe fn ld_global_v4_u32(ptr: *const u32) -> [u32; 4] {
    let (a, b, c, d): (u32, u32, u32, u32);
    asm!("ld.global.v4.b32 {{{a}, {b}, {c}, {d}}}, [{p}];", a = out(reg32) a, b = out(reg32) b,
         c = out(reg32) c, d = out(reg32) d, p = in(reg64) ptr, options(pure, readonly, nostack));
    [a, b, c, d]
}

/// Emits `prefetch.global.L1 [ptr]`: brings the line of `ptr` into the SM's L1 cache, without
/// waiting for it and without a register to hold it.
///
/// # Safety
/// `ptr` is a global address (a prefetch of any address does not fault, but keep it meaningful).
#[inline(always)]
pub unsafe fn prefetch_global_l1(ptr: *const u32) {
    asm!("prefetch.global.L1 [{p}];", p = in(reg64) ptr, options(nostack, readonly, preserves_flags));
}

/// Emits `st.global.v4.b32`: 16 bytes from registers to global memory.
///
/// # Safety
/// `ptr` must be valid for a 16-byte aligned write of global memory that no other thread
/// accesses concurrently.
#[inline(always)]
pub unsafe fn st_global_v4_u32(ptr: *mut u32, v: [u32; 4]) {
    asm!("st.global.v4.b32 [{p}], {{{a}, {b}, {c}, {d}}};", p = in(reg64) ptr, a = in(reg32) v[0],
         b = in(reg32) v[1], c = in(reg32) v[2], d = in(reg32) v[3], options(nostack));
}

/// Emits `st.global.b32`.
///
/// # Safety
/// `ptr` must be valid for a 4-byte aligned write of global memory that no other thread accesses
/// concurrently.
#[inline(always)]
pub unsafe fn st_global_u32(ptr: *mut u32, value: u32) {
    asm!("st.global.b32 [{p}], {v};", p = in(reg64) ptr, v = in(reg32) value, options(nostack));
}

/// Emits `st.global.b32` predicated on `store`: no branch, so the block around it stays one basic
/// block for ptxas to schedule (the instrumented twins' records inside the KV loop).
///
/// # Safety
/// Where `store`, as `st_global_u32`.
#[inline(always)]
pub unsafe fn st_global_u32_if(store: bool, ptr: *mut u32, value: u32) {
    asm!(
        "{{\n.reg .pred p;\nsetp.ne.u32 p, {s}, 0;\n@p st.global.b32 [{p}], {v};\n}}",
        s = in(reg32) store as u32, p = in(reg64) ptr, v = in(reg32) value,
        options(nostack)
    );
}

/// Emits `atom.global.add.u32` (relaxed, GPU scope): adds `value` to the word at `ptr`; returns
/// the word as it was.
///
/// # Safety
/// `ptr` must be valid for a 4-byte aligned read and write of global memory.
#[inline(always)]
pub unsafe fn atomic_add_u32(ptr: *mut u32, value: u32) -> u32 {
    let old: u32;
    asm!("atom.global.add.u32 {o}, [{p}], {v};", o = out(reg32) old, p = in(reg64) ptr, v = in(reg32) value,
         options(nostack));
    old
}

/// Emits `atom.acquire.gpu.global.add.u32`: as `atomic_add_u32`, and an acquire for this thread's
/// later accesses at GPU scope (no release of its earlier ones, which would cost a `MEMBAR.GPU`
/// before the atomic).
///
/// # Safety
/// As `atomic_add_u32`.
#[inline(always)]
pub unsafe fn atomic_add_acquire_u32(ptr: *mut u32, value: u32) -> u32 {
    let old: u32;
    asm!("atom.acquire.gpu.global.add.u32 {o}, [{p}], {v};", o = out(reg32) old, p = in(reg64) ptr,
         v = in(reg32) value, options(nostack));
    old
}

/// Emits `ld.acquire.gpu.global.u32`: the word at `ptr`, this thread's later accesses ordered after
/// the read (at GPU scope), for waiting on another block's count.
///
/// # Safety
/// `ptr` must be valid for a 4-byte aligned read of global memory.
#[inline(always)]
pub unsafe fn ld_acquire_u32(ptr: *const u32) -> u32 {
    let value: u32;
    asm!("ld.acquire.gpu.global.u32 {v}, [{p}];", v = out(reg32) value, p = in(reg64) ptr, options(nostack));
    value
}

/// Emits `st.release.gpu.global.u32`: stores `value` at `ptr` after this thread's earlier
/// accesses (at GPU scope), to hand a turn to the block waiting on it (`ld_acquire_u32`).
///
/// # Safety
/// `ptr` must be valid for a 4-byte aligned write of global memory.
#[inline(always)]
pub unsafe fn st_release_u32(ptr: *mut u32, value: u32) {
    asm!("st.release.gpu.global.u32 [{p}], {v};", p = in(reg64) ptr, v = in(reg32) value, options(nostack));
}

/// Emits `red.global.add.f32` twice: adds the pair `value` to the two floats at `ptr` (relaxed,
/// GPU scope), without returning them. (The one-instruction `.v2.f32` form needs PTX ISA 8.1;
/// the sm_90a units are PTX 8.0.)
///
/// # Safety
/// `ptr` must be valid for an 8-byte aligned read and write of global memory.
#[inline(always)]
pub unsafe fn red_add_f32x2(ptr: *mut f32, value: [f32; 2]) {
    asm!("red.global.add.f32 [{p}], {a};\nred.global.add.f32 [{p}+4], {b};", p = in(reg64) ptr,
         a = in(reg32) value[0], b = in(reg32) value[1], options(nostack));
}

/// Emits `st.global.b16`.
///
/// # Safety
/// As `st_global_u32`, for 2 bytes at a 2-byte aligned `ptr`.
#[inline(always)]
pub unsafe fn st_global_u16(ptr: *mut u16, value: u16) {
    asm!("st.global.b16 [{p}], {v};", p = in(reg64) ptr, v = in(reg16) value, options(nostack));
}

/// Emits `cp.async.cg.shared.global [dst], [src], 16, src_bytes`: copies `src_bytes` (0 or 16)
/// bytes and zero-fills the rest of the 16, without passing through registers. `src_bytes = 0`
/// reads nothing, which is how tiles past the end of a sequence become zeros.
///
/// # Safety
/// `dst` must be 16 bytes of this block's shared memory, 16-byte aligned, that nobody reads or
/// writes until this thread has waited for the copy (`cp_async_wait*`) and a barrier has
/// published it; `src` must be 16 readable, 16-byte aligned bytes of global memory when
/// `src_bytes` is 16.
#[inline(always)]
pub unsafe fn cp_async_16(dst: SharedAddr, src: *const u8, src_bytes: u32) {
    asm!("cp.async.cg.shared.global [{d}], [{s}], 16, {n};", d = in(reg32) dst.0, s = in(reg64) src,
         n = in(reg32) src_bytes, options(nostack));
}

/// Emits `cp.async.commit_group`: closes the group of copies issued since the last commit.
#[inline(always)]
pub fn cp_async_commit() {
    // Safety: orders this thread's own asynchronous copies; touches no memory itself.
    unsafe { asm!("cp.async.commit_group;", options(nostack)) };
}

/// Emits `cp.async.wait_group N`: waits until at most `N` committed groups are still in flight
/// (for this thread; a barrier is still needed before other threads read the data).
#[inline(always)]
pub fn cp_async_wait<const N: u32>() {
    // Safety: orders this thread's own asynchronous copies; touches no memory itself.
    unsafe { asm!("cp.async.wait_group {n};", n = const N, options(nostack)) };
}

/// Emits `cp.async.wait_group STAGES-1`: with `STAGES - 1` tiles prefetched ahead, waits until the
/// oldest outstanding one (the tile about to be used) has landed, for this thread's copies.
#[inline(always)]
pub fn cp_async_wait_stage<const STAGES: usize>() {
    // Safety: orders this thread's own asynchronous copies; touches no memory itself.
    unsafe { asm!("cp.async.wait_group {n};", n = const STAGES - 1, options(nostack)) };
}

/// Emits `st.shared.u32 [BARRIER_COUNTER], value`.
#[inline(always)]
pub fn barrier_counter_store(value: u32) {
    // Safety: the counter is this module's own shared variable, accessed by thread 0 only.
    unsafe { asm!("st.shared.u32 [BARRIER_COUNTER], {v};", v = in(reg32) value, options(nostack)) };
}

/// Emits `ld.shared.u32 %r, [BARRIER_COUNTER]`.
#[inline(always)]
pub fn barrier_counter_load() -> u32 {
    let r: u32;
    // Safety: the counter is this module's own shared variable, accessed by thread 0 only.
    unsafe { asm!("ld.shared.u32 {r}, [BARRIER_COUNTER];", r = out(reg32) r, options(nostack)) };
    r
}
