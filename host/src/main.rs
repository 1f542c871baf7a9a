//! `host`: the command line of flashrs. `verify` proves the kernels correct, `bench` times them,
//! `attend` runs attention on your own `.npy` tensors, `list` shows the compiled variants.

mod attend;
mod bench;
mod cubin;
mod harness;
mod inputs;
mod list;
mod micro;
mod paged;
mod peers;
mod plot;
mod profile;
mod report;
mod stress;
mod tune;
mod verify;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "host",
    version,
    about = "Scaled dot-product attention kernels written in Rust: verify, benchmark, run",
    long_about = "Scaled dot-product attention forward (FlashAttention style) with GPU kernels \
                  written in no_std Rust and compiled to PTX.\n\nExit codes: 0 success, 1 a \
                  verification or benchmark check failed, 2 bad arguments or no usable GPU, 3 the GPU or \
                  its driver failed during the run (a CUDA fault, a failed launch, out of device \
                  memory)."
)]
struct Cli {
    /// CUDA device ordinal.
    #[arg(long, global = true, default_value_t = 0)]
    device: usize,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Check every kernel variant against a float64 CPU reference on fresh random inputs.
    Verify(verify::Args),
    /// Time kernel variants and the peers (torch's SDPA, FA3) by CUDA-graph replay: p50/p90/p99,
    /// TFLOP/s, barriers per tile, ratios to each peer.
    Bench(bench::Args),
    /// Attention on your own [B,H,S,D] float16/float32 .npy tensors.
    Attend(attend::Args),
    /// List the compiled variants: parameters, barriers per tile, registers and spills.
    List(list::Args),
    /// Redraw the TFLOP/s plot of a `bench --json` report (no GPU needed).
    Plot(plot::Args),
    /// Profile one launch with Nsight Compute (ncu): tensor pipe, DRAM, occupancy, bank
    /// conflicts, registers; writes evidence/ncu_<kernel>.json with a verdict.
    Profile(profile::Args),
    /// Rank every compiled configuration by SM cycles per KV tile, measured in the kernel with
    /// clock64 (one instrumented launch each); writes micro_log.csv / micro_best.json.
    Micro(micro::Args),
    /// Evolutionary search over the compiled configurations, seeded by `micro`: every candidate
    /// gated (compiled, correct, then timed); `--save` records the winner for the library.
    Tune(tune::Args),
    /// Assemble the embedded PTX to cubins with ptxas (no GPU needed), so that a GPU machine
    /// skips the driver's JIT: set FLASHRS_CUBIN_DIR to the folder there.
    Cubin(cubin::Args),
    /// (internal) the single launch `profile` runs under ncu.
    #[command(hide = true)]
    ProfileTarget(profile::TargetArgs),
}

/// How a subcommand ended, beyond success.
pub enum Failure {
    /// A check failed (exit code 1); the subcommand has already said which.
    Check,
    /// Bad input or no usable GPU (exit code 2): one line saying why.
    Usage(String),
    /// The GPU or its driver failed during the run (exit code 3): one line saying how.
    Gpu(String),
}

impl From<flashrs::Error> for Failure {
    fn from(error: flashrs::Error) -> Failure {
        if error.is_gpu_fault() {
            Failure::Gpu(error.to_string())
        } else {
            Failure::Usage(error.to_string())
        }
    }
}

/// Errors that are about the user's input or files, never about the GPU: exit code 2.
macro_rules! usage_errors {
    ($($error:ty),*) => {$(
        impl From<$error> for Failure {
            fn from(error: $error) -> Failure {
                Failure::Usage(error.to_string())
            }
        }
    )*};
}

usage_errors!(
    String,
    std::io::Error,
    serde_json::Error,
    flashrs_lab::npy::NpyError,
    flashrs::tuned_table::TunedError
);

fn main() -> ExitCode {
    // Die quietly when the reader of our output goes away (`host list | head`), as Unix tools do,
    // instead of panicking on the failed write.
    // Safety: restoring the default disposition of a signal at start-up, before any thread exists.
    unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Verify(args) => verify::run(cli.device, args),
        Command::Bench(args) => bench::run(cli.device, args),
        Command::Attend(args) => attend::run(cli.device, args),
        Command::List(args) => list::run(args),
        Command::Plot(args) => plot::run(args),
        Command::Profile(args) => profile::run(cli.device, args),
        Command::Micro(args) => micro::run(cli.device, args),
        Command::Tune(args) => tune::run(cli.device, args),
        Command::Cubin(args) => cubin::run(args),
        Command::ProfileTarget(args) => profile::run_target(cli.device, args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(failure) => {
            if let Some(line) = failure.message() {
                eprintln!("{line}");
            }
            ExitCode::from(failure.exit_code())
        }
    }
}

impl Failure {
    fn exit_code(&self) -> u8 {
        match self {
            Failure::Check => 1,
            Failure::Usage(_) => 2,
            Failure::Gpu(_) => 3,
        }
    }

    /// The line for stderr; a failed check has printed its own verdict.
    fn message(&self) -> Option<String> {
        match self {
            Failure::Check => None,
            Failure::Usage(message) => Some(format!("error: {message}")),
            Failure::Gpu(message) => Some(format!("error: GPU failure during the run: {message}")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cudarc::driver::{sys::cudaError_enum, DriverError};

    #[test]
    fn gpu_faults_exit_3_and_input_errors_exit_2() {
        // Formatting a driver error asks libcuda for its text, so that variant is only classified.
        let driver = flashrs::Error::Driver(DriverError(cudaError_enum::CUDA_ERROR_ILLEGAL_ADDRESS));
        assert!(driver.is_gpu_fault());
        let fault = Failure::from(flashrs::Error::Cublas("CUBLAS_STATUS_EXECUTION_FAILED".into()));
        assert_eq!(fault.exit_code(), 3);
        assert!(fault.message().unwrap().contains("GPU failure"));
        for usage in [
            flashrs::Error::NoDriver,
            flashrs::Error::UnknownKernel("x".into()),
            flashrs::Error::InvalidProblem("x".into()),
            flashrs::Error::NoCublas,
        ] {
            assert_eq!(Failure::from(usage).exit_code(), 2);
        }
        assert_eq!(Failure::Check.exit_code(), 1);
        assert!(Failure::Check.message().is_none());
    }
}
