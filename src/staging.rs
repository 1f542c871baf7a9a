//! Bytes the host prepares for a launch to read from device memory (tensor maps, item tables),
//! copied there in the launch's stream order in a way a CUDA graph can replay.
//!
//! The bytes go to one of the GPU's [`Permanents`]: a device buffer per distinct content, filled
//! once and never written again, which lives as long as the `Gpu`. Under stream capture that is
//! what makes a graph replayable: a captured launch runs at every replay, long after the call
//! returned, and reads the buffer, which holds the same bytes for every replay of every graph
//! sharing it (filled by a synchronous copy when made). Outside capture it makes a call whose
//! tensors recur (the usual case: torch's caching allocator hands out the same blocks) free of
//! any copy or allocation: the first call fills the buffer by a copy in its stream's order and
//! records an event, which a later call on another stream waits for until it has completed. The
//! cost is memory that stays allocated: a few hundred bytes per distinct call, up to
//! [`EAGER_PERMANENTS`] outside capture; past that, an eager launch's bytes get a device buffer of
//! their own, filled in the stream's order and reused while the bytes stay the same.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use cudarc::driver::sys::{self, CUstreamCaptureMode, CUstreamCaptureStatus};
use cudarc::driver::{CudaContext, CudaSlice, CudaStream, DevicePtr, DriverError};

use crate::error::Result;

/// Most permanent copies made outside capture (each a few hundred bytes of device memory).
pub(crate) const EAGER_PERMANENTS: usize = 4096;

