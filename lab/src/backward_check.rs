//! One backward problem on a GPU, checked against the float64 gradients
//! ([`crate::backward_reference`]): the forward's inputs, output and log-sum-exp and a dO, all
//! from fresh random values in (-2, 2), and the comparison of the library's dQ, dK and dV with
//! float64. `host verify --backward` and the library's GPU tests (`tests/backward_gpu.rs`) share
//! it.

use flashrs::api::{attention, bf16, f16, DeviceTensor, Element, LseBuffer};
use flashrs::backward::{attention_backward, BackwardOptions};
use flashrs::{Gpu, Layout, Shape, Window};
use rand::rngs::StdRng;
use rand::Rng;

use crate::backward_reference::attention_backward_f64;
use crate::reference::{self, Comparison, ReferenceDims};

/// A 16-bit element type the backward takes, with what its check needs.
pub trait Half: Element {
    /// Rounds to the type.
    fn from_f32(x: f32) -> Self;
    /// Widens.
    fn to_f32(self) -> f32;
    /// A NaN, to poison a buffer with.
    fn nan() -> Self;
    /// The value's bits.
    fn bits(self) -> u16;
    /// The most relative L2 error of a gradient against float64: the type's rounding of P and
    /// dS before their products (2^-11 or 2^-8 relative per element, mostly averaging out) and
    /// of the gradient itself.
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
    fn bits(self) -> u16 {
        self.to_bits()
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
    fn bits(self) -> u16 {
        self.to_bits()
    }
    const REL_L2: f64 = 1.5e-2;
}

/// The backward's problems at head dim `head_dim`: ragged tiles (S not a multiple of 64), S_q
/// above and below S_k, grouped- and multi-query attention, a single query row.
pub fn shapes(head_dim: usize) -> Vec<Shape> {
    let shape = |batch, heads, heads_kv, seq_q, seq_k| Shape {
        batch,
        heads,
        heads_kv,
        seq_q,
        seq_k,
        head_dim,
        head_dim_v: head_dim,
    };
    vec![
        shape(2, 4, 4, 256, 256),
        shape(1, 4, 2, 200, 331),
        shape(2, 6, 1, 129, 70),
        shape(1, 2, 2, 1, 190),
    ]
}

/// `n` values uniform in (-2, 2), rounded to `T`.
pub fn random<T: Half>(n: usize, rng: &mut StdRng) -> Vec<T> {
    (0..n)
        .map(|_| T::from_f32(rng.random_range(-2.0f32..2.0)))
        .collect()
}

/// Widens a slice.
pub fn widen<T: Half>(x: &[T]) -> Vec<f32> {
    x.iter().map(|&e| e.to_f32()).collect()
}

/// A case's mask and score modifier: the causal mask, a sliding window, a logit softcap.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Masking {
    /// The bottom-right causal mask.
    pub causal: bool,
    /// A sliding window (none by default).
    pub window: Window,
    /// A logit softcap.
    pub softcap: Option<f32>,
}

impl From<bool> for Masking {
    /// The causal mask or none, nothing else.
    fn from(causal: bool) -> Self {
        Masking {
            causal,
            ..Masking::default()
        }
    }
}

impl Masking {
    /// The float64 reference's description of the same mask.
    pub fn reference(&self) -> reference::Mask {
        reference::Mask {
            causal: self.causal,
            left: self.window.left.map(|l| l as usize),
            right: self.window.right.map(|r| r as usize),
            softcap: self.softcap.map(f64::from),
        }
    }
}

impl std::fmt::Display for Masking {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let side = |s: Option<u32>| s.map_or("-1".to_string(), |s| s.to_string());
        write!(f, "{}", if self.causal { "causal" } else { "full" })?;
        if self.window.is_bounded() {
            write!(
                f,
                " window ({}, {})",
                side(self.window.left),
                side(self.window.right)
            )?;
        }
        if let Some(cap) = self.softcap {
            write!(f, " softcap {cap}")?;
        }
        Ok(())
    }
}

/// One backward problem on the GPU: the forward's inputs, output and log-sum-exp, and dO, with
/// the host copies (`[B, H, S, D]` order) the reference needs.
pub struct Case<T: Half> {
    /// The problem's dims.
    pub shape: Shape,
    /// The memory order of every tensor.
    pub layout: Layout,
    /// The mask and softcap of the forward (and so of the backward).
    pub masking: Masking,
    /// The forward's inputs.
    pub q: DeviceTensor<T>,
    /// See `q`.
    pub k: DeviceTensor<T>,
    /// See `q`.
    pub v: DeviceTensor<T>,
    /// The forward's output.
    pub out: DeviceTensor<T>,
    /// The forward's log-sum-exp of each query row.
    pub lse: LseBuffer,
    /// The gradient of the loss by the output.
    pub d_out: DeviceTensor<T>,
    /// Q, K, V and dO as uploaded, widened, `[B, H, S, D]`.
    pub host: [Vec<f32>; 4],
}

