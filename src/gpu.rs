//! The GPU side: a context with the embedded PTX loaded and typed launches of the variants.
//! Timing them belongs to the lab (`flashrs-lab`'s `Timing`), not to users of this crate.
//! `unsafe` is confined to `launch`, after every argument has been checked.

use std::collections::{BTreeMap, HashMap};
use std::marker::PhantomData;
use std::mem::ManuallyDrop;
use std::sync::{Arc, Mutex};

use cudarc::driver::sys::{CUdevice_attribute, CUfunction_attribute_enum};
use cudarc::driver::{
    CudaContext, CudaFunction, CudaModule, CudaSlice, CudaStream, DevicePtr, DevicePtrMut, LaunchConfig,
};
use cudarc::nvrtc::Ptx;
use serde::Serialize;

use crate::decode::DecodeOptions;
use crate::embedded;
use crate::error::{Error, Result};
use crate::launch::item_walk::ItemWalk;
use crate::launch::{tail_split, LaunchArgs};
use crate::layout::Layout;
use crate::problem::{DType, Params, Shape};
use crate::staging::{self, Permanents, Staged};
use crate::tma;
use crate::variants::{Family, VariantSpec, VARIANTS};

/// Where an open GPU's kernels come from.
enum KernelCode {
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
    /// Launches dependent on the kernel before them (`dependent_launches`).
    pub(crate) dependent_launches: bool,
    functions: Mutex<HashMap<String, CudaFunction>>,
    /// flash_decode's workspace and cached facts (`decode.rs`).
    pub(crate) decode: crate::decode::State,
    /// What launches captured in CUDA graphs read from device memory (`staging`).
    permanents: Permanents,
}

/// A variant resolved for one head dim: its entry point and launch facts. The fields are read
/// through accessors: a launch trusts them (grid, threads, shared memory, head dim), so safe code
/// outside the crate must not be able to change them:
///
/// ```compile_fail,E0616
/// # fn misuse(kernel: &mut flashrs::Kernel) {
/// kernel.head_dim = 128;
/// # }
/// ```
#[derive(Clone)]
pub struct Kernel {
    pub(crate) variant: &'static VariantSpec,
    pub(crate) head_dim: usize,
    pub(crate) dtype: DType,
    pub(crate) symbol: String,
    pub(crate) smem_bytes: u32,
    /// A persistent variant's most blocks: as many as the SMs hold at once (0 for the others).
    pub(crate) resident_grid: u32,
    pub(crate) function: CudaFunction,
    /// Which launch the entry point takes its parameters from.
    pub(crate) entry: Entry,
    /// Whether it is a barrier-counting twin, which writes records through the barrier log.
    pub(crate) counted: bool,
}

/// The launch an entry point is made for: each reads buffers the others do not pass (a varlen
/// kernel the `cu_seqlens`, a paged one the block table), so one handed to another is refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Entry {
    Dense,
    Varlen,
    Paged,
}

impl Entry {
    fn name(self) -> &'static str {
        match self {
            Entry::Dense => "dense",
            Entry::Varlen => "varlen",
            Entry::Paged => "paged",
        }
    }
}

impl Kernel {
    /// Refuses a launch of this kernel as `entry` (`Gpu::launch_with`, `launch_varlen`,
    /// `launch_paged`), or without a barrier log when it counts barriers: the kernel would read
    /// parameters that launch leaves null, or write its records at address 0.
    pub(crate) fn check_launch(&self, entry: Entry, has_barrier_log: bool) -> Result<()> {
        if self.entry != entry {
            return Err(Error::InvalidProblem(format!(
                "kernel {} is a {} entry point, launched as {}",
                self.symbol,
                self.entry.name(),
                entry.name()
            )));
        }
        if self.counted && !has_barrier_log {
            return Err(Error::InvalidProblem(format!(
                "kernel {} counts barriers: its launch needs a barrier log",
                self.symbol
            )));
        }
        Ok(())
    }
}

impl Kernel {
    /// The compiled variant this kernel belongs to.
    pub fn variant(&self) -> &'static VariantSpec {
        self.variant
    }

    /// The head dim this kernel is compiled for.
    pub fn head_dim(&self) -> usize {
        self.head_dim
    }

    /// The element type of Q, K, V and the output.
    pub fn dtype(&self) -> DType {
        self.dtype
    }

    /// The PTX entry point's name.
    pub fn symbol(&self) -> &str {
        &self.symbol
    }

    /// Dynamic shared memory per block.
    pub fn smem_bytes(&self) -> u32 {
        self.smem_bytes
    }
}

/// One device buffer of a [`Tensors`]: either allocated by the library (freed when dropped) or
/// borrowed from the caller through [`Gpu::tensors_from_raw`] (never freed here). Both are held
/// as a `CudaSlice` so that every launch, copy and length check treats them alike.
pub(crate) struct DeviceBuffer<T> {
    slice: ManuallyDrop<CudaSlice<T>>,
    owned: bool,
}

impl<T> DeviceBuffer<T> {
    pub(crate) fn owned(slice: CudaSlice<T>) -> DeviceBuffer<T> {
        DeviceBuffer {
            slice: ManuallyDrop::new(slice),
            owned: true,
        }
    }

    /// # Safety
    /// `raw.ptr` addresses `raw.len` elements of `T` in `stream`'s context that stay allocated
    /// while the buffer (and work enqueued with it) lives; see [`Gpu::tensors_from_raw`].
    pub(crate) unsafe fn borrowed(stream: &Arc<CudaStream>, raw: RawBuffer<T>) -> DeviceBuffer<T> {
        DeviceBuffer {
            // Safety: the caller's contract above; `Drop` leaks rather than frees it.
            slice: ManuallyDrop::new(unsafe { stream.upgrade_device_ptr(raw.ptr, raw.len) }),
            owned: false,
        }
    }
}

impl<T> std::ops::Deref for DeviceBuffer<T> {
    type Target = CudaSlice<T>;
    fn deref(&self) -> &CudaSlice<T> {
        &self.slice
    }
}

impl<T> std::ops::DerefMut for DeviceBuffer<T> {
    fn deref_mut(&mut self) -> &mut CudaSlice<T> {
        &mut self.slice
    }
}

impl<T> Drop for DeviceBuffer<T> {
    fn drop(&mut self) {
        // Safety: `slice` is taken exactly once, here, and never used after.
        let slice = unsafe { ManuallyDrop::take(&mut self.slice) };
        if self.owned {
            drop(slice);
        } else {
            // The caller owns the memory: forget the pointer instead of freeing it.
            let _ = slice.leak();
        }
    }
}

/// A caller-owned device allocation handed to [`Gpu::tensors_from_raw`]: its address and its
/// length in elements of `T`.
#[derive(Debug)]
pub struct RawBuffer<T> {
    /// The buffer's device address.
    pub ptr: cudarc::driver::sys::CUdeviceptr,
    /// Its length in elements of `T`.
    pub len: usize,
    _element: PhantomData<T>,
}

impl<T> RawBuffer<T> {
    /// Names `len` elements of `T` at device address `ptr`; [`Gpu::tensors_from_raw`] checks them.
    pub fn new(ptr: cudarc::driver::sys::CUdeviceptr, len: usize) -> RawBuffer<T> {
        RawBuffer {
            ptr,
            len,
            _element: PhantomData,
        }
    }
}

impl<T> Clone for RawBuffer<T> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<T> Copy for RawBuffer<T> {}

/// The caller-owned buffers of one attention call, for [`Gpu::tensors_from_raw`]. Q, K, V and
/// the output hold the bits of the dtype (f16 or bf16); the log-sum-exp is fp32.
#[derive(Clone, Copy, Debug)]
pub struct RawTensors {
    /// Q, `[B, H, S_q, D]` (or `[B, S_q, H, D]`).
    pub q: RawBuffer<u16>,
    /// K, `[B, H_kv, S_k, D]` (or `[B, S_k, H_kv, D]`).
    pub k: RawBuffer<u16>,
    /// V, laid out as K.
    pub v: RawBuffer<u16>,
    /// The output, laid out as Q.
    pub out: RawBuffer<u16>,
    /// Each query row's log-sum-exp (`[B, H, S_q]` fp32), when the caller wants it.
    pub lse: Option<RawBuffer<f32>>,
}

/// The device buffers of one attention call: Q, K, V, the output and optionally the log-sum-exp,
/// with the shape, layout and dtype they were made for. The buffers are private and checked
/// against that shape when made and again before every launch, so no safe call can hand a kernel
/// a buffer shorter than what it reads or writes. Read them with [`Tensors::out`] and friends.
/// Elements of Q, K, V and the output are the bits of `dtype` (f16 or bf16).
///
/// Replacing a buffer does not compile (the fields are private):
///
/// ```compile_fail,E0616
/// # fn misuse(gpu: &flashrs::Gpu, t: &mut flashrs::Tensors) -> flashrs::Result<()> {
/// t.out = gpu.upload(&[0u16; 1])?;
/// # Ok(())
/// # }
/// ```
///
/// while reading one does:
///
/// ```
/// # fn read(gpu: &flashrs::Gpu, t: &flashrs::Tensors) -> flashrs::Result<Vec<u16>> {
/// gpu.download(t.out())
/// # }
/// ```
pub struct Tensors {
    pub(crate) q: DeviceBuffer<u16>,
    pub(crate) k: DeviceBuffer<u16>,
    pub(crate) v: DeviceBuffer<u16>,
    pub(crate) out: DeviceBuffer<u16>,
    /// Each query row's log-sum-exp (`[B, H, S_q]`, natural log), written when present; see
    /// `Gpu::request_lse`.
    pub(crate) lse: Option<DeviceBuffer<f32>>,
    shape: Shape,
    dtype: DType,
    layout: Layout,
    /// Where launches on these buffers are enqueued: the GPU's own stream, or the caller's for
    /// borrowed buffers.
    stream: Arc<CudaStream>,
    /// The tensor maps of the last `flash_ws` launch (host bytes and their device copy), reused
    /// while the buffers and tile sizes stay the same.
    maps: Option<Staged>,
    /// The item table of the last causal persistent `flash_ws` launch (`causal_item_table`),
    /// dealt again only for another variant, shape or grid.
    walk_table: TableCache,
}

impl Tensors {
    /// The shape the buffers were made for.
    pub fn shape(&self) -> Shape {
        self.shape
    }

    /// How Q, K, V and the output are laid out (the LSE is always `[B, H, S_q]`).
    pub fn layout(&self) -> Layout {
        self.layout
    }

    /// The element type of Q, K, V and the output.
    pub fn dtype(&self) -> DType {
        self.dtype
    }

    /// The query buffer (the dtype's bits).
    pub fn q(&self) -> &CudaSlice<u16> {
        &self.q
    }

    /// The key buffer (the dtype's bits).
    pub fn k(&self) -> &CudaSlice<u16> {
        &self.k
    }

    /// The value buffer (the dtype's bits).
    pub fn v(&self) -> &CudaSlice<u16> {
        &self.v
    }

    /// The output, laid out as Q (download it with [`Gpu::download`]).
    pub fn out(&self) -> &CudaSlice<u16> {
        &self.out
    }

    /// The log-sum-exp buffer, once [`Gpu::request_lse`] made one (or the caller lent one).
    pub fn lse(&self) -> Option<&CudaSlice<f32>> {
        self.lse.as_deref()
    }

    /// The stream launches on these tensors run on.
    pub fn stream(&self) -> &Arc<CudaStream> {
        &self.stream
    }
}