/// One launch's staged bytes and where they are on the device: a permanent copy, or (outside
/// capture, once the permanents are full) a buffer of its own, kept apart so that staging under
/// capture never frees (or refills) a buffer an earlier eager launch used, which the capture
/// would record as a node.
#[derive(Default)]
pub(crate) struct Staged {
    /// Outside capture, past the permanents' cap: the bytes and their buffer.
    own: Option<(Vec<u8>, CudaSlice<u8>)>,
    /// The bytes and their permanent copy's address.
    captured: Option<(Vec<u8>, u64)>,
    /// Whether the last staging went to a permanent copy: the next launch reads that one.
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
    let permanent = match is_capturing(stream)? {
        true => Some(permanents.copy_in(&bytes)?),
        false => permanents.copy_in_eager(&bytes, stream)?,
    };
    if let Some(address) = permanent {
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

/// A device buffer filled once (`allocate`, or a copy in a stream's order whose completion
/// `filled` records), freed when dropped.
struct Permanent {
    device: sys::CUdeviceptr,
    /// The event after an eager fill until it is seen complete (then `None`).
    filled: Option<sys::CUevent>,
}

impl Drop for Permanent {
    fn drop(&mut self) {
        // Safety: allocated by `allocate` or `fill_in_order` and freed only here; no launch reads
        // it any more (the GPU is being dropped, or the buffer was never handed out); the event
        // is this buffer's own.
        unsafe {
            if let Some(event) = self.filled.take() {
                sys::cuEventDestroy_v2(event);
            }
            sys::cuMemFree_v2(self.device);
        }
    }
}

// Safety: a device address and an event handle, which the driver API takes from any thread of
// the process (its calls are thread-safe); a `Permanent` is only used under its map's mutex.
unsafe impl Send for Permanent {}

impl Permanent {
    /// Makes work enqueued on `stream` (outside capture) from now on see the buffer's bytes:
    /// nothing once its fill is known complete, else a wait on the fill's event.
    fn ready_for(&mut self, stream: &CudaStream) -> Result<()> {
        let Some(event) = self.filled else {
            return Ok(());
        };
        // Safety: `event` is this buffer's live event.
        if unsafe { sys::cuEventQuery(event) } != sys::CUresult::CUDA_SUCCESS {
            // Safety: a live stream handle (the wrapper holds it) and a live event.
            unsafe { sys::cuStreamWaitEvent(stream.cu_stream(), event, 0) }.result()?;
            return Ok(());
        }
        // Safety: as above; the event is not used again.
        unsafe { sys::cuEventDestroy_v2(event) };
        self.filled = None;
        Ok(())
    }
}

/// The GPU's permanent copies, by content (see the module docs): those made under capture and
/// those made outside it apart, so that a capture never waits on (or queries) an eager fill's
/// event, which would invalidate it.
pub(crate) struct Permanents {
    ctx: Arc<CudaContext>,
    copies: Mutex<HashMap<Vec<u8>, Permanent>>,
    eager: Mutex<HashMap<Vec<u8>, Permanent>>,
    /// Split scratch of captured launches, by (capture sequence, stream), the largest last: see
    /// `capture_scratch`.
    scratch: Mutex<HashMap<(u64, usize), Vec<CaptureScratch>>>,
}

/// A split workspace and its counters as a launch binds them: `((address, floats), (address,
/// count))`.
pub(crate) type ScratchPair = ((u64, usize), (u64, usize));

/// A workspace of `floats` fp32 values and `count` zeroed split counters.
struct CaptureScratch {
    workspace: Permanent,
    floats: usize,
    counters: Permanent,
    count: usize,
}

impl Permanents {
    pub(crate) fn new(ctx: Arc<CudaContext>) -> Self {
        Permanents {
            ctx,
            copies: Mutex::new(HashMap::new()),
            eager: Mutex::new(HashMap::new()),
            scratch: Mutex::new(HashMap::new()),
        }
    }

    /// Under capture: a split workspace of at least `floats` values and `count` counters for the
    /// launch captured next on `stream`, as `((address, floats), (address, count))`; `None`
    /// outside capture. Every launch captured on one stream of one capture sequence shares one
    /// pair: at each replay they run one after another, each leaving the counters 0 (the block
    /// that merges a row block's slices resets them) and writing its part of the workspace before
    /// reading it; a graph never replays concurrently with itself, and other captures or streams
    /// get pairs of their own. Made (counters zeroed) when first needed, grown by a new pair
    /// (later launches take it; earlier ones keep theirs), and kept for the GPU's life, so that a
    /// replay allocates and clears nothing.
    pub(crate) fn capture_scratch(
        &self,
        stream: &CudaStream,
        floats: usize,
        count: usize,
    ) -> Result<Option<ScratchPair>> {
        let mut status = CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE;
        let mut id: u64 = 0;
        // Safety: a live stream handle (the wrapper holds it), valid places for the status and
        // id; the graph, dependency and edge outputs are optional (null).
        unsafe {
            sys::cuStreamGetCaptureInfo_v3(
                stream.cu_stream(),
                &mut status,
                &mut id,
                std::ptr::null_mut(),
                std::ptr::null_mut(),
                std::ptr::null_mut(),
                std::ptr::null_mut(),
            )
        }
        .result()?;
        if status != CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_ACTIVE {
            return Ok(None);
        }
        let mut scratch = self.scratch.lock().unwrap_or_else(|e| e.into_inner());
        // An outgrown pair stays allocated: the launches captured with it still use it.
        let pairs = scratch.entry((id, stream.cu_stream() as usize)).or_default();
        if !pairs
            .last()
            .is_some_and(|p| p.floats >= floats && p.count >= count)
        {
            let (floats, count) = (
                floats.max(1).next_power_of_two(),
                count.max(1).next_power_of_two(),
            );
            pairs.push(relaxed_capture(|| {
                Ok(CaptureScratch {
                    workspace: zeroed(4 * floats)?,
                    floats,
                    counters: zeroed(4 * count)?,
                    count,
                })
            })?);
        }
        let pair = pairs.last().expect("a pair was just ensured");
        Ok(Some((
            (pair.workspace.device, pair.floats),
            (pair.counters.device, pair.count),
        )))
    }

    /// The device address of `bytes`' permanent copy under capture, made (allocated and filled
    /// before this returns) the first time.
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

    /// Outside capture: the device address of `bytes`' permanent copy, ready for work enqueued
    /// on `stream` next; made the first time (allocated, filled by a copy in `stream`'s order),
    /// unless [`EAGER_PERMANENTS`] are made already (`None`).
    fn copy_in_eager(&self, bytes: &[u8], stream: &CudaStream) -> Result<Option<u64>> {
        let mut copies = self.eager.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(permanent) = copies.get_mut(bytes) {
            permanent.ready_for(stream)?;
            return Ok(Some(permanent.device));
        }
        if copies.len() >= EAGER_PERMANENTS {
            return Ok(None);
        }
        let permanent = fill_in_order(bytes, stream)?;
        let device = permanent.device;
        copies.insert(bytes.to_vec(), permanent);
        Ok(Some(device))
    }
}

/// A device buffer holding `bytes`, filled before this returns.
fn allocate(bytes: &[u8]) -> std::result::Result<Permanent, DriverError> {
    let mut device: sys::CUdeviceptr = 0;
    // Safety: `device` is a valid place for the driver to write the allocation's address.
    unsafe { sys::cuMemAlloc_v2(&mut device, bytes.len().max(1)) }.result()?;
    let permanent = Permanent { device, filled: None };
    // Safety: the allocation holds `bytes.len()` bytes; the copy is synchronous, so `bytes` is
    // only read before this returns (on error, dropping `permanent` frees the allocation).
    unsafe { sys::cuMemcpyHtoD_v2(device, bytes.as_ptr().cast(), bytes.len()) }.result()?;
    Ok(permanent)
}

/// A device buffer of `bytes` zero bytes, cleared before this returns.
fn zeroed(bytes: usize) -> std::result::Result<Permanent, DriverError> {
    let mut device: sys::CUdeviceptr = 0;
    // Safety: `device` is a valid place for the driver to write the allocation's address.
    unsafe { sys::cuMemAlloc_v2(&mut device, bytes.max(1)) }.result()?;
    let permanent = Permanent { device, filled: None };
    // Safety: the allocation holds `bytes` bytes; the clear is synchronous (on error, dropping
    // `permanent` frees the allocation).
    unsafe { sys::cuMemsetD8_v2(device, 0, bytes) }.result()?;
    Ok(permanent)
}

/// A device buffer that will hold `bytes` for work enqueued on `stream` after this returns: the
/// copy is in the stream's order (the driver takes the bytes before returning), its completion
/// recorded in the buffer's event for work on other streams.
fn fill_in_order(bytes: &[u8], stream: &CudaStream) -> std::result::Result<Permanent, DriverError> {
    let mut device: sys::CUdeviceptr = 0;
    // Safety: `device` is a valid place for the driver to write the allocation's address.
    unsafe { sys::cuMemAlloc_v2(&mut device, bytes.len().max(1)) }.result()?;
    let mut permanent = Permanent { device, filled: None };
    let mut event: sys::CUevent = std::ptr::null_mut();
    // Safety: the allocation holds `bytes.len()` bytes and the stream handle is live; the driver
    // copies pageable bytes out before the call returns. `event` is a valid place for the handle,
    // which the buffer owns from here on.
    unsafe {
        sys::cuMemcpyHtoDAsync_v2(device, bytes.as_ptr().cast(), bytes.len(), stream.cu_stream()).result()?;
        sys::cuEventCreate(&mut event, sys::CUevent_flags::CU_EVENT_DISABLE_TIMING as u32).result()?;
        permanent.filled = Some(event);
        sys::cuEventRecord(event, stream.cu_stream()).result()?;
    }
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
        let eager = std::mem::take(self.eager.get_mut().unwrap_or_else(|e| e.into_inner()));
        let scratch = std::mem::take(self.scratch.get_mut().unwrap_or_else(|e| e.into_inner()));
        // The buffers are freed in the GPU's context; without it they are left to the driver.
        let any = !copies.is_empty() || !eager.is_empty() || !scratch.is_empty();
        if any && self.ctx.bind_to_thread().is_err() {
            std::mem::forget(copies);
            std::mem::forget(eager);
            std::mem::forget(scratch);
        }
    }
}
