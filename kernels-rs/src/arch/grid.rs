//! Programmatic dependent launch (sm_90): a launch that the host marks as dependent on the
//! kernel before it in the stream may start while that kernel is still finishing; these two
//! instructions say where the overlap must stop and when the next launch may start. Both are no
//! code in the sm_80 PTX (`cfg(sm90a)`, set by build.rs), where launches stay serialised.

#[cfg(sm90a)]
use core::arch::asm;

/// Emits `griddepcontrol.wait`: blocks until every grid this one depends on has completed and its
/// memory operations are visible here; immediately true for a launch without the dependency.
/// Nothing may touch global memory before it: the kernel before may still write our inputs or
/// read our outputs.
#[inline(always)]
pub fn wait_for_prerequisite_grids() {
    // Safety: waits only; the asm's default memory clobber keeps every global load and store
    // after it.
    #[cfg(sm90a)]
    unsafe {
        asm!("griddepcontrol.wait;", options(nostack))
    };
}

/// Emits `griddepcontrol.launch_dependents`: once every block of this grid has issued it (or
/// exited), the launch marked as dependent on this one may be scheduled; it still waits for this
/// grid's completion at its own `wait_for_prerequisite_grids`.
#[inline(always)]
pub fn launch_dependents() {
    // Safety: a scheduling hint to the hardware; changes no memory.
    #[cfg(sm90a)]
    unsafe {
        asm!("griddepcontrol.launch_dependents;", options(nostack, nomem))
    };
}
