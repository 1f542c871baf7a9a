//! The GPU side: a context with the embedded PTX loaded and typed launches of the variants.
//! Timing them belongs to the lab (`flashrs-lab`'s `Timing`), not to users of this crate.
//! `unsafe` is confined to `launch`, after every argument has been checked.

mod dense;
pub(crate) mod kernel;
pub(crate) mod launch;
mod options;
pub(crate) mod schedule;
pub(crate) mod scratch;
pub(crate) mod tensors;

pub use crate::dispatch::{default_variant, dispatch_candidates, Choice, DispatchEntry, DISPATCH};
pub(crate) use dense::check_head_dim;
pub(crate) use kernel::Entry;
pub use kernel::Kernel;
pub(crate) use launch::{blocks, check_alignment, check_lens, Launch, TENSOR_ALIGN};
pub use launch::{launch_config, RECORD_WORDS};
pub use options::{GpuOptions, L2Promotion};
pub(crate) use schedule::{dealt_item_table, item_walk, KeySlices};
pub use tensors::{decode, nan, RawBuffer, RawTensors, Tensors};
pub(crate) use tensors::{fill_nan, nan_lse, DeviceBuffer};

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use cudarc::driver::sys::CUdevice_attribute;
use cudarc::driver::{CudaContext, CudaFunction, CudaModule, CudaSlice, CudaStream};
use cudarc::nvrtc::Ptx;

use crate::embedded;
use crate::error::{Error, Result};
use crate::staging::{self, Permanents, Staged};
use crate::tuned_table::TunedTable;

/// Where an open GPU's kernels come from.
pub(crate) enum KernelCode {
    /// A cubin `host cubin` assembled from the embedded PTX (`FLASHRS_CUBIN_DIR`): every kernel,
    /// in one module loaded when the GPU is opened.
    Cubin(Arc<CudaModule>),
    /// The embedded PTX of the GPU's architecture: each kernel is loaded as a module of its own
    /// on first use, so the driver compiles only the kernels a process runs.
    Ptx(&'static embedded::EntryModules),
}

/// An open GPU: one context, its default stream, and the kernels for its architecture.
pub struct Gpu {
    ctx: Arc<CudaContext>,
    stream: Arc<CudaStream>,
    code: KernelCode,
    /// The PTX architecture loaded (80 or 90).
    pub arch: u32,
    /// The device's name, as the driver reports it.
    pub name: String,
    /// The device's compute capability, `(major, minor)`.
    pub compute_capability: (i32, i32),
    max_smem_optin: u32,
    /// Streaming multiprocessors, for the dispatch rule.
    pub sm_count: usize,
    /// The SM clock the driver reports (kHz): cycles to seconds for `micro`; `None` if unknown.
    pub clock_khz: Option<u32>,
    globals: BTreeMap<&'static str, u32>,
    /// What the caller chose when opening it.
    pub(crate) options: GpuOptions,
    /// Launches dependent on the kernel before them: the option, on Hopper only.
    pub(crate) dependent_launches: bool,
    /// The tuned table the dispatch consults: the option's file, else the embedded one.
    tuned: Option<TunedTable>,
    functions: Mutex<HashMap<String, CudaFunction>>,
    /// flash_decode's workspace and cached facts (`decode.rs`).
    pub(crate) decode: scratch::State,
    /// What launches captured in CUDA graphs read from device memory (`staging`).
    permanents: Permanents,
    /// Split workspaces and counters lent to launches on callers' streams (`scratch`).
    pub(crate) stream_pool: scratch::StreamPool,
}

impl Gpu {
    /// Opens device `ordinal` with the default options. A machine without the CUDA driver gets
    /// `Error::NoDriver`, not a panic: cudarc aborts when libcuda is missing, so its presence is
    /// checked first.
    pub fn open(ordinal: usize) -> Result<Gpu> {
        Gpu::open_with(ordinal, GpuOptions::default())
    }

