//! GPU tests of `flashrs_candle::flash_attn` against candle's own attention (matmul, mask and
//! softmax in f32 on the same half-precision inputs). `#[ignore]`d like the main crate's GPU
//! tests: they need an NVIDIA GPU and run there with `--ignored`.

use candle_core::{DType, Device, Tensor, D};
use flashrs_candle::flash_attn;

fn device() -> Device {
    Device::new_cuda(0).unwrap_or_else(|e| panic!("these tests need a GPU: {e}"))
}

/// Attention in f32 with candle's ops: `q` `[B, S_q, H, D]`, `k` and `v` `[B, S_k, H_kv, D]`,
/// query head `h` reading key/value head `h / (H / H_kv)`; causal as bottom-right aligned.
fn reference(q: &Tensor, k: &Tensor, v: &Tensor, scale: f32, causal: bool) -> candle_core::Result<Tensor> {
    let (batch, seq_q, heads, head_dim) = q.dims4()?;
    let (_, seq_k, heads_kv, _) = k.dims4()?;
    let group = heads / heads_kv;
    // [B, S, H, D] -> [B, H, S, D] in f32, key/value heads repeated for their query heads.
    let bhsd = |t: &Tensor| t.to_dtype(DType::F32)?.transpose(1, 2)?.contiguous();
    let repeat = |t: Tensor| {
        t.unsqueeze(2)?
            .expand((batch, heads_kv, group, seq_k, head_dim))?
            .reshape((batch, heads, seq_k, head_dim))
    };
    let (q, k, v) = (bhsd(q)?, repeat(bhsd(k)?)?, repeat(bhsd(v)?)?);
    let mut scores = (q.matmul(&k.t()?.contiguous()?)? * scale as f64)?;
    if causal {
        let mask: Vec<f32> = (0..seq_q)
            .flat_map(|i| {
                (0..seq_k).map(move |j| {
                    if j + seq_q <= i + seq_k {
                        0.0
                    } else {
                        f32::NEG_INFINITY
                    }
                })
            })
            .collect();
        let mask = Tensor::from_vec(mask, (seq_q, seq_k), q.device())?;
        scores = scores.broadcast_add(&mask)?;
    }
    let max = scores.max_keepdim(D::Minus1)?;
    let exp = scores.broadcast_sub(&max)?.exp()?;
    let probs = exp.broadcast_div(&exp.sum_keepdim(D::Minus1)?)?;
    probs.matmul(&v)?.transpose(1, 2)?.contiguous()
}

fn max_abs_diff(a: &Tensor, b: &Tensor) -> f32 {
    let diff = (a.to_dtype(DType::F32).unwrap() - b.to_dtype(DType::F32).unwrap()).unwrap();
    diff.abs()
        .unwrap()
        .flatten_all()
        .unwrap()
        .max(0)
        .unwrap()
        .to_scalar::<f32>()
        .unwrap()
}

struct Case {
    batch: usize,
    seq_q: usize,
    seq_k: usize,
    heads: usize,
    heads_kv: usize,
    head_dim: usize,
    causal: bool,
    dtype: DType,
}

/// Runs `case` on `device` against the reference; `transposed` hands the op `[B, H, S, D]`
/// tensors transposed to `[B, S, H, D]` (read in place as the other layout).
fn run(device: &Device, case: &Case, transposed: bool) {
    let Case {
        batch,
        seq_q,
        seq_k,
        heads,
        heads_kv,
        head_dim,
        causal,
        dtype,
    } = *case;
    let make = |seq, heads| -> Tensor {
        let t = if transposed {
            Tensor::randn(0f32, 1.0, (batch, heads, seq, head_dim), device)
                .unwrap()
                .transpose(1, 2)
                .unwrap()
        } else {
            Tensor::randn(0f32, 1.0, (batch, seq, heads, head_dim), device).unwrap()
        };
        t.to_dtype(dtype).unwrap()
    };
    let (q, k, v) = (make(seq_q, heads), make(seq_k, heads_kv), make(seq_k, heads_kv));
    let scale = 1.0 / (head_dim as f32).sqrt();
    let out = flash_attn(&q, &k, &v, scale, causal).unwrap();
    assert_eq!(out.dims(), q.dims());
    assert_eq!(out.dtype(), dtype);
    let expected = reference(&q, &k, &v, scale, causal).unwrap();
    let error = max_abs_diff(&out, &expected);
    // Half-precision outputs of values below about 4: f16 rounds at 2^-9 there, bf16 at 2^-6.
    let tolerance = if dtype == DType::F16 { 4e-3 } else { 3e-2 };
    let label = format!(
        "B={batch} S_q={seq_q} S_k={seq_k} H={heads} H_kv={heads_kv} D={head_dim} causal={causal} {dtype:?} transposed={transposed}"
    );
    println!("{label}: max |flashrs - candle f32| = {error:.2e}");
    assert!(error < tolerance, "{label}: {error} >= {tolerance}");
}

