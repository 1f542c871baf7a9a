//! The library's errors: each says what is wrong in terms of the user's input.

use std::fmt;
use std::path::PathBuf;

use thiserror::Error;

/// Everything the library refuses or fails at. `Debug` prints the same one line as `Display`, so
/// that `fn main() -> Result<(), flashrs::Error>` ends with `Error: <what went wrong>` rather than
/// the variant's structure; match on the variants for the details.
#[derive(Error)]
pub enum Error {
    /// libcuda could not be loaded: the machine has no NVIDIA driver.
    #[error("no CUDA driver found (libcuda could not be loaded): this needs a machine with an NVIDIA GPU and its driver")]
    NoDriver,
    /// No usable device: the ordinal is past the device count, or the GPU is older than sm_80.
    #[error("no CUDA device: {0}")]
    NoDevice(String),
    /// The shape or parameters cannot be run (a zero dim, more elements than memory can
    /// address, a kernel compiled for other head dims or dtype); the message says which.
    #[error("invalid problem: {0}")]
    InvalidProblem(String),
    /// The head dim (first) is not one the kernels are compiled for (second: the compiled ones),
    /// nor one the sm_90 dense and varlen forward run padded on the next compiled one
    /// ([`kernel_head_dim`](crate::problem::kernel_head_dim)) where the call could take that.
    #[error("unsupported head dim {0}: the kernels are compiled for {1:?}; the dense and varlen forward on sm_90 also take any other multiple of 8 up to 256")]
    UnsupportedHeadDim(usize, &'static [usize]),
    /// No compiled variant has this name.
    #[error("unknown kernel `{0}`: run `list` for the compiled variants")]
    UnknownKernel(String),
    /// The variant is in `kernels.toml` but not in this build: only the shipped variants (the
    /// dispatch's picks) are compiled by default, and instrumentation twins only on request.
    #[error("kernel {kernel} is not in this build: rebuild with FLASHRS_VARIANTS={name} (or FLASHRS_VARIANTS=all) to compile it")]
    NotBuilt {
        /// What is missing.
        kernel: String,
        /// The variant's name, for the rebuild hint.
        name: &'static str,
    },
    /// A buffer holds the wrong number of elements for the shape.
    #[error("{what}: expected {expected} elements for shape {shape}, got {actual}")]
    Length {
        /// Which buffer (`"q"`, `"out"`, `"host data"`, ...).
        what: &'static str,
        /// Elements the shape implies.
        expected: usize,
        /// Elements the buffer holds, counted in the expected element type.
        actual: usize,
        /// The shape the count was derived from, as text.
        shape: String,
    },
    /// The kernel needs more shared memory per block than the device's opt-in maximum.
    #[error(
        "kernel {kernel} needs {needed} bytes of shared memory per block, the device allows {available}"
    )]
    SharedMemory {
        /// The kernel's PTX symbol (variant, head dim, dtype).
        kernel: String,
        /// Shared memory the kernel needs per block, in bytes.
        needed: u32,
        /// The device's opt-in maximum per block, in bytes.
        available: u32,
    },
    /// The variant needs a newer architecture than the device's PTX targets.
    #[error("kernel {kernel} needs compute capability {needed_arch} (sm_{needed_arch}a for wgmma); this device's PTX is sm_{arch}")]
    Architecture {
        /// The variant's name.
        kernel: &'static str,
        /// The oldest compute capability (x10, e.g. 90) that has the variant.
        needed_arch: u32,
        /// The compute capability (x10) of the PTX this device loaded: 80 or 90.
        arch: u32,
    },
    /// The embedded PTX has no symbol by this name: the build and the variant table disagree.
    #[error("the embedded PTX lacks `{0}`: the build and the variant table disagree")]
    MissingSymbol(String),
    /// A device pointer is not aligned as the kernels need.
    #[error("{what}: device address {ptr:#x} is not aligned to {align} bytes")]
    Misaligned {
        /// Which buffer.
        what: &'static str,
        /// Its device address.
        ptr: u64,
        /// The alignment it needs, in bytes.
        align: u64,
    },
    /// A caller's device pointer is null.
    #[error("{what}: the device pointer is null")]
    NullPointer {
        /// Which buffer.
        what: &'static str,
    },
    /// A caller's tensor has strides no kernel reads: D's is not 1, or another is negative or not
    /// a multiple of 8 elements (16 bytes, the copy engine's rule).
    #[error("{what}: strides {strides:?} for dims [B, H, S, D] = {dims:?}: the kernels need D's stride 1 and the others positive multiples of 8 elements (16 bytes)")]
    NotContiguous {
        /// Which tensor.
        what: &'static str,
        /// Its logical dims `[B, H, S, D]`.
        dims: [usize; 4],
        /// Its element strides, in the order of `dims`.
        strides: [i64; 4],
    },
    /// A stream handed in belongs to another CUDA context than the `Gpu`'s.
    #[error(
        "the stream belongs to another CUDA context than the GPU's: buffers and launches must share one"
    )]
    ForeignStream,
    /// The tensors of one call do not fit together (layouts, batch, head dim or heads differ).
    #[error("incompatible tensors: {0}")]
    Incompatible(String),
    /// A tensor was allocated on another `Gpu` than the one running the call.
    #[error("{what} was made on another Gpu than the one asked to run the call: each Gpu orders its work on its own stream")]
    OtherGpu {
        /// Which tensor (`"q"`, `"k"`, ...).
        what: &'static str,
    },
    /// Prebuilt cubins (`GpuOptions::cubin_dir`, `FLASHRS_CUBIN_DIR`) could not be read or do
    /// not match the embedded PTX.
    #[error("prebuilt kernels (FLASHRS_CUBIN_DIR): {0}")]
    Cubin(String),
    /// The tuned table a `Gpu` was asked to consult (`GpuOptions::tuned_table`, `FLASHRS_TUNED`)
    /// cannot be read or is not a valid table.
    #[error("{0} (FLASHRS_TUNED)")]
    Tuned(#[from] TunedError),
    /// A CUDA driver call failed (a launch, a copy, an allocation, a fault while running).
    #[error("CUDA driver error: {0}")]
    Driver(#[from] cudarc::driver::DriverError),
}

impl Error {
    /// Whether the GPU or its driver failed while running work (a CUDA fault, a failed launch or
    /// copy, out of device memory), as opposed to input the library refuses or a machine without
    /// a usable GPU.
    pub fn is_gpu_fault(&self) -> bool {
        matches!(self, Error::Driver(_))
    }
}

impl fmt::Debug for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

/// The library's `Result`, with [`Error`](enum@Error) as the default error type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_is_the_one_line_message() {
        // The driver's variant asks libcuda for its text, so it is left to the GPU tests.
        let errors = [
            Error::NoDriver,
            Error::NoDevice("device 3 requested, 1 present".into()),
            Error::InvalidProblem("key/value heads (3) must divide query heads (8)".into()),
            Error::UnsupportedHeadDim(96, &[64, 128]),
            Error::UnknownKernel("flash_nope".into()),
            Error::Length {
                what: "out",
                expected: 4096,
                actual: 1,
                shape: "(1, 1, 64, 64)".into(),
            },
            Error::SharedMemory {
                kernel: "k".into(),
                needed: 300_000,
                available: 232_448,
            },
            Error::Architecture {
                kernel: "flash_ws",
                needed_arch: 90,
                arch: 80,
            },
            Error::MissingSymbol("x".into()),
            Error::Misaligned {
                what: "q",
                ptr: 0x1002,
                align: 16,
            },
            Error::NullPointer { what: "out" },
            Error::NotContiguous {
                what: "q",
                dims: [1, 2, 3, 64],
                strides: [384, 1, 128, 2],
            },
            Error::ForeignStream,
            Error::Incompatible("k is [1, 2, 64, 64] and v is [1, 2, 65, 64]: they must match".into()),
            Error::OtherGpu { what: "k" },
            Error::Cubin("kernels_sm_90a.cubin was built from another PTX: run `host cubin` again".into()),
        ];
        for error in errors {
            let debug = format!("{error:?}");
            assert_eq!(debug, error.to_string());
            assert_eq!(debug.lines().count(), 1, "{debug}");
        }
        // What `fn main() -> Result<(), Error>` prints (the standard library's `Termination`
        // writes `Error: {:?}`).
        assert_eq!(
            format!("Error: {:?}", Error::NoDriver),
            "Error: no CUDA driver found (libcuda could not be loaded): this needs a machine with an \
             NVIDIA GPU and its driver"
        );
    }
}