/// The address of every field of a `LaunchArgs`, in parameter order: the driver's parameter list.
macro_rules! launch_arg_addresses {
    ($args:ident; $($(#[$doc:meta])* $field:ident: $host:ty $(as $device:ty)?,)*) => {
        [$(&$args.$field as *const $host as *mut std::ffi::c_void),*]
    };
}

/// Whether launches on Hopper are made dependent on the kernel before them in the stream
/// (programmatic dependent launch): on unless `FLASHRS_PDL=0`. Every entry point waits for the
/// kernel before at its first instruction (`kernels-rs/src/arch/grid.rs`), `flash_ws` after its
/// set-up in shared memory and registers, so a dependent launch only lets its blocks be scheduled
/// (and `flash_ws`'s set up) while that kernel finishes.
fn dependent_launches(arch: u32) -> bool {
    arch == 90 && std::env::var_os("FLASHRS_PDL").is_none_or(|v| v != "0")
}

/// A kernel parameter list as the host fills it in: a struct whose fields are the entry points'
/// parameters in order (`LaunchArgs` for the forward's, `BackwardArgs` for the backward's), each
/// declared once for both sides by a `with_*_params!` list.
pub(crate) trait ParamList {
    /// Calls `f` with the address of every field, in parameter order: the driver's list.
    fn with_addresses<R>(&self, f: impl FnOnce(&mut [*mut std::ffi::c_void]) -> R) -> R;
}

impl ParamList for LaunchArgs {
    fn with_addresses<R>(&self, f: impl FnOnce(&mut [*mut std::ffi::c_void]) -> R) -> R {
        let args = self;
        f(&mut with_launch_params!(launch_arg_addresses!(args;)))
    }
}

impl ParamList for crate::backward_launch::BackwardArgs {
    fn with_addresses<R>(&self, f: impl FnOnce(&mut [*mut std::ffi::c_void]) -> R) -> R {
        let args = self;
        f(&mut with_backward_params!(launch_arg_addresses!(args;)))
    }
}

/// Launches `function` on `stream` with `args` pushed as its parameter list; with `dependent`,
/// as a programmatic dependent launch (see `dependent_launches`). Every launch of the library
/// goes through here.
///
/// # Safety
/// `function` takes the parameter list `A` describes (`kernels-rs/src/launch.rs` or
/// `backward_launch.rs`), and `args` and `config` satisfy its contract: buffers as long as the
/// shape says, live in `stream`'s context, the grid it expects. With `dependent`, `function` is
/// an sm_90a entry point (which waits for the kernel before it at its first instruction).
pub(crate) unsafe fn launch_with_args<A: ParamList>(
    stream: &CudaStream,
    function: &CudaFunction,
    config: LaunchConfig,
    args: &A,
    dependent: bool,
) -> Result<()> {
    use cudarc::driver::sys;
    let mut attribute = sys::CUlaunchAttribute {
        id: sys::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION,
        pad: [0; 4],
        value: sys::CUlaunchAttributeValue {
            programmaticStreamSerializationAllowed: 1,
        },
    };
    let (grid, block) = (config.grid_dim, config.block_dim);
    let launch = sys::CUlaunchConfig {
        gridDimX: grid.0,
        gridDimY: grid.1,
        gridDimZ: grid.2,
        blockDimX: block.0,
        blockDimY: block.1,
        blockDimZ: block.2,
        sharedMemBytes: config.shared_mem_bytes,
        hStream: stream.cu_stream(),
        attrs: &mut attribute,
        numAttrs: dependent as u32,
    };
    stream.context().bind_to_thread()?;
    args.with_addresses(|params| {
        // Safety: the caller's contract; `params` points at `args`' fields, which outlive the
        // call (the driver copies the parameters before it returns).
        unsafe {
            sys::cuLaunchKernelEx(
                &launch,
                function.cu_function(),
                params.as_mut_ptr(),
                std::ptr::null_mut(),
            )
        }
        .result()
    })?;
    Ok(())
}

/// The grid's y dimension limit: query heads beyond it go to z.
const MAX_GRID_Y: u32 = 65_535;

/// Words (`u32`) a barrier-counting twin records per block in the barrier log of its launch,
/// indexed by the block's linear index (`launch::record`): the block barriers counted, the KV
/// tiles processed, the SM clock cycles from the start of the KV loop to the end of the
/// epilogue, the SM the block ran on (`record_barriers` in `kernels-rs/src/attention/mod.rs`
/// writes them), then `flash_ws`'s timeline of the block's first work items (`record_event`).
pub const RECORD_WORDS: usize = crate::launch::record::WORDS as usize;

impl Gpu {
    /// Opens device `ordinal`. A machine without the CUDA driver gets `Error::NoDriver`, not a
    /// panic: cudarc aborts when libcuda is missing, so its presence is checked first.
    pub fn open(ordinal: usize) -> Result<Gpu> {
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
        let cubin_dir = std::env::var_os("FLASHRS_CUBIN_DIR").filter(|d| !d.is_empty());
        let code = match cubin_dir {
            Some(dir) => KernelCode::Cubin(ctx.load_module(cubin_image(dir.into(), target, ptx_text)?)?),
            None => KernelCode::Ptx(embedded::EntryModules::embedded(arch).ok_or_else(|| {
                Error::MissingSymbol(format!("the embedded {target} PTX cannot be read into kernels"))
            })?),
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
            dependent_launches: dependent_launches(arch),
            functions: Mutex::new(HashMap::new()),
            decode: Default::default(),
        })
    }

    /// The stream all of this GPU's own work is enqueued on.
    pub fn stream(&self) -> &Arc<CudaStream> {
        &self.stream
    }

    /// The CUDA context of this device.
    pub fn context(&self) -> &Arc<CudaContext> {
        &self.ctx
    }

    /// The kernel of `variant` for `head_dim` and `dtype`, or its barrier-counting twin.
    pub fn kernel(
        &self,
        variant: &'static VariantSpec,
        head_dim: usize,
        dtype: DType,
        counted: bool,
    ) -> Result<Kernel> {
        let symbol = if counted {
            variant.counted_symbol(head_dim, dtype.name())
        } else {
            variant.symbol(head_dim, dtype.name())
        };
        self.kernel_with_symbol(variant, head_dim, dtype, symbol, Entry::Dense, counted)
    }

    /// `kernel` for one of `variant`'s entry points named `symbol` (its own, its counted twin,
    /// or a paged one: `paged.rs`); launch facts from the variant's globals.
    pub(crate) fn kernel_with_symbol(
        &self,
        variant: &'static VariantSpec,
        head_dim: usize,
        dtype: DType,
        symbol: String,
        entry: Entry,
        counted: bool,
    ) -> Result<Kernel> {
        // The launch trusts the variant's tiles, threads and persistence: a copy with other
        // fields (they are public) would describe a kernel other than the one compiled.
        if !variant.is_compiled() {
            return Err(Error::UnknownKernel(format!(
                "{} (a variant that differs from the compiled one of that name)",
                variant.name
            )));
        }
        variant.check_built(counted)?;
        if variant.min_arch > self.arch {
            return Err(Error::Architecture {
                kernel: variant.name,
                needed_arch: variant.min_arch,
                arch: self.arch,
            });
        }
        if !variant.head_dims.contains(&head_dim) {
            return Err(Error::InvalidProblem(format!(
                "{} is compiled for head dims {:?}, not {head_dim}",
                variant.name, variant.head_dims
            )));
        }
        let base = variant.symbol(head_dim, dtype.name());
        let smem_bytes = *self
            .globals
            .get(format!("{base}_smem_bytes").as_str())
            .ok_or_else(|| Error::MissingSymbol(format!("{base}_smem_bytes")))?;
        if smem_bytes > self.max_smem_optin {
            return Err(Error::SharedMemory {
                kernel: base,
                needed: smem_bytes,
                available: self.max_smem_optin,
            });
        }
        let mut functions = self.functions.lock().unwrap_or_else(|e| e.into_inner());
        let function = match functions.get(&symbol) {
            Some(f) => f.clone(),
            None => {
                let f = self.load_function(&symbol)?;
                // Above 48 KiB a block's dynamic shared memory must be opted into per function.
                f.set_attribute(
                    CUfunction_attribute_enum::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                    smem_bytes as i32,
                )?;
                functions.insert(symbol.clone(), f.clone());
                f
            }
        };
        let resident_grid = if variant.persistent {
            let per_sm = function.occupancy_max_active_blocks_per_multiprocessor(
                variant.threads(),
                smem_bytes as usize,
                None,
            )?;
            per_sm.max(1) * self.sm_count as u32
        } else {
            0
        };
        Ok(Kernel {
            variant,
            head_dim,
            dtype,
            symbol,
            smem_bytes,
            resident_grid,
            function,
            entry,
            counted,
        })
    }

    /// A fixed (non-variant) kernel of the module by name, loaded once and then taken from the
    /// cache the variants' kernels share: for the launches that follow every call (the split
    /// decode's combine, the e4m3 V transpose).
    pub(crate) fn cached_function(&self, name: &str) -> Result<CudaFunction> {
        let mut functions = self.functions.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(f) = functions.get(name) {
            return Ok(f.clone());
        }
        let f = self.load_function(name)?;
        functions.insert(name.to_string(), f.clone());
        Ok(f)
    }

    /// As `cached_function`, for a kernel whose blocks take `smem_bytes` of dynamic shared
    /// memory: opted into once, when it is loaded (above 48 KiB the driver needs that).
    pub(crate) fn cached_function_with_shared(&self, name: &str, smem_bytes: u32) -> Result<CudaFunction> {
        let mut functions = self.functions.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(f) = functions.get(name) {
            return Ok(f.clone());
        }
        if smem_bytes > self.max_smem_optin {
            return Err(Error::SharedMemory {
                kernel: name.to_string(),
                needed: smem_bytes,
                available: self.max_smem_optin,
            });
        }
        let f = self.load_function(name)?;
        f.set_attribute(
            CUfunction_attribute_enum::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
            smem_bytes as i32,
        )?;
        functions.insert(name.to_string(), f.clone());
        Ok(f)
    }

    /// A fixed (non-variant) kernel by name, such as `softmax_rows_f16`.
    pub fn function(&self, name: &str) -> Result<CudaFunction> {
        self.cached_function(name)
    }

    /// Loads the kernel `name`: from the cubin, or as its own module cut from the embedded PTX
    /// (which the driver compiles now). Callers cache the result.
    fn load_function(&self, name: &str) -> Result<CudaFunction> {
        let missing = || Error::MissingSymbol(name.to_string());
        match &self.code {
            KernelCode::Cubin(module) => module.load_function(name).map_err(|_| missing()),
            KernelCode::Ptx(modules) => {
                let module = self
                    .ctx
                    .load_module(Ptx::from_src(modules.module(name).ok_or_else(missing)?))?;
                module.load_function(name).map_err(|_| missing())
            }
        }
    }

    /// Copies host data to a new device buffer.
    pub fn upload<T: cudarc::driver::DeviceRepr>(&self, data: &[T]) -> Result<CudaSlice<T>> {
        Ok(self.stream.clone_htod(data)?)
    }

    /// Copies a device buffer back to the host, on the buffer's own stream (so after the work
    /// enqueued on it, including launches on caller-lent tensors); waits for that stream.
    pub fn download<T: cudarc::driver::DeviceRepr + Default + Clone>(
        &self,
        buffer: &CudaSlice<T>,
    ) -> Result<Vec<T>> {
        Ok(buffer.stream().clone_dtoh(buffer)?)
    }

    /// Uploads Q, K and V (the bits of `dtype`) for `shape`, lengths checked, and allocates an
    /// output poisoned with NaN, so that any element a kernel fails to write stays visibly wrong.
    pub fn tensors(&self, shape: Shape, dtype: DType, q: &[u16], k: &[u16], v: &[u16]) -> Result<Tensors> {
        self.tensors_in(Layout::Bhsd, shape, dtype, q, k, v)
    }

    /// As `tensors`, for inputs laid out as `layout` (the output will be too).
    pub fn tensors_in(
        &self,
        layout: Layout,
        shape: Shape,
        dtype: DType,
        q: &[u16],
        k: &[u16],
        v: &[u16],
    ) -> Result<Tensors> {
        shape.validate()?;
        let bytes = dtype.bytes();
        check_bytes("q", std::mem::size_of_val(q), shape.q_len(), bytes, shape)?;
        check_bytes("k", std::mem::size_of_val(k), shape.kv_len(), bytes, shape)?;
        check_bytes("v", std::mem::size_of_val(v), shape.kv_len(), bytes, shape)?;
        Ok(Tensors {
            q: DeviceBuffer::owned(self.upload(q)?),
            k: DeviceBuffer::owned(self.upload(k)?),
            v: DeviceBuffer::owned(self.upload(v)?),
            out: DeviceBuffer::owned(self.upload(&vec![nan(dtype); shape.q_len()])?),
            lse: None,
            shape,
            dtype,
            layout,
            stream: self.stream.clone(),
            maps: None,
            walk_table: None,
        })
    }

    /// Wraps buffers the caller allocated (with another library, or PyTorch through its data
    /// pointers) as [`Tensors`] for `shape`, laid out as `layout`, holding `dtype`. Launches on
    /// them run on `stream`, which must belong to this GPU's context (the caller's own stream, so
    /// that its work and ours stay ordered without a synchronisation). Lengths, alignment, the
    /// shape and the stream's context are checked here and again at every launch; a mismatch is
    /// a typed error. The buffers are never freed by the library.
    ///
    /// # Safety
    /// For as long as the returned `Tensors` lives and until the work it enqueued on `stream` has
    /// completed:
    /// - each `ptr` is a device allocation (or part of one) of this GPU's context that holds at
    ///   least `len` elements of its type from `ptr` on, and stays allocated;
    /// - no other work writes Q, K, V, or reads or writes the output and log-sum-exp, unless it
    ///   is ordered with `stream` (same stream, or events);
    /// - the output and log-sum-exp do not overlap each other or Q, K, V.
    ///
    /// Alignment (16 bytes for Q, K, V and the output, 4 for the log-sum-exp) is checked, not
    /// assumed.
    pub unsafe fn tensors_from_raw(
        &self,
        stream: &Arc<CudaStream>,
        layout: Layout,
        shape: Shape,
        dtype: DType,
        raw: RawTensors,
    ) -> Result<Tensors> {
        shape.validate()?;
        self.check_stream(stream)?;
        let bytes = dtype.bytes();
        let lse_rows = shape.lse_len().ok_or_else(|| too_large(shape))?;
        let tensor_buffers = [
            ("q", raw.q, shape.q_len()),
            ("k", raw.k, shape.kv_len()),
            ("v", raw.v, shape.kv_len()),
            ("out", raw.out, shape.q_len()),
        ];
        for (what, buffer, elements) in tensor_buffers {
            check_buffer(what, buffer.len, 2, Some(elements), bytes, shape)?;
            check_alignment(what, buffer.ptr, TENSOR_ALIGN)?;
        }
        if let Some(lse) = raw.lse {
            check_buffer("lse", lse.len, 4, Some(lse_rows), 4, shape)?;
            check_alignment("lse", lse.ptr, 4)?;
        }
        // Safety: the caller's contract above (allocation, lengths, lifetime, ordering); the
        // lengths were also just checked against the shape.
        let borrow = |raw| unsafe { DeviceBuffer::borrowed(stream, raw) };
        Ok(Tensors {
            q: borrow(raw.q),
            k: borrow(raw.k),
            v: borrow(raw.v),
            out: borrow(raw.out),
            // Safety: as above.
            lse: raw.lse.map(|lse| unsafe { DeviceBuffer::borrowed(stream, lse) }),
            shape,
            dtype,
            layout,
            stream: stream.clone(),
            maps: None,
            walk_table: None,
        })
    }

    /// For work outside `launch` that reads Q, K, V and writes the output on this GPU's own
    /// stream (the lab's cuBLAS and cuTENSOR candidates, its timing): the tensors are on that
    /// stream and their buffers hold what the shape and dtype imply.
    pub fn check_tensors_on_own_stream(&self, tensors: &Tensors) -> Result<()> {
        // Such work is ordered on this GPU's stream only: on tensors of a caller's stream it
        // could run before the caller's writes to them, or race its reads.
        if *tensors.stream != *self.stream {
            return Err(Error::InvalidProblem(
                "these tensors are on a caller's stream: work outside `launch` runs on the GPU's own \
                 stream and needs tensors made there"
                    .into(),
            ));
        }
        let lens = BufferLens {
            q: tensors.q.len(),
            k: tensors.k.len(),
            v: tensors.v.len(),
            out: tensors.out.len(),
            lse: tensors.lse.as_ref().map(|lse| lse.len()),
            barrier_log: None,
            tensor_maps: None,
        };
        check_buffers(tensors.shape, tensors.dtype, lens, 0, false)
    }

    /// Refuses a stream of another context: pointers of one context mean nothing in another.
    fn check_stream(&self, stream: &CudaStream) -> Result<()> {
        if **stream.context() == *self.ctx {
            Ok(())
        } else {
            Err(Error::ForeignStream)
        }
    }

    /// Makes the next launches also write each row's log-sum-exp into the tensors' `lse`
    /// (allocated here, NaN-poisoned).
    pub fn request_lse(&self, tensors: &mut Tensors) -> Result<()> {
        tensors.lse = Some(nan_lse(&tensors.stream, tensors.shape)?);
        Ok(())
    }

    /// Refills the output with NaN before a launch whose every write must be checked.
    pub fn poison(&self, tensors: &mut Tensors) -> Result<()> {
        fill_nan(&tensors.stream, &mut tensors.out, tensors.dtype)
    }

    /// The library's choice for a problem: the first of [`dispatch_candidates`] for this GPU
    /// (`flash_decode` for decode-like problems, else the tuned table's entry for this GPU, dtype,
    /// head dim, sequence-length bucket and mask, written by `tune --save`, else the built-in
    /// `DISPATCH` heuristic).
    pub fn choose(&self, shape: Shape, dtype: DType, causal: bool) -> (&'static VariantSpec, Choice) {
        let candidates = self.dispatch_candidates(shape, dtype, causal);
        // The list always ends with the heuristic's entry; the fallback only keeps this total.
        candidates.first().copied().unwrap_or_else(|| {
            (
                default_variant(shape, causal, self.sm_count, self.arch),
                Choice::Heuristic,
            )
        })
    }

    /// [`dispatch_candidates`] on this GPU.
    pub fn dispatch_candidates(
        &self,
        shape: Shape,
        dtype: DType,
        causal: bool,
    ) -> Vec<(&'static VariantSpec, Choice)> {
        dispatch_candidates(&self.name, self.arch, self.sm_count, shape, dtype, causal)
    }

    /// Attention forward on `tensors` with the named variant, or the library's choice when
    /// `kernel` is `None`. Returns the variant used. Asynchronous: `download` waits.
    pub fn forward(
        &self,
        tensors: &mut Tensors,
        params: Params,
        kernel: Option<&str>,
    ) -> Result<&'static VariantSpec> {
        let variant = match kernel {
            Some(name) => VariantSpec::by_name(name).ok_or_else(|| Error::UnknownKernel(name.to_string()))?,
            None => {
                let (variant, _) = self.choose(tensors.shape, tensors.dtype, params.causal);
                let d = tensors.shape.head_dim;
                if !variant.head_dims.contains(&d) {
                    return Err(Error::InvalidProblem(no_listed_kernel(d)));
                }
                variant
            }
        };
        let kernel = self.kernel(variant, tensors.shape.head_dim, tensors.dtype, false)?;
        self.launch(&kernel, tensors, params, None)?;
        Ok(variant)
    }

    /// Launches `kernel` on the tensors' stream (asynchronously). `barrier_log`, for counted
    /// kernels, holds [`Gpu::barrier_log_len`] words and gets [`RECORD_WORDS`] per block. Every
    /// buffer the kernel gets is checked against the shape, dtype and grid right before the launch.
    pub fn launch(
        &self,
        kernel: &Kernel,
        tensors: &mut Tensors,
        params: Params,
        barrier_log: Option<&mut CudaSlice<u32>>,
    ) -> Result<()> {
        self.launch_with(kernel, tensors, params, barrier_log, DecodeOptions::default())
    }

    /// [`Gpu::launch`] with what `options` fixes of a `flash_decode` launch (its split count,
    /// checked against the problem: [`crate::decode::Plan::forced`]); the default options are
    /// `launch` itself. A forced split count on a kernel of another family is an error. A
    /// counted launch's `barrier_log` is sized by [`Gpu::barrier_log_len`], which knows the
    /// default plan only: with a forced count, size it from [`Gpu::split_plan`]'s grid.
    pub fn launch_with(
        &self,
        kernel: &Kernel,
        tensors: &mut Tensors,
        params: Params,
        barrier_log: Option<&mut CudaSlice<u32>>,
        options: DecodeOptions,
    ) -> Result<()> {
        let shape = tensors.shape;
        params.validate()?;
        kernel.check_launch(Entry::Dense, barrier_log.is_some())?;
        self.check_stream(&tensors.stream)?;
        if tensors.dtype != kernel.dtype {
            return Err(Error::InvalidProblem(format!(
                "kernel {} takes {}, the tensors hold {}",
                kernel.symbol, kernel.dtype, tensors.dtype
            )));
        }
        if shape.head_dim != kernel.head_dim {
            return Err(Error::InvalidProblem(format!(
                "kernel {} is compiled for head dim {}, the problem has {}",
                kernel.symbol, kernel.head_dim, shape.head_dim
            )));
        }
        if kernel.variant.family.fp8() {
            return Err(Error::InvalidProblem(format!(
                "kernel {} takes e4m3 inputs: call it through Gpu::fp8_forward",
                kernel.symbol
            )));
        }
        // The warp-specialised family, and flash_decode through the copy engine, read their
        // tiles through tensor maps built here per call.
        let uses_maps = kernel.variant.family == Family::FlashWs || kernel.variant.copy_engine();
        if uses_maps {
            self.prepare_maps(kernel.variant, tensors)?;
        }
        // flash_decode plans its own grid (key slices) and may need a workspace and a combine.
        let decode = self.decode_plan(kernel, shape, options)?;
        let config = match &decode {
            Some(plan) => plan.grid(kernel.variant.threads(), kernel.smem_bytes),
            None => launch_config(kernel, shape),
        };
        check_buffers(
            shape,
            tensors.dtype,
            BufferLens {
                q: tensors.q.len(),
                k: tensors.k.len(),
                v: tensors.v.len(),
                out: tensors.out.len(),
                lse: tensors.lse.as_ref().map(|lse| lse.len()),
                barrier_log: barrier_log.as_ref().map(|log| log.len()),
                tensor_maps: match &tensors.maps {
                    Some(maps) if uses_maps => Some(maps.len()),
                    _ => None,
                },
            },
            blocks(&config),
            uses_maps,
        )?;
        let seq_major = (tensors.layout == Layout::Bshd) as u32;
        // Key slices: flash_decode's plan, or the persistent flash_ws's tail split.
        let slices = match &decode {
            Some(plan) => KeySlices {
                splits: plan.splits,
                floats: plan.workspace_floats(shape),
                counters: plan.counters(),
            },
            None => KeySlices::tail_split(kernel.variant, shape, params.causal, &config),
        };
        let slice_buffers = self.slice_buffers(slices, &tensors.stream)?;
        let (workspace, split_counters) = slice_buffers.addresses(&tensors.stream);
        // A causal persistent launch walks the host's item table: dealt once per variant, shape
        // and grid, and copied in the tensors' stream's order.
        let has_table = walks_item_table(kernel.variant, params.causal);
        if has_table {
            let table_key = (kernel.variant.name, shape, config.grid_dim.0);
            let (bytes, mut staged) = match tensors.walk_table.take() {
                Some((key, staged)) if key == table_key => (staged.bytes().to_vec(), Some(staged)),
                cached => {
                    let table = causal_item_table(kernel.variant, shape, config.grid_dim.0)
                        .ok_or_else(|| too_large(shape))?;
                    (staging::words_bytes(&table), cached.map(|(_, staged)| staged))
                }
            };
            self.stage(&tensors.stream, bytes, &mut staged)?;
            tensors.walk_table = staged.map(|staged| (table_key, staged));
        }
        let Tensors {
            q,
            k,
            v,
            out,
            lse,
            maps,
            stream,
            walk_table,
            ..
        } = tensors;
        let stream: &CudaStream = stream;
        // The pointers stay valid while these guards live, which is until the launch is enqueued;
        // recording the accesses is cudarc's event tracking, off on this context (`open`).
        let (q_ptr, _q_guard) = q.device_ptr(stream);
        let (k_ptr, _k_guard) = k.device_ptr(stream);
        let (v_ptr, _v_guard) = v.device_ptr(stream);
        let (out_ptr, _out_guard) = out.device_ptr_mut(stream);
        let (lse_ptr, _lse_guard) = optional_ptr_mut(lse.as_deref_mut(), stream);
        let (log_ptr, _log_guard) = optional_ptr_mut(barrier_log, stream);
        let tensor_maps = match maps {
            Some(maps) if uses_maps => maps.address(stream),
            _ => 0,
        };
        let walk_table = match walk_table {
            Some((_, table)) if has_table => table.address(stream),
            _ => 0,
        };
        let args = LaunchArgs {
            q: q_ptr,
            k: k_ptr,
            v: v_ptr,
            out: out_ptr,
            lse: lse_ptr,
            barrier_log: log_ptr,
            tensor_maps,
            seq_q: shape.seq_q as u32,
            seq_k: shape.seq_k as u32,
            scale_log2: params.scale_for(shape.head_dim) * std::f32::consts::LOG2_E,
            causal: params.causal as u32,
            kv_group: shape.kv_group() as u32,
            heads: shape.heads as u32,
            seq_major,
            batch_heads: (shape.batch * shape.heads) as u32,
            kv_splits: slices.splits,
            workspace,
            split_counters,
            // Contiguous K and V: no block table (the paged launch is `paged.rs`).
            ..LaunchArgs::default()
        }
        .walking(ItemWalk {
            table: walk_table,
            ..item_walk(kernel.variant, shape, &config, slices.splits)
        });
        // Safety: the arguments are the kernels' parameter list (kernels-rs/src/launch.rs, the
        // same list the entry points are generated from); every buffer holds exactly the
        // elements the shape, dtype and grid imply (checked just above, after the last change to
        // any of them) and lives in this context (stream checked above); the shape was validated
        // when the tensors were made and cannot change since; the grid covers exactly the blocks
        // the kernel expects for this shape (with a split, flash_decode's or the persistent
        // flash_ws's tail split, the workspace and the zeroed slice counters are the ones
        // `slices` sized for this grid; with a causal persistent flash_ws, the item table is
        // `causal_item_table`'s for this grid); `kernel`'s launch facts cannot be changed outside
        // the crate.
        unsafe { launch_with_args(stream, &kernel.function, config, &args, self.dependent_launches) }
    }

    /// Encodes the tensor maps of Q, K, V and the output for `variant`'s tiles and copies them to the GPU,
    /// unless the copy from the last launch still holds the same bytes (same buffers, shape,
    /// layout, tiles). The copy is ordered on the tensors' stream before the launch that reads it.
    fn prepare_maps(&self, variant: &VariantSpec, tensors: &mut Tensors) -> Result<()> {
        let (shape, layout, dtype) = (tensors.shape, tensors.layout, tensors.dtype);
        let q_map = tma::MapGeometry::q(layout, shape, variant.block_m);
        let kv_map = tma::MapGeometry::kv(layout, shape, variant.block_n);
        let out_map = tma::MapGeometry::out(layout, shape);
        let mut bytes = Vec::with_capacity(tma::MAPS * tma::MAP_BYTES);
        for (geometry, buffer) in [
            (q_map, &tensors.q),
            (kv_map, &tensors.k),
            (kv_map, &tensors.v),
            (out_map, &tensors.out),
        ] {
            let (address, _sync) = buffer.device_ptr(&tensors.stream);
            bytes.extend_from_slice(&geometry.encode(dtype, address)?);
        }
        self.stage(&tensors.stream, bytes, &mut tensors.maps)
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

    /// The length in `u32` of the barrier log that a launch of the counted `kernel` (see
    /// [`Gpu::kernel`]) on a problem of `shape` takes: [`RECORD_WORDS`] per block of its grid,
    /// which for `flash_decode` depends on how this GPU splits the keys. For a paged launch pass
    /// the paged tensors' shape, for a varlen one
    /// [`VarlenTensors::grid_shape`](crate::VarlenTensors::grid_shape).
    pub fn barrier_log_len(&self, kernel: &Kernel, shape: Shape) -> Result<usize> {
        let config = match self.decode_plan(kernel, shape, DecodeOptions::default())? {
            Some(plan) => plan.grid(kernel.variant.threads(), kernel.smem_bytes),
            None => launch_config(kernel, shape),
        };
        RECORD_WORDS
            .checked_mul(blocks(&config))
            .ok_or_else(|| too_large(shape))
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
fn cubin_image(dir: std::path::PathBuf, target: &str, ptx_text: &str) -> Result<Ptx> {
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

/// A causal persistent launch's item table (`causal_item_table`): the variant, shape and grid it
/// was dealt for, and its device copy.
type TableCache = Option<((&'static str, Shape, u32), Staged)>;

/// The NaN bit pattern of `dtype`, for poisoning outputs.
pub fn nan(dtype: DType) -> u16 {
    match dtype {
        DType::F16 => 0x7e00,
        DType::Bf16 => 0x7fc0,
    }
}

/// A log-sum-exp buffer for `shape` on `stream`, NaN until a launch writes it.
pub(crate) fn nan_lse(stream: &Arc<CudaStream>, shape: Shape) -> Result<DeviceBuffer<f32>> {
    let rows = shape.lse_len().ok_or_else(|| too_large(shape))?;
    Ok(DeviceBuffer::owned(stream.clone_htod(&vec![f32::NAN; rows])?))
}

/// Refills `out` with `dtype`'s NaN, in `stream`'s order.
pub(crate) fn fill_nan(stream: &Arc<CudaStream>, out: &mut CudaSlice<u16>, dtype: DType) -> Result<()> {
    stream.memcpy_htod(&vec![nan(dtype); out.len()], out)?;
    Ok(())
}

/// Downloads an output (or any tensor) as f32.
pub fn decode(dtype: DType, bits: &[u16]) -> Vec<f32> {
    bits.iter().map(|&b| dtype.decode(b)).collect()
}

/// The grid for `kernel` on `shape`: `(query blocks, batch * heads)`, or for a persistent
/// variant as many blocks as the GPU holds at once (fewer if there are fewer work items), each
/// walking its share of the `(query block, head)` items.
pub fn launch_config(kernel: &Kernel, shape: Shape) -> LaunchConfig {
    let v = kernel.variant;
    // Heads on y, spilling into z past the 65,535 that y allows; blocks past B*H return at once.
    let heads = (shape.batch * shape.heads) as u32;
    let row_blocks = (shape.seq_q as u32).div_ceil(v.block_m);
    let y = heads.min(MAX_GRID_Y);
    let grid_dim = if v.persistent {
        (
            row_blocks.saturating_mul(heads).min(kernel.resident_grid).max(1),
            1,
            1,
        )
    } else {
        (row_blocks, y, heads.div_ceil(y))
    };
    LaunchConfig {
        grid_dim,
        block_dim: (v.threads(), 1, 1),
        shared_mem_bytes: kernel.smem_bytes,
    }
}

pub(crate) fn blocks(config: &LaunchConfig) -> usize {
    config.grid_dim.0 as usize * config.grid_dim.1 as usize * config.grid_dim.2 as usize
}

/// The lengths of one launch's buffers, as allocated, in elements of their own type: u16 for Q,
/// K, V and the output, f32 for the log-sum-exp, u32 for the barrier log, bytes for the tensor
/// maps.
#[derive(Clone, Copy, Debug)]
struct BufferLens {
    q: usize,
    k: usize,
    v: usize,
    out: usize,
    lse: Option<usize>,
    barrier_log: Option<usize>,
    tensor_maps: Option<usize>,
}

/// Every buffer a launch on `shape` in `dtype` over `blocks` blocks touches holds exactly what the
/// kernels read or write, so that the unsafe launch cannot go past one. Checked right before every
/// launch, not only when the `Tensors` were made, so that no later change (a new log-sum-exp
/// buffer, a barrier log, the tensor maps) goes unchecked. Compared in bytes, so an element type
/// of another size (a future dtype) cannot pass by its element count.
fn check_buffers(shape: Shape, dtype: DType, lens: BufferLens, blocks: usize, uses_maps: bool) -> Result<()> {
    let element = dtype.bytes();
    check_buffer("q", lens.q, 2, shape.checked_q_len(), element, shape)?;
    check_buffer("k", lens.k, 2, shape.checked_kv_len(), element, shape)?;
    check_buffer("v", lens.v, 2, shape.checked_kv_len(), element, shape)?;
    check_buffer("out", lens.out, 2, shape.checked_q_len(), element, shape)?;
    if let Some(lse) = lens.lse {
        check_buffer("lse", lse, 4, shape.lse_len(), 4, shape)?;
    }
    if let Some(log) = lens.barrier_log {
        check_buffer("barrier log", log, 4, RECORD_WORDS.checked_mul(blocks), 4, shape)?;
    }
    match (uses_maps, lens.tensor_maps) {
        (true, Some(maps)) => {
            check_buffer("tensor maps", maps, 1, Some(tma::MAPS * tma::MAP_BYTES), 1, shape)
        }
        (true, None) => Err(Error::Length {
            what: "tensor maps",
            expected: tma::MAPS * tma::MAP_BYTES,
            actual: 0,
            shape: shape.to_string(),
        }),
        (false, _) => Ok(()),
    }
}

/// Checks that a buffer of `actual` elements of `actual_size` bytes holds exactly the `expected`
/// elements of `expected_size` bytes (`None`: a count past `usize`) the shape implies. The error
/// counts in the expected element type.
fn check_buffer(
    what: &'static str,
    actual: usize,
    actual_size: usize,
    expected: Option<usize>,
    expected_size: usize,
    shape: Shape,
) -> Result<()> {
    let expected = expected.ok_or_else(|| too_large(shape))?;
    let expected_bytes = expected
        .checked_mul(expected_size)
        .ok_or_else(|| too_large(shape))?;
    if actual.checked_mul(actual_size) == Some(expected_bytes) {
        Ok(())
    } else {
        Err(Error::Length {
            what,
            expected,
            actual: actual.saturating_mul(actual_size) / expected_size,
            shape: shape.to_string(),
        })
    }
}

/// Refuses the first of `checks` (a buffer's name, its length and the length the problem needs,
/// in elements) whose lengths differ, naming it and the problem (`shape`).
pub(crate) fn check_lens(
    checks: &[(&'static str, usize, usize)],
    shape: &dyn std::fmt::Display,
) -> Result<()> {
    match checks.iter().find(|(_, actual, expected)| actual != expected) {
        Some(&(what, actual, expected)) => Err(Error::Length {
            what,
            expected,
            actual,
            shape: shape.to_string(),
        }),
        None => Ok(()),
    }
}

/// `check_buffer` for Q, K, V handed in as host slices of u16 bits.
fn check_bytes(
    what: &'static str,
    actual_bytes: usize,
    expected: usize,
    element: usize,
    shape: Shape,
) -> Result<()> {
    check_buffer(what, actual_bytes, 1, Some(expected), element, shape)
}

/// The error of a shape whose element count does not fit in memory's address space.
fn too_large(shape: Shape) -> Error {
    Error::InvalidProblem(format!("{shape} has more elements than memory can address"))
}

/// Alignment of Q, K, V and the output: the kernels copy 16 bytes at a time (`cp.async`,
/// vector loads) and TMA needs 16-byte-aligned tensors.
pub(crate) const TENSOR_ALIGN: u64 = 16;

/// The device address of an optional output buffer (0, which the kernels read as "absent") and
/// the guard that keeps it borrowed until the launch is enqueued: the pattern of every launch's
/// LSE and barrier-log buffers.
pub(crate) fn optional_ptr_mut<'a, T>(
    buffer: Option<&'a mut CudaSlice<T>>,
    stream: &'a CudaStream,
) -> (u64, Option<cudarc::driver::SyncOnDrop<'a>>) {
    match buffer {
        Some(buffer) => {
            let (ptr, guard) = buffer.device_ptr_mut(stream);
            (ptr, Some(guard))
        }
        None => (0, None),
    }
}

pub(crate) fn check_alignment(what: &'static str, ptr: u64, align: u64) -> Result<()> {
    if ptr != 0 && ptr.is_multiple_of(align) {
        Ok(())
    } else {
        Err(Error::Misaligned { what, ptr, align })
    }
}

/// The library's choice of variant: by architecture, head dim, how many waves of 128-row query
/// blocks the problem fills, and the mask (the first entry whose architecture the device has, whose
/// `min_waves` the problem reaches and whose mask filter it passes wins). Measured on the H100
/// (evidence/forward/bench_h100.json and docs/history/perf-notes.md). Hopper takes the
/// warp-specialised `flash_ws`, everything else the `mma.sync` kernels.
///
/// | arch | head dim | mask       | >= 4 waves            | >= 1 wave                | less                  |
/// |------|----------|------------|-----------------------|--------------------------|-----------------------|
/// | 90   | 64       | non-causal | ws m192_n128_s2_pp_ov_ps | ws m192_n128_s2_pp_ov_ps from 2048 rows, else ws m128_n128_s2_pp_ov_ps | ws m128_n128_s2_pp_ov |
/// | 90   | 64       | non-causal, 256-row blocks in one or two full rounds | ws m256_n64_s3_pp_ov (whatever the waves) | | |
/// | 90   | 64       | causal     | ws m192_n128_s2_pp_ov_ps | ws m128_n128_s2_pp_ov_ps | ws m128_n128_s2_pp_ov |
/// | 90   | 128      | both       | (as >= 1 wave)        | ws m128_n128_s2_pp_ov_ps | ws m128_n128_s2_pp_ov |
/// | 90   | 256      | both       | (as >= 1 wave)        | ws m128_n80_s2_pp_ov     | ws m128_n80_s2_pp_ov  |
/// | 80   | 64       | both       | (as >= 1 wave)        | mma m128_n64_w4_s2       | mma m64_n64_w4_s2_b3  |
/// | 80   | 128      | both       | (as >= 1 wave)        | mma m128_n32_w4_s3_qsmem | mma m64_n64_w4_s2     |
///
/// Problems from one wave on take the persistent twins (`_ps`, one block per SM walking the work
/// items): since their item loop was made warp-converged, their KV loop is the grid kernels' and
/// the next item's loads run under each item's end: 1-11% faster than the grid at head dims 64 and
/// 128 on the non-causal shapes of one wave or more measured up to 4096 keys, a tie at 8192
/// (evidence/forward/dispatch/persistent-vs-grid/, docs/kernels/flash_ws.md, persistence). Causal
/// problems kept the grid at first: a persistent walk by positions lacks the grid's longest-first
/// order (1.46x slower at (1,16,16384,128)). A causal persistent launch now walks the host's item
/// table instead (`causal_item_table`, the grid's order dealt out ahead): 4-9% faster than the grid
/// at (2,16,4096,128) and (4,16,2048,128), 6-7% at (4,16,2048,64), 1% at (1,16,16384,128)
/// (evidence/forward/dispatch/causal-persistent/), and the README's bench (`PICKS_BENCH`) times it
/// as the pick. Causal problems at head dim 128 take the 128-key tile, not the 176-key one: 3.6-4%
/// faster at (2,16,4096,128) in both dtypes of one set of runs and 6% in another, a tie (0.3%) at
/// (1,16,16384,128) (evidence/forward/dispatch/causal-n128/, docs/kernels/flash_ws.md, tiles per
/// head dim).
///
/// Head dim 64 takes three consumer warpgroups (192-row blocks) from four waves of 128-row blocks
/// on: 6-12% faster non-causal and 10-13% causal at (4,16,2048,64), (2,16,4096,64) and
/// (1,16,8192,64), but 15% slower at (2,8,2048,64), where its 176 blocks fill 132 SMs 1.3 times
/// (evidence/forward/dispatch/three-consumers-d64/, docs/kernels/flash_ws.md, tiles per head dim).
/// Fewer, larger blocks lose to the last wave's idle SMs below about four waves (2.7 waves of
/// 192-row blocks). Since the persistent kernel splits its last round over the idle SMs
/// (`launch::tail_split`) its 192-row twin wins non-causal from one wave on where a head has 2048
/// rows or more: 2-12% faster than the 128-row one at (2,8,2048,64), (1,8,4096,64), (2,16,2048,64)
/// and (3,16,2048,64) in fp16 and bf16, a tie at (1,16,4096,64); at (1,32,1024,64), whose last row
/// block per head is a third full, 11% slower (evidence/forward/dispatch/waves-d64/).
///
/// Ahead of those, non-causal head-dim-64 problems whose 256-row blocks make one or two rounds that
/// keep three quarters of the SMs busy or more (`fills_its_rounds`) take four consumer warpgroups,
/// whose blocks then need no second item or split tail: 1.07-1.18x cuDNN and 2-14% faster than the
/// earlier picks at (2,8,2048,64), (1,8,4096,64), (1,32,1024,64), (2,7,2048,64), (1,13,2048,64),
/// (2,8,2000,64) and (2,8,2048,4096,64), 5% at (4,8,2048,64) (two rounds). At (1,12,2048,64) (96
/// blocks) the 192-row items make exactly one round and win; at four rounds ((4,16,2048,64)) the
/// persistent pick is 5% faster; causal blocks are too uneven for one round
/// (evidence/forward/dispatch/four-consumers-d64/, docs/kernels/flash_ws.md, tiles per head dim).
///
/// Small problems wanted more, smaller blocks before `flash_ws` (at (2,8,512,64) the 128-row tiles
/// give 64 blocks for 132 SMs); on Hopper it now wins there too: at (1,8,2048,128) 30 us against
/// `flash_wgmma`'s 45 (cuDNN 31.6), at (1,8,2048,64) 23 us against `flash_mma`'s 40 (cuDNN 22.6),
/// at (2,8,512,64) 8.2-8.7 us against 9.8 (evidence/forward/dispatch/small-problems/). Among
/// two-consumer kernels at head dim 64 the 128-key ping-pong pair has been ahead since the causal
/// longest-first order, 2-4% at (4,16,2048,64) and (2,16,4096,64)
/// (evidence/forward/dispatch/d64-ping-pong/). At head dim 256 ping-pong pays since the lazy
/// rescale: 4-8% at (2,16,4096,256), a tie at (1,4,2048,256) causal
/// (evidence/forward/dispatch/d256-ping-pong/). The tuned table keeps `flash_mma` for the smallest
/// head-dim-64 problems it measured faster. Decode-like problems go to `flash_decode` first
/// (`Gpu::choose`, src/decode.rs).
pub const DISPATCH: &[DispatchEntry] = &[
    DispatchEntry {
        arch: 90,
        head_dim: 64,
        min_waves: 0,
        min_seq_q: 0,
        non_causal_only: true,
        full_rounds: true,
        kernel: "flash_ws_m256_n64_s3_pp_ov_mbarrier",
    },
    DispatchEntry {
        arch: 90,
        head_dim: 64,
        min_waves: 4,
        min_seq_q: 0,
        non_causal_only: false,
        full_rounds: false,
        kernel: "flash_ws_m192_n128_s2_pp_ov_ps_mbarrier",
    },
    DispatchEntry {
        arch: 90,
        head_dim: 64,
        min_waves: 1,
        min_seq_q: 2048,
        non_causal_only: true,
        full_rounds: false,
        kernel: "flash_ws_m192_n128_s2_pp_ov_ps_mbarrier",
    },
    DispatchEntry {
        arch: 90,
        head_dim: 64,
        min_waves: 1,
        min_seq_q: 0,
        non_causal_only: false,
        full_rounds: false,
        kernel: "flash_ws_m128_n128_s2_pp_ov_ps_mbarrier",
    },
    DispatchEntry {
        arch: 90,
        head_dim: 128,
        min_waves: 1,
        min_seq_q: 0,
        non_causal_only: false,
        full_rounds: false,
        kernel: "flash_ws_m128_n128_s2_pp_ov_ps_mbarrier",
    },
    DispatchEntry {
        arch: 90,
        head_dim: 64,
        min_waves: 0,
        min_seq_q: 0,
        non_causal_only: false,
        full_rounds: false,
        kernel: "flash_ws_m128_n128_s2_pp_ov_mbarrier",
    },
    DispatchEntry {
        arch: 90,
        head_dim: 128,
        min_waves: 0,
        min_seq_q: 0,
        non_causal_only: false,
        full_rounds: false,
        kernel: "flash_ws_m128_n128_s2_pp_ov_mbarrier",
    },
    DispatchEntry {
        arch: 90,
        head_dim: 256,
        min_waves: 1,
        min_seq_q: 0,
        non_causal_only: false,
        full_rounds: false,
        kernel: "flash_ws_m128_n80_s2_pp_ov_mbarrier",
    },
    DispatchEntry {
        arch: 90,
        head_dim: 256,
        min_waves: 0,
        min_seq_q: 0,
        non_causal_only: false,
        full_rounds: false,
        kernel: "flash_ws_m128_n80_s2_pp_ov_mbarrier",
    },
    DispatchEntry {
        arch: 80,
        head_dim: 64,
        min_waves: 1,
        min_seq_q: 0,
        non_causal_only: false,
        full_rounds: false,
        kernel: "flash_mma_m128_n64_w4_s2_light",
    },
    DispatchEntry {
        arch: 80,
        head_dim: 64,
        min_waves: 0,
        min_seq_q: 0,
        non_causal_only: false,
        full_rounds: false,
        kernel: "flash_mma_m64_n64_w4_s2_b3_light",
    },
    DispatchEntry {
        arch: 80,
        head_dim: 128,
        min_waves: 1,
        min_seq_q: 0,
        non_causal_only: false,
        full_rounds: false,
        kernel: "flash_mma_m128_n32_w4_s3_qsmem_light",
    },
    DispatchEntry {
        arch: 80,
        head_dim: 128,
        min_waves: 0,
        min_seq_q: 0,
        non_causal_only: false,
        full_rounds: false,
        kernel: "flash_mma_m64_n64_w4_s2_light",
    },
];

/// Where `Gpu::choose` found its variant.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Choice {
    /// An entry of the tuned table for this GPU.
    Tuned,
    /// The built-in `DISPATCH` table (no tuned entry for this GPU, dtype, head dim, bucket, mask).
    Heuristic,
}

/// Every variant the dispatch weighs for a problem on a GPU named `device` (architecture `arch`
/// x10, `sms` multiprocessors), best first, each once: `flash_decode` when the problem is
/// decode-like, then the tuned table's entry, then the built-in `DISPATCH` entry, each being
/// what the dispatch falls back to when the one before does not apply. Never empty; the first
/// is [`Gpu::choose`]'s pick. `bench` times them all, so the pick is measured beside what it
/// was preferred to.
pub fn dispatch_candidates(
    device: &str,
    arch: u32,
    sms: usize,
    shape: Shape,
    dtype: DType,
    causal: bool,
) -> Vec<(&'static VariantSpec, Choice)> {
    // The tuned table's buckets are by sequence length, which for decode-like problems is the
    // key length alone: they go to flash_decode before the table is asked.
    let decode = crate::decode::DISPATCH
        .then(|| crate::decode::decode_variant(shape, arch, sms))
        .flatten();
    let seq = shape.seq_q.max(shape.seq_k);
    let tuned = builtin_tuned().and_then(|table| {
        table
            .resolve(VARIANTS, device, dtype.name(), shape.head_dim, seq, causal)
            .ok()
            .flatten()
            .filter(|v| v.min_arch <= arch)
    });
    let ranked = decode
        .map(|v| (v, Choice::Heuristic))
        .into_iter()
        .chain(tuned.map(|v| (v, Choice::Tuned)))
        .chain([(default_variant(shape, causal, sms, arch), Choice::Heuristic)]);
    let mut candidates: Vec<(&'static VariantSpec, Choice)> = Vec::with_capacity(3);
    for (variant, source) in ranked {
        if !candidates.iter().any(|(v, _)| v.name == variant.name) {
            candidates.push((variant, source));
        }
    }
    candidates
}

/// The key slices of one launch and what they need: `splits` slices per row block (1: none),
/// `floats` of workspace and `counters` slice counters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct KeySlices {
    pub(crate) splits: u32,
    floats: usize,
    counters: usize,
}

impl KeySlices {
    const NONE: KeySlices = KeySlices {
        splits: 1,
        floats: 0,
        counters: 0,
    };

    /// The tail split (`launch::tail_split`) of a persistent flash_ws or flash_ws_fp8 launch of
    /// `variant` on `shape` over the grid `config`: non-causal problems only, whose items are all
    /// the same size (a causal problem's last round holds its shortest items, whose slices would
    /// save little).
    /// `FLASHRS_TAIL_SPLIT=0` turns it off, for measuring it.
    pub(crate) fn tail_split(
        variant: &VariantSpec,
        shape: Shape,
        causal: bool,
        config: &LaunchConfig,
    ) -> KeySlices {
        let warp_specialised = matches!(variant.family, Family::FlashWs | Family::FlashWsFp8);
        if !warp_specialised || !variant.persistent || causal || !tail_split_enabled() {
            return KeySlices::NONE;
        }
        let Ok(items) = u32::try_from(
            (shape.seq_q as u64).div_ceil(variant.block_m as u64) * (shape.batch * shape.heads) as u64,
        ) else {
            return KeySlices::NONE;
        };
        let grid = config.grid_dim.0;
        let tiles = u32::try_from((shape.seq_k as u64).div_ceil(variant.block_n as u64)).unwrap_or(u32::MAX);
        let splits = tail_split::slices(items, grid, tiles);
        let consumers = variant.block_m / 64;
        KeySlices {
            splits,
            floats: tail_split::workspace_floats(items, grid, splits, consumers, shape.head_dim as u32)
                as usize,
            counters: tail_split::counters(items, grid, splits, consumers) as usize,
        }
    }
}

/// The walk over the work items of a persistent flash_ws or flash_ws_fp8 launch of `variant` on
/// `shape` over the grid `config`, with `splits` slices per item of its last round
/// (`KeySlices::tail_split`); none for every other launch.
pub(crate) fn item_walk(variant: &VariantSpec, shape: Shape, config: &LaunchConfig, splits: u32) -> ItemWalk {
    let warp_specialised = matches!(variant.family, Family::FlashWs | Family::FlashWsFp8);
    if !warp_specialised || !variant.persistent {
        return ItemWalk::default();
    }
    let row_blocks = (shape.seq_q as u32).div_ceil(variant.block_m);
    let batch_heads = (shape.batch * shape.heads) as u32;
    ItemWalk::new(
        row_blocks,
        batch_heads,
        shape.heads as u32,
        config.grid_dim.0,
        splits,
    )
}

/// Whether a launch of `variant` walks an item table (`causal_item_table`): a persistent
/// `flash_ws` on a causal problem. Every other launch walks by positions, or has one item.
pub(crate) fn walks_item_table(variant: &VariantSpec, causal: bool) -> bool {
    variant.family == Family::FlashWs && variant.persistent && causal
}

/// The item table (`launch::item_walk::table`) of a persistent `flash_ws` launch of `variant` on
/// a causal `shape` over `grid` blocks (`walks_item_table`); `None` when the items do not count
/// in a `u32` or there is no block.
///
/// A causal item sees from one tile of keys to all of them, so the positions' walk (block `b`
/// takes items `b, b + grid, ...`) deals the blocks unequal work: 1.46x slower than the grid
/// kernel at (1,16,16384,128) (docs/kernels/flash_ws.md, persistence). The grid kernel's blocks
/// take their items in the longest-first order of `launch::causal_order` as SMs come free; here
/// the host deals that order out the same way ahead of time (list scheduling: each item to the
/// block whose items so far end first, by their KV tiles and a fixed cost per item), so that a
/// persistent block runs the grid kernel's schedule without its per-block start and end
/// (docs/kernels/flash_ws.md, persistence: causal problems walk a table).
pub(crate) fn causal_item_table(variant: &VariantSpec, shape: Shape, grid: u32) -> Option<Vec<u32>> {
    use crate::launch::{causal_order, item_walk::table};
    let (block_m, block_n) = (variant.block_m, variant.block_n);
    let (seq_q, seq_k) = (shape.seq_q as u32, shape.seq_k as u32);
    let row_blocks = seq_q.div_ceil(block_m);
    let batch_heads = u32::try_from(shape.batch * shape.heads).ok()?;
    let items = row_blocks.checked_mul(batch_heads)?;
    let group = causal_order::max_heads_per_group(seq_k, shape.head_dim as u32, shape.kv_group() as u32);
    // The KV tiles of the keys a row block's last row sees.
    let tiles = |row_block: u32| {
        let last_row = (row_block * block_m + block_m).min(seq_q) - 1;
        (shape.causal_key_end(last_row) as u64).div_ceil(block_n as u64)
    };
    let entries = (0..items).map(|item| {
        let (head, row_block) = causal_order::item(item, row_blocks, batch_heads, group);
        ([head, row_block], tiles(row_block))
    });
    dealt_item_table(grid, table::pairs_start(grid), entries)
}

/// An item table (`launch::item_walk::table`) of `entries` (each item's words and its KV tiles)
/// dealt in their order to `grid` blocks by list scheduling: each item to the block whose items so
/// far end first, by their KV tiles and a fixed cost per item. The words: the `grid + 1` offsets,
/// zeros up to `entries_start`, then each block's entries in the order it takes them. `None`
/// without a block or when the items do not count in a `u32`.
pub(crate) fn dealt_item_table<const W: usize>(
    grid: u32,
    entries_start: u32,
    entries: impl Iterator<Item = ([u32; W], u64)>,
) -> Option<Vec<u32>> {
    use std::cmp::Reverse;
    // An item's cost in quarter tiles: its KV tiles and the fixed cost of starting it.
    const QUARTERS_PER_TILE: u64 = 4;
    const ITEM_QUARTERS: u64 = 1;
    let mut ends: std::collections::BinaryHeap<Reverse<(u64, u32)>> =
        (0..grid).map(|b| Reverse((0, b))).collect();
    let mut lists = vec![Vec::new(); grid as usize];
    for (entry, tiles) in entries {
        let Reverse((end, block)) = ends.pop()?;
        lists[block as usize].push(entry);
        ends.push(Reverse((end + QUARTERS_PER_TILE * tiles + ITEM_QUARTERS, block)));
    }
    let items = u32::try_from(lists.iter().map(Vec::len).sum::<usize>()).ok()?;
    let mut words = Vec::with_capacity(entries_start as usize + W * items as usize);
    words.push(0);
    for list in &lists {
        words.push(words.last().copied().unwrap_or(0) + list.len() as u32);
    }
    words.resize(entries_start as usize, 0);
    words.extend(lists.iter().flatten().flatten());
    Some(words)
}

/// The workspace and slice counters of one launch's `KeySlices`: this GPU's cached ones, or, on
/// a caller's stream, the launch's own.
pub(crate) enum SliceBuffers {
    /// The cached workspace and counters (addresses; 0 for none), ordered on this GPU's stream.
    Cached(u64, u64),
    /// Zeroed, allocated and freed (after the launch) in the order of the caller's stream.
    Own(CudaSlice<f32>, CudaSlice<u32>),
}

impl SliceBuffers {
    /// The device addresses of the workspace and the counters.
    pub(crate) fn addresses(&self, stream: &Arc<CudaStream>) -> (u64, u64) {
        match self {
            SliceBuffers::Cached(workspace, counters) => (*workspace, *counters),
            SliceBuffers::Own(partials, counters) => {
                (partials.device_ptr(stream).0, counters.device_ptr(stream).0)
            }
        }
    }
}

impl Gpu {
    /// The buffers `slices` needs for a launch on `stream`. The cached workspace and counters are
    /// ordered on this GPU's stream only, so a caller's stream gets its own.
    pub(crate) fn slice_buffers(&self, slices: KeySlices, stream: &Arc<CudaStream>) -> Result<SliceBuffers> {
        let (floats, counters) = (slices.floats, slices.counters);
        if floats > 0 && **stream != *self.stream {
            return Ok(SliceBuffers::Own(
                stream.alloc_zeros::<f32>(floats)?,
                stream.alloc_zeros::<u32>(counters)?,
            ));
        }
        Ok(SliceBuffers::Cached(
            self.decode_workspace(floats)?,
            self.decode_counters(counters)?,
        ))
    }
}

/// Whether the persistent flash_ws and flash_ws_fp8 split their last round
/// (`KeySlices::tail_split`): yes unless `FLASHRS_TAIL_SPLIT` is `0`, read once.
fn tail_split_enabled() -> bool {
    static ENABLED: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ENABLED.get_or_init(|| std::env::var_os("FLASHRS_TAIL_SPLIT").is_none_or(|v| v != "0"))
}

/// The tuned table, parsed once: the file `FLASHRS_TUNED` names when set (so a fresh
/// `tune --save --table FILE` takes effect without a rebuild), else the one compiled into the
/// library (`tuned/h100.json`; a unit test keeps an unparsable one from shipping). `None` when
/// the named file cannot be read: the heuristic then decides, as for an untuned GPU.
pub(crate) fn builtin_tuned() -> Option<&'static crate::tuned_table::TunedTable> {
    static TABLE: std::sync::OnceLock<Option<crate::tuned_table::TunedTable>> = std::sync::OnceLock::new();
    TABLE
        .get_or_init(|| match std::env::var_os("FLASHRS_TUNED") {
            Some(path) => crate::tuned_table::TunedTable::load(std::path::Path::new(&path)).ok(),
            None => crate::tuned_table::TunedTable::builtin().ok(),
        })
        .as_ref()
}

/// One row of `DISPATCH`.
#[derive(Clone, Copy, Debug)]
pub struct DispatchEntry {
    /// The oldest architecture (x10) the entry applies to.
    pub arch: u32,
    /// The head dim the entry applies to.
    pub head_dim: usize,
    /// At least this many waves of 128-row query blocks (blocks per multiprocessor).
    pub min_waves: usize,
    /// At least this many query rows per head (0: any).
    pub min_seq_q: usize,
    /// The entry applies to non-causal problems only (a causal one reads on to the next).
    pub non_causal_only: bool,
    /// The entry applies only where the picked variant's own blocks (of its `block_m` rows) make
    /// one or two rounds on the multiprocessors that leave at most a quarter of them idle
    /// (`fills_its_rounds`).
    pub full_rounds: bool,
    /// The variant the entry picks, by name.
    pub kernel: &'static str,
}

/// Why the dispatch has nothing for head dim `d`: only experimental variants have it (they run
/// when named).
fn no_listed_kernel(d: usize) -> String {
    let named: Vec<&str> = crate::variants::EXPERIMENTAL_VARIANTS
        .iter()
        .filter(|v| v.head_dims.contains(&d))
        .map(|v| v.name)
        .collect();
    format!(
        "head dim {d} has no tested kernel yet; experimental variants that have it, run only when named: {}",
        named.join(", ")
    )
}

/// `shape`'s blocks of `block_m` query rows, over every batch and head.
fn query_blocks(shape: Shape, block_m: usize) -> usize {
    shape.seq_q.div_ceil(block_m) * shape.batch * shape.heads
}

/// Whether `shape`'s blocks of `block_m` query rows make one or two rounds on `sms`
/// multiprocessors that leave at most a quarter of them idle: then no round is a short tail that
/// a persistent kernel would have to split.
fn fills_its_rounds(shape: Shape, block_m: usize, sms: usize) -> bool {
    let blocks = query_blocks(shape, block_m);
    let rounds = blocks.div_ceil(sms);
    rounds <= 2 && 4 * blocks >= 3 * rounds * sms
}

/// The variant `DISPATCH` picks for `shape` on a GPU with `sms` multiprocessors whose PTX is
/// architecture `arch` (80 or 90).
pub fn default_variant(shape: Shape, causal: bool, sms: usize, arch: u32) -> &'static VariantSpec {
    let blocks = query_blocks(shape, 128);
    DISPATCH
        .iter()
        .filter(|e| {
            e.arch <= arch
                && e.head_dim == shape.head_dim
                && blocks >= e.min_waves * sms
                && shape.seq_q >= e.min_seq_q
                && !(causal && e.non_causal_only)
        })
        .filter_map(|e| Some((e, VariantSpec::by_name(e.kernel)?)))
        .find(|(e, v)| !e.full_rounds || fills_its_rounds(shape, v.block_m as usize, sms))
        .map(|(_, v)| v)
        .or_else(|| {
            crate::variants::built(VARIANTS)
                .find(|v| v.family == Family::FlashMma && v.head_dims.contains(&shape.head_dim))
        })
        // A head dim only a newer architecture's family has (256 on sm_80): that variant, so that
        // the launch fails with the architecture it needs rather than a wrong head dim.
        .or_else(|| crate::variants::built(VARIANTS).find(|v| v.head_dims.contains(&shape.head_dim)))
        .unwrap_or(&VARIANTS[0])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn causal_item_table_deals_every_item_once_and_evenly() {
        use crate::launch::item_walk::table;
        let persistent = VariantSpec::by_name("flash_ws_m128_n128_s2_pp_ov_ps_mbarrier").unwrap();
        let cross = Shape {
            seq_q: 300,
            seq_k: 1000,
            ..Shape::new(2, 3, 0, 128).with_heads_kv(1)
        };
        for (shape, grid) in [
            (Shape::new(2, 16, 4096, 128), 132u32),
            (Shape::new(1, 3, 1000, 128), 5),
            (cross, 4),
            (Shape::new(1, 1, 1, 128), 1),
        ] {
            let words = causal_item_table(persistent, shape, grid).unwrap();
            let row_blocks = (shape.seq_q as u32).div_ceil(persistent.block_m);
            let heads = (shape.batch * shape.heads) as u32;
            let items = row_blocks * heads;
            assert_eq!(words.len(), table::words(grid, items), "{shape}");
            let offsets = &words[..=grid as usize];
            assert_eq!((offsets[0], offsets[grid as usize]), (0, items), "{shape}");
            assert!(offsets.windows(2).all(|w| w[0] <= w[1]), "{shape}");
            let pairs: Vec<[u32; 2]> = words[table::pairs_start(grid) as usize..]
                .chunks(2)
                .map(|p| [p[0], p[1]])
                .collect();
            let mut seen = vec![false; items as usize];
            for &[head, row_block] in &pairs {
                assert!(head < heads && row_block < row_blocks, "{shape}");
                let at = (head * row_blocks + row_block) as usize;
                assert!(!seen[at], "{shape}: item ({head}, {row_block}) twice");
                seen[at] = true;
            }
            assert!(seen.iter().all(|&s| s), "{shape}");
            // No block's work past the lightest's by more than the longest item (list
            // scheduling's bound), in the table's cost (quarter tiles; a self-attention row
            // block `r` of 128 rows sees `r + 1` tiles of 128 keys).
            if shape.seq_q == shape.seq_k {
                let cost = |row_block: u32| 4 * (row_block as usize + 1) + 1;
                let loads: Vec<usize> = offsets
                    .windows(2)
                    .map(|w| {
                        pairs[w[0] as usize..w[1] as usize]
                            .iter()
                            .map(|p| cost(p[1]))
                            .sum()
                    })
                    .collect();
                let (least, most) = (loads.iter().min().unwrap(), loads.iter().max().unwrap());
                assert!(
                    most - least <= cost(row_blocks - 1),
                    "{shape}: loads {least}..{most}"
                );
            }
        }
        assert!(walks_item_table(persistent, true));
        assert!(!walks_item_table(persistent, false));
        let grid_kernel = VariantSpec::by_name("flash_ws_m128_n128_s2_pp_ov_mbarrier").unwrap();
        assert!(!walks_item_table(grid_kernel, true));
    }

    /// The bench run the README's results table comes from (`scripts/readme_table.py`).
    const PICKS_BENCH: &str = "evidence/forward/bench_h200.json";

    /// The README's column of the library's picks is what this tree's dispatch picks on that
    /// bench's GPU (variant, and whether the tuned table chose it), with the speed relative to
    /// cuDNN that the bench measured for that variant in the same run. Checked against the
    /// dispatch rather than the run's record of its pick, which a later change to the dispatch or
    /// the tuned table leaves stale: such a change fails here until the bench is run again.
    #[test]
    fn the_readme_shows_the_picks_this_dispatch_makes_as_the_bench_measured_them() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
        let read = |path: &str| std::fs::read_to_string(root.join(path)).unwrap();
        let readme = read("README.md");
        assert!(
            readme.contains(PICKS_BENCH),
            "the README names the file its picks come from"
        );
        let bench: serde_json::Value = serde_json::from_str(&read(PICKS_BENCH)).unwrap();
        let gpu_name = bench["gpu"].as_str().unwrap();
        let results = bench["results"].as_array().unwrap();
        let cases = bench["summary"].as_array().unwrap();
        assert!(!cases.is_empty());
        for case in cases {
            let dims: [usize; 4] = serde_json::from_value(case["shape"].clone()).unwrap();
            let causal = case["causal"].as_bool().unwrap();
            let shape = Shape {
                seq_k: case["seq_k"].as_u64().unwrap() as usize,
                heads_kv: case["heads_kv"].as_u64().unwrap() as usize,
                ..Shape::new(dims[0], dims[1], dims[2], dims[3])
            };
            // The run's GPU: an H200 (132 multiprocessors) loading the sm_90a PTX; the tuned
            // table is the library's (`FLASHRS_TUNED` would replace it here as in `choose`).
            let (variant, how) = dispatch_candidates(gpu_name, 90, 132, shape, DType::F16, causal)[0];
            let picked = variant.name;
            let p50 = |kernel: &str| {
                results
                    .iter()
                    .find(|r| {
                        r["kernel"] == kernel
                            && r["dtype"] == "float16"
                            && ["shape", "seq_k", "heads_kv", "causal"]
                                .iter()
                                .all(|k| r[k] == case[k])
                    })
                    .and_then(|r| r["p50_us"].as_f64())
                    .unwrap_or_else(|| {
                        panic!(
                            "{PICKS_BENCH} has no time of {kernel} on {shape} causal={causal}: bench again"
                        )
                    })
            };
            let ratio = p50("torch_cudnn") / p50(picked);
            let tuned_note = if how == Choice::Tuned { " (tuned)" } else { "" };
            let [b, h, s, d] = dims;
            let row_start = format!("| ({b}, {h}, {s}, {d}) | {} |", if causal { "yes" } else { "no" });
            let row = readme
                .lines()
                .find(|line| line.starts_with(&row_start))
                .unwrap_or_else(|| panic!("the README's results table has no row {row_start}"));
            let cell = format!("| `{picked}`{tuned_note}, {ratio:.2}x |");
            assert!(row.ends_with(&cell), "{row}\n should end with {cell}");
        }
    }

    #[test]
    fn dispatch_candidates_start_with_the_pick_and_end_with_the_heuristic() {
        let h100 =
            |shape: Shape| dispatch_candidates("NVIDIA H100 80GB HBM3", 90, 132, shape, DType::F16, false);
        let decode = Shape {
            seq_q: 1,
            ..Shape::new(1, 32, 32768, 128)
        };
        let chunk = Shape {
            seq_q: 128,
            ..Shape::new(4, 32, 4096, 128)
        };
        for shape in [decode, decode.with_heads_kv(8), chunk, Shape::new(2, 8, 512, 64)] {
            let candidates = h100(shape);
            let names: Vec<&str> = candidates.iter().map(|(v, _)| v.name).collect();
            let mut unique = names.clone();
            unique.dedup();
            assert_eq!(unique.len(), names.len(), "{shape}: {names:?}");
            let last = candidates.last().unwrap();
            assert_eq!(
                last.0.name,
                default_variant(shape, false, 132, 90).name,
                "{shape}"
            );
            assert!(candidates
                .iter()
                .all(|(v, _)| v.head_dims.contains(&shape.head_dim)));
        }
        // A decode step goes to flash_decode first, and the regular kernel it was preferred to
        // is a candidate too.
        let one = h100(decode);
        assert_eq!(
            one[0],
            (
                crate::decode::decode_variant(decode, 90, 132).unwrap(),
                Choice::Heuristic
            )
        );
        assert!(
            one.iter().any(|(v, _)| v.family != Family::FlashDecode),
            "{one:?}"
        );
        // A prefill chunk has too many rows for flash_decode: none is weighed.
        assert!(h100(chunk).iter().all(|(v, _)| v.family != Family::FlashDecode));
    }

    #[test]
    fn dispatch_names_compiled_variants_for_their_head_dims_and_arch() {
        for e in DISPATCH {
            let v = VariantSpec::by_name(e.kernel)
                .unwrap_or_else(|| panic!("{} is not in kernels.toml", e.kernel));
            assert!(
                v.head_dims.contains(&e.head_dim),
                "{} lacks head dim {}",
                e.kernel,
                e.head_dim
            );
            assert!(v.min_arch <= e.arch, "{} needs sm_{}", e.kernel, v.min_arch);
        }
        for arch in [80, 90] {
            for &d in crate::variants::HEAD_DIMS {
                for big in [false, true] {
                    let shape = Shape::new(if big { 8 } else { 1 }, 16, 4096, d);
                    let v = default_variant(shape, big, 132, arch);
                    if !VARIANTS.iter().any(|v| v.head_dims.contains(&d)) {
                        // Only experimental variants have this head dim: `forward` says so.
                        assert!(no_listed_kernel(d).contains("flash_ws"), "d={d}");
                        continue;
                    }
                    if !VARIANTS
                        .iter()
                        .any(|v| v.min_arch <= arch && v.head_dims.contains(&d))
                    {
                        // Only a newer architecture has this head dim: its variant, so that the
                        // launch names the architecture needed.
                        assert!(
                            v.head_dims.contains(&d) && v.min_arch > arch,
                            "{} for d={d}",
                            v.name
                        );
                        continue;
                    }
                    assert!(
                        v.min_arch <= arch && v.head_dims.contains(&d),
                        "{} for d={d} sm_{arch}",
                        v.name
                    );
                    assert!(
                        v.family != Family::Naive,
                        "no entry for d={d} big={big} sm_{arch}"
                    );
                }
            }
        }
    }

    #[test]
    fn hopper_takes_the_warp_specialised_kernel_for_big_problems_and_others_mma() {
        let big = Shape::new(2, 16, 4096, 128);
        assert_eq!(default_variant(big, false, 132, 90).family, Family::FlashWs);
        assert_eq!(
            default_variant(big, false, 132, 80).name,
            "flash_mma_m128_n32_w4_s3_qsmem_light"
        );
        // From one wave on the persistent twins (causal ones walk the host's item table, in the
        // grid's longest-first order). Head dim 64: three consumer warpgroups from four waves of
        // 128-row blocks on. Below one wave the grid kernel (a persistent block would have one item).
        let cases = [
            (
                (2, 16, 4096, 128, false),
                "flash_ws_m128_n128_s2_pp_ov_ps_mbarrier",
            ),
            (
                (2, 16, 4096, 128, true),
                "flash_ws_m128_n128_s2_pp_ov_ps_mbarrier",
            ),
            (
                (2, 16, 4096, 64, false),
                "flash_ws_m192_n128_s2_pp_ov_ps_mbarrier",
            ),
            ((2, 16, 4096, 64, true), "flash_ws_m192_n128_s2_pp_ov_ps_mbarrier"),
            // One or two rounds of 256-row blocks that keep three quarters of the SMs busy or
            // more: four consumers, no split tail (128 blocks here, 256 at (4,8,2048,64); 64 at
            // (1,8,2048,64) and 96 at (1,12,2048,64) leave too many SMs idle, 512 at
            // (4,16,2048,64) are four rounds). Non-causal only.
            ((2, 8, 2048, 64, false), "flash_ws_m256_n64_s3_pp_ov_mbarrier"),
            ((1, 8, 4096, 64, false), "flash_ws_m256_n64_s3_pp_ov_mbarrier"),
            ((1, 32, 1024, 64, false), "flash_ws_m256_n64_s3_pp_ov_mbarrier"),
            ((4, 8, 2048, 64, false), "flash_ws_m256_n64_s3_pp_ov_mbarrier"),
            ((1, 8, 2048, 64, false), "flash_ws_m128_n128_s2_pp_ov_mbarrier"),
            // From one wave on, at 2048 rows or more, the 192-row twin (its last round split).
            (
                (1, 12, 2048, 64, false),
                "flash_ws_m192_n128_s2_pp_ov_ps_mbarrier",
            ),
            (
                (4, 16, 2048, 64, false),
                "flash_ws_m192_n128_s2_pp_ov_ps_mbarrier",
            ),
            ((2, 8, 2048, 64, true), "flash_ws_m128_n128_s2_pp_ov_ps_mbarrier"),
            ((2, 8, 512, 64, true), "flash_ws_m128_n128_s2_pp_ov_mbarrier"),
            ((1, 8, 2048, 128, false), "flash_ws_m128_n128_s2_pp_ov_mbarrier"),
            ((2, 16, 4096, 256, false), "flash_ws_m128_n80_s2_pp_ov_mbarrier"),
            ((2, 16, 4096, 256, true), "flash_ws_m128_n80_s2_pp_ov_mbarrier"),
        ];
        for ((b, h, s, d, causal), expected) in cases {
            let shape = Shape::new(b, h, s, d);
            assert_eq!(
                default_variant(shape, causal, 132, 90).name,
                expected,
                "{shape} causal={causal}"
            );
        }
    }

    /// The sizes of the parameters PTX entry `name` declares, in order.
    fn declared_param_bytes(ptx: &str, name: &str) -> Vec<usize> {
        let header = format!(".visible .entry {name}(");
        let start = ptx.find(&header).unwrap_or_else(|| panic!("no entry {name}")) + header.len();
        let list = &ptx[start..start + ptx[start..].find(')').expect("parameter list closes")];
        list.split(',')
            .map(|param| {
                let ty = param
                    .split_whitespace()
                    .nth(1)
                    .unwrap_or_else(|| panic!("{name}: {param}"));
                match ty {
                    ".u64" | ".b64" | ".s64" => 8,
                    ".u32" | ".b32" | ".s32" | ".f32" => 4,
                    other => panic!("{name}: unexpected parameter type {other}"),
                }
            })
            .collect()
    }

    /// Host and device build the argument list from the same declaration, but the device's is
    /// what the PTX says: every entry point of every variant (and its counted twin) must declare
    /// exactly the parameters `launch` pushes.
    #[test]
    fn every_kernel_declares_the_launch_parameters() {
        let mut checked = 0;
        for (_, arch, ptx) in embedded::modules() {
            for v in crate::variants::built(VARIANTS).filter(|v| v.min_arch <= arch) {
                for &d in v.head_dims {
                    for dtype in crate::variants::DTYPES {
                        let twins = [false, true].into_iter().filter(|&c| !c || v.counted_built);
                        let paged = twins.clone().map(|counted| v.paged_symbol(d, dtype, counted));
                        let varlen = twins.clone().map(|counted| v.varlen_symbol(d, dtype, counted));
                        let plain = twins.map(|counted| match counted {
                            true => v.counted_symbol(d, dtype),
                            false => v.symbol(d, dtype),
                        });
                        for symbol in plain.chain(paged.flatten()).chain(varlen.flatten()) {
                            assert_eq!(
                                declared_param_bytes(ptx, &symbol),
                                LaunchArgs::PARAM_BYTES,
                                "{symbol} on sm_{arch}"
                            );
                            checked += 1;
                        }
                    }
                }
            }
        }
        assert!(checked > 40, "only {checked} entry points checked");
    }

    #[test]
    fn launch_args_pass_pointers_and_scalars_at_their_own_sizes() {
        // Pointers as u64 (q, k, v, out; lse and the barrier log; the tensor maps; the decode
        // workspace and its slice counters; the block table and lengths; the varlen prefix sums;
        // the e4m3 descales; the item walk's table) and the item walk's three divisors as u64,
        // the scalars as 32 bits: a field's type changing silently would change every kernel's
        // signature.
        let bytes = LaunchArgs::PARAM_BYTES;
        assert_eq!(bytes.len(), 31);
        assert_eq!(bytes.iter().filter(|&&b| b == 8).count(), 18);
        assert_eq!(bytes.iter().filter(|&&b| b == 4).count(), 13);
    }

    fn lens_for(shape: Shape) -> BufferLens {
        BufferLens {
            q: shape.q_len(),
            k: shape.kv_len(),
            v: shape.kv_len(),
            out: shape.q_len(),
            lse: Some(shape.batch * shape.heads * shape.seq_q),
            barrier_log: Some(RECORD_WORDS * 6),
            tensor_maps: Some(tma::MAPS * tma::MAP_BYTES),
        }
    }

    /// What `check_buffers` says about `lens`: `None` when it accepts them, else the buffer
    /// its length error names (any other error fails the test).
    fn refused(shape: Shape, lens: BufferLens, uses_maps: bool) -> Option<&'static str> {
        match check_buffers(shape, DType::F16, lens, 6, uses_maps) {
            Ok(()) => None,
            Err(Error::Length { what, .. }) => Some(what),
            Err(other) => panic!("not a length error: {other}"),
        }
    }

    #[test]
    fn buffers_are_checked_against_the_shape_before_a_launch() {
        let shape = Shape {
            seq_k: 80,
            ..Shape::new(2, 4, 100, 64).with_heads_kv(2)
        };
        let exact = lens_for(shape);
        assert_eq!(refused(shape, exact, true), None);
        let bare = BufferLens {
            lse: None,
            barrier_log: None,
            tensor_maps: None,
            ..exact
        };
        assert_eq!(refused(shape, bare, false), None);
        // Every buffer one element short, and one element long (a buffer made for another shape
        // is refused either way), names itself.
        for delta in [-1isize, 1] {
            let off = |n: usize| n.checked_add_signed(delta).unwrap();
            let wrong: [(&str, BufferLens); 7] = [
                (
                    "q",
                    BufferLens {
                        q: off(exact.q),
                        ..exact
                    },
                ),
                (
                    "k",
                    BufferLens {
                        k: off(exact.k),
                        ..exact
                    },
                ),
                (
                    "v",
                    BufferLens {
                        v: off(exact.v),
                        ..exact
                    },
                ),
                (
                    "out",
                    BufferLens {
                        out: off(exact.out),
                        ..exact
                    },
                ),
                (
                    "lse",
                    BufferLens {
                        lse: exact.lse.map(off),
                        ..exact
                    },
                ),
                (
                    "barrier log",
                    BufferLens {
                        barrier_log: exact.barrier_log.map(off),
                        ..exact
                    },
                ),
                (
                    "tensor maps",
                    BufferLens {
                        tensor_maps: exact.tensor_maps.map(off),
                        ..exact
                    },
                ),
            ];
            for (what, lens) in wrong {
                assert_eq!(refused(shape, lens, true), Some(what), "{what} off by {delta}");
            }
        }
        // The warp-specialised kernels read tensor maps: a launch without them is refused.
        assert_eq!(
            refused(
                shape,
                BufferLens {
                    tensor_maps: None,
                    ..exact
                },
                true
            ),
            Some("tensor maps")
        );
        // Buffers of the grouped-query shape's Q size given for K (kv heads ignored) are refused.
        assert_eq!(
            refused(
                shape,
                BufferLens {
                    k: shape.q_len(),
                    ..exact
                },
                false
            ),
            Some("k")
        );
    }

    #[test]
    fn counts_past_usize_are_errors_not_wrapped_lengths() {
        // A shape whose element count wraps to a small number must not accept a small buffer.
        let huge = Shape {
            batch: usize::MAX / 2 + 1,
            ..Shape::new(1, 2, 1, 64)
        };
        assert_eq!(huge.checked_q_len(), None);
        let small = BufferLens {
            q: huge.q_len(),
            k: huge.kv_len(),
            v: huge.kv_len(),
            out: huge.q_len(),
            lse: None,
            barrier_log: None,
            tensor_maps: None,
        };
        assert!(matches!(
            check_buffers(huge, DType::F16, small, 1, false),
            Err(Error::InvalidProblem(_))
        ));
        assert!(huge.validate().is_err());
    }

    #[test]
    fn caller_pointers_must_be_aligned_and_not_null() {
        assert!(check_alignment("q", 0x7f00_0000_0100, TENSOR_ALIGN).is_ok());
        for ptr in [0, 0x7f00_0000_0102, 0x7f00_0000_0108] {
            match check_alignment("q", ptr, TENSOR_ALIGN) {
                Err(Error::Misaligned {
                    what: "q", align: 16, ..
                }) => {}
                other => panic!("{ptr:#x}: {other:?}"),
            }
        }
        assert!(check_alignment("lse", 0x7f00_0000_0104, 4).is_ok());
    }

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

    #[test]
    fn small_problems_get_small_blocks_except_on_hopper() {
        let small = Shape::new(2, 8, 512, 64);
        assert_eq!(
            default_variant(small, false, 132, 80).name,
            "flash_mma_m64_n64_w4_s2_b3_light"
        );
        // flash_ws beats the small-block kernels at small sizes too (the table's documentation).
        for d in [64, 128] {
            for shape in [Shape::new(2, 8, 512, d), Shape::new(1, 8, 2048, d)] {
                assert_eq!(
                    default_variant(shape, false, 132, 90).name,
                    "flash_ws_m128_n128_s2_pp_ov_mbarrier",
                    "{shape}"
                );
            }
        }
    }
}
