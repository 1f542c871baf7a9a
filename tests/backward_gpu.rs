//! GPU tests of the backward pass (`flashrs::backward`): dQ, dK and dV against the float64
//! gradients on fresh random inputs (fp16 and bf16, head dims 64, 128 and 256, causal and not,
//! S_q != S_k, grouped- and multi-query attention, both layouts, rows that see no key), every
//! element written (the gradients start as NaN on the raw path), the deterministic mode
//! bit-identical over repeats, and the raw path's refusals. `#[ignore]`d like `tests/gpu.rs`:
//! they run on a GPU machine with `--ignored`. `FLASHRS_REPEATS` sets the determinism repeats
//! (default 20).

use cudarc::driver::{CudaSlice, DevicePtr};
use flashrs::api::{bf16, f16, TensorView};
use flashrs::backward::{attention_backward_raw, workspace_bytes, BackwardViews};
use flashrs::{Error, Gpu, Layout, Shape, Window};
use flashrs_lab::backward_check::{bit_identical, maskings, passes, shapes, Case, Half, Masking};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

fn gpu() -> Gpu {
    Gpu::open_with(0, flashrs::GpuOptions::from_env())
        .unwrap_or_else(|e| panic!("these tests need a GPU: {e}"))
}

fn seeded() -> (u64, StdRng) {
    let seed = std::env::var("FLASHRS_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| rand::rng().random());
    (seed, StdRng::seed_from_u64(seed))
}

fn case<T: Half>(
    gpu: &Gpu,
    shape: Shape,
    layout: Layout,
    masking: impl Into<Masking>,
    rng: &mut StdRng,
) -> Case<T> {
    Case::new(gpu, shape, layout, masking, rng).unwrap()
}

/// Checks each gradient of `case` against float64, printing its errors.
fn check<T: Half>(case: &Case<T>, grads: &[Vec<T>; 3], what: &str) {
    for (name, cmp) in ["dq", "dk", "dv"].iter().zip(case.compare(grads)) {
        println!(
            "{what}: {} {} {} {}: {name} rel_l2 {:.2e} max_abs {:.2e}",
            case.shape,
            T::DTYPE,
            case.layout,
            case.masking,
            cmp.rel_l2_err,
            cmp.max_abs_err
        );
        assert!(
            passes::<T>(&cmp),
            "{what}: {name} on {} {} {} {}: {cmp:?}",
            case.shape,
            T::DTYPE,
            case.layout,
            case.masking
        );
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
        head_dim_v: head_dim,
    }
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
                let grads = case.backward(&gpu, false).unwrap();
                check(&case, &grads, &format!("{what} (seed {seed})"));
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

/// Sliding windows (left only, both sides, with and without causal) and softcaps, on every head
/// dim and dtype: the gradients against float64 under the same mask and softcap.
#[test]
#[ignore = "needs an NVIDIA GPU (run with --ignored on a GPU machine)"]
fn gradients_match_float64_under_windows_and_softcaps() {
    let gpu = gpu();
    let (seed, mut rng) = seeded();
    println!("seed {seed}");
    for head_dim in flashrs::backward::HEAD_DIMS.iter().copied() {
        let problems = shapes(head_dim);
        for (i, masking) in maskings().into_iter().enumerate() {
            let s = problems[i % problems.len()];
            let layout = if i % 2 == 0 { Layout::Bshd } else { Layout::Bhsd };
            let what = format!("windows and softcaps (seed {seed})");
            let half = case::<f16>(&gpu, s, layout, masking, &mut rng);
            check(&half, &half.backward(&gpu, false).unwrap(), &what);
            let brain = case::<bf16>(&gpu, s, layout, masking, &mut rng);
            check(&brain, &brain.backward(&gpu, true).unwrap(), &what);
        }
    }
}

/// Causal with S_q > S_k: the first rows see no key, and their dQ is zero, not NaN.
#[test]
#[ignore = "needs an NVIDIA GPU (run with --ignored on a GPU machine)"]
fn rows_that_see_no_key_get_a_zero_gradient() {
    let gpu = gpu();
    let (_, mut rng) = seeded();
    let s = shape(1, 2, 2, 300, 100, 128);
    let case = case::<bf16>(&gpu, s, Layout::Bhsd, true, &mut rng);
    let grads = case.backward(&gpu, false).unwrap();
    check(&case, &grads, "fully masked rows");
    // Row r sees keys 0..=r + S_k - S_q: rows below 200 see none.
    for head in 0..2 {
        let rows = &grads[0][head * 300 * 128..][..200 * 128];
        assert!(rows.iter().all(|g| g.to_f32() == 0.0), "head {head}");
    }
}

/// The deterministic mode gives the same bits on every run, at every head dim, causal or not and
/// under a sliding window (whose query tiles are walked by key blocks from the one holding the
/// first row's first key, not from key block 0); the default mode's gradients agree with them
/// to rounding.
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
        let window = Masking {
            causal: true,
            window: Window {
                left: Some(200),
                right: None,
            },
            softcap: None,
        };
        for masking in [false.into(), true.into(), window] {
            // Many key blocks per query tile, so that the order of their additions matters.
            let s = shape(1, 4, 2, 512, 1024, head_dim);
            let case = case::<bf16>(&gpu, s, Layout::Bshd, masking, &mut rng);
            let first = case.backward(&gpu, true).unwrap();
            check(&case, &first, &format!("deterministic (seed {seed})"));
            for repeat in 1..repeats {
                let again = case.backward(&gpu, true).unwrap();
                assert!(
                    bit_identical(&first, &again),
                    "d {head_dim} {masking:?}: the gradients differ on repeat {repeat}"
                );
            }
            println!("d {head_dim} {masking:?}: {repeats} deterministic runs bit-identical");
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
    check(&case, &grads, "raw path");
}