/// Errors of loading, saving and resolving a tuned table.
#[derive(Debug, Error)]
pub enum TunedError {
    /// The table's file could not be read.
    #[error("cannot read tuned table {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The operating system's error.
        source: std::io::Error,
    },
    /// The table's file or its directory could not be written.
    #[error("cannot write tuned table {path}: {source}")]
    Write {
        /// The file.
        path: PathBuf,
        /// The operating system's error.
        source: std::io::Error,
    },
    /// The text is not JSON of the table's form.
    #[error("tuned table is not valid JSON of the expected form: {0}")]
    Parse(#[from] serde_json::Error),
    /// One GPU lists the same (dtype, head dim, bucket, mask) twice, or the same split key.
    #[error("tuned table lists {gpu} / {key} twice: dispatch would be ambiguous")]
    Duplicate {
        /// The GPU's name.
        gpu: String,
        /// The repeated key, as text (e.g. `f16 d128 <=1024 causal`).
        key: String,
    },
    /// A split entry's bucket is not a power of two, so no problem would ever fall in it.
    #[error(
        "tuned table's decode_splits for {gpu} has {field} {value}: buckets are powers of two (the largest count in each)"
    )]
    Bucket {
        /// The GPU's name.
        gpu: String,
        /// `rows_bucket`, `blocks_bucket` or `seq_k_bucket`.
        field: &'static str,
        /// The value found.
        value: u64,
    },
    /// An entry names a variant this build does not have.
    #[error("tuned table names unknown kernel `{kernel}` for {gpu}: not in kernels.toml (retune or remove the entry)")]
    UnknownKernel {
        /// The GPU's name.
        gpu: String,
        /// The unknown variant name.
        kernel: String,
    },
    /// An entry names a variant at a head dim it is not compiled for.
    #[error(
        "tuned table names kernel `{kernel}` for {gpu} at head dim {head_dim}, which it is not compiled for"
    )]
    HeadDim {
        /// The GPU's name.
        gpu: String,
        /// The variant name.
        kernel: String,
        /// The entry's head dim.
        head_dim: usize,
    },
}
