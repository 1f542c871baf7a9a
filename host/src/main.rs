//! `host`: the command line of flashrs. `verify` proves the kernels correct, `bench` times them,
//! `attend` runs attention on your own `.npy` tensors, `list` shows the compiled variants.

mod attend;
mod backward;
mod bench;
mod cubin;
mod fp8;
mod harness;
mod inputs;
mod library;
mod list;
mod micro;
mod paged;
mod peers;
mod plot;
mod profile;
mod report;
mod rounds;
mod stress;
mod trace;
mod tune;
mod varlen;
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
    /// conflicts, registers; writes evidence/profiles/ncu_<kernel>.json with a verdict.
    Profile(profile::Args),
    /// Rank every compiled configuration by SM cycles per KV tile, measured in the kernel with
    /// clock64 (one instrumented launch each); writes micro_log.csv / micro_best.json.
    Micro(micro::Args),
    /// Evolutionary search over the compiled configurations, seeded by `micro`: every candidate
    /// gated (compiled, correct, then timed); `--save` records the winner for the library.
    /// `--splits`: the same for flash_decode's count of key slices on a decode-like shape.
    Tune(tune::Args),
    /// Where a flash_ws launch's blocks spend their cycles item by item: one launch of its
    /// instrumented twin after warm-up launches; per item position, the median over blocks of the
    /// wait for Q, the KV loop, a split item's merge, the epilogue and the gap between items.
    Trace(trace::Args),
    /// Assemble the embedded PTX to cubins with ptxas (no GPU needed), so that a GPU machine
    /// skips the driver's JIT: set FLASHRS_CUBIN_DIR to the folder there.
    Cubin(cubin::Args),
    /// (internal) the single launch `profile` runs under ncu.
    #[command(hide = true)]
    ProfileTarget(profile::TargetArgs),
}

/// How a subcommand ended, beyond success.
#[derive(Debug)]
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
        Failure::from(flashrs_lab::LabError::from(error))
    }
}

