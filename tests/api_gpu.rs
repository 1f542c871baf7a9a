//! GPU tests of the typed API (`flashrs::api`): the builder against the float64 reference (dense,
//! varlen and paged calls), `attention_raw` on views against the builder on every kind of
//! stream, and mismatched inputs refused before a launch. `#[ignore]`d like `tests/gpu.rs`: they
//! need an NVIDIA GPU and run there with `--ignored`.

use std::ffi::c_void;

use cudarc::driver::{CudaSlice, DevicePtr};
use flashrs::api::{
    attention, attention_raw, bf16, f16, paged_attention, varlen_attention, DeviceTensor, Element, LseBuffer,
    PackedTensor, PagedCache, RawOptions, TensorView,
};
use flashrs::{
    paged_attention_raw, varlen_attention_raw, CacheView, DType, Error, Gpu, Layout, PackedView, PagedKv,
    Shape, VarlenBatch,
};
use flashrs_lab::reference::{self, DTypeTolerance, Dims, ReferenceDims};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

fn gpu() -> Gpu {
    Gpu::open_with(0, flashrs::GpuOptions::from_env())
        .unwrap_or_else(|e| panic!("these tests need a GPU: {e}"))
}

/// How the tests make and read elements of either type.
trait Half: Element {
    fn from_f32(x: f32) -> Self;
    fn to_f32(self) -> f32;
    fn nan() -> Self;
}

impl Half for f16 {
    fn from_f32(x: f32) -> Self {
        f16::from_f32(x)
    }
    fn to_f32(self) -> f32 {
        f16::to_f32(self)
    }
    fn nan() -> Self {
        f16::NAN
    }
}

impl Half for bf16 {
    fn from_f32(x: f32) -> Self {
        bf16::from_f32(x)
    }
    fn to_f32(self) -> f32 {
        bf16::to_f32(self)
    }
    fn nan() -> Self {
        bf16::NAN
    }
}

/// Random elements in `[-2, 2)`, stored in `[B, H, S, D]` order.
fn random<T: Half>(n: usize, rng: &mut StdRng) -> Vec<T> {
    (0..n)
        .map(|_| T::from_f32(rng.random_range(-2.0f32..2.0)))
        .collect()
}

fn widen<T: Half>(x: &[T]) -> Vec<f32> {
    x.iter().map(|&e| e.to_f32()).collect()
}

/// One call's inputs on the host in `[B, H, S, D]` order, their reference output and
/// log-sum-exp, and the device tensors in `layout`.
struct Case<T: Half> {
    shape: Shape,
    layout: Layout,
    q: DeviceTensor<T>,
    k: DeviceTensor<T>,
    v: DeviceTensor<T>,
    expected: Vec<f64>,
    expected_lse: Vec<f64>,
}

fn case<T: Half>(gpu: &Gpu, shape: Shape, layout: Layout, causal: bool, rng: &mut StdRng) -> Case<T> {
    let q: Vec<T> = random(shape.q_len(), rng);
    let k: Vec<T> = random(shape.kv_len(), rng);
    let v: Vec<T> = random(shape.kv_len(), rng);
    let scale = 1.0 / (shape.head_dim as f64).sqrt();
    let dims = shape.reference_dims();
    let (qf, kf, vf) = (widen(&q), widen(&k), widen(&v));
    let expected = reference::attention_f64(&qf, &kf, &vf, dims, causal, scale);
    let expected_lse = reference::log_sum_exp_f64(&qf, &kf, dims, causal, scale);
    let q_dims = [shape.batch, shape.heads, shape.seq_q, shape.head_dim];
    let kv_dims = [shape.batch, shape.heads_kv, shape.seq_k, shape.head_dim];
    let upload = |data: &[T], [b, h, s, d]: [usize; 4]| {
        DeviceTensor::from_host(gpu, &layout.from_bhsd(data, b, h, s, d), [b, h, s, d], layout).unwrap()
    };
    Case {
        shape,
        layout,
        q: upload(&q, q_dims),
        k: upload(&k, kv_dims),
        v: upload(&v, kv_dims),
        expected,
        expected_lse,
    }
}

impl<T: Half> Case<T> {
    /// An output poisoned with NaN, so that an element no kernel writes fails the comparison.
    fn poisoned_out(&self, gpu: &Gpu) -> DeviceTensor<T> {
        let dims = self.q.dims();
        DeviceTensor::from_host(gpu, &vec![T::nan(); self.shape.q_len()], dims, self.layout).unwrap()
    }

    /// Checks `out` (in the case's layout) against the reference.
    fn check(&self, out: &DeviceTensor<T>, what: &str) {
        assert_eq!(out.dims(), self.q.dims(), "{what}");
        assert_eq!(out.layout(), self.layout, "{what}");
        let s = self.shape;
        let host = self
            .layout
            .to_bhsd(&out.to_host().unwrap(), s.batch, s.heads, s.seq_q, s.head_dim);
        let cmp = reference::compare(&widen(&host), &self.expected);
        assert!(
            cmp.passes(T::DTYPE.tolerance()),
            "{what} on {s} {} {}: {cmp:?}",
            T::DTYPE,
            self.layout
        );
    }

    /// The builder's call with a log-sum-exp: the output and the log-sum-exp.
    fn run_with_lse(&self, gpu: &Gpu, causal: bool) -> (DeviceTensor<T>, LseBuffer) {
        let mut lse = LseBuffer::for_queries(gpu, &self.q).unwrap();
        let out = attention(&self.q, &self.k, &self.v)
            .causal(causal)
            .lse(&mut lse)
            .run(gpu)
            .unwrap();
        (out, lse)
    }

