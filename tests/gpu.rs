//! GPU tests: real launches checked against the float64 reference. They need an NVIDIA GPU, so
//! they are `#[ignore]`d in a plain `cargo test` (CI has no GPU) and run on a GPU machine with
//! `--ignored` (see README, "Running on a GPU machine").

use cudarc::driver::{CudaSlice, DevicePtr};
use flashrs::gpu::{RawBuffer, RawTensors};
use flashrs::variants::VARIANTS;
use flashrs::{DType, Error, Gpu, Layout, Params, Shape};
use flashrs_lab::reference::{self, DTypeTolerance, ReferenceDims};
use flashrs_lab::{LabError, Timing};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

fn gpu() -> Gpu {
    Gpu::open_with(0, flashrs::GpuOptions::from_env())
        .unwrap_or_else(|e| panic!("these tests need a GPU: {e}"))
}

fn random(n: usize, dtype: DType, rng: &mut StdRng) -> Vec<u16> {
    (0..n)
        .map(|_| dtype.encode(rng.random_range(-2.0f32..2.0)))
        .collect()
}

fn widen(dtype: DType, x: &[u16]) -> Vec<f32> {
    flashrs::gpu::decode(dtype, x)
}

/// Fresh random inputs on the GPU (output poisoned with NaN) and their float64 reference.
fn problem(
    gpu: &Gpu,
    shape: Shape,
    params: Params,
    dtype: DType,
    rng: &mut StdRng,
) -> (flashrs::Tensors, Vec<f64>) {
    let (q, k, v) = (
        random(shape.q_len(), dtype, rng),
        random(shape.kv_len(), dtype, rng),
        random(shape.kv_len(), dtype, rng),
    );
    let expected = reference::attention_f64(
        &widen(dtype, &q),
        &widen(dtype, &k),
        &widen(dtype, &v),
        shape.reference_dims(),
        params.causal,
        params.scale_for(shape.head_dim) as f64,
    );
    (gpu.tensors(shape, dtype, &q, &k, &v).unwrap(), expected)
}

/// As `problem`, with the log-sum-exp requested and its float64 reference.
fn problem_with_lse(
    gpu: &Gpu,
    shape: Shape,
    params: Params,
    dtype: DType,
    rng: &mut StdRng,
) -> (flashrs::Tensors, Vec<f64>, Vec<f64>) {
    let (mut tensors, expected) = problem(gpu, shape, params, dtype, rng);
    gpu.request_lse(&mut tensors).unwrap();
    let (q, k) = (
        gpu.download(tensors.q()).unwrap(),
        gpu.download(tensors.k()).unwrap(),
    );
    let lse_expected = reference::log_sum_exp_f64(
        &widen(dtype, &q),
        &widen(dtype, &k),
        shape.reference_dims(),
        params.causal,
        params.scale_for(shape.head_dim) as f64,
    );
    (tensors, expected, lse_expected)
}

/// Runs every variant on `shape` against the float64 reference, output poisoned with NaN.
fn check_all(gpu: &Gpu, shape: Shape, causal: bool, seed: u64) {
    for dtype in DType::ALL {
        check_dtype(gpu, shape, causal, dtype, seed);
    }
}

fn check_dtype(gpu: &Gpu, shape: Shape, causal: bool, dtype: DType, seed: u64) {
    let mut rng = StdRng::seed_from_u64(seed);
    let params = Params {
        causal,
        scale: None,
        ..Params::default()
    };
    let (mut tensors, expected) = problem(gpu, shape, params, dtype, &mut rng);
    for variant in runnable(gpu, shape) {
        gpu.poison(&mut tensors).unwrap();
        gpu.forward(&mut tensors, params, Some(variant.name)).unwrap();
        let what = format!("{} on {shape} causal={causal} {dtype} seed={seed}", variant.name);
        assert_output_matches(gpu, &tensors, &expected, &what);
    }
}

/// The output the last launch on `tensors` wrote agrees with `expected` within its dtype's
/// tolerance; `what` names the launch in the failure.
fn assert_output_matches(gpu: &Gpu, tensors: &flashrs::Tensors, expected: &[f64], what: &str) {
    let dtype = tensors.dtype();
    let actual = widen(dtype, &gpu.download(tensors.out()).unwrap());
    let cmp = reference::compare(&actual, expected);
    assert!(cmp.passes(dtype.tolerance()), "{what}: {cmp:?}");
}

/// The variants this GPU can run at `shape`'s head dim.
fn runnable(gpu: &Gpu, shape: Shape) -> impl Iterator<Item = &'static flashrs::VariantSpec> + '_ {
    flashrs::variants::built(flashrs::VARIANTS)
        .filter(move |v| v.head_dims.contains(&shape.head_dim) && v.min_arch <= gpu.arch)
}

#[test]
#[ignore = "needs an NVIDIA GPU (run with --ignored on a GPU machine)"]
fn every_variant_reads_and_writes_the_bshd_layout() {
    let gpu = gpu();
    let seed: u64 = rand::rng().random();
    let mut rng = StdRng::seed_from_u64(seed);
    // Odd lengths, S_q != S_k, grouped heads: every stride of the [B,S,H,D] layout matters.
    for shape in [
        Shape::new(2, 4, 77, 64).with_heads_kv(2),
        Shape::new(1, 6, 200, 128).with_heads_kv(3),
    ] {
        let shape = Shape {
            seq_k: shape.seq_k + 35,
            ..shape
        };
        for causal in [false, true] {
            let params = Params {
                causal,
                scale: None,
                ..Params::default()
            };
            let dtype = DType::F16;
            let (q, k, v) = (
                random(shape.q_len(), dtype, &mut rng),
                random(shape.kv_len(), dtype, &mut rng),
                random(shape.kv_len(), dtype, &mut rng),
            );
            let expected = reference::attention_f64(
                &widen(dtype, &q),
                &widen(dtype, &k),
                &widen(dtype, &v),
                shape.reference_dims(),
                causal,
                params.scale_for(shape.head_dim) as f64,
            );
            let (b, d) = (shape.batch, shape.head_dim);
            let bshd = Layout::Bshd;
            let mut tensors = gpu
                .tensors_in(
                    bshd,
                    shape,
                    dtype,
                    &bshd.from_bhsd(&q, b, shape.heads, shape.seq_q, d),
                    &bshd.from_bhsd(&k, b, shape.heads_kv, shape.seq_k, d),
                    &bshd.from_bhsd(&v, b, shape.heads_kv, shape.seq_k, d),
                )
                .unwrap();
            for variant in runnable(&gpu, shape) {
                gpu.poison(&mut tensors).unwrap();
                gpu.forward(&mut tensors, params, Some(variant.name)).unwrap();
                let out = widen(dtype, &gpu.download(tensors.out()).unwrap());
                let actual = bshd.to_bhsd(&out, b, shape.heads, shape.seq_q, d);
                let cmp = reference::compare(&actual, &expected);
                assert!(
                    cmp.passes(dtype.tolerance()),
                    "{} bshd on {shape} causal={causal} seed={seed}: {cmp:?}",
                    variant.name
                );
            }
        }
    }
}

