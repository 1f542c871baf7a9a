//! flashrs-lab: the tools this repository measures and checks the `flashrs` kernels with, kept
//! out of the user-facing crate. The host CLI, the library's GPU tests and the fuzz targets use
//! them; a user of `flashrs` needs none of them.
//!
//! - [`reference`](mod@reference): float64 attention on the CPU, and the comparison of an output with it;
//! - [`fp8`]: the float64 check of the FP8 (e4m3) kernel on its dequantised inputs, its derived
//!   tolerance, and the RMSE of the accuracy study;
//! - [`timing`]: event and CUDA-graph timing, occupancy, barrier counts ([`Timing`], implemented
//!   for [`flashrs::Gpu`]);
//! - [`clocks`]: the SM clock, power and temperature (NVML) over the timed windows;
//! - [`stats`]: summaries of timings and bootstrap confidence intervals;
//! - [`ptx`], [`ptxas`], [`sass`]: reading the embedded PTX, assembling it, and its SASS;
//! - [`npy`]: NumPy `.npy` files (the CLI's inputs and outputs);
//! - [`cublas`], [`cutensor`]: attention composed of cuBLAS or cuTENSOR calls around our row softmax
//!   ([`composed`]), the A/B candidates every kernel must beat;
//! - [`search`]: the evolutionary search over the compiled configurations (`host tune`);
//! - [`error`]: [`LabError`], the library's errors plus those of cuBLAS and cuTENSOR.

#![warn(missing_docs)]

pub mod backward_check;
pub mod backward_reference;
pub mod clocks;
pub mod composed;
pub mod cublas;
pub mod cutensor;
pub mod error;
pub mod fp8;
pub mod npy;
pub mod ptx;
pub mod ptxas;
pub mod reference;
pub mod sass;
pub mod search;
pub mod stats;
pub mod timeline;
pub mod timing;

pub use error::LabError;
pub use timing::{Replays, Timing};