    fn check_lse(&self, lse: &LseBuffer, what: &str) {
        assert_lse(lse, &self.expected_lse, &format!("{what} on {}", self.shape));
    }
}

/// Every row of `lse` within 1e-3 of the reference's, or equal to it (`-inf` for a row that sees
/// no key).
fn assert_lse(lse: &LseBuffer, expected: &[f64], what: &str) {
    let rows = lse.to_host().unwrap();
    assert_eq!(rows.len(), expected.len(), "{what}");
    for (row, (&a, &r)) in rows.iter().zip(expected).enumerate() {
        let ok = (a as f64 == r) || (a as f64 - r).abs() <= 1e-3;
        assert!(ok, "{what}: lse row {row}: {a} vs {r}");
    }
}

fn seeded() -> (u64, StdRng) {
    let seed = rand::rng().random();
    (seed, StdRng::seed_from_u64(seed))
}

#[test]
#[ignore = "needs an NVIDIA GPU (run with --ignored on a GPU machine)"]
fn plain_f16_matches_the_reference() {
    let gpu = gpu();
    let (seed, mut rng) = seeded();
    for shape in [Shape::new(2, 4, 200, 64), Shape::new(1, 3, 77, 128)] {
        let case: Case<f16> = case(&gpu, shape, Layout::Bhsd, false, &mut rng);
        let out = attention(&case.q, &case.k, &case.v).run(&gpu).unwrap();
        case.check(&out, &format!("run, seed {seed}"));
        // Into a NaN-poisoned output, which must be fully overwritten.
        let mut into = case.poisoned_out(&gpu);
        let variant = attention(&case.q, &case.k, &case.v)
            .run_into(&gpu, &mut into)
            .unwrap();
        case.check(&into, &format!("run_into ({}), seed {seed}", variant.name));
        // Every compiled variant this GPU runs, named through the builder.
        for variant in flashrs::variants::built(flashrs::VARIANTS)
            .filter(|v| v.head_dims.contains(&shape.head_dim) && v.min_arch <= gpu.arch)
        {
            let mut out = case.poisoned_out(&gpu);
            let ran = attention(&case.q, &case.k, &case.v)
                .kernel(variant)
                .run_into(&gpu, &mut out)
                .unwrap();
            assert_eq!(ran.name, variant.name);
            case.check(&out, &format!("{}, seed {seed}", variant.name));
        }
    }
}

#[test]
#[ignore = "needs an NVIDIA GPU (run with --ignored on a GPU machine)"]
fn grouped_query_causal_bf16_with_log_sum_exp_matches_the_reference() {
    let gpu = gpu();
    let (seed, mut rng) = seeded();
    for shape in [
        Shape::new(2, 8, 150, 64).with_heads_kv(2),
        Shape::new(1, 8, 300, 128).with_heads_kv(1),
    ] {
        let case: Case<bf16> = case(&gpu, shape, Layout::Bhsd, true, &mut rng);
        let mut lse = LseBuffer::for_queries(&gpu, &case.q).unwrap();
        assert_eq!(lse.dims(), [shape.batch, shape.heads, shape.seq_q]);
        let out = attention(&case.q, &case.k, &case.v)
            .causal(true)
            .lse(&mut lse)
            .run(&gpu)
            .unwrap();
        case.check(&out, &format!("seed {seed}"));
        case.check_lse(&lse, &format!("seed {seed}"));
    }
}

#[test]
#[ignore = "needs an NVIDIA GPU (run with --ignored on a GPU machine)"]
fn bshd_layout_matches_the_reference() {
    let gpu = gpu();
    let (seed, mut rng) = seeded();
    let shape = Shape::new(2, 6, 133, 64).with_heads_kv(3);
    for causal in [false, true] {
        let case: Case<f16> = case(&gpu, shape, Layout::Bshd, causal, &mut rng);
        let (out, lse) = case.run_with_lse(&gpu, causal);
        case.check(&out, &format!("causal={causal}, seed {seed}"));
        case.check_lse(&lse, &format!("causal={causal}, seed {seed}"));
    }
}

#[test]
#[ignore = "needs an NVIDIA GPU (run with --ignored on a GPU machine)"]
fn different_query_and_key_lengths_match_the_reference() {
    let gpu = gpu();
    let (seed, mut rng) = seeded();
    let cross = |seq_q, seq_k, head_dim| Shape {
        seq_q,
        seq_k,
        ..Shape::new(1, 4, 1, head_dim)
    };
    // S_q > S_k with a causal mask: the first query rows see no key and must be zeros.
    for (shape, causal) in [
        (cross(100, 37, 64), true),
        (cross(37, 150, 128), true),
        (cross(1, 500, 64), false),
    ] {
        let case: Case<f16> = case(&gpu, shape, Layout::Bhsd, causal, &mut rng);
        let mut out = case.poisoned_out(&gpu);
        attention(&case.q, &case.k, &case.v)
            .causal(causal)
            .run_into(&gpu, &mut out)
            .unwrap();
        case.check(&out, &format!("causal={causal}, seed {seed}"));
    }
}

