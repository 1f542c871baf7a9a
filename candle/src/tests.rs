//! The argument checks, on CPU tensors (their dtype, dims, strides and offsets are all the checks
//! read) and on bare descriptions: no GPU needed.

use candle_core::{DType, Device, Tensor};

use super::*;

/// A `[B, S, H, D]` tensor of zeros on the CPU.
fn bshd(dims: (usize, usize, usize, usize), dtype: DType) -> Tensor {
    Tensor::zeros(dims, dtype, &Device::Cpu).unwrap()
}

/// The message of a refused call, which must be one line.
fn refused<T: std::fmt::Debug>(result: candle_core::Result<T>) -> String {
    let error = result.expect_err("expected a refusal");
    let text = error.to_string();
    assert_eq!(text.lines().count(), 1, "{text}");
    text
}

#[test]
fn self_attention_and_grouped_heads_are_accepted_in_both_memory_orders() {
    let q = bshd((2, 100, 8, 64), DType::F16);
    let kv = bshd((2, 37, 2, 64), DType::F16);
    assert_eq!(check(&q, &kv, &kv, 0.125, false).unwrap(), Layout::Bshd);
    assert_eq!(check(&q, &q, &q, 0.125, true).unwrap(), Layout::Bshd);
    // Multi-query k and v (one head) are contiguous in both layouts: they take q's (the H100 run
    // of the GPU tests refused this as "q is bshd and k is bhsd" before).
    let mqa = bshd((2, 37, 1, 64), DType::F16);
    assert_eq!(check(&q, &mqa, &mqa, 0.125, false).unwrap(), Layout::Bshd);
    // The transposes of contiguous [B, H, S, D] tensors, read in place.
    let q = Tensor::zeros((2, 8, 100, 128), DType::BF16, &Device::Cpu)
        .unwrap()
        .transpose(1, 2)
        .unwrap();
    let kv = Tensor::zeros((2, 1, 300, 128), DType::BF16, &Device::Cpu)
        .unwrap()
        .transpose(1, 2)
        .unwrap();
    assert_eq!(q.dims(), &[2, 100, 8, 128]);
    assert_eq!(check(&q, &kv, &kv, 0.1, false).unwrap(), Layout::Bhsd);
}

#[test]
fn cpu_tensors_that_pass_the_checks_are_refused_for_their_device() {
    let q = bshd((1, 16, 4, 64), DType::F16);
    let message = refused(flash_attn(&q, &q, &q, 0.125, false));
    assert!(
        message.contains("q is on Cpu: flashrs needs CUDA tensors"),
        "{message}"
    );
}

#[test]
fn dtypes_must_be_one_half_type() {
    let q = bshd((1, 16, 4, 64), DType::F16);
    let message = refused(flash_attn(
        &bshd((1, 16, 4, 64), DType::F32),
        &q,
        &q,
        0.125,
        false,
    ));
    assert!(
        message.contains("q has dtype F32: flashrs takes F16 or BF16"),
        "{message}"
    );
    let bf = bshd((1, 16, 4, 64), DType::BF16);
    let message = refused(flash_attn(&q, &q, &bf, 0.125, false));
    assert!(message.contains("q is F16 and v is BF16"), "{message}");
}

#[test]
fn tensors_must_have_four_dims() {
    let q = bshd((1, 16, 4, 64), DType::F16);
    let flat = Tensor::zeros((16, 4, 64), DType::F16, &Device::Cpu).unwrap();
    let message = refused(flash_attn(&q, &flat, &q, 0.125, false));
    assert!(
        message.contains("k has 3 dims [16, 4, 64]: flashrs takes 4"),
        "{message}"
    );
}

#[test]
fn other_strides_are_refused_with_the_library_message() {
    let q = bshd((1, 16, 4, 64), DType::F16);
    // Head dim not the innermost, and a slice of a wider head dim.
    let swapped = bshd((1, 16, 64, 4), DType::F16).transpose(2, 3).unwrap();
    let narrowed = bshd((1, 16, 4, 128), DType::F16).narrow(3, 0, 64).unwrap();
    for (name, t) in [("swapped", swapped), ("narrowed", narrowed)] {
        let message = refused(flash_attn(&q, &t, &q, 0.125, false));
        assert!(
            message.contains("k") && message.contains("contiguous"),
            "{name}: {message}"
        );
    }
}

