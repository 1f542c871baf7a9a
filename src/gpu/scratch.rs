//! Scratch a `Gpu` keeps for the launches that split their keys (`flash_decode`'s plan, the
//! persistent `flash_ws`'s tail split): workspaces and slice counters, grown by powers of two and
//! kept for the `Gpu`'s life (and a pool of them for callers' streams), and the split plan of a
//! decode launch on this GPU.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use cudarc::driver::sys;
use cudarc::driver::{CudaContext, CudaSlice, CudaStream, DevicePtr};

use crate::decode::{DecodeOptions, Plan};
use crate::error::{Error, Result};
use crate::gpu::{Gpu, Kernel};
use crate::problem::Shape;
use crate::tuned_table::SplitProblem;
use crate::variants::Family;

/// What the `Gpu` keeps for decode launches, behind a lock (launches take `&Gpu`).
#[derive(Default)]
pub struct State {
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    /// Every workspace ever allocated, the largest last. Older ones are kept (not freed) until
    /// the `Gpu` drops: a CUDA graph captured earlier may still replay with their addresses.
    workspaces: Vec<CudaSlice<f32>>,
    /// The slice counters, kept the same way. Allocated zeroed; every launch leaves them 0 (the
    /// block that merges a row block's slices resets its counter).
    counters: Vec<CudaSlice<u32>>,
    /// Resident blocks per SM of each decode kernel (the driver's occupancy calculator).
    resident: HashMap<String, u32>,
}

impl Gpu {
    /// The plan of a launch of `kernel` on `shape` with `options`: `Some` for `flash_decode`
    /// kernels only (`split_plan`); a forced split count on any other kernel is an error.
    pub(crate) fn decode_plan(
        &self,
        kernel: &Kernel,
        shape: Shape,
        options: DecodeOptions,
    ) -> Result<Option<Plan>> {
        if kernel.variant.family == Family::FlashDecode {
            return self.split_plan(kernel, shape, options).map(Some);
        }
        match options.splits {
            None => Ok(None),
            Some(_) => Err(Error::InvalidProblem(format!(
                "kernel {} does not split the keys: a split count is for flash_decode kernels",
                kernel.symbol
            ))),
        }
    }

    lab_pub! {
        /// The plan a launch of the `flash_decode` `kernel` on `shape` with `options` takes: its
        /// split count and where that came from (the module's documentation gives the order). An
        /// error for a kernel of another family, or when a forced count cannot run on `shape`.
        fn split_plan(&self, kernel: &Kernel, shape: Shape, options: DecodeOptions) -> Result<Plan> {
            let heuristic = self.heuristic_split_plan(kernel, shape)?;
            let problem = SplitProblem::of(kernel.dtype, kernel.variant.name, shape, heuristic.blocks());
            let tuned = self
                .tuned_table()
                .and_then(|table| table.decode_splits(&self.name, &problem));
            heuristic.chosen(options, tuned)
        }
    }

    lab_pub! {
        /// The heuristic's plan of the `flash_decode` `kernel` on `shape` ([`choose_splits`] on this
        /// GPU's slots), whatever the tuned table says: what `tune --splits` measures against.
        fn heuristic_split_plan(&self, kernel: &Kernel, shape: Shape) -> Result<Plan> {
            if kernel.variant.family != Family::FlashDecode {
                return Err(Error::InvalidProblem(format!(
                    "kernel {} is not a flash_decode kernel: only those split the keys",
                    kernel.symbol
                )));
            }
            let resident = {
                let cached = self.decode_state().resident.get(&kernel.symbol).copied();
                match cached {
                    Some(blocks) => blocks,
                    None => {
                        let blocks = self.resident_blocks(kernel)?.max(1);
                        self.decode_state().resident.insert(kernel.symbol.clone(), blocks);
                        blocks
                    }
                }
            };
            let slots = self.sm_count as u64 * resident as u64;
            Plan::new(shape, kernel.variant.block_m, kernel.variant.block_n, slots)
        }
    }

    /// The device address of a workspace of at least `floats` fp32 values (0 for none), grown by
    /// powers of two and kept for this `Gpu`'s life (see `Inner::workspaces`).
    pub(crate) fn decode_workspace(&self, floats: usize) -> Result<(u64, usize)> {
        self.grown(floats, |inner| &mut inner.workspaces)
    }

    /// The device address of at least `count` slice counters, each 0 (0 for none): grown by
    /// powers of two and kept as the workspaces are. Launches on this `Gpu`'s stream only (they
    /// are ordered, so one launch's counters are back at 0 before the next one counts).
    pub(crate) fn decode_counters(&self, count: usize) -> Result<(u64, usize)> {
        self.grown(count, |inner| &mut inner.counters)
    }

    /// The address and length of the last of `buffers` (0 for `len` 0), after appending a zeroed
    /// one of the next power of two at or above `len` when it is shorter.
    fn grown<T: cudarc::driver::DeviceRepr + cudarc::driver::ValidAsZeroBits>(
        &self,
        len: usize,
        buffers: impl FnOnce(&mut Inner) -> &mut Vec<CudaSlice<T>>,
    ) -> Result<(u64, usize)> {
        if len == 0 {
            return Ok((0, 0));
        }
        let mut state = self.decode_state();
        let buffers = buffers(&mut state);
        if buffers.last().is_none_or(|b| b.len() < len) {
            buffers.push(self.stream().alloc_zeros::<T>(len.next_power_of_two())?);
        }
        let buffer = buffers.last().expect("a buffer was just ensured");
        let (address, _sync) = buffer.device_ptr(self.stream());
        Ok((address, buffer.len()))
    }