#[test]
#[ignore = "needs an NVIDIA GPU (run with --ignored on a GPU machine)"]
fn mismatched_inputs_are_refused_before_a_launch() {
    let gpu = gpu();
    let (case, mut rng) = small_grouped_case(&gpu, 7);
    let mut tensor = |dims: [usize; 4], layout| {
        let n = dims.iter().product();
        DeviceTensor::<f16>::from_host(&gpu, &random(n, &mut rng), dims, layout).unwrap()
    };
    let kv_bshd = tensor([1, 2, 64, 64], Layout::Bshd);
    let kv_long = tensor([1, 2, 65, 64], Layout::Bhsd);
    let kv_three_heads = tensor([1, 3, 64, 64], Layout::Bhsd);
    let kv_batch_two = tensor([2, 2, 64, 64], Layout::Bhsd);
    let kv_d128 = tensor([1, 2, 64, 128], Layout::Bhsd);
    let (q, k, v) = (&case.q, &case.k, &case.v);
    // k and v in another layout than q: read through the copy engine on Hopper (checked by
    // `mixed_layouts_and_strided_views_match_the_reference`), refused in one line elsewhere.
    if gpu.arch < 90 {
        let err = attention(q, &kv_bshd, &kv_bshd).run(&gpu).unwrap_err();
        assert!(matches!(err, Error::Incompatible(_)), "{err}");
    }
    let refused: Vec<(&str, &DeviceTensor<f16>, &DeviceTensor<f16>)> = vec![
        ("k and v dims", k, &kv_long),
        ("heads", &kv_three_heads, &kv_three_heads),
        ("batch", &kv_batch_two, &kv_batch_two),
        ("head dim", &kv_d128, &kv_d128),
    ];
    let mut out = case.poisoned_out(&gpu);
    for (what, k, v) in refused {
        match attention(q, k, v).run_into(&gpu, &mut out) {
            Err(Error::Incompatible(message)) => assert_eq!(message.lines().count(), 1),
            other => panic!("{what}: {other:?}"),
        }
        assert!(matches!(
            attention(q, k, v).run(&gpu),
            Err(Error::Incompatible(_))
        ));
    }
    // The log-sum-exp shaped for the keys, an output shaped like the keys, a bad scale.
    let mut lse = LseBuffer::new(&gpu, [1, 2, 64]).unwrap();
    assert!(matches!(
        attention(q, k, v).lse(&mut lse).run_into(&gpu, &mut out),
        Err(Error::Incompatible(_))
    ));
    let mut wrong_out = tensor([1, 2, 64, 64], Layout::Bhsd);
    assert!(matches!(
        attention(q, k, v).run_into(&gpu, &mut wrong_out),
        Err(Error::Incompatible(_))
    ));
    assert!(matches!(
        attention(q, k, v).scale(-1.0).run_into(&gpu, &mut out),
        Err(Error::InvalidProblem(_))
    ));
    // Tensors of another Gpu (its own stream) are refused rather than raced.
    let other = gpu_again();
    let foreign = DeviceTensor::<f16>::from_host(
        &other,
        &random(64 * 64 * 2, &mut rng),
        [1, 2, 64, 64],
        Layout::Bhsd,
    )
    .unwrap();
    assert!(matches!(
        attention(q, &foreign, v).run_into(&gpu, &mut out),
        Err(Error::OtherGpu { what: "k" })
    ));
    // Nothing ran: the output is still all NaN.
    let untouched = out.to_host().unwrap();
    assert!(
        untouched.iter().all(|x| x.is_nan()),
        "a refused call wrote the output"
    );
    // Host data that does not fill its dims.
    match DeviceTensor::<bf16>::from_host(&gpu, &[bf16::ZERO; 10], [1, 1, 4, 64], Layout::Bhsd) {
        Err(Error::Length {
            expected: 256,
            actual: 10,
            ..
        }) => {}
        other => panic!("{other:?}"),
    }
    // The same call with the right inputs runs and overwrites every element.
    attention(q, k, v).run_into(&gpu, &mut out).unwrap();
    case.check(&out, "after the refusals");
    assert_eq!(DType::F16, <f16 as Element>::DTYPE);
}

/// The refusal tests' problem, `[1, 4, 64, 64]` queries on 2 key/value heads, and its generator.
fn small_grouped_case(gpu: &Gpu, seed: u64) -> (Case<f16>, StdRng) {
    let mut rng = StdRng::seed_from_u64(seed);
    let shape = Shape::new(1, 4, 64, 64).with_heads_kv(2);
    (case(gpu, shape, Layout::Bhsd, false, &mut rng), rng)
}

/// A second `Gpu` on the same device: same context, another stream.
fn gpu_again() -> Gpu {
    gpu()
}

/// A fresh f32 buffer of `rows` NaNs on `gpu`'s stream, for `attention_raw`'s log-sum-exp.
fn lse_rows(gpu: &Gpu, rows: usize) -> CudaSlice<f32> {
    gpu.upload(&vec![f32::NAN; rows]).unwrap()
}

fn address<T>(gpu: &Gpu, buffer: &CudaSlice<T>) -> u64 {
    buffer.device_ptr(gpu.stream()).0
}

