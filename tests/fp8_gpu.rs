//! GPU tests of the FP8 (e4m3) kernel: real launches on e4m3-quantised inputs, checked against
//! float64 on the dequantised inputs within flashrs-lab's derived FP8 tolerance. They need an
//! NVIDIA GPU of compute capability 9.0, so they are `#[ignore]`d in a plain `cargo test` (CI has
//! no GPU) and run on a GPU machine with `--ignored` (see README, "Running on a GPU machine").

use flashrs::fp8::quantize::Fp8Inputs;
use flashrs::{DType, Gpu, Layout, Params, Shape, FP8_VARIANTS};
use flashrs_lab::fp8::{compare_fp8, fp8_reference, lse_bound_ratio, Fp8Tolerance, P_SCALE};
use flashrs_lab::reference::{attention_rows_f64, compare, log_sum_exp_f64, ReferenceDims};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

fn gpu() -> Gpu {
    Gpu::open_with(0, flashrs::GpuOptions::from_env())
        .unwrap_or_else(|e| panic!("these tests need a GPU: {e}"))
}

fn random(n: usize, rng: &mut StdRng) -> Vec<f32> {
    (0..n).map(|_| rng.random_range(-2.0f32..2.0)).collect()
}

/// Fresh random Q, K, V (`[B, H, S, D]`) quantised to e4m3, and their dequantised values: what
/// the kernel computes with.
#[allow(clippy::type_complexity)]
fn quantised(shape: Shape, rng: &mut StdRng) -> (Fp8Inputs, (Vec<f32>, Vec<f32>, Vec<f32>)) {
    let (q, k, v) = (
        random(shape.q_len(), rng),
        random(shape.kv_len(), rng),
        random(shape.kv_len(), rng),
    );
    let fp8 = Fp8Inputs::quantize(shape, Layout::Bhsd, &q, &k, &v).unwrap();
    let dequantised = fp8.dequantize(shape, Layout::Bhsd).unwrap();
    (fp8, dequantised)
}

/// Every FP8 variant of `shape`'s head dim, in both layouts and both output types, with the LSE,
/// against float64 on the dequantised inputs; the output and LSE NaN-poisoned first. `scale`:
/// the softmax scale (`None`: 1/sqrt(D)).
fn check(gpu: &Gpu, shape: Shape, causal: bool, scale: Option<f32>, seed: u64) {
    let mut rng = StdRng::seed_from_u64(seed);
    let (fp8, (dq, dk, dv)) = quantised(shape, &mut rng);
    let params = Params {
        causal,
        scale,
        ..Params::default()
    };
    let scale = params.scale_for(shape.head_dim) as f64;
    let dims = shape.reference_dims();
    let lse_expected = log_sum_exp_f64(&dq, &dk, dims, causal, scale);
    let (b, d) = (shape.batch, shape.head_dim);
    let variants: Vec<_> = flashrs::variants::built(FP8_VARIANTS)
        .filter(|v| v.head_dims.contains(&d))
        .collect();
    assert!(!variants.is_empty(), "no FP8 variant for head dim {d}");
    for out_dtype in DType::ALL {
        let tolerance = Fp8Tolerance::new(out_dtype, P_SCALE);
        let expected = fp8_reference((&dq, &dk, &dv), dims, causal, scale, tolerance);
        for layout in Layout::ALL {
            let qb = layout.from_bhsd(&fp8.q, b, shape.heads, shape.seq_q, d);
            let kb = layout.from_bhsd(&fp8.k, b, shape.heads_kv, shape.seq_k, d);
            let vb = layout.from_bhsd(&fp8.v, b, shape.heads_kv, shape.seq_k, d);
            let mut t = gpu
                .fp8_tensors(shape, layout, out_dtype, &qb, &kb, &vb, &fp8.descale)
                .unwrap();
            gpu.fp8_request_lse(&mut t).unwrap();
            for variant in &variants {
                gpu.fp8_poison(&mut t).unwrap();
                gpu.fp8_forward(&mut t, params, Some(variant.name)).unwrap();
                let out = flashrs::gpu::decode(out_dtype, &gpu.download(t.out()).unwrap());
                let out = layout.to_bhsd(&out, b, shape.heads, shape.seq_q, d);
                let cmp = compare_fp8(&out, &expected);
                let what = format!(
                    "{} on {shape} causal={causal} {layout} out {out_dtype} seed={seed}",
                    variant.name
                );
                assert!(cmp.passes(tolerance), "{what}: {cmp:?}");
                let lse = gpu.download(t.lse().unwrap()).unwrap();
                let ratio = lse_bound_ratio(&lse, &lse_expected, &expected.lse_bound);
                assert!(ratio <= 1.0, "{what}: LSE off by {ratio} of its bound");
            }
        }
    }
}