    fn decode_state(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.decode.inner.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Split workspaces and slice counters for launches on callers' streams, outside capture: the
/// `Gpu`'s cached ones are ordered on its own stream only, and allocating, zeroing and freeing a
/// pair per call costs more host time than the launch. An entry is lent to one launch at a time;
/// the launch's stream first waits for the event recorded after the entry's last launch (on any
/// stream), so no two launches use it at once, and the counters are 0 when it starts (every
/// launch leaves them 0; a new entry's are cleared in the stream's order).
pub(crate) struct StreamPool {
    ctx: Arc<CudaContext>,
    entries: Mutex<Vec<PoolEntry>>,
}

/// A workspace of `floats` fp32 values and `count` counters, with the event recorded after the
/// last launch that used them.
struct PoolEntry {
    workspace: sys::CUdeviceptr,
    floats: usize,
    counters: sys::CUdeviceptr,
    count: usize,
    last_use: sys::CUevent,
    busy: bool,
}

// Safety: device addresses and an event handle, which the driver API takes from any thread; an
// entry is only used under the pool's mutex or by the one lease that marked it busy.
unsafe impl Send for PoolEntry {}

/// Most entries a pool holds; past that, a launch allocates its own pair.
const POOL_ENTRIES: usize = 16;

impl StreamPool {
    pub(crate) fn new(ctx: Arc<CudaContext>) -> StreamPool {
        StreamPool {
            ctx,
            entries: Mutex::new(Vec::new()),
        }
    }

    /// A workspace of at least `floats` values and `count` zeroed counters for the launch
    /// enqueued next on `stream`, lent until the returned lease drops (after that launch is
    /// enqueued); `None` when every entry is busy and the pool is full.
    pub(crate) fn lease(
        &self,
        floats: usize,
        count: usize,
        stream: &CudaStream,
    ) -> Result<Option<PoolLease<'_>>> {
        let mut entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        let free = entries
            .iter()
            .position(|e| !e.busy && e.floats >= floats && e.count >= count);
        let index = match free {
            Some(index) => {
                // Safety: a live stream handle (the wrapper holds it) and the entry's live event.
                unsafe { sys::cuStreamWaitEvent(stream.cu_stream(), entries[index].last_use, 0) }.result()?;
                index
            }
            None if entries.len() < POOL_ENTRIES => {
                entries.push(PoolEntry::new(
                    floats.next_power_of_two(),
                    count.next_power_of_two(),
                    stream,
                )?);
                entries.len() - 1
            }
            None => return Ok(None),
        };
        let entry = &mut entries[index];
        entry.busy = true;
        Ok(Some(PoolLease {
            pool: self,
            index,
            stream: stream.cu_stream(),
            workspace: (entry.workspace, entry.floats),
            counters: (entry.counters, entry.count),
        }))
    }
}

impl PoolEntry {
    /// Allocates an entry whose counters are cleared in `stream`'s order.
    fn new(floats: usize, count: usize, stream: &CudaStream) -> Result<PoolEntry> {
        let mut entry = PoolEntry {
            workspace: 0,
            floats,
            counters: 0,
            count,
            last_use: std::ptr::null_mut(),
            busy: false,
        };
        // Safety: valid places for the driver's answers; the allocations hold what the memset
        // writes; the stream handle is live. On an error `entry` frees what it holds (Drop).
        unsafe {
            sys::cuEventCreate(
                &mut entry.last_use,
                sys::CUevent_flags::CU_EVENT_DISABLE_TIMING as u32,
            )
            .result()?;
            sys::cuMemAlloc_v2(&mut entry.workspace, 4 * floats.max(1)).result()?;
            sys::cuMemAlloc_v2(&mut entry.counters, 4 * count.max(1)).result()?;
            sys::cuMemsetD32Async(entry.counters, 0, count.max(1), stream.cu_stream()).result()?;
        }
        Ok(entry)
    }
}

impl Drop for PoolEntry {
    fn drop(&mut self) {
        // Safety: the entry's own allocations and event, no longer used (the pool is dropped with
        // its `Gpu`, whose launches have all been enqueued; the driver frees after they ran).
        unsafe {
            if !self.last_use.is_null() {
                sys::cuEventDestroy_v2(self.last_use);
            }
            for address in [self.workspace, self.counters] {
                if address != 0 {
                    sys::cuMemFree_v2(address);
                }
            }
        }
    }
}

impl Drop for StreamPool {
    fn drop(&mut self) {
        let entries = std::mem::take(self.entries.get_mut().unwrap_or_else(|e| e.into_inner()));
        // Freed in the pool's context; without it they are left to the driver.
        if !entries.is_empty() && self.ctx.bind_to_thread().is_err() {
            std::mem::forget(entries);
        }
    }
}

/// A pool entry lent to one launch: recorded as used (an event on the launch's stream) and given
/// back when dropped, after the launch was enqueued.
pub(crate) struct PoolLease<'p> {
    pool: &'p StreamPool,
    index: usize,
    stream: sys::CUstream,
    /// The workspace's address and length in floats.
    pub(crate) workspace: (u64, usize),
    /// The counters' address and count.
    pub(crate) counters: (u64, usize),
}

impl Drop for PoolLease<'_> {
    fn drop(&mut self) {
        let mut entries = self.pool.entries.lock().unwrap_or_else(|e| e.into_inner());
        let entry = &mut entries[self.index];
        // Safety: the entry's live event and the launch's stream, alive while the lease is (it
        // borrows the launch's stream's user). If the record fails, the entry stays busy: never
        // lent again rather than lent without the wait.
        if unsafe { sys::cuEventRecord(entry.last_use, self.stream) }
            .result()
            .is_ok()
        {
            entry.busy = false;
        }
    }
}