#[test]
#[ignore = "needs an NVIDIA GPU (run with --ignored on a GPU machine)"]
fn attention_raw_on_views_matches_the_safe_path_on_any_stream() {
    let gpu = gpu();
    let (seed, mut rng) = seeded();
    let other = gpu.context().new_stream().unwrap();
    // The GPU's own stream, another stream of its context, and the legacy default stream (null).
    let streams: [(&str, *mut c_void); 3] = [
        ("own", gpu.stream().cu_stream().cast()),
        ("other", other.cu_stream().cast()),
        ("legacy", std::ptr::null_mut()),
    ];
    let decode = Shape {
        seq_q: 1,
        seq_k: 4096,
        ..Shape::new(2, 8, 1, 128).with_heads_kv(2)
    };
    let cases = [
        (Shape::new(2, 4, 200, 64), Layout::Bhsd, false),
        (Shape::new(1, 8, 300, 128).with_heads_kv(2), Layout::Bshd, true),
        // Split over keys (flash_decode and its combine, with a workspace).
        (decode, Layout::Bhsd, false),
    ];
    for (shape, layout, causal) in cases {
        let case: Case<f16> = case(&gpu, shape, layout, causal, &mut rng);
        let (safe, safe_lse) = case.run_with_lse(&gpu, causal);
        let want = safe.to_host().unwrap();
        let want_lse = safe_lse.to_host().unwrap();
        let (chosen, _) = gpu.choose(shape, DType::F16, causal);
        for (name, stream) in streams {
            let what = format!("{shape} {layout} causal={causal} on the {name} stream, seed {seed}");
            let out = case.poisoned_out(&gpu);
            let lse = lse_rows(&gpu, shape.batch * shape.heads * shape.seq_q);
            // The uploads above ran on the GPU's stream, which does not wait for the others.
            gpu.synchronize().unwrap();
            let options = RawOptions {
                causal,
                scale: None,
                ..RawOptions::default()
            };
            // Safety: views of live tensors of this GPU, the output and log-sum-exp distinct
            // buffers of the right sizes; every stream is of this GPU's context (or null), and
            // the context is synchronised below before anything reads or frees them.
            let ran = unsafe {
                attention_raw(
                    &gpu,
                    case.q.view(),
                    case.k.view(),
                    case.v.view(),
                    out.view(),
                    Some(address(&gpu, &lse)),
                    options,
                    stream,
                )
            }
            .unwrap_or_else(|e| panic!("{what}: {e}"));
            gpu.context().synchronize().unwrap();
            assert_eq!(ran.name, chosen.name, "{what}: the safe path's dispatch");
            let got = out.to_host().unwrap();
            assert!(
                got.iter().zip(&want).all(|(a, b)| a.to_bits() == b.to_bits()),
                "{what}: not the safe path's output"
            );
            let got_lse = gpu.download(&lse).unwrap();
            assert!(
                got_lse
                    .iter()
                    .zip(&want_lse)
                    .all(|(a, b)| a.to_bits() == b.to_bits()),
                "{what}: not the safe path's log-sum-exp"
            );
            case.check(&out, &what);
        }
    }
}

/// q, k and v each in their own layout, and k and v as strided views of a longer KV cache (the
/// first `S_k` of `S_k + 37` positions), match the float64 reference on Hopper, whose kernels read
/// them through the copy engine, dense and decode-like, causal and not; a GPU whose kernels read
/// in place refuses them in one line.
#[test]
#[ignore = "needs an NVIDIA GPU (run with --ignored on a GPU machine)"]
fn mixed_layouts_and_strided_views_match_the_reference() {
    let gpu = gpu();
    let (seed, mut rng) = seeded();
    let decode = Shape {
        seq_q: 1,
        seq_k: 1000,
        ..Shape::new(2, 8, 1, 128).with_heads_kv(2)
    };
    for (shape, causal) in [
        (Shape::new(2, 8, 300, 64).with_heads_kv(2), false),
        (Shape::new(1, 4, 200, 128), true),
        (decode, false),
    ] {
        let case: Case<f16> = case(&gpu, shape, Layout::Bhsd, causal, &mut rng);
        let what = format!("{shape} causal={causal}, seed {seed}");
        let [b, h_kv, s_k, d] = case.k.dims();
        let (k_host, v_host) = (case.k.to_host().unwrap(), case.v.to_host().unwrap());
        // 1. k and v contiguous [B, S, H, D] beside [B, H, S, D] q, through the builder.
        let bshd = |data: &[f16]| {
            DeviceTensor::from_host(
                &gpu,
                &Layout::Bshd.from_bhsd(data, b, h_kv, s_k, d),
                [b, h_kv, s_k, d],
                Layout::Bshd,
            )
            .unwrap()
        };
        let (k_bshd, v_bshd) = (bshd(&k_host), bshd(&v_host));
        let mixed = attention(&case.q, &k_bshd, &v_bshd).causal(causal).run(&gpu);
        if gpu.arch < 90 {
            assert!(matches!(mixed, Err(Error::Incompatible(_))), "{what}: {mixed:?}");
            return;
        }
        case.check(
            &mixed.unwrap_or_else(|e| panic!("{what}: {e}")),
            &format!("mixed layouts, {what}"),
        );
        // 2. k and v as views of the first S_k positions of a [B, H_kv, S_k + 37, D] cache.
        let s_max = s_k + 37;
        let cache = |data: &[f16]| {
            let mut host = vec![f16::NAN; b * h_kv * s_max * d];
            for (row, chunk) in data.chunks(d).enumerate() {
                let (head, position) = (row / s_k, row % s_k);
                host[(head * s_max + position) * d..][..d].copy_from_slice(chunk);
            }
            DeviceTensor::from_host(&gpu, &host, [b, h_kv, s_max, d], Layout::Bhsd).unwrap()
        };
        let (k_cache, v_cache) = (cache(&k_host), cache(&v_host));
        let strides = flashrs::Strides([h_kv * s_max * d, s_max * d, d, 1]);
        // Safety: views of the caches' first S_k positions, which the strides reach and the
        // caches hold; the caches live until the GPU is synchronised below.
        let (k_view, v_view) = unsafe {
            (
                TensorView::from_strided(k_cache.view().ptr(), [b, h_kv, s_k, d], strides),
                TensorView::from_strided(v_cache.view().ptr(), [b, h_kv, s_k, d], strides),
            )
        };
        let out = case.poisoned_out(&gpu);
        let options = RawOptions {
            causal,
            scale: None,
            ..RawOptions::default()
        };
        let stream: *mut c_void = gpu.stream().cu_stream().cast();
        // Safety: as above; q and the output are live tensors of this GPU, distinct.
        let ran = unsafe {
            attention_raw(
                &gpu,
                case.q.view(),
                k_view,
                v_view,
                out.view(),
                None,
                options,
                stream,
            )
        }
        .unwrap_or_else(|e| panic!("{what}: {e}"));
        gpu.synchronize().unwrap();
        case.check(&out, &format!("KV cache views, {what}, kernel {}", ran.name));
    }
}