#[test]
#[ignore = "needs an NVIDIA GPU (run with --ignored on a GPU machine)"]
fn every_variant_matches_the_reference_on_odd_shapes() {
    let gpu = gpu();
    let seed = rand::rng().random();
    for shape in [
        Shape::new(1, 2, 1, 64),
        Shape::new(2, 3, 77, 64),
        Shape::new(1, 2, 200, 128),
        Shape::new(1, 1, 129, 128),
    ] {
        for causal in [false, true] {
            check_all(&gpu, shape, causal, seed);
        }
    }
}

#[test]
#[ignore = "needs an NVIDIA GPU (run with --ignored on a GPU machine)"]
fn different_query_and_key_lengths_align_causal_masks_bottom_right() {
    let gpu = gpu();
    let seed = rand::rng().random();
    // seq_q > seq_k: the first 63 query rows see no key at all and must come out as zeros.
    for shape in [
        Shape {
            batch: 1,
            heads: 2,
            heads_kv: 2,
            seq_q: 100,
            seq_k: 37,
            head_dim: 64,
            head_dim_v: 64,
        },
        Shape {
            batch: 1,
            heads: 2,
            heads_kv: 2,
            seq_q: 37,
            seq_k: 150,
            head_dim: 128,
            head_dim_v: 128,
        },
    ] {
        for causal in [false, true] {
            check_all(&gpu, shape, causal, seed);
        }
    }
}

#[test]
#[ignore = "needs an NVIDIA GPU (run with --ignored on a GPU machine)"]
fn grouped_query_attention_and_log_sum_exp_match_the_reference() {
    let gpu = gpu();
    let mut rng = StdRng::seed_from_u64(rand::rng().random());
    for (shape, causal) in [
        (Shape::new(2, 8, 150, 64).with_heads_kv(2), true),
        (Shape::new(1, 4, 77, 128).with_heads_kv(1), false),
        (
            Shape {
                batch: 1,
                heads: 4,
                heads_kv: 2,
                seq_q: 90,
                seq_k: 40,
                head_dim: 64,
                head_dim_v: 64,
            },
            true,
        ),
    ] {
        for dtype in DType::ALL {
            let params = Params {
                causal,
                scale: None,
                ..Params::default()
            };
            let (mut tensors, expected, lse_expected) =
                problem_with_lse(&gpu, shape, params, dtype, &mut rng);
            for variant in
                flashrs::variants::built(flashrs::VARIANTS).filter(|v| v.head_dims.contains(&shape.head_dim))
            {
                gpu.poison(&mut tensors).unwrap();
                gpu.forward(&mut tensors, params, Some(variant.name)).unwrap();
                let cmp = reference::compare(&widen(dtype, &gpu.download(tensors.out()).unwrap()), &expected);
                assert!(
                    cmp.passes(dtype.tolerance()),
                    "{} on {shape} {dtype}: {cmp:?}",
                    variant.name
                );
                let lse = gpu.download(tensors.lse().unwrap()).unwrap();
                for (row, (&a, &r)) in lse.iter().zip(&lse_expected).enumerate() {
                    let ok = (a as f64 == r) || (a as f64 - r).abs() <= 1e-3;
                    assert!(
                        ok,
                        "{} on {shape} {dtype}: lse row {row}: {a} vs {r}",
                        variant.name
                    );
                }
            }
        }
    }
}

#[test]
#[ignore = "needs an NVIDIA GPU (run with --ignored on a GPU machine)"]
fn run_time_barrier_counts_match_the_declared_ones() {
    let gpu = gpu();
    let globals = flashrs_lab::ptx::u32_globals(flashrs::embedded::PTX_SM90);
    let shape = Shape::new(1, 4, 300, 64);
    let dtype = DType::F16;
    let mut rng = StdRng::seed_from_u64(7);
    let (q, k, v) = (
        random(shape.q_len(), dtype, &mut rng),
        random(shape.kv_len(), dtype, &mut rng),
        random(shape.kv_len(), dtype, &mut rng),
    );
    let mut tensors = gpu.tensors(shape, dtype, &q, &k, &v).unwrap();
    for variant in flashrs::variants::built(flashrs::VARIANTS).filter(|v| v.head_dims.contains(&64)) {
        let symbol = variant.symbol(64, dtype.name());
        let declared = globals[format!("{symbol}_barriers_per_tile").as_str()] as f64;
        if !variant.counted_built {
            // Without its instrumentation twin in this build the count is a typed refusal.
            let err = gpu.count_barriers(
                variant,
                &mut tensors,
                Params {
                    causal: false,
                    scale: None,
                    ..Params::default()
                },
            );
            assert!(matches!(err, Err(Error::NotBuilt { .. })), "{symbol}");
            continue;
        }
        for causal in [false, true] {
            let count = gpu
                .count_barriers(
                    variant,
                    &mut tensors,
                    Params {
                        causal,
                        scale: None,
                        ..Params::default()
                    },
                )
                .unwrap();
            assert_eq!(count.per_tile, declared, "{symbol} causal={causal}: {count:?}");
        }
    }
}