#[test]
#[ignore = "needs an NVIDIA GPU (run with --ignored on a GPU machine)"]
fn every_fp8_variant_matches_float64_on_its_dequantised_inputs() {
    let gpu = gpu();
    let cases = [
        (Shape::new(1, 4, 512, 128), false),
        (Shape::new(1, 4, 512, 128), true),
        (Shape::new(2, 2, 300, 256), true),
        // Grouped and multi-query heads; more keys than queries and fewer, causal.
        (Shape::new(1, 8, 384, 128).with_heads_kv(2), true),
        (Shape::new(1, 4, 200, 256).with_heads_kv(1), false),
        (
            Shape {
                seq_k: 1000,
                ..Shape::new(1, 4, 77, 128)
            },
            true,
        ),
        (
            Shape {
                seq_k: 70,
                ..Shape::new(1, 2, 200, 128)
            },
            true,
        ),
        // More row blocks than the H100's 132 SMs (144 items): at head dim 128 the persistent
        // variant's blocks walk several, and the last round's items are split over the idle SMs
        // and merged; at 256 (no persistent variant) the grid kernels on the same long shape.
        (Shape::new(1, 8, 2200, 128).with_heads_kv(2), false),
        (Shape::new(1, 8, 2200, 256), false),
    ];
    for (i, (shape, causal)) in cases.into_iter().enumerate() {
        check(&gpu, shape, causal, None, 1200 + i as u64);
    }
}

/// Scores eleven times the usual scale, so that a row's maximum moves past the kept one by more
/// than `MAX_SLACK_LOG2` in many tiles: the path where a warp takes its speculative
/// exponentials again with the new maxima (`FragmentSoftmax::probabilities_speculatively`),
/// which Gaussian scores at 1/sqrt(D) almost never reach after the first tile.
#[test]
#[ignore = "needs an NVIDIA GPU (run with --ignored on a GPU machine)"]
fn fp8_variants_match_float64_where_row_maxima_move_often() {
    let gpu = gpu();
    for (i, causal) in [false, true].into_iter().enumerate() {
        check(
            &gpu,
            Shape::new(1, 4, 1024, 128),
            causal,
            Some(1.0),
            1300 + i as u64,
        );
    }
}

#[test]
#[ignore = "needs an NVIDIA GPU (run with --ignored on a GPU machine)"]
fn fp8_inputs_of_the_wrong_length_or_head_dim_are_refused() {
    let gpu = gpu();
    let shape = Shape::new(1, 2, 64, 128);
    let n = shape.q_len();
    let descale = vec![1.0f32; 3 * 2];
    let bytes = vec![0x38u8; n];
    assert!(gpu
        .fp8_tensors(
            shape,
            Layout::Bhsd,
            DType::Bf16,
            &bytes[1..],
            &bytes,
            &bytes,
            &descale
        )
        .is_err());
    assert!(gpu
        .fp8_tensors(
            shape,
            Layout::Bhsd,
            DType::Bf16,
            &bytes,
            &bytes,
            &bytes,
            &descale[1..]
        )
        .is_err());
    let d64 = Shape::new(1, 2, 64, 64);
    let small = vec![0x38u8; d64.q_len()];
    let refused = gpu
        .fp8_tensors(d64, Layout::Bhsd, DType::Bf16, &small, &small, &small, &descale)
        .and_then(|mut t| {
            gpu.fp8_forward(
                &mut t,
                Params {
                    causal: false,
                    scale: None,
                    ..Params::default()
                },
                None,
            )
            .map(|_| ())
        });
    assert!(refused.is_err(), "head dim 64 has no FP8 kernel");
}