#[test]
#[ignore = "needs an NVIDIA GPU (run with --ignored on a GPU machine)"]
fn attention_raw_refuses_every_buffer_mismatch_before_a_launch() {
    let gpu = gpu();
    let (case, _) = small_grouped_case(&gpu, 11);
    let out = case.poisoned_out(&gpu);
    let lse = lse_rows(&gpu, 4 * 64);
    let lse_ptr = address(&gpu, &lse);
    let (q, k, v) = (case.q.view(), case.k.view(), case.v.view());
    let stream: *mut c_void = gpu.stream().cu_stream().cast();
    let moved = |t: TensorView<'_, f16>, dims: [usize; 4], layout: Layout, offset: u64| {
        // Safety: only passed to calls that refuse it before a launch (asserted below).
        unsafe { TensorView::<f16>::from_raw(t.ptr() + offset, dims, layout) }
    };
    let run = |q, k, v, out, lse, options, stream| {
        // Safety: every call here is refused by its checks before anything is launched (the
        // assertions below fail otherwise); the valid views are of live tensors of this GPU.
        unsafe { attention_raw(&gpu, q, k, v, out, lse, options, stream) }
    };
    let plain = RawOptions::default();
    let o = out.view();
    let kv_dims = k.dims();
    let bhsd = |t, dims| moved(t, dims, Layout::Bhsd, 0);
    // A head dim that is not a multiple of 8 (those that are run, padded where they have no tiles
    // of their own).
    let d36 = [
        bhsd(q, [1, 4, 32, 36]),
        bhsd(k, [1, 2, 32, 36]),
        bhsd(v, [1, 2, 32, 36]),
        bhsd(o, [1, 4, 32, 36]),
    ];
    let negative = RawOptions {
        causal: false,
        scale: Some(-1.0),
        ..RawOptions::default()
    };
    // (what, [q, k, v, out], lse, options)
    let refused = [
        ("out dims", [q, k, v, bhsd(o, [1, 4, 65, 64])], None, plain),
        (
            "out strided",
            // Safety: only passed to calls that refuse it before a launch (asserted below).
            [q, k, v, unsafe {
                TensorView::from_strided(o.ptr(), q.dims(), flashrs::Strides([32768, 128, 512, 1]))
            }],
            None,
            plain,
        ),
        ("out like k", [q, k, v, bhsd(o, kv_dims)], None, plain),
        ("k and v", [q, k, bhsd(v, [1, 2, 63, 64]), o], None, plain),
        (
            "heads",
            [q, bhsd(k, [1, 3, 64, 64]), bhsd(v, [1, 3, 64, 64]), o],
            None,
            plain,
        ),
        ("head dim", d36, None, plain),
        ("scale", [q, k, v, o], None, negative),
        (
            "q misaligned",
            [moved(q, q.dims(), Layout::Bhsd, 2), k, v, o],
            None,
            plain,
        ),
        (
            "out misaligned",
            [q, k, v, moved(o, q.dims(), Layout::Bhsd, 8)],
            None,
            plain,
        ),
        (
            "k null",
            [
                q,
                moved(k, kv_dims, Layout::Bhsd, 0u64.wrapping_sub(k.ptr())),
                v,
                o,
            ],
            None,
            plain,
        ),
        ("lse null", [q, k, v, o], Some(0), plain),
        ("lse misaligned", [q, k, v, o], Some(lse_ptr + 2), plain),
        ("out is q", [q, k, v, bhsd(q, q.dims())], None, plain),
        ("lse inside out", [q, k, v, o], Some(o.ptr() + 64), plain),
    ];
    for (what, [q, k, v, out], lse, options) in refused {
        match run(q, k, v, out, lse, options, stream) {
            Err(e) if !e.is_gpu_fault() => assert_eq!(e.to_string().lines().count(), 1, "{what}"),
            other => panic!("{what}: {other:?}"),
        }
    }
    // A stream of another context: refused, not launched into a context without the kernels.
    let foreign = cudarc::driver::CudaContext::new_non_primary(0, 0).unwrap();
    let foreign_stream = foreign.new_stream().unwrap();
    assert!(matches!(
        run(q, k, v, o, None, plain, foreign_stream.cu_stream().cast()),
        Err(Error::ForeignStream)
    ));
    drop(foreign_stream);
    drop(foreign);
    // Nothing ran: the output and log-sum-exp are still all NaN.
    assert!(
        out.to_host().unwrap().iter().all(|x| x.is_nan()),
        "a refused call wrote the output"
    );
    assert!(gpu.download(&lse).unwrap().iter().all(|x| x.is_nan()));
    // The same views, right, run.
    run(q, k, v, o, Some(lse_ptr), plain, stream).unwrap();
    case.check(&out, "after the refusals");
}

