//! The tensor memory accelerator (TMA, sm_90): whole tiles copied between global and shared
//! memory by one thread's instruction, described by a tensor map the host encoded
//! (`cuTensorMapEncodeTiled`): shape, strides, box, 128-byte swizzle, zero fill out of bounds.
//!
//! The maps live in global memory (a small buffer the host fills before the launch). They cannot
//! be kernel parameters here: rustc's NVPTX calling convention rejects the 64-byte alignment a map
//! needs in the parameter space (an internal compiler error in rustc 1.96), and the address of a
//! by-value parameter would be a local copy the copy engine cannot read.

use core::arch::asm;

use super::SharedAddr;

/// Emits `prefetch.tensormap [map]`: brings a tensor map into the copy engine's descriptor cache
/// ahead of its first use.
///
/// # Safety
/// `map` is the generic address of a 64-byte aligned, encoded tensor map in global memory.
#[inline(always)]
pub unsafe fn prefetch_tensormap(map: *const u8) {
    asm!("prefetch.tensormap [{m}];", m = in(reg64) map, options(nostack));
}

/// Emits `cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes`: copies
/// the box at coordinates `coords` (innermost first) of the tensor `map` describes into shared
/// memory at `dst` (1024-byte aligned for the 128-byte swizzle), and counts its bytes on the
/// barrier `bar` as they land. Elements outside the tensor arrive as zeros.
///
/// # Safety
/// `map` as for `prefetch_tensormap`, describing memory that stays allocated until the copy lands;
/// `dst` has room for the box, which nothing else reads or writes until `bar` says it landed;
/// `bar` is an initialised mbarrier whose phase expects these bytes (`mbarrier_arrive_expect_tx`).
#[inline(always)]
pub unsafe fn tma_load_4d(dst: SharedAddr, map: *const u8, bar: SharedAddr, coords: [i32; 4]) {
    asm!(
        "cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes \
         [{dst}], [{map}, {{{c0}, {c1}, {c2}, {c3}}}], [{bar}];",
        dst = in(reg32) dst.0, map = in(reg64) map, bar = in(reg32) bar.0,
        c0 = in(reg32) coords[0], c1 = in(reg32) coords[1], c2 = in(reg32) coords[2],
        c3 = in(reg32) coords[3],
        options(nostack)
    );
}

/// Emits `cp.async.bulk.tensor.4d.global.shared::cta.tile.bulk_group`: copies the shared-memory box
/// at `src` (laid out as `tma_load_4d` writes it) to coordinates `coords` of the tensor `map`
/// describes. Elements of the box outside the tensor are not written.
///
/// # Safety
/// `map` as for `prefetch_tensormap`, describing writable memory nobody else writes meanwhile;
/// `src` holds the box (1024-byte aligned for the 128-byte swizzle), its writes made visible to
/// the async proxy (`fence_proxy_async_shared`, then a barrier for other threads' writes); it
/// stays unchanged and allocated until `bulk_wait_group_read` returns.
#[inline(always)]
pub unsafe fn tma_store_4d(map: *const u8, src: SharedAddr, coords: [i32; 4]) {
    asm!(
        "cp.async.bulk.tensor.4d.global.shared::cta.tile.bulk_group [{map}, {{{c0}, {c1}, {c2}, {c3}}}], [{src}];",
        map = in(reg64) map, src = in(reg32) src.0,
        c0 = in(reg32) coords[0], c1 = in(reg32) coords[1], c2 = in(reg32) coords[2],
        c3 = in(reg32) coords[3],
        options(nostack)
    );
}

/// Emits `cp.async.bulk.commit_group`: closes this thread's bulk copies issued so far into a group.
#[inline(always)]
pub fn bulk_commit_group() {
    // Safety: bookkeeping of this thread's own copies; touches no memory.
    unsafe { asm!("cp.async.bulk.commit_group;", options(nostack)) };
}

/// Emits `cp.async.bulk.wait_group.read 0`: waits until every committed bulk copy of this thread
/// has read its source, so that its shared memory may be reused or released.
#[inline(always)]
pub fn bulk_wait_group_read_all() {
    // Safety: waiting touches no memory.
    unsafe { asm!("cp.async.bulk.wait_group.read 0;", options(nostack)) };
}

/// Emits `cp.async.bulk.wait_group 0`: waits until every committed bulk copy of this thread has
/// completed, its writes to global memory done.
#[inline(always)]
pub fn bulk_wait_group_all() {
    // Safety: waiting touches no memory.
    unsafe { asm!("cp.async.bulk.wait_group 0;", options(nostack)) };
}

/// Emits `cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32`: adds `bytes` bytes of fp32
/// values from shared memory at `src` into global memory at `dst`, element by element, by the
/// copy engine (one operation for the whole range, reduced in L2), asynchronously in this
/// thread's bulk group.
///
/// # Safety
/// `dst` and `src` 16-byte aligned, `bytes` a multiple of 16; `dst` valid for `bytes` of reads
/// and writes of global memory; `src` this block's shared memory, written and made visible to
/// the async proxy (`fence_proxy_async_shared`, then a barrier), unchanged until
/// `bulk_wait_group_read_all` returns.
#[inline(always)]
pub unsafe fn bulk_reduce_add_f32(dst: *mut f32, src: SharedAddr, bytes: u32) {
    asm!(
        "cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 [{dst}], [{src}], {bytes};",
        dst = in(reg64) dst,
        src = in(reg32) src.get(),
        bytes = in(reg32) bytes,
        options(nostack)
    );
}