#[test]
#[ignore = "needs an NVIDIA GPU (run with --ignored on a GPU machine)"]
fn wrong_buffer_lengths_and_head_dims_are_typed_errors() {
    let gpu = gpu();
    let shape = Shape::new(1, 2, 64, 64);
    let one = DType::F16.encode(1.0);
    let full = vec![one; shape.q_len()];
    let short = vec![one; shape.q_len() - 1];
    let err = gpu.tensors(shape, DType::F16, &full, &short, &full);
    assert!(
        matches!(err, Err(Error::Length { what: "k", .. })),
        "{:?}",
        err.err()
    );
    let mut tensors = gpu.tensors(shape, DType::F16, &full, &full, &full).unwrap();
    // A kernel for another head dim, or for bf16 on f16 tensors, is refused.
    let mismatched = [
        gpu.kernel(&VARIANTS[0], 128, DType::F16, false).unwrap(),
        gpu.kernel(&VARIANTS[0], 64, DType::Bf16, false).unwrap(),
    ];
    for kernel in &mismatched {
        let err = gpu.launch(
            kernel,
            &mut tensors,
            Params {
                causal: false,
                scale: None,
                ..Params::default()
            },
            None,
        );
        assert!(
            matches!(err, Err(Error::InvalidProblem(_))),
            "{}: {:?}",
            kernel.symbol(),
            err.err()
        );
    }
    let err = gpu.forward(
        &mut tensors,
        Params {
            causal: false,
            scale: Some(f32::NAN),
            ..Params::default()
        },
        None,
    );
    assert!(matches!(err, Err(Error::InvalidProblem(_))), "{:?}", err.err());
    let err = gpu.forward(
        &mut tensors,
        Params {
            causal: false,
            scale: None,
            ..Params::default()
        },
        Some("no_such_kernel"),
    );
    assert!(matches!(err, Err(Error::UnknownKernel(_))), "{:?}", err.err());
}

/// Caller-owned buffers of `lens` elements (Q, K, V, output, LSE), zeroed, on `gpu`'s context.
struct Owned {
    q: CudaSlice<u16>,
    k: CudaSlice<u16>,
    v: CudaSlice<u16>,
    out: CudaSlice<u16>,
    lse: CudaSlice<f32>,
}

impl Owned {
    fn new(gpu: &Gpu, q: usize, kv: usize, rows: usize) -> Owned {
        let stream = gpu.stream();
        Owned {
            q: stream.alloc_zeros(q).unwrap(),
            k: stream.alloc_zeros(kv).unwrap(),
            v: stream.alloc_zeros(kv).unwrap(),
            out: stream.alloc_zeros(q).unwrap(),
            lse: stream.alloc_zeros(rows).unwrap(),
        }
    }

    /// Their addresses and lengths, as a caller of `tensors_from_raw` holds them.
    fn raw(&self, gpu: &Gpu) -> RawTensors {
        let stream = gpu.stream();
        let ptr = |buffer: &CudaSlice<u16>| RawBuffer::new(buffer.device_ptr(stream).0, buffer.len());
        RawTensors {
            q: ptr(&self.q),
            k: ptr(&self.k),
            v: ptr(&self.v),
            out: ptr(&self.out),
            lse: Some(RawBuffer::new(self.lse.device_ptr(stream).0, self.lse.len())),
            sinks: None,
        }
    }
}

