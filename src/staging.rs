//! Bytes the host prepares for a launch to read from device memory (tensor maps, item tables),
//! copied there in the launch's stream order in a way a CUDA graph can replay.
//!
//! Outside stream capture a launch's bytes get a device buffer of their own, filled by an
//! ordinary copy in the stream's order and reused while the bytes stay the same. Under capture
//! that would not do: a captured launch runs at every replay, long after the call returned and its
//! buffers were freed or refilled for another call. So while the launch's stream is capturing,
//! the bytes go to one of the GPU's [`Permanents`]: a device buffer per distinct content, filled
//! once, when it is made, by a synchronous copy, and never written again; it lives as long as the
//! `Gpu`. A graph's launch reads it and the graph holds no copy of its own, so every replay, of
//! every graph sharing it, reads the same bytes. The cost is memory that stays allocated: a few
//! hundred bytes per distinct captured call.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use cudarc::driver::sys::{self, CUstreamCaptureMode, CUstreamCaptureStatus};
use cudarc::driver::{CudaContext, CudaSlice, CudaStream, DevicePtr, DriverError};

use crate::error::Result;

/// One launch's staged bytes and where they are on the device: the copy outside capture and
/// the one under capture are kept apart, so that staging under capture never frees (or
/// refills) a buffer an earlier eager launch used, which the capture would record as a node.
#[derive(Default)]
pub(crate) struct Staged {
    /// Outside capture: the bytes and their buffer.
    own: Option<(Vec<u8>, CudaSlice<u8>)>,
    /// Under capture: the bytes and their permanent copy's address.
    captured: Option<(Vec<u8>, u64)>,
    /// Whether the last staging was under capture: the next launch reads that copy.
    last_captured: bool,
}

impl Staged {
    /// The device address the launch reads the bytes from (0 before any staging).
    pub(crate) fn address(&self, stream: &CudaStream) -> u64 {
        match (&self.own, &self.captured, self.last_captured) {
            (_, Some((_, address)), true) => *address,
            // Event tracking is off on the library's contexts, so the guard records nothing.
            (Some((_, buffer)), _, false) => buffer.device_ptr(stream).0,
            _ => 0,
        }
    }

    /// The bytes, as last staged.
    pub(crate) fn bytes(&self) -> &[u8] {
        match (&self.own, &self.captured, self.last_captured) {
            (_, Some((bytes, _)), true) | (Some((bytes, _)), _, false) => bytes,
            _ => &[],
        }
    }

    /// How many bytes the device copy holds.
    pub(crate) fn len(&self) -> usize {
        self.bytes().len()
    }
}

/// Whether work enqueued on `stream` now is being captured into a graph.
pub(crate) fn is_capturing(stream: &CudaStream) -> Result<bool> {
    let mut status = CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE;
    // Safety: the stream handle is live (the wrapper holds it) and `status` a valid place to write.
    unsafe { sys::cuStreamIsCapturing(stream.cu_stream(), &mut status) }.result()?;
    Ok(status != CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE)
}

/// Copies `bytes` to the device for a launch enqueued next on `stream`, into `cache`: reused when
/// it already holds the same bytes in the mode the stream is in (see the module docs).
pub(crate) fn stage(
    permanents: &Permanents,
    stream: &Arc<CudaStream>,
    bytes: Vec<u8>,
    cache: &mut Option<Staged>,
) -> Result<()> {
    let staged = cache.get_or_insert_with(Staged::default);
    if is_capturing(stream)? {
        let address = permanents.copy_in(&bytes)?;
        staged.captured = Some((bytes, address));
        staged.last_captured = true;
        return Ok(());
    }
    match &mut staged.own {
        Some((cached, _)) if *cached == bytes => {}
        Some((cached, buffer)) if buffer.len() == bytes.len() => {
            stream.memcpy_htod(&bytes, buffer)?;
            *cached = bytes;
        }
        own => {
            let buffer = stream.clone_htod(&bytes)?;
            *own = Some((bytes, buffer));
        }
    }
    staged.last_captured = false;
    Ok(())
}

/// `words` as the bytes the device reads them as (little-endian `u32`s).
pub(crate) fn words_bytes(words: &[u32]) -> Vec<u8> {
    words.iter().flat_map(|w| w.to_le_bytes()).collect()
}

/// A device buffer filled once (`allocate`), freed when dropped.
struct Permanent {
    device: sys::CUdeviceptr,
}

impl Drop for Permanent {
    fn drop(&mut self) {
        // Safety: allocated by `allocate` and freed only here; no launch reads it any more (the
        // GPU is being dropped, or the buffer was never handed out).
        unsafe { sys::cuMemFree_v2(self.device) };
    }
}

/// The GPU's permanent copies, by content (see the module docs).
pub(crate) struct Permanents {
    ctx: Arc<CudaContext>,
    copies: Mutex<HashMap<Vec<u8>, Permanent>>,
}

impl Permanents {
    pub(crate) fn new(ctx: Arc<CudaContext>) -> Self {
        Permanents {
            ctx,
            copies: Mutex::new(HashMap::new()),
        }
    }

    /// The device address of `bytes`' permanent copy, made (allocated and filled) the first time.
    fn copy_in(&self, bytes: &[u8]) -> Result<u64> {
        let mut copies = self.copies.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(permanent) = copies.get(bytes) {
            return Ok(permanent.device);
        }
        let permanent = relaxed_capture(|| allocate(bytes))?;
        let device = permanent.device;
        copies.insert(bytes.to_vec(), permanent);
        Ok(device)
    }
}

/// A device buffer holding `bytes`, filled before this returns.
fn allocate(bytes: &[u8]) -> std::result::Result<Permanent, DriverError> {
    let mut device: sys::CUdeviceptr = 0;
    // Safety: `device` is a valid place for the driver to write the allocation's address.
    unsafe { sys::cuMemAlloc_v2(&mut device, bytes.len().max(1)) }.result()?;
    let permanent = Permanent { device };
    // Safety: the allocation holds `bytes.len()` bytes; the copy is synchronous, so `bytes` is
    // only read before this returns (on error, dropping `permanent` frees the allocation).
    unsafe { sys::cuMemcpyHtoD_v2(device, bytes.as_ptr().cast(), bytes.len()) }.result()?;
    Ok(permanent)
}

/// Runs `f` with this thread's capture mode relaxed, so that the synchronous allocation and copy
/// it makes are allowed while a stream is capturing (torch captures in the global mode, the lab's
/// timing in the thread-local one); the thread's mode is restored after.
fn relaxed_capture<T>(f: impl FnOnce() -> std::result::Result<T, DriverError>) -> Result<T> {
    let mut mode = CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED;
    // Safety: `mode` is a valid place to exchange the thread's mode through.
    unsafe { sys::cuThreadExchangeStreamCaptureMode(&mut mode) }.result()?;
    let result = f();
    // Safety: as above; this puts the thread's previous mode back.
    unsafe { sys::cuThreadExchangeStreamCaptureMode(&mut mode) }.result()?;
    Ok(result?)
}

impl Drop for Permanents {
    fn drop(&mut self) {
        let copies = std::mem::take(self.copies.get_mut().unwrap_or_else(|e| e.into_inner()));
        // The buffers are freed in the GPU's context; without it they are left to the driver.
        if !copies.is_empty() && self.ctx.bind_to_thread().is_err() {
            std::mem::forget(copies);
        }
    }
}
