//! GPU tests of the backward pass (`flashrs::backward`): dQ, dK and dV against the float64
//! gradients on fresh random inputs (fp16 and bf16, head dims 64, 128 and 256, causal and not,
//! S_q != S_k, grouped- and multi-query attention, both layouts, rows that see no key), every
//! element written (the gradients start as NaN on the raw path), the deterministic mode
//! bit-identical over repeats, and the raw path's refusals. `#[ignore]`d like `tests/gpu.rs`:
//! they run on a GPU machine with `--ignored`. `FLASHRS_REPEATS` sets the determinism repeats
//! (default 20).

use cudarc::driver::{CudaSlice, DevicePtr};
use flashrs::api::{attention, bf16, f16, DeviceTensor, Element, LseBuffer, TensorView};
use flashrs::backward::{
    attention_backward, attention_backward_raw, workspace_bytes, BackwardOptions, BackwardViews,
};
use flashrs::{Error, Gpu, Layout, Shape};
use flashrs_lab::backward_reference::attention_backward_f64;
use flashrs_lab::reference::{self, Comparison, ReferenceDims};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

fn gpu() -> Gpu {
    Gpu::open_with(0, flashrs::GpuOptions::from_env())
        .unwrap_or_else(|e| panic!("these tests need a GPU: {e}"))
}

trait Half: Element {
    fn from_f32(x: f32) -> Self;
    fn to_f32(self) -> f32;
    fn nan() -> Self;
    /// Most relative L2 error of a gradient against float64: the type's rounding of P and dS
    /// before their products (2^-11 or 2^-8 relative per element, mostly averaging out) and of
    /// the gradient itself.
    const REL_L2: f64;
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
    const REL_L2: f64 = 2e-3;
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
    const REL_L2: f64 = 1.5e-2;
}

fn random<T: Half>(n: usize, rng: &mut StdRng) -> Vec<T> {
    (0..n)
        .map(|_| T::from_f32(rng.random_range(-2.0f32..2.0)))
        .collect()
}

fn widen<T: Half>(x: &[T]) -> Vec<f32> {
    x.iter().map(|&e| e.to_f32()).collect()
}