#[test]
fn shapes_that_do_not_fit_each_other_are_refused() {
    let q = bshd((2, 16, 8, 64), DType::F16);
    let cases = [
        // Three key heads do not divide eight query heads.
        (bshd((2, 16, 3, 64), DType::F16), None, "must divide q's 8"),
        (bshd((1, 16, 8, 64), DType::F16), None, "batch"),
        (bshd((2, 16, 8, 128), DType::F16), None, "head dim"),
        (
            bshd((2, 16, 8, 64), DType::F16),
            Some(bshd((2, 17, 8, 64), DType::F16)),
            "keys and values need the same dims",
        ),
    ];
    for (k, v, expected) in cases {
        let v = v.unwrap_or_else(|| k.clone());
        let message = refused(flash_attn(&q, &k, &v, 0.125, false));
        assert!(message.contains(expected), "{expected}: {message}");
    }
}

#[test]
fn what_the_kernels_cannot_take_is_refused() {
    let d96 = bshd((1, 16, 4, 96), DType::F16);
    let message = refused(flash_attn(&d96, &d96, &d96, 0.1, false));
    assert!(message.contains("96"), "{message}");
    let q = bshd((1, 16, 4, 64), DType::F16);
    for scale in [0.0, -1.0, f32::NAN, f32::INFINITY] {
        let message = refused(flash_attn(&q, &q, &q, scale, true));
        assert!(message.contains("scale"), "{scale}: {message}");
    }
}

#[test]
fn an_offset_that_breaks_the_alignment_is_refused() {
    // One element into a flat buffer: a 2-byte offset, where the kernels need 16.
    let flat = Tensor::zeros(1 + 16 * 4 * 64, DType::F16, &Device::Cpu).unwrap();
    let shifted = flat
        .narrow(0, 1, 16 * 4 * 64)
        .unwrap()
        .reshape((1, 16, 4, 64))
        .unwrap();
    assert_eq!(shifted.layout().start_offset(), 1);
    let q = bshd((1, 16, 4, 64), DType::F16);
    let message = refused(flash_attn(&q, &q, &shifted, 0.125, false));
    assert!(message.contains("v") && message.contains("align"), "{message}");
    // Eight elements in (16 bytes) is fine.
    let aligned = Tensor::zeros(8 + 16 * 4 * 64, DType::F16, &Device::Cpu)
        .unwrap()
        .narrow(0, 8, 16 * 4 * 64)
        .unwrap()
        .reshape((1, 16, 4, 64))
        .unwrap();
    assert_eq!(check(&q, &q, &aligned, 0.125, false).unwrap(), Layout::Bshd);
}

#[test]
fn descriptions_are_checked_without_tensors() {
    let desc = |what, dims: [usize; 4], strides: [usize; 4]| Desc {
        what,
        dtype: DType::BF16,
        dims: dims.to_vec(),
        strides: strides.to_vec(),
        offset: 0,
    };
    // A single position or head: both memory orders fit, and either reads the same.
    let q = desc("q", [1, 1, 8, 64], [512, 512, 64, 1]);
    let layout = check_descs(&[q.clone(), q.clone(), q.clone()], options(0.125, true)).unwrap();
    assert!(matches!(layout, Layout::Bhsd | Layout::Bshd));
    // The per-tensor layouts must agree.
    let bshd = desc("q", [1, 4, 8, 64], [2048, 512, 64, 1]);
    let bhsd = desc("k", [1, 4, 8, 64], [2048, 64, 256, 1]);
    let message = check_descs(&[bshd.clone(), bhsd, bshd], options(0.125, false)).unwrap_err();
    assert!(message.contains("one layout"), "{message}");
}