    /// Opens device `ordinal` with `options` ([`GpuOptions::from_env`] for the environment's).
    /// A tuned table or cubin folder the options name that cannot be used is an error here, not
    /// a silent fallback.
    pub fn open_with(ordinal: usize, options: GpuOptions) -> Result<Gpu> {
        if !library_present(&["libcuda.so.1", "libcuda.so", "nvcuda.dll"]) {
            return Err(Error::NoDriver);
        }
        let count = CudaContext::device_count().map_err(|e| Error::NoDevice(e.to_string()))?;
        if ordinal >= count.max(0) as usize {
            return Err(Error::NoDevice(format!(
                "device {ordinal} requested, {count} present"
            )));
        }
        let ctx = CudaContext::new(ordinal)?;
        // Safety: all work runs on the one stream below, so cudarc's per-buffer events (which
        // order buffers across streams) are not needed; without them launches can be captured
        // into CUDA graphs.
        unsafe { ctx.disable_event_tracking() };
        // A stream of our own: the legacy default stream cannot be captured into a graph.
        let stream = ctx.new_stream()?;
        let compute_capability = ctx.compute_capability()?;
        let (arch, target) = match compute_capability {
            // The sm_90a PTX (wgmma) loads on Hopper only; anything newer takes the sm_80 PTX.
            (9, 0) => (90, "sm_90a"),
            (major, _) if major >= 8 => (80, "sm_80"),
            (major, minor) => {
                return Err(Error::NoDevice(format!(
                    "compute capability {major}.{minor}: the kernels need sm_80 or newer"
                )))
            }
        };
        let ptx_text = embedded::ptx(arch).ok_or_else(|| {
            Error::NoDevice(format!(
                "this build has no {target} kernels (built with FLASHRS_ARCHES set): rebuild with \
                 FLASHRS_ARCHES unset or naming {target}"
            ))
        })?;
        let code = match &options.cubin_dir {
            Some(dir) => KernelCode::Cubin(ctx.load_module(cubin_image(dir.clone(), target, ptx_text)?)?),
            None => KernelCode::Ptx(embedded::EntryModules::embedded(arch).ok_or_else(|| {
                Error::MissingSymbol(format!("the embedded {target} PTX cannot be read into kernels"))
            })?),
        };
        let tuned = match &options.tuned_table {
            Some(path) => Some(TunedTable::load(path)?),
            None => TunedTable::builtin().ok(),
        };
        let max_smem_optin =
            ctx.attribute(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN)? as u32;
        let sm_count = ctx.attribute(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)? as usize;
        let clock_khz = ctx
            .attribute(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_CLOCK_RATE)
            .ok()
            .filter(|&k| k > 0)
            .map(|k| k as u32);
        Ok(Gpu {
            permanents: Permanents::new(ctx.clone()),
            stream_pool: scratch::StreamPool::new(ctx.clone()),
            sm_count,
            clock_khz,
            stream,
            name: ctx.name()?,
            ctx,
            code,
            arch,
            compute_capability,
            max_smem_optin,
            globals: embedded::u32_globals(ptx_text),
            // Every entry point waits for the kernel before it at its first instruction
            // (`kernels-rs/src/arch/grid.rs`), flash_ws after its set-up, so a dependent launch
            // only lets its blocks be scheduled while that kernel finishes; sm_90a only.
            dependent_launches: options.dependent_launches && arch == 90,
            tuned,
            options,
            functions: Mutex::new(HashMap::new()),
            decode: Default::default(),
        })
    }

    lab_pub! {
        /// The stream all of this GPU's own work is enqueued on.
        fn stream(&self) -> &Arc<CudaStream> {
            &self.stream
        }
    }

    /// The options it was opened with.
    pub fn options(&self) -> &GpuOptions {
        &self.options
    }

    /// The tuned table the dispatch consults: [`GpuOptions::tuned_table`]'s, else the one
    /// compiled into the library.
    pub fn tuned_table(&self) -> Option<&TunedTable> {
        self.tuned.as_ref()
    }

    lab_pub! {
        /// The CUDA context of this device.
        fn context(&self) -> &Arc<CudaContext> {
            &self.ctx
        }
    }

    lab_pub! {
        /// Copies host data to a new device buffer.
        fn upload<T: cudarc::driver::DeviceRepr>(&self, data: &[T]) -> Result<CudaSlice<T>> {
            Ok(self.stream.clone_htod(data)?)
        }
    }