/// Every way a buffer can disagree with the shape (each of Q, K, V, output, LSE and the barrier
/// log a element short or long, K sized for the query heads of a grouped-query shape, a
/// misaligned address) is refused with a typed error before anything is launched.
#[test]
#[ignore = "needs an NVIDIA GPU (run with --ignored on a GPU machine)"]
fn every_buffer_mismatch_is_a_typed_error() {
    let gpu = gpu();
    let shape = Shape::new(1, 4, 64, 64).with_heads_kv(2);
    let rows = shape.batch * shape.heads * shape.seq_q;
    let owned = Owned::new(&gpu, shape.q_len() + 1, shape.q_len() + 1, rows + 1);
    let exact = {
        let mut raw = owned.raw(&gpu);
        raw.q.len = shape.q_len();
        raw.k.len = shape.kv_len();
        raw.v.len = shape.kv_len();
        raw.out.len = shape.q_len();
        raw.lse = raw.lse.map(|lse| RawBuffer::new(lse.ptr, rows));
        raw
    };
    let stream = gpu.stream().clone();
    let wrap = |raw: RawTensors| {
        // Safety: every buffer of `owned` holds one element more than `exact` names, lives until
        // the end of the test, and is used on the GPU's stream only.
        unsafe { gpu.tensors_from_raw(&stream, Layout::Bhsd, shape, DType::F16, raw) }
    };
    let params = Params {
        causal: false,
        scale: None,
        ..Params::default()
    };
    // Exact lengths are taken and run.
    let mut tensors = wrap(exact).unwrap();
    gpu.forward(&mut tensors, params, None).unwrap();
    gpu.synchronize().unwrap();
    for delta in [-1isize, 1] {
        let off = |buffer: RawBuffer<u16>| {
            RawBuffer::new(buffer.ptr, buffer.len.checked_add_signed(delta).unwrap())
        };
        let lse = exact.lse.unwrap();
        let cases = [
            (
                "q",
                RawTensors {
                    q: off(exact.q),
                    ..exact
                },
            ),
            (
                "k",
                RawTensors {
                    k: off(exact.k),
                    ..exact
                },
            ),
            (
                "v",
                RawTensors {
                    v: off(exact.v),
                    ..exact
                },
            ),
            (
                "out",
                RawTensors {
                    out: off(exact.out),
                    ..exact
                },
            ),
            (
                "lse",
                RawTensors {
                    lse: Some(RawBuffer::new(
                        lse.ptr,
                        lse.len.checked_add_signed(delta).unwrap(),
                    )),
                    ..exact
                },
            ),
        ];
        for (what, raw) in cases {
            match wrap(raw) {
                Err(Error::Length { what: named, .. }) => assert_eq!(named, what, "off by {delta}"),
                other => panic!("{what} off by {delta}: {:?}", other.err()),
            }
        }
    }
    // K and V sized for every query head, though the shape has half as many key/value heads.
    let kv_as_q = RawTensors {
        k: RawBuffer::new(exact.k.ptr, shape.q_len()),
        ..exact
    };
    assert!(matches!(wrap(kv_as_q), Err(Error::Length { what: "k", .. })));
    // An address 2 bytes in (still within the allocation, lengths right) is misaligned.
    let shifted = RawTensors {
        out: RawBuffer::new(exact.out.ptr + 2, exact.out.len),
        ..exact
    };
    assert!(matches!(
        wrap(shifted),
        Err(Error::Misaligned { what: "out", .. })
    ));
    // The barrier log of a counted launch, one record short (where this build has the twin).
    let variant = &VARIANTS[0];
    let Ok(kernel) = gpu.kernel(variant, shape.head_dim, DType::F16, true) else {
        assert!(!variant.counted_built);
        return;
    };
    let blocks = {
        let config = flashrs::gpu::launch_config(&kernel, shape);
        (config.grid_dim.0 * config.grid_dim.1 * config.grid_dim.2) as usize
    };
    let mut short_log = gpu
        .stream()
        .alloc_zeros::<u32>(flashrs::gpu::RECORD_WORDS * blocks - 1)
        .unwrap();
    let err = gpu.launch(&kernel, &mut tensors, params, Some(&mut short_log));
    assert!(
        matches!(
            err,
            Err(Error::Length {
                what: "barrier log",
                ..
            })
        ),
        "{:?}",
        err.err()
    );
    // Host data of the wrong length for the safe constructor.
    let one = DType::F16.encode(1.0);
    let (q, kv) = (vec![one; shape.q_len()], vec![one; shape.kv_len()]);
    for (what, [q, k, v]) in [
        ("q", [&q[1..], &kv[..], &kv[..]]),
        ("k", [&q[..], &q[..], &kv[..]]),
        ("v", [&q[..], &kv[..], &kv[1..]]),
    ] {
        match gpu.tensors(shape, DType::F16, q, k, v) {
            Err(Error::Length { what: named, .. }) => assert_eq!(named, what),
            other => panic!("{what}: {:?}", other.err()),
        }
    }
    drop(tensors);
    drop(owned);
}

/// Caller-owned buffers on the caller's own stream give what the library's own buffers give, and
/// dropping the `Tensors` leaves the caller's buffers allocated.
#[test]
#[ignore = "needs an NVIDIA GPU (run with --ignored on a GPU machine)"]
fn caller_buffers_on_the_callers_stream_match_owned_ones() {
    let gpu = gpu();
    let shape = Shape::new(2, 4, 100, 64).with_heads_kv(2);
    let params = Params {
        causal: true,
        scale: None,
        ..Params::default()
    };
    let mut rng = StdRng::seed_from_u64(7);
    let dtype = DType::F16;
    let (mut owned_tensors, expected) = problem(&gpu, shape, params, dtype, &mut rng);
    gpu.request_lse(&mut owned_tensors).unwrap();
    gpu.forward(&mut owned_tensors, params, None).unwrap();
    let want_out = gpu.download(owned_tensors.out()).unwrap();
    let want_lse = gpu.download(owned_tensors.lse().unwrap()).unwrap();

    let caller_stream = gpu.context().new_stream().unwrap();
    let rows = shape.batch * shape.heads * shape.seq_q;
    let buffers = Owned {
        q: caller_stream
            .clone_htod(&gpu.download(owned_tensors.q()).unwrap())
            .unwrap(),
        k: caller_stream
            .clone_htod(&gpu.download(owned_tensors.k()).unwrap())
            .unwrap(),
        v: caller_stream
            .clone_htod(&gpu.download(owned_tensors.v()).unwrap())
            .unwrap(),
        out: caller_stream.alloc_zeros(shape.q_len()).unwrap(),
        lse: caller_stream.alloc_zeros(rows).unwrap(),
    };
    let raw = buffers.raw(&gpu);
    // Safety: `buffers` hold exactly these lengths, outlive `tensors`, and are used on
    // `caller_stream` only.
    let mut tensors =
        unsafe { gpu.tensors_from_raw(&caller_stream, Layout::Bhsd, shape, dtype, raw) }.unwrap();
    assert_eq!(**tensors.stream(), *caller_stream);
    gpu.forward(&mut tensors, params, None).unwrap();
    assert_eq!(gpu.download(tensors.out()).unwrap(), want_out);
    assert_eq!(gpu.download(tensors.lse().unwrap()).unwrap(), want_lse);
    let cmp = reference::compare(&widen(dtype, &want_out), &expected);
    assert!(cmp.passes(dtype.tolerance()), "{cmp:?}");
    // Timing records events on the GPU's own stream: refused for the caller's.
    let kernel = gpu.kernel(&VARIANTS[0], 64, dtype, false).unwrap();
    assert!(matches!(
        gpu.time_launches(&kernel, &mut tensors, params, 0, 1),
        Err(Error::InvalidProblem(_))
    ));
    drop(tensors);
    // Still the caller's: readable after the wrapper is gone.
    assert_eq!(caller_stream.clone_dtoh(&buffers.out).unwrap(), want_out);
}