impl<T: Half> Case<T> {
    /// Fresh random Q, K, V and dO in `layout`, and the forward's output and log-sum-exp.
    pub fn new(
        gpu: &Gpu,
        shape: Shape,
        layout: Layout,
        masking: impl Into<Masking>,
        rng: &mut StdRng,
    ) -> flashrs::Result<Self> {
        let masking = masking.into();
        let q_dims = [shape.batch, shape.heads, shape.seq_q, shape.head_dim];
        let kv_dims = [shape.batch, shape.heads_kv, shape.seq_k, shape.head_dim];
        let host: [Vec<T>; 4] = [
            random(shape.q_len(), rng),
            random(shape.kv_len(), rng),
            random(shape.kv_len(), rng),
            random(shape.q_len(), rng),
        ];
        let upload = |data: &[T], [b, h, s, d]: [usize; 4]| {
            DeviceTensor::from_host(gpu, &layout.from_bhsd(data, b, h, s, d), [b, h, s, d], layout)
        };
        let (q, k, v) = (
            upload(&host[0], q_dims)?,
            upload(&host[1], kv_dims)?,
            upload(&host[2], kv_dims)?,
        );
        let d_out = upload(&host[3], q_dims)?;
        let mut lse = LseBuffer::for_queries(gpu, &q)?;
        let mut forward = attention(&q, &k, &v)
            .causal(masking.causal)
            .window(masking.window.left, masking.window.right)
            .lse(&mut lse);
        if let Some(cap) = masking.softcap {
            forward = forward.softcap(cap);
        }
        let out = forward.run(gpu)?;
        Ok(Case {
            shape,
            layout,
            masking,
            q,
            k,
            v,
            out,
            lse,
            d_out,
            host: host.map(|h| widen(&h)),
        })
    }

    /// The backward options of this case.
    pub fn options(&self, deterministic: bool) -> BackwardOptions {
        BackwardOptions {
            causal: self.masking.causal,
            scale: None,
            window: self.masking.window,
            softcap: self.masking.softcap,
            deterministic,
        }
    }

    /// dQ, dK and dV from the library, as stored (the case's layout).
    pub fn backward(&self, gpu: &Gpu, deterministic: bool) -> flashrs::Result<[Vec<T>; 3]> {
        let grads = attention_backward(
            gpu,
            [&self.q, &self.k, &self.v],
            &self.out,
            &self.lse,
            &self.d_out,
            self.options(deterministic),
        )?;
        Ok([grads.d_q.to_host()?, grads.d_k.to_host()?, grads.d_v.to_host()?])
    }

    /// Each gradient's comparison with the float64 one, in `[B, H, S, D]` order.
    pub fn compare(&self, grads: &[Vec<T>; 3]) -> [Comparison; 3] {
        let s = self.shape;
        let [q, k, v, d_out] = &self.host;
        let scale = 1.0 / (s.head_dim as f64).sqrt();
        let expected = attention_backward_f64(
            (q, k, v),
            d_out,
            s.reference_dims(),
            self.masking.reference(),
            scale,
        );
        let bhsd = |data: &[T], heads: usize, seq: usize| {
            widen(&self.layout.to_bhsd(data, s.batch, heads, seq, s.head_dim))
        };
        [
            reference::compare(&bhsd(&grads[0], s.heads, s.seq_q), &expected.d_q),
            reference::compare(&bhsd(&grads[1], s.heads_kv, s.seq_k), &expected.d_k),
            reference::compare(&bhsd(&grads[2], s.heads_kv, s.seq_k), &expected.d_v),
        ]
    }
}

/// The masks and softcaps the backward is checked under: none, causal, sliding windows (left only
/// and both sides, narrower than a tile and wider), a softcap alone and with causal. What the
/// window sizes are relative to: `shapes`' sequences (70 to 331 rows).
pub fn maskings() -> Vec<Masking> {
    let window = |left: Option<u32>, right: Option<u32>| Window { left, right };
    let masking = |causal, window, softcap| Masking {
        causal,
        window,
        softcap,
    };
    vec![
        masking(false, Window::default(), None),
        masking(true, Window::default(), None),
        masking(true, window(Some(37), None), None),
        masking(false, window(Some(100), Some(20)), None),
        masking(false, window(None, Some(3)), Some(5.0)),
        masking(true, Window::default(), Some(2.5)),
    ]
}

/// Whether a gradient's comparison passes: every element finite, the relative L2 error within
/// the type's bound.
pub fn passes<T: Half>(comparison: &Comparison) -> bool {
    comparison.non_finite == 0 && comparison.rel_l2_err <= T::REL_L2
}

/// Whether two runs' gradients are the same bits.
pub fn bit_identical<T: Half>(a: &[Vec<T>; 3], b: &[Vec<T>; 3]) -> bool {
    a.iter()
        .zip(b)
        .all(|(x, y)| x.len() == y.len() && x.iter().zip(y).all(|(p, q)| p.bits() == q.bits()))
}
