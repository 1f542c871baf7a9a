//! The lab's errors: the library's, plus the failures of the libraries only the lab loads (cuBLAS
//! and cuTENSOR, for the composed A/B candidates), which a user of `flashrs` never meets.

use std::fmt;

use thiserror::Error;

/// Everything a lab tool refuses or fails at. Like [`flashrs::Error`], `Debug` prints the one-line
/// message, so that a `main` returning this error ends with a readable `Error: ...`.
#[derive(Error)]
pub enum LabError {
    /// An error of the library (bad input, no GPU, a CUDA fault).
    #[error(transparent)]
    Flashrs(#[from] flashrs::Error),
    /// libcublas could not be loaded (needed only by the cuBLAS candidate).
    #[error("cuBLAS (libcublas) could not be loaded: the `cublas` path needs it on the library path")]
    NoCublas,
    /// A cuBLAS call failed; the message is cuBLAS's error.
    #[error("cuBLAS error: {0}")]
    Cublas(String),
    /// libcutensor (cuTENSOR 2) could not be loaded (needed only by the cuTENSOR candidate); the
    /// message is the loader's.
    #[error("cuTENSOR (libcutensor.so.2) could not be loaded: the `cutensor` path needs it on the library path ({0})")]
    NoCutensor(String),
    /// A cuTENSOR call failed while running work; the message names the call and its status.
    #[error("cuTENSOR error: {0}")]
    Cutensor(String),
}

impl LabError {
    /// Whether the GPU, its driver or a CUDA library failed while running work (a CUDA fault, a
    /// failed launch or copy, a cuBLAS or cuTENSOR failure), as opposed to refused input, a
    /// machine without a usable GPU, or a library that is not installed.
    pub fn is_gpu_fault(&self) -> bool {
        match self {
            LabError::Flashrs(error) => error.is_gpu_fault(),
            LabError::Cublas(_) | LabError::Cutensor(_) => true,
            LabError::NoCublas | LabError::NoCutensor(_) => false,
        }
    }

    /// Whether a composed candidate's library (cuBLAS, cuTENSOR) is missing: the tools note it and
    /// go on without that candidate.
    pub fn is_missing_library(&self) -> bool {
        matches!(self, LabError::NoCublas | LabError::NoCutensor(_))
    }
}

impl From<cudarc::driver::DriverError> for LabError {
    fn from(error: cudarc::driver::DriverError) -> LabError {
        LabError::Flashrs(error.into())
    }
}

impl fmt::Debug for LabError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

/// The lab's `Result`, with [`LabError`] as the default error type.
pub type Result<T, E = LabError> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_are_one_line_and_kinds_are_told_apart() {
        let errors = [
            LabError::NoCublas,
            LabError::Cublas("CUBLAS_STATUS_EXECUTION_FAILED".into()),
            LabError::NoCutensor(
                "libcutensor.so.2: cannot open shared object file: No such file or directory".into(),
            ),
            LabError::Cutensor("cutensorContract (scores): CUTENSOR_STATUS_EXECUTION_FAILED".into()),
            LabError::from(flashrs::Error::UnknownKernel("flash_nope".into())),
        ];
        for error in &errors {
            let debug = format!("{error:?}");
            assert_eq!(debug, error.to_string());
            assert_eq!(debug.lines().count(), 1, "{debug}");
        }
        // The library's error reads exactly as it does on its own.
        assert_eq!(
            errors[4].to_string(),
            flashrs::Error::UnknownKernel("flash_nope".into()).to_string()
        );
        let faults: Vec<bool> = errors.iter().map(LabError::is_gpu_fault).collect();
        assert_eq!(faults, [false, true, false, true, false]);
        let missing: Vec<bool> = errors.iter().map(LabError::is_missing_library).collect();
        assert_eq!(missing, [true, false, true, false, false]);
        // A CUDA fault of the library stays one through the conversion (its text asks libcuda,
        // so it is only classified here).
        let driver =
            cudarc::driver::DriverError(cudarc::driver::sys::cudaError_enum::CUDA_ERROR_ILLEGAL_ADDRESS);
        assert!(LabError::from(driver).is_gpu_fault());
    }
}
