//! A variant resolved for one head dim and dtype on an open GPU: its entry point, loaded once, and the launch facts the PTX declares for it.

use crate::gpu::{Gpu, KernelCode};

use cudarc::driver::sys::CUfunction_attribute_enum;
use cudarc::driver::CudaFunction;
use cudarc::nvrtc::Ptx;

use crate::error::{Error, Result};
use crate::problem::DType;
use crate::variants::VariantSpec;

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

impl Gpu {
    lab_pub! {
        /// The kernel of `variant` for `head_dim` and `dtype`, or its barrier-counting twin.
        fn kernel(
            &self,
            variant: &'static VariantSpec,
            head_dim: usize,
            dtype: DType,
            counted: bool,
        ) -> Result<Kernel> {
            // A padded head dim's flash_ws entry point is the one of the head dim that pads it.
            let head_dim = variant.entry_head_dim(head_dim);
            let symbol = if counted {
                variant.counted_symbol(head_dim, dtype.name())
            } else {
                variant.symbol(head_dim, dtype.name())
            };
            self.kernel_with_symbol(variant, head_dim, dtype, symbol, Entry::Dense, counted)
        }
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

    lab_pub! {
        /// A fixed (non-variant) kernel by name, such as `softmax_rows_f16`.
        fn function(&self, name: &str) -> Result<CudaFunction> {
            self.cached_function(name)
        }
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
}