#[test]
#[ignore = "needs an NVIDIA GPU (run with --ignored on a GPU machine)"]
fn cublas_path_matches_the_reference() {
    let gpu = gpu();
    let mut rng = StdRng::seed_from_u64(rand::rng().random());
    for (shape, causal, dtype) in [
        (Shape::new(1, 3, 77, 64), true, DType::F16),
        (Shape::new(2, 2, 130, 128), false, DType::F16),
        (Shape::new(1, 2, 100, 64), true, DType::Bf16),
    ] {
        let params = Params {
            causal,
            scale: None,
            ..Params::default()
        };
        let (mut tensors, expected) = problem(&gpu, shape, params, dtype, &mut rng);
        let mut path = flashrs_lab::cublas::CublasAttention::new(&gpu, shape, dtype)
            .expect("libcublas on the library path");
        path.launch(&gpu, &mut tensors, params).unwrap();
        let cmp = reference::compare(&widen(dtype, &gpu.download(tensors.out()).unwrap()), &expected);
        assert!(
            cmp.passes(dtype.tolerance()),
            "cublas on {shape} causal={causal} {dtype}: {cmp:?}"
        );
    }
}

/// The cuTENSOR path (where libcutensor.so.2 is on the library path; a note otherwise): grouped
/// heads, S_q != S_k, both layouts and dtypes, against float64 on a NaN-poisoned output; asking
/// it for the log-sum-exp is a typed error.
#[test]
#[ignore = "needs an NVIDIA GPU (run with --ignored on a GPU machine)"]
fn cutensor_path_matches_the_reference() {
    if let Err(e) = flashrs_lab::cutensor::available() {
        println!("note: not run: {e}");
        return;
    }
    let gpu = gpu();
    let seed: u64 = rand::rng().random();
    let mut rng = StdRng::seed_from_u64(seed);
    let grouped = Shape {
        seq_k: 141,
        ..Shape::new(2, 6, 77, 64).with_heads_kv(2)
    };
    for (shape, causal, dtype) in [
        (grouped, true, DType::F16),
        (grouped, false, DType::Bf16),
        (Shape::new(1, 2, 130, 128), true, DType::Bf16),
        (Shape::new(1, 4, 1, 64).with_heads_kv(1), false, DType::F16),
    ] {
        let params = Params {
            causal,
            scale: None,
            ..Params::default()
        };
        let (q, k, v) = (
            random(shape.q_len(), dtype, &mut rng),
            random(shape.kv_len(), dtype, &mut rng),
            random(shape.kv_len(), dtype, &mut rng),
        );
        let expected = reference::attention_f64(
            &widen(dtype, &q),
            &widen(dtype, &k),
            &widen(dtype, &v),
            shape.reference_dims(),
            causal,
            params.scale_for(shape.head_dim) as f64,
        );
        let mut path = flashrs_lab::cutensor::CutensorAttention::new(&gpu, shape, dtype).unwrap();
        let (b, d) = (shape.batch, shape.head_dim);
        for layout in [Layout::Bhsd, Layout::Bshd] {
            let (lq, lk, lv) = (
                layout.from_bhsd(&q, b, shape.heads, shape.seq_q, d),
                layout.from_bhsd(&k, b, shape.heads_kv, shape.seq_k, d),
                layout.from_bhsd(&v, b, shape.heads_kv, shape.seq_k, d),
            );
            let mut tensors = gpu.tensors_in(layout, shape, dtype, &lq, &lk, &lv).unwrap();
            // Twice: the second launch reuses the plans made by the first.
            for run in 0..2 {
                gpu.poison(&mut tensors).unwrap();
                path.launch(&gpu, &mut tensors, params).unwrap();
                let out = widen(dtype, &gpu.download(tensors.out()).unwrap());
                let out = layout.to_bhsd(&out, b, shape.heads, shape.seq_q, d);
                let cmp = reference::compare(&out, &expected);
                assert!(
                    cmp.passes(dtype.tolerance()),
                    "cutensor run {run} on {shape} causal={causal} {dtype} {layout} (seed {seed}): {cmp:?}"
                );
            }
            gpu.request_lse(&mut tensors).unwrap();
            assert!(matches!(
                path.launch(&gpu, &mut tensors, params),
                Err(LabError::Flashrs(Error::InvalidProblem(_)))
            ));
        }
    }
}

/// NaN in the inputs propagates like torch's SDPA: a NaN in query row r makes row r NaN (its
/// scores are all NaN) and leaves every other row exact; documented in the README.
#[test]
#[ignore = "needs an NVIDIA GPU (run with --ignored on a GPU machine)"]
fn nan_in_a_query_row_poisons_that_row_only() {
    let gpu = gpu();
    let shape = Shape::new(1, 2, 150, 64);
    let dtype = DType::F16;
    let mut rng = StdRng::seed_from_u64(3);
    let (mut q, k, v) = (
        random(shape.q_len(), dtype, &mut rng),
        random(shape.kv_len(), dtype, &mut rng),
        random(shape.kv_len(), dtype, &mut rng),
    );
    let (bad_head, bad_row, d) = (1, 37, shape.head_dim);
    let bad = (bad_head * shape.seq_q + bad_row) * d;
    q[bad + 5] = dtype.encode(f32::NAN);
    let params = Params {
        causal: false,
        scale: None,
        ..Params::default()
    };
    let expected = reference::attention_f64(
        &widen(dtype, &q),
        &widen(dtype, &k),
        &widen(dtype, &v),
        shape.reference_dims(),
        false,
        params.scale_for(d) as f64,
    );
    let mut tensors = gpu.tensors(shape, dtype, &q, &k, &v).unwrap();
    for variant in runnable(&gpu, shape) {
        gpu.poison(&mut tensors).unwrap();
        gpu.forward(&mut tensors, params, Some(variant.name)).unwrap();
        let actual = widen(dtype, &gpu.download(tensors.out()).unwrap());
        assert!(
            actual[bad..bad + d].iter().all(|x| x.is_nan()),
            "{}: the NaN row must come out NaN",
            variant.name
        );
        let others = |x: &[f32]| -> Vec<f32> { [&x[..bad], &x[bad + d..]].concat() };
        let expected_others: Vec<f64> = [&expected[..bad], &expected[bad + d..]].concat();
        let cmp = reference::compare(&others(&actual), &expected_others);
        assert!(
            cmp.passes(dtype.tolerance()),
            "{}: other rows {cmp:?}",
            variant.name
        );
    }
}