impl From<flashrs_lab::LabError> for Failure {
    fn from(error: flashrs_lab::LabError) -> Failure {
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
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(error) => exit_on_bad_arguments(error),
    };
    let result = match cli.command {
        Command::Verify(args) => verify::run(cli.device, args),
        Command::Bench(args) => bench::run(cli.device, args),
        Command::Attend(args) => attend::run(cli.device, args),
        Command::List(args) => list::run(args),
        Command::Plot(args) => plot::run(args),
        Command::Profile(args) => profile::run(cli.device, args),
        Command::Micro(args) => micro::run(cli.device, args),
        Command::Tune(args) => tune::run(cli.device, args),
        Command::Trace(args) => trace::run(cli.device, args),
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

/// Help and version as clap prints them; any other parse error as one line on stderr (exit 2),
/// like every other error of this command line.
fn exit_on_bad_arguments(error: clap::Error) -> ! {
    use clap::error::ErrorKind;
    match error.kind() {
        // `host` alone shows the help (on stderr, exit 2): a list of commands, not an error line.
        ErrorKind::DisplayHelp
        | ErrorKind::DisplayVersion
        | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => error.exit(),
        _ => {
            eprintln!("{}", one_line(&error));
            std::process::exit(error.exit_code())
        }
    }
}

/// A clap error in one line: its message and tips, without the usage block and the pointer to
/// `--help` (`error: unexpected argument '--x' found (tip: ...)`).
fn one_line(error: &clap::Error) -> String {
    let text = error.render().to_string();
    let mut parts: Vec<String> = Vec::new();
    for line in text.lines().map(str::trim) {
        if line.starts_with("Usage:") || line.starts_with("For more information") {
            break;
        }
        if line.is_empty() {
            continue;
        }
        match line.strip_prefix("tip: ") {
            Some(tip) => parts.push(format!("(tip: {tip})")),
            None => parts.push(line.to_string()),
        }
    }
    let line = parts.join(" ");
    if line.is_empty() {
        "error: invalid arguments (see --help)".to_string()
    } else {
        line
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
    fn clap_errors_are_one_line() {
        let bad: &[&[&str]] = &[
            &["host", "verify", "--bogus"],
            &["host", "verify", "--shapes"],
            &["host", "bench", "--iters", "0"],
            &["host", "verify", "--shape", "1,2"],
            &["host", "attend", "--q", "q.npy"],
            &["host", "verify", "--quick", "--shapes", "long"],
            &["host", "verify", "--quick", "--dtype", "bf16"],
            &["host", "tune", "--iters", "5"],
            &["host", "nope"],
        ];
        for argv in bad {
            let Err(error) = Cli::try_parse_from(*argv) else {
                panic!("{argv:?} parsed");
            };
            let line = one_line(&error);
            assert_eq!(line.lines().count(), 1, "{argv:?}: {line}");
            assert!(line.starts_with("error: "), "{argv:?}: {line}");
            assert!(!line.contains("Usage"), "{argv:?}: {line}");
            assert_eq!(error.exit_code(), 2, "{argv:?}");
        }
        // The missing arguments are named in the line, the tip kept.
        let missing = Cli::try_parse_from(["host", "attend", "--q", "q.npy"])
            .err()
            .unwrap();
        let line = one_line(&missing);
        assert!(line.contains("--k <K>") && line.contains("--out <OUT>"), "{line}");
        let typo = Cli::try_parse_from(["host", "verify", "--shape-set", "x"])
            .err()
            .unwrap();
        assert!(one_line(&typo).contains("(tip:"), "{}", one_line(&typo));
        // Help is not an error to shorten.
        let help = Cli::try_parse_from(["host", "verify", "--help"]).err().unwrap();
        assert_eq!(help.kind(), clap::error::ErrorKind::DisplayHelp);
        let bare = Cli::try_parse_from(["host"]).err().unwrap();
        assert_eq!(
            bare.kind(),
            clap::error::ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
        );
    }

    #[test]
    fn gpu_faults_exit_3_and_input_errors_exit_2() {
        use flashrs_lab::LabError;
        // Formatting a driver error asks libcuda for its text, so that variant is only classified.
        let driver = flashrs::Error::Driver(DriverError(cudaError_enum::CUDA_ERROR_ILLEGAL_ADDRESS));
        assert!(driver.is_gpu_fault() && LabError::from(driver).is_gpu_fault());
        let fault = Failure::from(LabError::Cublas("CUBLAS_STATUS_EXECUTION_FAILED".into()));
        assert_eq!(fault.exit_code(), 3);
        let fault = Failure::from(LabError::Cutensor("cutensorContract: failed".into()));
        assert_eq!(fault.exit_code(), 3);
        assert_eq!(
            fault.message().unwrap(),
            "error: GPU failure during the run: cuTENSOR error: cutensorContract: failed"
        );
        for usage in [
            flashrs::Error::NoDriver,
            flashrs::Error::UnknownKernel("x".into()),
            flashrs::Error::InvalidProblem("x".into()),
        ] {
            let line = format!("error: {usage}");
            let failure = Failure::from(usage);
            assert_eq!(failure.exit_code(), 2);
            assert_eq!(failure.message().unwrap(), line);
        }
        // A library error keeps its class through the lab's error.
        let wrapped = Failure::from(LabError::from(flashrs::Error::UnknownKernel("x".into())));
        assert_eq!(wrapped.exit_code(), 2);
        for usage in [
            LabError::NoCublas,
            LabError::NoCutensor("libcutensor.so.2: cannot open shared object file".into()),
        ] {
            assert_eq!(Failure::from(usage).exit_code(), 2);
        }
        assert_eq!(Failure::Check.exit_code(), 1);
        assert!(Failure::Check.message().is_none());
    }
}