    /// Copies a device buffer back to the host, on the buffer's own stream (so after the work
    /// enqueued on it, including launches on caller-lent tensors); waits for that stream.
    pub fn download<T: cudarc::driver::DeviceRepr + Default + Clone>(
        &self,
        buffer: &CudaSlice<T>,
    ) -> Result<Vec<T>> {
        Ok(buffer.stream().clone_dtoh(buffer)?)
    }

    /// Copies `bytes` (tensor maps, an item table) to the device for the launch enqueued next on
    /// `stream`, into `cache`, in a way a CUDA graph capturing `stream` replays (`staging`).
    pub(crate) fn stage(
        &self,
        stream: &Arc<CudaStream>,
        bytes: Vec<u8>,
        cache: &mut Option<Staged>,
    ) -> Result<()> {
        staging::stage(&self.permanents, stream, bytes, cache)
    }

    /// Blocks of `kernel` that fit on one multiprocessor at once (registers, shared memory,
    /// threads), as the driver's occupancy calculator says.
    pub(crate) fn resident_blocks(&self, kernel: &Kernel) -> Result<u32> {
        Ok(kernel.function.occupancy_max_active_blocks_per_multiprocessor(
            kernel.variant.threads(),
            kernel.smem_bytes as usize,
            None,
        )?)
    }

    /// Waits for the stream and reports any asynchronous error from the launches before.
    pub fn synchronize(&self) -> Result<()> {
        Ok(self.stream.synchronize()?)
    }
}

/// Whether one of `names` loads as a shared library. Asked of the system rather than of cudarc,
/// whose own check exists only when it loads the libraries at run time (not when a crate in the
/// build links them, as candle does); a program linked to libcuda could not start without it, so
/// there the answer is always yes. Public for code that loads other CUDA libraries through
/// cudarc (the lab's cuBLAS candidate), which aborts the process when one is missing.
pub fn library_present(names: &[&str]) -> bool {
    names.iter().any(|name| {
        // Safety: the CUDA libraries' initialisers only register themselves; no other code runs.
        unsafe { libloading::Library::new(*name) }.is_ok()
    })
}

/// The cubin in `dir` (a folder that `host cubin` filled) that ptxas assembled from the embedded
/// PTX of `target`. A cubin whose fingerprint does not match the embedded PTX is refused: its
/// kernels could take other parameters than this build passes.
pub(crate) fn cubin_image(dir: std::path::PathBuf, target: &str, ptx_text: &str) -> Result<Ptx> {
    let (cubin, fingerprint) = embedded::cubin_files(target);
    let read = |name: &str| {
        std::fs::read(dir.join(name)).map_err(|e| Error::Cubin(format!("{}: {e}", dir.join(name).display())))
    };
    let expected = format!("{:016x}", embedded::fingerprint(ptx_text));
    let found = read(&fingerprint)?;
    if String::from_utf8_lossy(&found).trim() != expected {
        return Err(Error::Cubin(format!(
            "{cubin} in {} was built from another PTX than this build embeds: run `host cubin` again",
            dir.display()
        )));
    }
    Ok(Ptx::from_binary(read(&cubin)?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cubin_is_loaded_only_with_the_fingerprint_of_this_ptx() {
        let dir = std::env::temp_dir().join(format!("flashrs-cubin-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (cubin, fingerprint) = embedded::cubin_files("sm_90a");
        let ptx = ".version 8.0\n.target sm_90a\n";
        let image = |dir: &std::path::Path| cubin_image(dir.to_path_buf(), "sm_90a", ptx);
        // Nothing written yet: the missing file is named.
        assert!(matches!(image(&dir), Err(Error::Cubin(m)) if m.contains("ptx-fnv64")));
        std::fs::write(dir.join(&cubin), b"\x7fELF").unwrap();
        std::fs::write(dir.join(&fingerprint), "0123456789abcdef\n").unwrap();
        assert!(matches!(image(&dir), Err(Error::Cubin(m)) if m.contains("another PTX")));
        let own = format!("{:016x}\n", embedded::fingerprint(ptx));
        std::fs::write(dir.join(&fingerprint), own).unwrap();
        assert!(image(&dir).is_ok(), "the matching cubin loads");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
