//! The library's errors: each says what is wrong in terms of the user's input.

use std::fmt;

use thiserror::Error;

/// Everything the library refuses or fails at. `Debug` prints the same one line as `Display`, so
/// that `fn main() -> Result<(), flashrs::Error>` ends with `Error: <what went wrong>` rather than
/// the variant's structure; match on the variants for the details.
#[derive(Error)]
pub enum Error {
    #[error("no CUDA driver found (libcuda could not be loaded): this needs a machine with an NVIDIA GPU and its driver")]
    NoDriver,
    #[error("no CUDA device: {0}")]
    NoDevice(String),
    #[error("invalid problem: {0}")]
    InvalidProblem(String),
    #[error("unsupported head dim {0}: compiled head dims are {1:?}")]
    UnsupportedHeadDim(usize, &'static [usize]),
    #[error("unknown kernel `{0}`: run `list` for the compiled variants")]
    UnknownKernel(String),
    #[error("{what}: expected {expected} elements for shape {shape}, got {actual}")]
    Length {
        what: &'static str,
        expected: usize,
        actual: usize,
        shape: String,
    },
    #[error(
        "kernel {kernel} needs {needed} bytes of shared memory per block, the device allows {available}"
    )]
    SharedMemory {
        kernel: String,
        needed: u32,
        available: u32,
    },
    #[error("kernel {kernel} needs compute capability {needed_arch} (sm_{needed_arch}a for wgmma); this device's PTX is sm_{arch}")]
    Architecture {
        kernel: &'static str,
        needed_arch: u32,
        arch: u32,
    },
    #[error("the embedded PTX lacks `{0}`: the build and the variant table disagree")]
    MissingSymbol(String),
    #[error("cuBLAS (libcublas) could not be loaded: the `cublas` path needs it on the library path")]
    NoCublas,
    #[error("cuBLAS error: {0}")]
    Cublas(String),
    #[error("{what}: device address {ptr:#x} is not aligned to {align} bytes")]
    Misaligned {
        what: &'static str,
        ptr: u64,
        align: u64,
    },
    #[error(
        "the stream belongs to another CUDA context than the GPU's: buffers and launches must share one"
    )]
    ForeignStream,
    #[error("incompatible tensors: {0}")]
    Incompatible(String),
    #[error("{what} was made on another Gpu than the one asked to run the call: each Gpu orders its work on its own stream")]
    OtherGpu { what: &'static str },
    #[error("prebuilt kernels (FLASHRS_CUBIN_DIR): {0}")]
    Cubin(String),
    #[error("CUDA driver error: {0}")]
    Driver(#[from] cudarc::driver::DriverError),
}

impl Error {
    /// Whether the GPU or its driver failed while running work (a CUDA fault, a failed launch or
    /// copy, out of device memory, a cuBLAS failure), as opposed to input the library refuses or
    /// a machine without a usable GPU.
    pub fn is_gpu_fault(&self) -> bool {
        matches!(self, Error::Driver(_) | Error::Cublas(_))
    }
}

impl fmt::Debug for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

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
            Error::NoCublas,
            Error::Cublas("CUBLAS_STATUS_EXECUTION_FAILED".into()),
            Error::Misaligned {
                what: "q",
                ptr: 0x1002,
                align: 16,
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