fn seeded() -> (u64, StdRng) {
    let seed = std::env::var("FLASHRS_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| rand::rng().random());
    (seed, StdRng::seed_from_u64(seed))
}

/// One backward problem on the GPU: the forward's inputs, output and log-sum-exp, and dO, with
/// the host copies (`[B, H, S, D]` order) the reference needs.
struct Case<T: Half> {
    shape: Shape,
    layout: Layout,
    causal: bool,
    q: DeviceTensor<T>,
    k: DeviceTensor<T>,
    v: DeviceTensor<T>,
    out: DeviceTensor<T>,
    lse: LseBuffer,
    d_out: DeviceTensor<T>,
    host: [Vec<f32>; 4],
}

fn case<T: Half>(gpu: &Gpu, shape: Shape, layout: Layout, causal: bool, rng: &mut StdRng) -> Case<T> {
    let q_dims = [shape.batch, shape.heads, shape.seq_q, shape.head_dim];
    let kv_dims = [shape.batch, shape.heads_kv, shape.seq_k, shape.head_dim];
    let host: [Vec<T>; 4] = [
        random(shape.q_len(), rng),
        random(shape.kv_len(), rng),
        random(shape.kv_len(), rng),
        random(shape.q_len(), rng),
    ];
    let upload = |data: &[T], [b, h, s, d]: [usize; 4]| {
        DeviceTensor::from_host(gpu, &layout.from_bhsd(data, b, h, s, d), [b, h, s, d], layout).unwrap()
    };
    let (q, k, v) = (
        upload(&host[0], q_dims),
        upload(&host[1], kv_dims),
        upload(&host[2], kv_dims),
    );
    let d_out = upload(&host[3], q_dims);
    let mut lse = LseBuffer::for_queries(gpu, &q).unwrap();
    let out = attention(&q, &k, &v)
        .causal(causal)
        .lse(&mut lse)
        .run(gpu)
        .unwrap();
    Case {
        shape,
        layout,
        causal,
        q,
        k,
        v,
        out,
        lse,
        d_out,
        host: host.map(|h| widen(&h)),
    }
}

impl<T: Half> Case<T> {
    fn options(&self, deterministic: bool) -> BackwardOptions {
        BackwardOptions {
            causal: self.causal,
            scale: None,
            deterministic,
        }
    }

    fn backward(&self, gpu: &Gpu, deterministic: bool) -> [Vec<T>; 3] {
        let grads = attention_backward(
            gpu,
            [&self.q, &self.k, &self.v],
            &self.out,
            &self.lse,
            &self.d_out,
            self.options(deterministic),
        )
        .unwrap();
        [&grads.d_q, &grads.d_k, &grads.d_v].map(|t| t.to_host().unwrap())
    }

    /// Each gradient's comparison with the float64 one, in `[B, H, S, D]` order.
    fn compare(&self, grads: &[Vec<T>; 3]) -> [Comparison; 3] {
        let s = self.shape;
        let [q, k, v, d_out] = &self.host;
        let scale = 1.0 / (s.head_dim as f64).sqrt();
        let expected = attention_backward_f64((q, k, v), d_out, s.reference_dims(), self.causal, scale);
        let bhsd = |data: &[T], heads: usize, seq: usize| {
            widen(&self.layout.to_bhsd(data, s.batch, heads, seq, s.head_dim))
        };
        [
            reference::compare(&bhsd(&grads[0], s.heads, s.seq_q), &expected.d_q),
            reference::compare(&bhsd(&grads[1], s.heads_kv, s.seq_k), &expected.d_k),
            reference::compare(&bhsd(&grads[2], s.heads_kv, s.seq_k), &expected.d_v),
        ]
    }

    fn check(&self, grads: &[Vec<T>; 3], what: &str) {
        for (name, cmp) in ["dq", "dk", "dv"].iter().zip(self.compare(grads)) {
            println!(
                "{what}: {} {} {} causal {}: {name} rel_l2 {:.2e} max_abs {:.2e}",
                self.shape,
                T::DTYPE,
                self.layout,
                self.causal,
                cmp.rel_l2_err,
                cmp.max_abs_err
            );
            assert!(
                cmp.non_finite == 0 && cmp.rel_l2_err <= T::REL_L2,
                "{what}: {name} on {} {} {} causal {}: {cmp:?}",
                self.shape,
                T::DTYPE,
                self.layout,
                self.causal
            );
        }
    }
}

fn shape(batch: usize, heads: usize, heads_kv: usize, seq_q: usize, seq_k: usize, head_dim: usize) -> Shape {
    Shape {
        batch,
        heads,
        heads_kv,
        seq_q,
        seq_k,
        head_dim,
    }
}

/// Shapes with ragged tiles (S not a multiple of 64), S_q != S_k both ways, GQA and MQA.
fn shapes(head_dim: usize) -> Vec<Shape> {
    vec![
        shape(2, 4, 4, 256, 256, head_dim),
        shape(1, 4, 2, 200, 331, head_dim),
        shape(2, 6, 1, 129, 70, head_dim),
        shape(1, 2, 2, 1, 190, head_dim),
    ]
}

fn every_shape<T: Half>(what: &str) {
    let gpu = gpu();
    let (seed, mut rng) = seeded();
    println!("seed {seed}");
    for head_dim in flashrs::backward::HEAD_DIMS.iter().copied() {
        for (i, s) in shapes(head_dim).into_iter().enumerate() {
            for causal in [false, true] {
                let layout = if i % 2 == 0 { Layout::Bhsd } else { Layout::Bshd };
                let case = case::<T>(&gpu, s, layout, causal, &mut rng);
                let grads = case.backward(&gpu, false);
                case.check(&grads, &format!("{what} (seed {seed})"));
            }
        }
    }
}

#[test]
#[ignore = "needs an NVIDIA GPU (run with --ignored on a GPU machine)"]
fn f16_gradients_match_float64_on_every_head_dim_and_shape() {
    every_shape::<f16>("f16");
}

#[test]
#[ignore = "needs an NVIDIA GPU (run with --ignored on a GPU machine)"]
fn bf16_gradients_match_float64_on_every_head_dim_and_shape() {
    every_shape::<bf16>("bf16");
}

/// Causal with S_q > S_k: the first rows see no key, and their dQ is zero, not NaN.
#[test]
#[ignore = "needs an NVIDIA GPU (run with --ignored on a GPU machine)"]
fn rows_that_see_no_key_get_a_zero_gradient() {
    let gpu = gpu();
    let (_, mut rng) = seeded();
    let s = shape(1, 2, 2, 300, 100, 128);
    let case = case::<bf16>(&gpu, s, Layout::Bhsd, true, &mut rng);
    let grads = case.backward(&gpu, false);
    case.check(&grads, "fully masked rows");
    // Row r sees keys 0..=r + S_k - S_q: rows below 200 see none.
    for head in 0..2 {
        let rows = &grads[0][head * 300 * 128..][..200 * 128];
        assert!(rows.iter().all(|g| g.to_f32() == 0.0), "head {head}");
    }
}

/// The deterministic mode gives the same bits on every run, at every head dim; the default
/// mode's gradients agree with them to rounding.
#[test]
#[ignore = "needs an NVIDIA GPU (run with --ignored on a GPU machine)"]
fn deterministic_gradients_are_bit_identical_over_repeats() {
    let gpu = gpu();
    let (seed, mut rng) = seeded();
    let repeats: usize = std::env::var("FLASHRS_REPEATS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(20);
    for head_dim in flashrs::backward::HEAD_DIMS.iter().copied() {
        for causal in [false, true] {
            // Many key blocks per query tile, so that the order of their additions matters.
            let s = shape(1, 4, 2, 512, 1024, head_dim);
            let case = case::<bf16>(&gpu, s, Layout::Bshd, causal, &mut rng);
            let first = case.backward(&gpu, true);
            case.check(&first, &format!("deterministic (seed {seed})"));
            for repeat in 1..repeats {
                let again = case.backward(&gpu, true);
                for (name, (a, b)) in ["dq", "dk", "dv"].iter().zip(first.iter().zip(&again)) {
                    let same = a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits());
                    assert!(
                        same,
                        "d {head_dim} causal {causal}: {name} differs on repeat {repeat}"
                    );
                }
            }
            println!("d {head_dim} causal {causal}: {repeats} deterministic runs bit-identical");
        }
    }
}

fn address<T>(gpu: &Gpu, buffer: &CudaSlice<T>) -> u64 {
    buffer.device_ptr(gpu.stream()).0
}

/// The raw path on caller memory: gradients start as NaN (so an unwritten element fails), the
/// workspace is the caller's, and a refused call (short workspace, dO of other dims) launches
/// nothing and leaves the NaN in place.
#[test]
#[ignore = "needs an NVIDIA GPU (run with --ignored on a GPU machine)"]
fn the_raw_path_writes_every_element_and_refuses_bad_calls() {
    let gpu = gpu();
    let (_, mut rng) = seeded();
    let s = shape(2, 8, 2, 333, 250, 64);
    let case = case::<f16>(&gpu, s, Layout::Bhsd, true, &mut rng);
    let nan = |len: usize| gpu.upload(&vec![f16::nan(); len]).unwrap();
    let (d_q, d_k, d_v) = (nan(s.q_len()), nan(s.kv_len()), nan(s.kv_len()));
    let workspace = gpu.upload(&vec![f32::NAN; workspace_bytes(s) / 4]).unwrap();
    let view = |buffer: &CudaSlice<f16>, dims: [usize; 4]| {
        // Safety: a live buffer of `dims` elements on this GPU, until the stream is synchronised.
        unsafe { TensorView::from_raw(address(&gpu, buffer), dims, Layout::Bhsd) }
    };
    let (q_dims, kv_dims) = (case.q.dims(), case.k.dims());
    let views = BackwardViews {
        q: case.q.view(),
        k: case.k.view(),
        v: case.v.view(),
        out: case.out.view(),
        d_out: case.d_out.view(),
        lse: case.lse.device_address(),
        d_q: view(&d_q, q_dims),
        d_k: view(&d_k, kv_dims),
        d_v: view(&d_v, kv_dims),
    };
    let ws = address(&gpu, &workspace);
    let stream = gpu.stream().cu_stream() as *mut std::ffi::c_void;
    // Refused: a workspace one float short, and dO with one row fewer.
    // Safety: every address is a live buffer of this GPU of the dims its view says.
    let short = unsafe {
        attention_backward_raw(
            &gpu,
            views,
            ws,
            workspace_bytes(s) - 4,
            case.options(false),
            stream,
        )
    };
    assert!(matches!(short, Err(Error::Incompatible(_))), "{short:?}");
    let mut bad = views;
    bad.d_out = view(&d_q, [2, 8, 332, 64]);
    // Safety: as above.
    let bad =
        unsafe { attention_backward_raw(&gpu, bad, ws, workspace_bytes(s), case.options(false), stream) };
    assert!(matches!(bad, Err(Error::Incompatible(_))), "{bad:?}");
    assert!(
        gpu.download(&d_q).unwrap().iter().all(|x| x.is_nan()),
        "a refused call wrote dq"
    );
    // Safety: as above.
    unsafe { attention_backward_raw(&gpu, views, ws, workspace_bytes(s), case.options(false), stream) }
        .unwrap();
    let grads = [&d_q, &d_k, &d_v].map(|b| gpu.download(b).unwrap());
    case.check(&grads, "raw path");
}
