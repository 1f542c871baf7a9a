//! GPU tests of the e4m3 kernels (`flash_ws_fp8`) against the float64 reference on the exact
//! values the kernel reads (e4m3 bytes times their descales). `#[ignore]`d in a plain `cargo test`
//! (CI has no GPU); run on a GPU machine with `--ignored`.

use flashrs::{DType, Gpu, Layout, Params, Shape, FP8_VARIANTS};
use flashrs_lab::reference::{self, ReferenceDims, Tolerance};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

fn gpu() -> Gpu {
    Gpu::open(0).unwrap_or_else(|e| panic!("these tests need a GPU: {e}"))
}

/// The value of an e4m3 byte (1 sign, 4 exponent bits of bias 7, 3 mantissa bits; the test never
/// makes NaN, 0x7f and 0xff).
fn e4m3(byte: u8) -> f32 {
    let sign = if byte & 0x80 != 0 { -1.0 } else { 1.0 };
    let (exponent, mantissa) = (((byte >> 3) & 0xf) as i32, (byte & 7) as f32);
    sign * if exponent == 0 {
        mantissa / 8.0 * 2f32.powi(-6)
    } else {
        (1.0 + mantissa / 8.0) * 2f32.powi(exponent - 7)
    }
}

/// Random e4m3 bytes of magnitude 1/16 .. 7.5 (exponents 3 ..= 9), either sign: no NaN, no zero
/// run that would hide a mistake.
fn random_bytes(n: usize, rng: &mut StdRng) -> Vec<u8> {
    (0..n)
        .map(|_| {
            let sign = if rng.random_bool(0.5) { 0x80 } else { 0 };
            sign | (rng.random_range(3u8..=9) << 3) | rng.random_range(0u8..8)
        })
        .collect()
}

/// The true values of `bytes` (a `[B, H?, S, D]` tensor in `layout` of `heads` heads) with one
/// descale per (batch, KV head), as `[B, H, S, D]` for the reference.
fn dequantise(
    bytes: &[u8],
    descale: &[f32],
    shape: Shape,
    layout: Layout,
    heads: usize,
    seq: usize,
) -> Vec<f32> {
    let d = shape.head_dim;
    let bhsd = layout.to_bhsd(bytes, shape.batch, heads, seq, d);
    let group = heads / shape.heads_kv;
    bhsd.iter()
        .enumerate()
        .map(|(i, &b)| {
            let head = i / (seq * d); // b * heads + h
            let (batch, h) = (head / heads, head % heads);
            e4m3(b) * descale[batch * shape.heads_kv + h / group]
        })
        .collect()
}

/// Bounds for e4m3 inputs with a 16-bit output, on outputs of |o| up to ~4: the kernel rounds the
/// probabilities to e4m3 before P V (3 mantissa bits: up to 2^-4 relative per weight, averaging
/// out over the keys) and the output to 16 bits; the products of e4m3 values are exact in fp32.
/// A wrong key order between P and V, a wrong descale or a missed tile moves outputs by O(1).
const E4M3: Tolerance = Tolerance {
    max_abs: 0.25,
    rel_l2: 0.08,
};

fn check(gpu: &Gpu, shape: Shape, layout: Layout, causal: bool, out_dtype: DType, seed: u64) {
    let mut rng = StdRng::seed_from_u64(seed);
    let (q, k, v) = (
        random_bytes(shape.q_len(), &mut rng),
        random_bytes(shape.kv_len(), &mut rng),
        random_bytes(shape.kv_len(), &mut rng),
    );
    let kv_heads = shape.batch * shape.heads_kv;
    let descale: Vec<f32> = (0..3 * kv_heads)
        .map(|_| rng.random_range(0.05f32..0.3))
        .collect();
    let (dq, dk, dv) = (
        &descale[..kv_heads],
        &descale[kv_heads..2 * kv_heads],
        &descale[2 * kv_heads..],
    );
    let params = Params { causal, scale: None };
    let (q_true, k_true) = (
        dequantise(&q, dq, shape, layout, shape.heads, shape.seq_q),
        dequantise(&k, dk, shape, layout, shape.heads_kv, shape.seq_k),
    );
    let scale = params.scale_for(shape.head_dim) as f64;
    let expected = reference::attention_f64(
        &q_true,
        &k_true,
        &dequantise(&v, dv, shape, layout, shape.heads_kv, shape.seq_k),
        shape.reference_dims(),
        causal,
        scale,
    );
    let expected_lse = reference::log_sum_exp_f64(&q_true, &k_true, shape.reference_dims(), causal, scale);
    let mut tensors = gpu
        .fp8_tensors(shape, layout, out_dtype, &q, &k, &v, &descale)
        .unwrap();
    gpu.fp8_request_lse(&mut tensors).unwrap();
    for variant in FP8_VARIANTS
        .iter()
        .filter(|v| v.head_dims.contains(&shape.head_dim))
    {
        gpu.fp8_poison(&mut tensors).unwrap();
        gpu.fp8_forward(&mut tensors, params, Some(variant.name)).unwrap();
        let out = flashrs::gpu::decode(out_dtype, &gpu.download(tensors.out()).unwrap());
        let actual = layout.to_bhsd(&out, shape.batch, shape.heads, shape.seq_q, shape.head_dim);
        let cmp = reference::compare(&actual, &expected);
        let what = format!(
            "{} {shape} {layout:?} causal={causal} {out_dtype} seed={seed}",
            variant.name
        );
        assert!(cmp.passes(E4M3), "{what}: {cmp:?}");
        // The probabilities' sums are kept in fp32, so the log-sum-exp sees no e4m3 rounding.
        let lse = gpu.download(tensors.lse().unwrap()).unwrap();
        let lse_cmp = reference::compare(&lse, &expected_lse);
        assert!(lse_cmp.max_abs_err <= 1e-3, "{what}: LSE {lse_cmp:?}");
        println!(
            "{what}: max abs {:.3e}, rel l2 {:.3e}",
            cmp.max_abs_err, cmp.rel_l2_err
        );
    }
}

