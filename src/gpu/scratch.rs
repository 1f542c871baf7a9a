//! Scratch a `Gpu` keeps for the launches that split their keys (`flash_decode`'s plan, the
//! persistent `flash_ws`'s tail split): workspaces and slice counters, grown by powers of two and
//! kept for the `Gpu`'s life, and the split plan of a decode launch on this GPU.

use std::collections::HashMap;
use std::sync::Mutex;

use cudarc::driver::{CudaSlice, DevicePtr};

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

    /// The plan a launch of the `flash_decode` `kernel` on `shape` with `options` takes: its
    /// split count and where that came from (the module's documentation gives the order). An
    /// error for a kernel of another family, or when a forced count cannot run on `shape`.
    pub fn split_plan(&self, kernel: &Kernel, shape: Shape, options: DecodeOptions) -> Result<Plan> {
        let heuristic = self.heuristic_split_plan(kernel, shape)?;
        let problem = SplitProblem::of(kernel.dtype, kernel.variant.name, shape, heuristic.blocks());
        let tuned =
            crate::dispatch::builtin_tuned().and_then(|table| table.decode_splits(&self.name, &problem));
        heuristic.chosen(options, tuned)
    }

    /// The heuristic's plan of the `flash_decode` `kernel` on `shape` ([`choose_splits`] on this
    /// GPU's slots), whatever the tuned table says: what `tune --splits` measures against.
    pub fn heuristic_split_plan(&self, kernel: &Kernel, shape: Shape) -> Result<Plan> {
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