fn cases() -> Vec<Case> {
    let case = |batch, seq_q, seq_k, heads, heads_kv, head_dim, causal, dtype| Case {
        batch,
        seq_q,
        seq_k,
        heads,
        heads_kv,
        head_dim,
        causal,
        dtype,
    };
    vec![
        case(2, 128, 128, 8, 8, 64, false, DType::F16),
        case(2, 128, 128, 8, 8, 64, false, DType::BF16),
        case(1, 256, 256, 8, 2, 128, true, DType::F16),
        case(1, 256, 256, 8, 2, 128, true, DType::BF16),
        case(2, 200, 200, 4, 1, 64, true, DType::BF16),
        case(1, 1, 333, 32, 8, 128, false, DType::F16),
        case(1, 64, 300, 8, 4, 128, false, DType::BF16),
        case(1, 130, 130, 4, 4, 256, true, DType::F16),
    ]
}

#[test]
#[ignore = "needs an NVIDIA GPU"]
fn matches_candles_attention_on_its_default_stream() {
    let device = device();
    for case in cases() {
        run(&device, &case, false);
    }
}

#[test]
#[ignore = "needs an NVIDIA GPU"]
fn matches_candles_attention_on_a_stream_of_its_own_and_transposed_inputs() {
    let device = Device::new_cuda_with_stream(0).unwrap();
    for case in cases() {
        run(&device, &case, false);
        run(&device, &case, true);
    }
}

#[test]
#[ignore = "needs an NVIDIA GPU"]
fn bad_inputs_on_the_gpu_are_errors_not_panics() {
    let device = device();
    let q = Tensor::zeros((1, 16, 4, 64), DType::F16, &device).unwrap();
    let one_line = |result: candle_core::Result<Tensor>| {
        let text = result.expect_err("expected a refusal").to_string();
        assert_eq!(text.lines().count(), 1, "{text}");
        text
    };
    let d96 = Tensor::zeros((1, 16, 4, 96), DType::F16, &device).unwrap();
    assert!(one_line(flash_attn(&d96, &d96, &d96, 0.1, false)).contains("96"));
    let cpu = Tensor::zeros((1, 16, 4, 64), DType::F16, &Device::Cpu).unwrap();
    assert!(one_line(flash_attn(&q, &cpu, &q, 0.1, false)).contains("CUDA"));
    let f32s = q.to_dtype(DType::F32).unwrap();
    assert!(one_line(flash_attn(&f32s, &f32s, &f32s, 0.1, false)).contains("F16 or BF16"));
    let shifted = Tensor::zeros(1 + 16 * 4 * 64, DType::F16, &device)
        .unwrap()
        .narrow(0, 1, 16 * 4 * 64)
        .unwrap()
        .reshape((1, 16, 4, 64))
        .unwrap();
    assert!(one_line(flash_attn(&q, &q, &shifted, 0.1, false)).contains("aligned"));
    // Still usable after the refusals.
    let out = flash_attn(&q, &q, &q, 0.1, false).unwrap();
    assert_eq!(out.dims(), &[1, 16, 4, 64]);
    device.synchronize().unwrap();
}