#[test]
#[ignore = "needs an NVIDIA GPU (run with --ignored on a GPU machine)"]
fn fp8_refuses_bad_descales_and_16_bit_kernels() {
    let gpu = gpu();
    let shape = Shape::new(1, 2, 64, 128);
    let bytes = vec![0x38u8; shape.q_len()];
    let zero = vec![0.0f32; 6];
    assert!(gpu
        .fp8_tensors(shape, Layout::Bhsd, DType::F16, &bytes, &bytes, &bytes, &zero)
        .is_err());
    let one = vec![1.0f32; 6];
    let mut t = gpu
        .fp8_tensors(shape, Layout::Bhsd, DType::F16, &bytes, &bytes, &bytes, &one)
        .unwrap();
    let params = Params {
        causal: false,
        scale: None,
        ..Params::default()
    };
    let sixteen_bit = gpu.fp8_forward(&mut t, params, Some("flash_ws_m128_n128_s2_pp_ov_mbarrier"));
    assert!(sixteen_bit.is_err(), "a 16-bit kernel must not read e4m3 inputs");
}

/// The benchmark shapes, a sample of rows checked (the full reference would take minutes): many
/// KV tiles per row, every variant, the relative L2 bound of the derivation in `flashrs_lab::fp8`.
#[test]
#[ignore = "needs an NVIDIA GPU (run with --ignored on a GPU machine)"]
fn fp8_benchmark_shapes_match_float64_on_sampled_rows() {
    let gpu = gpu();
    let mut rng = StdRng::seed_from_u64(7);
    for (d, causal) in [(128, false), (128, true), (256, false)] {
        let shape = Shape::new(2, 16, 4096, d);
        let (fp8, (dq, dk, dv)) = quantised(shape, &mut rng);
        let params = Params {
            causal,
            scale: None,
            ..Params::default()
        };
        let rows: Vec<(usize, usize)> = (0..48)
            .map(|_| {
                (
                    rng.random_range(0..shape.batch * shape.heads),
                    rng.random_range(0..shape.seq_q),
                )
            })
            .collect();
        let dims = shape.reference_dims();
        let scale = params.scale_for(d) as f64;
        let expected = attention_rows_f64(&dq, &dk, &dv, dims, causal, scale, &rows);
        let mut t = gpu
            .fp8_tensors(
                shape,
                Layout::Bhsd,
                DType::Bf16,
                &fp8.q,
                &fp8.k,
                &fp8.v,
                &fp8.descale,
            )
            .unwrap();
        for variant in flashrs::variants::built(FP8_VARIANTS).filter(|v| v.head_dims.contains(&d)) {
            gpu.fp8_poison(&mut t).unwrap();
            gpu.fp8_forward(&mut t, params, Some(variant.name)).unwrap();
            let out = flashrs::gpu::decode(DType::Bf16, &gpu.download(t.out()).unwrap());
            let sampled: Vec<f32> = rows
                .iter()
                .flat_map(|&(head, row)| out[(head * shape.seq_q + row) * d..][..d].to_vec())
                .collect();
            let cmp = compare(&sampled, &expected);
            let what = format!("{} on {shape} causal={causal}", variant.name);
            let bound = Fp8Tolerance::new(DType::Bf16, P_SCALE).rel_l2;
            assert!(cmp.non_finite == 0 && cmp.rel_l2_err <= bound, "{what}: {cmp:?}");
            println!("{what}: rel l2 {:.3e}", cmp.rel_l2_err);
        }
    }
}
