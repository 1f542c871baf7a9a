//! Causal self-attention on random f16 inputs with the library's choice of kernel.
//!
//! `cargo run --release --example basic`; without a GPU it ends with the library's one-line error.

use flashrs::api::{attention, f16, DeviceTensor};
use flashrs::{Gpu, Layout};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

fn main() -> Result<(), flashrs::Error> {
    let gpu = Gpu::open(0)?;
    let dims = [2, 8, 512, 64]; // [B, H, S, D]
    let mut rng = StdRng::seed_from_u64(0);
    let mut random = || -> Vec<f16> {
        (0..dims.iter().product())
            .map(|_| f16::from_f32(rng.random_range(-1.0..1.0)))
            .collect()
    };
    let q = DeviceTensor::from_host(&gpu, &random(), dims, Layout::Bhsd)?;
    let k = DeviceTensor::from_host(&gpu, &random(), dims, Layout::Bhsd)?;
    let v = DeviceTensor::from_host(&gpu, &random(), dims, Layout::Bhsd)?;

    let out = attention(&q, &k, &v).causal(true).run(&gpu)?;

    let checksum: f64 = out.to_host()?.iter().map(|x| f64::from(x.to_f32())).sum();
    println!(
        "causal attention on {}: out {:?}, checksum {checksum:.6}",
        gpu.name,
        out.dims()
    );
    Ok(())
}