/// The lengths of `lens` (keys), as a random page permutation of a cache of `block_size`-key
/// pages with two pages no sequence uses: the table (`-1` past each sequence's last page) and the
/// page count.
fn random_pages(lens: &[i32], block_size: usize, rng: &mut StdRng) -> (Vec<i32>, usize) {
    let used: Vec<usize> = lens.iter().map(|&l| (l as usize).div_ceil(block_size)).collect();
    let max_blocks = used.iter().copied().max().unwrap_or(0).max(1);
    let num_blocks = used.iter().sum::<usize>() + 2;
    let mut pages: Vec<i32> = (0..num_blocks as i32).collect();
    for i in (1..pages.len()).rev() {
        pages.swap(i, rng.random_range(0..=i));
    }
    let mut next = pages.into_iter();
    let mut table = vec![-1; lens.len() * max_blocks];
    for (b, &n) in used.iter().enumerate() {
        for slot in &mut table[b * max_blocks..][..n] {
            *slot = next.next().unwrap();
        }
    }
    (table, num_blocks)
}

#[test]
#[ignore = "needs an NVIDIA GPU (run with --ignored on a GPU machine)"]
fn varlen_calls_match_the_reference_per_sequence() {
    let gpu = gpu();
    let (seed, mut rng) = seeded();
    // An empty sequence, a single row, queries shorter than their keys (causal alignment per
    // sequence), and a long one with a tail.
    let (lens_q, lens_k) = ([17, 0, 300, 1], [40, 5, 300, 1]);
    let (heads, heads_kv, d) = (8, 2, 128);
    let batch = VarlenBatch::from_lengths(&lens_q, &lens_k).unwrap();
    let (total_q, total_k) = (batch.total_q(), batch.total_k());
    let q: Vec<f16> = random(total_q * heads * d, &mut rng);
    let k: Vec<f16> = random(total_k * heads_kv * d, &mut rng);
    let v: Vec<f16> = random(total_k * heads_kv * d, &mut rng);
    let dims = Dims {
        batch: 1,
        heads,
        heads_kv,
        seq_q: 0,
        seq_k: 0,
        head_dim: d,
    };
    let scale = 1.0 / (d as f64).sqrt();
    let (expected, expected_lse) =
        reference::varlen_attention_f64((&widen(&q), &widen(&k), &widen(&v)), &batch, dims, true, scale);
    let dq = PackedTensor::from_host(&gpu, &q, [total_q, heads, d]).unwrap();
    let dk = PackedTensor::from_host(&gpu, &k, [total_k, heads_kv, d]).unwrap();
    let dv = PackedTensor::from_host(&gpu, &v, [total_k, heads_kv, d]).unwrap();
    let check = |out: &PackedTensor<f16>, what: &str| {
        assert_eq!(out.dims(), [total_q, heads, d]);
        let cmp = reference::compare(&widen(&out.to_host().unwrap()), &expected);
        assert!(cmp.passes(DType::F16.tolerance()), "{what}, seed {seed}: {cmp:?}");
    };
    let mut lse = LseBuffer::for_packed(&gpu, &dq).unwrap();
    assert_eq!(lse.dims(), [1, heads, total_q]);
    let run_out = varlen_attention(&dq, &dk, &dv, &batch)
        .causal(true)
        .lse(&mut lse)
        .run(&gpu)
        .unwrap();
    check(&run_out, "run");
    assert_lse(&lse, &expected_lse, &format!("seed {seed}"));
    // Every variant with a varlen entry point on this GPU, named, into a NaN-poisoned output.
    for variant in flashrs::varlen::varlen_variants(d, gpu.arch) {
        let mut into = PackedTensor::from_host(&gpu, &vec![f16::NAN; q.len()], [total_q, heads, d]).unwrap();
        let ran = varlen_attention(&dq, &dk, &dv, &batch)
            .causal(true)
            .kernel(variant)
            .run_into(&gpu, &mut into)
            .unwrap();
        assert_eq!(ran.name, variant.name);
        check(&into, variant.name);
    }
    // Prefix sums that do not end at the packed rows, and a kernel without a varlen entry point:
    // refused before a launch, the output untouched.
    let mut out = PackedTensor::from_host(&gpu, &vec![f16::NAN; q.len()], [total_q, heads, d]).unwrap();
    let short = VarlenBatch::from_lengths(&[17, 0, 299, 1], &lens_k).unwrap();
    assert!(matches!(
        varlen_attention(&dq, &dk, &dv, &short).run_into(&gpu, &mut out),
        Err(Error::Incompatible(_))
    ));
    let dense_only = flashrs::variants::built(flashrs::VARIANTS)
        .find(|v| !v.has_varlen() && v.head_dims.contains(&d))
        .unwrap();
    assert!(matches!(
        varlen_attention(&dq, &dk, &dv, &batch)
            .kernel(dense_only)
            .run_into(&gpu, &mut out),
        Err(Error::InvalidProblem(_))
    ));
    assert!(
        out.to_host().unwrap().iter().all(|x| x.is_nan()),
        "a refused call wrote the output"
    );
    varlen_raw_matches_the_safe_path(&gpu, [&dq, &dk, &dv], &batch, (&run_out, &lse));
}

/// Asserts a raw path's output and log-sum-exp are the safe path's, bit for bit.
fn assert_same_bits<T: Half>((out, lse): (Vec<T>, Vec<f32>), (want, want_lse): (Vec<T>, Vec<f32>)) {
    let bits = |x: Vec<T>| x.into_iter().map(|x| x.to_f32().to_bits()).collect::<Vec<_>>();
    assert_eq!(bits(out), bits(want), "raw output");
    let lse_bits = |x: Vec<f32>| x.into_iter().map(f32::to_bits).collect::<Vec<_>>();
    assert_eq!(lse_bits(lse), lse_bits(want_lse), "raw lse");
}