/// Tensors of more than 2^31 elements: offsets are 64-bit all the way. One launch of the
/// library's choice on Q, K, V of 2.16e9 elements each (17 GB on the GPU), checked in float64 on
/// rows sampled across the whole tensor, the last head (past element 2^31) included.
#[test]
#[ignore = "needs an NVIDIA GPU (run with --ignored on a GPU machine)"]
fn tensors_over_2_pow_31_elements_index_in_64_bits() {
    let gpu = gpu();
    let shape = Shape::new(1, 16_512, 1024, 128);
    assert!(shape.q_len() > 1 << 31);
    let dtype = DType::F16;
    // A cheap deterministic fill (xorshift), values in [-2, 2): fast enough for 6.5e9 elements.
    let fill = |n: usize, mut state: u64| -> Vec<u16> {
        (0..n)
            .map(|_| {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                dtype.encode(((state >> 40) as f32 / (1u64 << 24) as f32) * 4.0 - 2.0)
            })
            .collect()
    };
    let (q, k, v) = (
        fill(shape.q_len(), 1),
        fill(shape.kv_len(), 2),
        fill(shape.kv_len(), 3),
    );
    let mut tensors = gpu.tensors(shape, dtype, &q, &k, &v).unwrap();
    let params = Params {
        causal: true,
        scale: None,
        ..Params::default()
    };
    let used = gpu.forward(&mut tensors, params, None).unwrap();
    let out = gpu.download(tensors.out()).unwrap();
    let (s, d) = (shape.seq_q, shape.head_dim);
    let scale = params.scale_for(d) as f64;
    let x = |t: &[u16], i: usize| dtype.decode(t[i]) as f64;
    let mut worst = 0.0f64;
    for i in 0..64usize {
        let head = if i == 0 {
            shape.heads - 1
        } else {
            (i * 7919) % shape.heads
        };
        let row = (i * 104_729) % s;
        // Causal, S_q = S_k: keys 0..=row, in float64.
        let scores: Vec<f64> = (0..=row)
            .map(|j| {
                (0..d)
                    .map(|c| x(&q, (head * s + row) * d + c) * x(&k, (head * s + j) * d + c))
                    .sum::<f64>()
                    * scale
            })
            .collect();
        let max = scores.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        let weights: Vec<f64> = scores.iter().map(|z| (z - max).exp()).collect();
        let total: f64 = weights.iter().sum();
        for c in 0..d {
            let expected: f64 = weights
                .iter()
                .enumerate()
                .map(|(j, w)| w * x(&v, (head * s + j) * d + c))
                .sum::<f64>()
                / total;
            let actual = x(&out, (head * s + row) * d + c);
            assert!(
                actual.is_finite(),
                "{}: non-finite output at head {head} row {row}",
                used.name
            );
            worst = worst.max((actual - expected).abs());
        }
    }
    println!(
        "{} on {shape}: 64 sampled rows, max abs error {worst:.2e}",
        used.name
    );
    assert!(
        worst <= dtype.tolerance().max_abs,
        "{}: max abs error {worst}",
        used.name
    );
}

/// A paged KV cache: every flash_decode variant's paged entry point against the float64 paged
/// reference, on pages in a shuffled order with unused pages of NaN (a stray read poisons the
/// output), lengths 0, 1, a page tail and one long enough to split, grouped heads, causal with
/// S_q > 1, block sizes 16, 64 and 256; the LSE too. Then the contiguous path on the same keys
/// gives the same output (all sequences full).
#[test]
#[ignore = "needs an NVIDIA GPU (run with --ignored on a GPU machine)"]
fn paged_kv_cache_matches_the_paged_reference() {
    let gpu = gpu();
    let mut rng = StdRng::seed_from_u64(11);
    for block_size in [16usize, 64, 256] {
        for (heads, heads_kv, seq_q, d, lens) in [
            (8usize, 2usize, 1usize, 128usize, vec![0i32, 1, 3000]),
            (8, 1, 3, 64, vec![2, 257, 40]),
        ] {
            let used: Vec<usize> = lens.iter().map(|&l| (l as usize).div_ceil(block_size)).collect();
            let max_blocks = used.iter().copied().max().unwrap().max(1);
            let num_blocks = used.iter().sum::<usize>() + 2;
            let mut pages: Vec<i32> = (0..num_blocks as i32).collect();
            for i in (1..pages.len()).rev() {
                pages.swap(i, rng.random_range(0..=i));
            }
            let mut table = vec![-1; lens.len() * max_blocks];
            let mut next = pages.iter();
            for (b, &n) in used.iter().enumerate() {
                for j in 0..n {
                    table[b * max_blocks + j] = *next.next().unwrap();
                }
            }
            let cache = flashrs::PagedKv::new(block_size, num_blocks, table, lens.clone()).unwrap();
            let shape = cache.shape(heads, heads_kv, seq_q, d).unwrap();
            let cache_len = cache.cache_len(shape).unwrap();
            for causal in [false, true] {
                let dtype = DType::F16;
                let q = random(shape.q_len(), dtype, &mut rng);
                let mut k = random(cache_len, dtype, &mut rng);
                let mut v = random(cache_len, dtype, &mut rng);
                let page = block_size * heads_kv * d;
                for &unused in next.clone() {
                    let at = unused as usize * page;
                    k[at..at + page].fill(flashrs::gpu::nan(dtype));
                    v[at..at + page].fill(flashrs::gpu::nan(dtype));
                }
                let params = Params {
                    causal,
                    scale: None,
                    ..Params::default()
                };
                let (expected, expected_lse) = reference::paged_attention_f64(
                    &widen(dtype, &q),
                    (&widen(dtype, &k), &widen(dtype, &v)),
                    &cache,
                    shape.reference_dims(),
                    causal,
                    params.scale_for(d) as f64,
                );
                for variant in flashrs::variants::built(flashrs::VARIANTS)
                    .filter(|v| v.family == flashrs::Family::FlashDecode && v.head_dims.contains(&d))
                {
                    let kernel = gpu.paged_kernel(variant, d, dtype, false).unwrap();
                    let mut tensors = gpu
                        .paged_tensors(Layout::Bhsd, shape, dtype, &q, &k, &v, cache.clone())
                        .unwrap();
                    gpu.request_paged_lse(&mut tensors).unwrap();
                    gpu.launch_paged(&kernel, &mut tensors, params, None).unwrap();
                    let out = widen(dtype, &gpu.download(tensors.out()).unwrap());
                    let cmp = reference::compare(&out, &expected);
                    let what = format!(
                        "{} block {block_size} lens {lens:?} causal {causal}",
                        variant.name
                    );
                    assert!(cmp.passes(dtype.tolerance()), "{what}: {cmp:?}");
                    let lse = gpu.download(tensors.lse().unwrap()).unwrap();
                    for (a, r) in lse.iter().zip(&expected_lse) {
                        assert!(
                            (*a as f64 == *r) || (*a as f64 - r).abs() < 1e-3,
                            "{what}: lse {a} vs {r}"
                        );
                    }
                }
            }
        }
    }
}