#[test]
#[ignore = "needs an NVIDIA Hopper GPU"]
fn e4m3_matches_float64_on_whole_and_ragged_tiles() {
    let gpu = gpu();
    if gpu.arch < 90 {
        panic!("the e4m3 kernels need sm_90a, this GPU is sm_{}", gpu.arch);
    }
    let mut seed = 1;
    for d in [128, 256] {
        for (batch, heads, heads_kv, seq_q, seq_k) in
            [(1, 2, 2, 256, 256), (2, 4, 1, 200, 333), (1, 2, 2, 1, 77)]
        {
            let shape = Shape {
                seq_q,
                seq_k,
                ..Shape::new(batch, heads, 1, d).with_heads_kv(heads_kv)
            };
            for layout in [Layout::Bhsd, Layout::Bshd] {
                for causal in [false, true] {
                    let out_dtype = if seed % 2 == 0 { DType::F16 } else { DType::Bf16 };
                    check(&gpu, shape, layout, causal, out_dtype, seed);
                    seed += 1;
                }
            }
        }
    }
}

/// The benchmark shapes, rows spot-checked (the full reference would take minutes): many tiles
/// per row, every variant.
#[test]
#[ignore = "needs an NVIDIA Hopper GPU"]
fn e4m3_large_shapes_spot_checked() {
    let gpu = gpu();
    let mut rng = StdRng::seed_from_u64(7);
    for (d, causal) in [(128, false), (128, true), (256, false)] {
        let shape = Shape::new(2, 16, 4096, d);
        let layout = Layout::Bhsd;
        let (q, k, v) = (
            random_bytes(shape.q_len(), &mut rng),
            random_bytes(shape.kv_len(), &mut rng),
            random_bytes(shape.kv_len(), &mut rng),
        );
        let kv_heads = shape.batch * shape.heads_kv;
        let descale: Vec<f32> = (0..3 * kv_heads)
            .map(|_| rng.random_range(0.05f32..0.3))
            .collect();
        let (dq, dk, dv) = (
            &descale[..kv_heads],
            &descale[kv_heads..2 * kv_heads],
            &descale[2 * kv_heads..],
        );
        let params = Params { causal, scale: None };
        let rows: Vec<(usize, usize)> = (0..48)
            .map(|_| {
                (
                    rng.random_range(0..shape.batch * shape.heads),
                    rng.random_range(0..shape.seq_q),
                )
            })
            .collect();
        let expected = reference::attention_rows_f64(
            &dequantise(&q, dq, shape, layout, shape.heads, shape.seq_q),
            &dequantise(&k, dk, shape, layout, shape.heads_kv, shape.seq_k),
            &dequantise(&v, dv, shape, layout, shape.heads_kv, shape.seq_k),
            shape.reference_dims(),
            causal,
            params.scale_for(d) as f64,
            &rows,
        );
        let mut tensors = gpu
            .fp8_tensors(shape, layout, DType::Bf16, &q, &k, &v, &descale)
            .unwrap();
        for variant in FP8_VARIANTS.iter().filter(|v| v.head_dims.contains(&d)) {
            gpu.fp8_poison(&mut tensors).unwrap();
            gpu.fp8_forward(&mut tensors, params, Some(variant.name)).unwrap();
            let out = flashrs::gpu::decode(DType::Bf16, &gpu.download(tensors.out()).unwrap());
            let actual: Vec<f32> = rows
                .iter()
                .flat_map(|&(head, row)| out[(head * shape.seq_q + row) * d..][..d].to_vec())
                .collect();
            let cmp = reference::compare(&actual, &expected);
            let what = format!("{} {shape} causal={causal}", variant.name);
            assert!(cmp.passes(E4M3), "{what}: {cmp:?}");
            println!(
                "{what}: max abs {:.3e}, rel l2 {:.3e}",
                cmp.max_abs_err, cmp.rel_l2_err
            );
        }
    }
}

#[test]
#[ignore = "needs an NVIDIA Hopper GPU"]
fn e4m3_rejects_what_it_cannot_run() {
    let gpu = gpu();
    let shape = Shape::new(1, 2, 64, 64);
    let bytes = vec![0x38u8; shape.q_len()];
    let descale = vec![1.0f32; 3 * 2];
    assert!(gpu
        .fp8_tensors(shape, Layout::Bhsd, DType::F16, &bytes, &bytes, &bytes, &descale)
        .is_err());
    let shape = Shape::new(1, 2, 64, 128);
    let bytes = vec![0x38u8; shape.q_len()];
    let bad = vec![0.0f32; 6];
    assert!(gpu
        .fp8_tensors(shape, Layout::Bhsd, DType::F16, &bytes, &bytes, &bytes, &bad)
        .is_err());
    let mut tensors = gpu
        .fp8_tensors(shape, Layout::Bhsd, DType::F16, &bytes, &bytes, &bytes, &descale)
        .unwrap();
    let params = Params {
        causal: false,
        scale: None,
    };
    assert!(gpu
        .fp8_forward(&mut tensors, params, Some("flash_ws_m128_n128_s2_pp_ov_mbarrier"))
        .is_err());
}