/// `varlen_attention_raw` on views of the same tensors, on a stream of the caller's, gives the
/// safe path's bits (output and log-sum-exp); a null, misaligned or overlapping view is refused
/// before a launch.
fn varlen_raw_matches_the_safe_path(
    gpu: &Gpu,
    [q, k, v]: [&PackedTensor<f16>; 3],
    batch: &VarlenBatch,
    (want, want_lse): (&PackedTensor<f16>, &LseBuffer),
) {
    let dims = q.dims();
    let rows = dims[0] * dims[1];
    let out = PackedTensor::from_host(gpu, &vec![f16::NAN; rows * dims[2]], dims).unwrap();
    let lse = lse_rows(gpu, rows);
    let caller = gpu.context().new_stream().unwrap();
    gpu.synchronize().unwrap();
    let options = RawOptions {
        causal: true,
        scale: None,
        ..RawOptions::default()
    };
    let run = |q: PackedView<'_, f16>, out: PackedView<'_, f16>, lse: Option<u64>| {
        // Safety: views of live tensors of this GPU (or refused before a launch: asserted by the
        // callers), nothing else running on them; `caller` is synchronised before they drop.
        unsafe {
            varlen_attention_raw(
                gpu,
                q,
                k.view(),
                v.view(),
                out,
                lse,
                batch,
                options,
                caller.cu_stream().cast(),
            )
        }
    };
    run(q.view(), out.view(), Some(address(gpu, &lse))).unwrap();
    caller.synchronize().unwrap();
    assert_same_bits(
        (out.to_host().unwrap(), gpu.download(&lse).unwrap()),
        (want.to_host().unwrap(), want_lse.to_host().unwrap()),
    );
    // Safety (all three): only passed to calls that refuse them before a launch (asserted).
    let null = unsafe { PackedView::<f16>::from_raw(0, dims) };
    let misaligned = unsafe { PackedView::<f16>::from_raw(q.view().ptr() + 2, dims) };
    let onto_q = unsafe { PackedView::<f16>::from_raw(q.view().ptr(), dims) };
    let refused = [
        ("null", null, out.view()),
        ("misaligned", misaligned, out.view()),
        ("overlap", q.view(), onto_q),
    ];
    for (what, q_view, out_view) in refused {
        match run(q_view, out_view, None) {
            Err(e) if !e.is_gpu_fault() => assert_eq!(e.to_string().lines().count(), 1, "{what}"),
            other => panic!("{what}: {other:?}"),
        }
    }
}

#[test]
#[ignore = "needs an NVIDIA GPU (run with --ignored on a GPU machine)"]
fn paged_calls_match_the_reference_per_sequence() {
    let gpu = gpu();
    let (seed, mut rng) = seeded();
    let (heads, heads_kv, seq_q, d, block_size) = (8, 2, 2, 64, 16);
    let lens = [37, 1, 0, 64];
    let (table, num_blocks) = random_pages(&lens, block_size, &mut rng);
    let cache = PagedKv::new(block_size, num_blocks, table, lens.to_vec()).unwrap();
    let cache_dims = [num_blocks, block_size, heads_kv, d];
    let cache_len = cache_dims.iter().product();
    let q: Vec<bf16> = random(lens.len() * heads * seq_q * d, &mut rng);
    let k: Vec<bf16> = random(cache_len, &mut rng);
    let v: Vec<bf16> = random(cache_len, &mut rng);
    let dims = Dims {
        batch: lens.len(),
        heads,
        heads_kv,
        seq_q,
        seq_k: 0,
        head_dim: d,
    };
    let scale = 1.0 / (d as f64).sqrt();
    let (expected, expected_lse) =
        reference::paged_attention_f64(&widen(&q), (&widen(&k), &widen(&v)), &cache, dims, true, scale);
    let q_dims = [lens.len(), heads, seq_q, d];
    let dq = DeviceTensor::from_host(&gpu, &q, q_dims, Layout::Bhsd).unwrap();
    let dk = PagedCache::from_host(&gpu, &k, cache_dims).unwrap();
    let dv = PagedCache::from_host(&gpu, &v, cache_dims).unwrap();
    let check = |out: &DeviceTensor<bf16>, what: &str| {
        let cmp = reference::compare(&widen(&out.to_host().unwrap()), &expected);
        assert!(
            cmp.passes(DType::Bf16.tolerance()),
            "{what}, seed {seed}: {cmp:?}"
        );
    };
    let mut lse = LseBuffer::for_queries(&gpu, &dq).unwrap();
    let run_out = paged_attention(&dq, &dk, &dv, &cache)
        .causal(true)
        .lse(&mut lse)
        .run(&gpu)
        .unwrap();
    check(&run_out, "run");
    assert_lse(&lse, &expected_lse, &format!("seed {seed}"));
    for variant in flashrs::variants::built(flashrs::VARIANTS)
        .filter(|v| v.family == flashrs::Family::FlashDecode && v.head_dims.contains(&d))
    {
        let mut into =
            DeviceTensor::from_host(&gpu, &vec![bf16::NAN; q.len()], q_dims, Layout::Bhsd).unwrap();
        let ran = paged_attention(&dq, &dk, &dv, &cache)
            .causal(true)
            .kernel(variant)
            .run_into(&gpu, &mut into)
            .unwrap();
        assert_eq!(ran.name, variant.name);
        check(&into, variant.name);
    }
    // A table for another cache size, and a kernel that reads no pages: refused before a launch.
    let mut out = DeviceTensor::from_host(&gpu, &vec![bf16::NAN; q.len()], q_dims, Layout::Bhsd).unwrap();
    let bigger = PagedKv::new(
        block_size,
        num_blocks + 1,
        cache.block_table().to_vec(),
        lens.to_vec(),
    )
    .unwrap();
    assert!(matches!(
        paged_attention(&dq, &dk, &dv, &bigger).run_into(&gpu, &mut out),
        Err(Error::Incompatible(_))
    ));
    let dense_only = flashrs::variants::built(flashrs::VARIANTS)
        .find(|v| v.family == flashrs::Family::FlashMma && v.head_dims.contains(&d))
        .unwrap();
    assert!(matches!(
        paged_attention(&dq, &dk, &dv, &cache)
            .kernel(dense_only)
            .run_into(&gpu, &mut out),
        Err(Error::InvalidProblem(_))
    ));
    assert!(
        out.to_host().unwrap().iter().all(|x| x.is_nan()),
        "a refused call wrote the output"
    );
    paged_raw_matches_the_safe_path(&gpu, &dq, [&dk, &dv], &cache, (&run_out, &lse));
}