/// Bad paged input is refused before any launch: a contiguous-only variant, a shape that does
/// not match the cache, caches of the wrong length.
#[test]
#[ignore = "needs an NVIDIA GPU (run with --ignored on a GPU machine)"]
fn paged_bad_input_is_refused_before_any_launch() {
    let gpu = gpu();
    let cache = flashrs::PagedKv::new(16, 2, vec![0, 1], vec![20]).unwrap();
    let shape = cache.shape(4, 2, 1, 64).unwrap();
    let mma = flashrs::variants::built(flashrs::VARIANTS)
        .find(|v| v.family == flashrs::Family::FlashMma)
        .unwrap();
    let err = gpu.paged_kernel(mma, 64, DType::F16, false).err().unwrap();
    assert!(err.to_string().contains("no paged entry point"), "{err}");
    let q = vec![0u16; shape.q_len()];
    let kv = vec![0u16; cache.cache_len(shape).unwrap()];
    let short = vec![0u16; kv.len() - 1];
    let err = gpu
        .paged_tensors(Layout::Bhsd, shape, DType::F16, &q, &short, &kv, cache.clone())
        .err()
        .unwrap();
    assert!(err.to_string().contains("k cache"), "{err}");
    let wrong = Shape { seq_k: 99, ..shape };
    assert!(gpu
        .paged_tensors(Layout::Bhsd, wrong, DType::F16, &q, &kv, &kv, cache)
        .is_err());
}

/// `DecodeOptions::splits`: every count the problem takes as given runs that many slices and
/// matches the reference (every flash_decode variant, both dtypes, causal or not); the default
/// takes the tuned table's or the heuristic's count; counts the problem cannot take, and a count
/// on a kernel that does not split, are refused before any launch.
#[test]
#[ignore = "needs an NVIDIA GPU (run with --ignored on a GPU machine)"]
fn forced_split_counts_match_the_reference_or_are_refused() {
    use flashrs::decode::{without_empty_slices, SplitSource, MAX_SPLITS};
    use flashrs::{DecodeOptions, Family};
    let gpu = gpu();
    let mut rng = StdRng::seed_from_u64(rand::rng().random());
    // Grouped, two queries per head, a key tail: 16 or 32 packed rows per KV head.
    let shape = Shape {
        seq_q: 2,
        seq_k: 3000,
        ..Shape::new(1, 16, 2, 64).with_heads_kv(2)
    };
    let decode = flashrs::variants::built(flashrs::VARIANTS)
        .filter(|v| v.family == Family::FlashDecode && v.min_arch <= gpu.arch && v.head_dims.contains(&64));
    for variant in decode {
        for dtype in DType::ALL {
            for causal in [false, true] {
                let params = Params {
                    causal,
                    scale: None,
                    ..Params::default()
                };
                let (mut tensors, expected) = problem(&gpu, shape, params, dtype, &mut rng);
                let kernel = gpu.kernel(variant, 64, dtype, false).unwrap();
                let default = gpu.split_plan(&kernel, shape, DecodeOptions::default()).unwrap();
                assert_ne!(default.source, SplitSource::Forced);
                let tiles = default.kv_tiles;
                let counts = (1..=tiles.min(MAX_SPLITS)).filter(|&s| without_empty_slices(tiles, s) == s);
                for splits in counts {
                    let options = DecodeOptions { splits: Some(splits) };
                    let plan = gpu.split_plan(&kernel, shape, options).unwrap();
                    assert_eq!((plan.splits, plan.source), (splits, SplitSource::Forced));
                    gpu.poison(&mut tensors).unwrap();
                    gpu.launch_with(&kernel, &mut tensors, params, None, options)
                        .unwrap();
                    let what = format!("{} {dtype} causal={causal} {splits} slices", variant.name);
                    assert_output_matches(&gpu, &tensors, &expected, &what);
                }
                for refused in [0, tiles + 1, MAX_SPLITS + 1] {
                    let options = DecodeOptions {
                        splits: Some(refused),
                    };
                    let err = gpu
                        .launch_with(&kernel, &mut tensors, params, None, options)
                        .unwrap_err();
                    assert!(matches!(err, Error::InvalidProblem(_)), "{refused}: {err}");
                }
            }
        }
    }
    // A kernel that does not split the keys takes no count.
    let regular = flashrs::variants::built(flashrs::VARIANTS)
        .find(|v| v.family == Family::FlashMma && v.head_dims.contains(&64))
        .unwrap();
    let params = Params {
        causal: false,
        scale: None,
        ..Params::default()
    };
    let (mut tensors, _) = problem(&gpu, shape, params, DType::F16, &mut rng);
    let kernel = gpu.kernel(regular, 64, DType::F16, false).unwrap();
    let options = DecodeOptions { splits: Some(2) };
    let err = gpu
        .launch_with(&kernel, &mut tensors, params, None, options)
        .unwrap_err();
    assert!(err.to_string().contains("does not split the keys"), "{err}");
    assert!(gpu.split_plan(&kernel, shape, DecodeOptions::default()).is_err());
}

