//! `host`: the command line of flashrs. `verify` proves the kernels correct, `bench` times them,
//! `attend` runs attention on your own `.npy` tensors, `list` shows the compiled variants.

mod attend;
mod autotune;
mod bench;
mod harness;
mod inputs;
mod list;
mod micro;
mod peers;
mod plot;
mod profile;
mod report;
mod stress;
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
                  verification or benchmark check failed, 2 bad arguments or no usable GPU."
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
    /// Time kernel variants with CUDA events: p50/p90/p99, TFLOP/s, barriers per tile.
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
    Tune(autotune::Args),
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
}

impl<E: std::fmt::Display> From<E> for Failure {
    fn from(error: E) -> Failure {
        Failure::Usage(error.to_string())
    }
}

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
        Command::Tune(args) => autotune::run(cli.device, args),
        Command::ProfileTarget(args) => profile::run_target(cli.device, args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(Failure::Check) => ExitCode::from(1),
        Err(Failure::Usage(message)) => {
            eprintln!("error: {message}");
            ExitCode::from(2)
        }
    }
}