/// `paged_attention_raw` on views of the same tensors, on a stream of the caller's, gives the
/// safe path's bits (output and log-sum-exp); a cache view of the wrong dims is refused before
/// a launch.
fn paged_raw_matches_the_safe_path(
    gpu: &Gpu,
    q: &DeviceTensor<bf16>,
    [k, v]: [&PagedCache<bf16>; 2],
    cache: &PagedKv,
    (want, want_lse): (&DeviceTensor<bf16>, &LseBuffer),
) {
    let out = DeviceTensor::from_host(
        gpu,
        &vec![bf16::NAN; q.dims().iter().product()],
        q.dims(),
        q.layout(),
    )
    .unwrap();
    let lse = lse_rows(gpu, want_lse.dims().iter().product());
    let caller = gpu.context().new_stream().unwrap();
    gpu.synchronize().unwrap();
    let options = RawOptions {
        causal: true,
        scale: None,
        ..RawOptions::default()
    };
    // Safety: views of live tensors of this GPU, nothing else running on them; `caller` is
    // synchronised before they drop.
    unsafe {
        paged_attention_raw(
            gpu,
            q.view(),
            k.view(),
            v.view(),
            out.view(),
            Some(address(gpu, &lse)),
            cache,
            options,
            caller.cu_stream().cast(),
        )
    }
    .unwrap();
    caller.synchronize().unwrap();
    assert_same_bits(
        (out.to_host().unwrap(), gpu.download(&lse).unwrap()),
        (want.to_host().unwrap(), want_lse.to_host().unwrap()),
    );
    let mut dims = k.dims();
    dims[0] -= 1;
    // Safety: only passed to a call that refuses it before a launch (asserted).
    let short = unsafe { CacheView::<bf16>::from_raw(k.view().ptr(), dims) };
    let refused = unsafe {
        paged_attention_raw(
            gpu,
            q.view(),
            short,
            short,
            out.view(),
            None,
            cache,
            options,
            caller.cu_stream().cast(),
        )
    };
    assert!(matches!(refused, Err(Error::Incompatible(_))), "{refused:?}");
}

#[test]
#[ignore = "needs an NVIDIA GPU (run with --ignored on a GPU machine)"]
fn attention_over_key_chunks_merged_equals_attention_over_all_keys() {
    let gpu = gpu();
    let (seed, mut rng) = seeded();
    let (b, h, h_kv, s_q, s_k, d, cut) = (2, 8, 2, 100, 700, 128, 250);
    let shape = Shape {
        seq_k: s_k,
        ..Shape::new(b, h, s_q, d).with_heads_kv(h_kv)
    };
    let q: Vec<f16> = random(shape.q_len(), &mut rng);
    let k: Vec<f16> = random(shape.kv_len(), &mut rng);
    let v: Vec<f16> = random(shape.kv_len(), &mut rng);
    let scale = 1.0 / (d as f64).sqrt();
    let dims = shape.reference_dims();
    let expected = reference::attention_f64(&widen(&q), &widen(&k), &widen(&v), dims, false, scale);
    let expected_lse = reference::log_sum_exp_f64(&widen(&q), &widen(&k), dims, false, scale);
    // Keys `range` of every (batch, KV head), [B, H_kv, S, D].
    let chunk = |x: &[f16], range: std::ops::Range<usize>| -> Vec<f16> {
        x.chunks(s_k * d)
            .flat_map(|head| head[range.start * d..range.end * d].to_vec())
            .collect()
    };
    let upload = |x: &[f16], dims: [usize; 4]| DeviceTensor::from_host(&gpu, x, dims, Layout::Bhsd).unwrap();
    let dq = upload(&q, [b, h, s_q, d]);
    let partial = |range: std::ops::Range<usize>| {
        let n = range.len();
        let (dk, dv) = (
            upload(&chunk(&k, range.clone()), [b, h_kv, n, d]),
            upload(&chunk(&v, range), [b, h_kv, n, d]),
        );
        let mut lse = LseBuffer::for_queries(&gpu, &dq).unwrap();
        let out = attention(&dq, &dk, &dv).lse(&mut lse).run(&gpu).unwrap();
        (out, lse)
    };
    let (a, b_side) = (partial(0..cut), partial(cut..s_k));
    let (out, lse) = flashrs::merge_states(&gpu, (&a.0, &a.1), (&b_side.0, &b_side.1)).unwrap();
    let cmp = reference::compare(&widen(&out.to_host().unwrap()), &expected);
    assert!(cmp.passes(DType::F16.tolerance()), "seed {seed}: {cmp:?}");
    assert_lse(&lse, &expected_lse, &format!("merged, seed {seed}"));
    // Log-sum-exps of other rows than the outputs': refused before a launch.
    let short = LseBuffer::new(&gpu, [b, h, s_q - 1]).unwrap();
    assert!(matches!(
        flashrs::merge_states(&gpu, (&a.0, &short), (&b_side.0, &b_side.1)),
        Err(Error::Incompatible(_))
    ));
}