#[test]
#[ignore = "needs an NVIDIA GPU (run with --ignored on a GPU machine)"]
fn persistent_tail_split_matches_the_reference() {
    use flashrs::launch::tail_split;
    use flashrs::Family;
    let gpu = gpu();
    let mut rng = StdRng::seed_from_u64(rand::rng().random());
    let persistent = flashrs::variants::built(flashrs::VARIANTS)
        .filter(|v| v.family == Family::FlashWs && v.persistent && v.min_arch <= gpu.arch);
    for variant in persistent {
        for &head_dim in variant.head_dims {
            // One block per SM: a round of `sm_count` items and 3 more, the last row block of
            // each head short, the keys not a whole number of tiles; grouped heads.
            let heads = gpu.sm_count.div_ceil(3) + 1;
            let shape = Shape {
                seq_q: 3 * variant.block_m as usize - 17,
                seq_k: 9 * variant.block_n as usize + 5,
                ..Shape::new(1, heads, 1, head_dim).with_heads_kv(1)
            };
            let items = 3 * heads as u32;
            let tiles = shape.seq_k.div_ceil(variant.block_n as usize) as u32;
            let slices = tail_split::slices(items, gpu.sm_count as u32, tiles);
            assert!(
                slices >= 2,
                "{}: the shape must split ({items} items)",
                variant.name
            );
            for dtype in DType::ALL {
                let params = Params {
                    causal: false,
                    scale: None,
                    ..Params::default()
                };
                let (mut tensors, expected, lse_expected) =
                    problem_with_lse(&gpu, shape, params, dtype, &mut rng);
                // Twice: the first launch must leave its slice counters at 0 for the second, and
                // the merge must not depend on which slice finished last.
                let mut first: Option<Vec<u16>> = None;
                for launch in 0..2 {
                    gpu.poison(&mut tensors).unwrap();
                    gpu.forward(&mut tensors, params, Some(variant.name)).unwrap();
                    let what = format!(
                        "{} on {shape} {dtype}, {slices} slices, launch {launch}",
                        variant.name
                    );
                    assert_output_matches(&gpu, &tensors, &expected, &what);
                    let lse = gpu.download(tensors.lse().unwrap()).unwrap();
                    for (row, (&a, &r)) in lse.iter().zip(&lse_expected).enumerate() {
                        assert!((a as f64 - r).abs() <= 1e-3, "{what}: lse row {row}: {a} vs {r}");
                    }
                    let out = gpu.download(tensors.out()).unwrap();
                    match &first {
                        Some(first) => assert!(*first == out, "{what}: not bit-identical to launch 0"),
                        None => first = Some(out),
                    }
                }
            }
        }
    }
}

/// The lower layer's ways to reach a kernel with a buffer it was not given are refused before any
/// launch: a counted kernel with no barrier log, a varlen entry point handed to the dense launch,
/// a copy of a variant with other tiles, and varlen tensors another `Gpu` made.
#[test]
#[ignore = "needs an NVIDIA GPU (run with --ignored on a GPU machine)"]
fn the_lower_layer_refuses_what_would_reach_memory_it_was_not_given() {
    let gpu = gpu();
    let mut rng = StdRng::seed_from_u64(7);
    let shape = Shape::new(1, 2, 128, 64);
    let params = Params {
        causal: false,
        scale: None,
        ..Params::default()
    };
    let (mut tensors, _) = problem(&gpu, shape, params, DType::F16, &mut rng);
    let variant = flashrs::variants::built(flashrs::VARIANTS)
        .find(|v| v.head_dims.contains(&64) && v.min_arch <= gpu.arch && v.has_varlen_at(64))
        .expect("a variant with a varlen entry point at head dim 64");
    let message = |result: flashrs::Result<()>| result.unwrap_err().to_string();

    // A counted kernel launched without its log: refused, or not in this build at all.
    match gpu.kernel(variant, 64, DType::F16, true) {
        Ok(counted) => {
            let refused = message(gpu.launch(&counted, &mut tensors, params, None));
            assert!(refused.contains("counts barriers"), "{refused}");
        }
        Err(err) => assert!(
            matches!(err, Error::NotBuilt { .. }) && !variant.counted_built,
            "{err}"
        ),
    }

    let varlen = gpu.varlen_kernel(variant, 64, DType::F16, false).unwrap();
    let refused = message(gpu.launch(varlen.kernel(), &mut tensors, params, None));
    assert!(
        refused.contains("is a varlen entry point, launched as dense"),
        "{refused}"
    );

    let mut copy = *variant;
    copy.spec.block_m *= 2;
    let leaked: &'static flashrs::variants::VariantSpec = Box::leak(Box::new(copy));
    let refused = gpu
        .kernel(leaked, 64, DType::F16, false)
        .err()
        .unwrap()
        .to_string();
    assert!(refused.contains("differs from the compiled one"), "{refused}");

    let batch = flashrs::VarlenBatch::new(vec![0, 3, 10], vec![0, 5, 9]).unwrap();
    let (heads, d) = (2, 64);
    let q = random(10 * heads * d, DType::F16, &mut rng);
    let kv = random(9 * heads * d, DType::F16, &mut rng);
    let mut packed = gpu
        .varlen_tensors(batch, (heads, heads, d), DType::F16, (&q, &kv, &kv))
        .unwrap();
    // Another Gpu of the same device launches them on their own stream, ordered with their
    // buffers (one of another device would be refused: its context is not theirs); so does the
    // Gpu that made them, with the same result.
    let other = Gpu::open_with(0, flashrs::GpuOptions::from_env()).unwrap();
    let other_kernel = other.varlen_kernel(variant, 64, DType::F16, false).unwrap();
    other
        .launch_varlen(&other_kernel, &mut packed, params, None)
        .unwrap();
    let first = gpu.download(packed.out()).unwrap();
    gpu.launch_varlen(&varlen, &mut packed, params, None).unwrap();
    assert_eq!(gpu.download(packed.out()).unwrap(), first);
}
