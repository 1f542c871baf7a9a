//! `cubin`: assemble the embedded PTX with ptxas ahead of time, so that a GPU machine loads
//! ready machine code instead of waiting for the driver's JIT (about 40 s per process on sm_90a).

use std::path::PathBuf;
use std::process::Command;
use std::time::Instant;

use flashrs::embedded;
use flashrs_lab::ptxas;

use crate::Failure;

#[derive(clap::Args)]
pub struct Args {
    /// Folder to write `kernels_<target>.cubin` and its PTX fingerprint into; point
    /// `FLASHRS_CUBIN_DIR` at it on the GPU machine.
    #[arg(long)]
    out: PathBuf,
    /// Architectures to assemble (80, 90); every embedded one by default.
    #[arg(long, value_delimiter = ',')]
    arch: Vec<u32>,
}

pub fn run(args: Args) -> Result<(), Failure> {
    let ptxas = ptxas::find_ptxas().ok_or_else(|| {
        Failure::Usage("ptxas not found: run scripts/setup.sh, or set FLASHRS_PTXAS to a ptxas binary".into())
    })?;
    if let Some(unknown) = args
        .arch
        .iter()
        .find(|&&a| !embedded::modules().any(|(_, number, _)| number == a))
    {
        return Err(Failure::Usage(format!(
            "no embedded PTX for sm_{unknown}: the architectures are 80 and 90"
        )));
    }
    std::fs::create_dir_all(&args.out)?;
    for (target, number, ptx_text) in embedded::modules() {
        if !args.arch.is_empty() && !args.arch.contains(&number) {
            continue;
        }
        let (cubin, fingerprint) = embedded::cubin_files(target);
        let ptx_file = args.out.join(format!("kernels_{target}.ptx"));
        std::fs::write(&ptx_file, ptx_text)?;
        let started = Instant::now();
        let status = Command::new(&ptxas)
            .arg(format!("-arch={target}"))
            .arg("-o")
            .arg(args.out.join(&cubin))
            .arg(&ptx_file)
            .status();
        std::fs::remove_file(&ptx_file)?;
        if !status?.success() {
            return Err(Failure::Usage(format!("ptxas failed on the {target} PTX")));
        }
        let hash = format!("{:016x}\n", embedded::fingerprint(ptx_text));
        std::fs::write(args.out.join(&fingerprint), hash)?;
        println!(
            "{} ({:.0} s)",
            args.out.join(&cubin).display(),
            started.elapsed().as_secs_f64()
        );
    }
    Ok(())
}
