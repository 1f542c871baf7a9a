//! The problem a kernel solves: shapes, scale and mask, checked before anything touches a GPU.

use serde::Serialize;

use crate::error::{Error, Result};
use crate::variants::HEAD_DIMS;
pub use crate::variants::{kernel_head_dim, MAX_HEAD_DIM};

/// The shape of one attention call: Q is `[batch, heads, seq_q, head_dim]`, K is `[batch,
/// heads_kv, seq_k, head_dim]`, V `[batch, heads_kv, seq_k, head_dim_v]` and the output `[batch,
/// heads, seq_q, head_dim_v]`. `heads_kv` divides `heads`: grouped-query attention (multi-query
/// when 1) when smaller. `head_dim_v` is `head_dim` but for the sm_90 dense forward, which takes a
/// smaller one (DeepSeek's MLA prefill: 192 and 128).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Shape {
    /// Independent sequences in the batch (`B`).
    pub batch: usize,
    /// Query heads (`H`).
    pub heads: usize,
    /// Key/value heads; divides `heads`.
    pub heads_kv: usize,
    /// Query rows per head (`S_q`).
    pub seq_q: usize,
    /// Key/value rows per head (`S_k`).
    pub seq_k: usize,
    /// Elements per head vector of Q and K (`D`).
    pub head_dim: usize,
    /// Elements per head vector of V and of the output (`D_v`): `head_dim` (what [`Shape::new`]
    /// gives), or on the sm_90 dense forward a multiple of 8 below it ([`Shape::with_head_dim_v`]).
    pub head_dim_v: usize,
}

/// Most query heads (`B * H`) one launch takes: the grid's y and z dimensions, 65,535 each.
pub const MAX_BATCH_HEADS: usize = 65_535 * 65_535;

impl Shape {
    /// Self-attention shape: `seq_q = seq_k = seq`.
    pub fn new(batch: usize, heads: usize, seq: usize, head_dim: usize) -> Shape {
        Shape {
            batch,
            heads,
            heads_kv: heads,
            seq_q: seq,
            seq_k: seq,
            head_dim,
            head_dim_v: head_dim,
        }
    }

    /// The same shape with V's (and the output's) head dim `head_dim_v`.
    pub fn with_head_dim_v(self, head_dim_v: usize) -> Shape {
        Shape { head_dim_v, ..self }
    }

    /// Whether V's head dim differs from Q's and K's: only `flash_ws` runs that.
    pub fn split_head_dims(&self) -> bool {
        self.head_dim_v != self.head_dim
    }

    /// The same shape with `heads_kv` key/value heads.
    pub fn with_heads_kv(self, heads_kv: usize) -> Shape {
        Shape { heads_kv, ..self }
    }

    /// The keys query row `row` sees under the causal mask (`Params::causal`, bottom-right
    /// aligned): `0..` the returned end, `row + 1 + seq_k - seq_q` clamped to `0..=seq_k`. The
    /// host's copy of the kernels' rule (`Problem::key_end` in kernels-rs/src/attention/mod.rs).
    pub fn causal_key_end(&self, row: u32) -> u32 {
        (row as i64 + 1 + self.seq_k as i64 - self.seq_q as i64).clamp(0, self.seq_k as i64) as u32
    }

    /// The compiled head dim whose kernels run this shape ([`kernel_head_dim`]; the head dim
    /// itself for a shape that does not pass [`Shape::validate`]).
    pub fn kernel_head_dim(&self) -> usize {
        kernel_head_dim(self.head_dim).unwrap_or(self.head_dim)
    }

    /// Whether the head dim runs padded, on the next compiled head dim's `flash_ws` tiles
    /// ([`kernel_head_dim`]).
    pub fn padded_head_dim(&self) -> bool {
        self.kernel_head_dim() != self.head_dim
    }

    /// The same shape at the kernel's head dim ([`Shape::kernel_head_dim`]): what sizes a
    /// launch's grid, schedule and workspace, which follow the compiled tiles.
    pub fn at_kernel_head_dim(self) -> Shape {
        let d = self.kernel_head_dim();
        Shape {
            head_dim: d,
            head_dim_v: d,
            ..self
        }
    }

    /// Whether only `flash_ws` runs this shape: a padded head dim ([`kernel_head_dim`]) or
    /// V's head dim not Q's and K's.
    pub fn needs_flash_ws(&self) -> bool {
        self.padded_head_dim() || self.split_head_dims()
    }

    /// Refuses a padded head dim ([`kernel_head_dim`]) and a V head dim of its own on a path
    /// without them: everything but the sm_90 dense forward (and, for padded head dims, varlen).
    pub fn require_compiled_head_dim(&self) -> Result<()> {
        if !HEAD_DIMS.contains(&self.head_dim) {
            return Err(Error::UnsupportedHeadDim(self.head_dim, HEAD_DIMS));
        }
        self.require_one_head_dim()
    }

    /// Refuses a V head dim other than Q's and K's on a path without it: everything but the
    /// sm_90 dense forward.
    pub fn require_one_head_dim(&self) -> Result<()> {
        if self.split_head_dims() {
            return Err(Error::Incompatible(format!(
                "v's head dim is {}, q's and k's {}: only the dense forward on sm_90 takes a smaller \
                 one for v",
                self.head_dim_v, self.head_dim
            )));
        }
        Ok(())
    }

    /// Query heads per key/value head.
    pub fn kv_group(&self) -> usize {
        self.heads / self.heads_kv.max(1)
    }

    /// Q's logical dims, `[B, H, S_q, D]` (the output's too where `head_dim_v` is `head_dim`).
    pub fn q_dims(&self) -> [usize; 4] {
        [self.batch, self.heads, self.seq_q, self.head_dim]
    }

    /// K's logical dims, `[B, H_kv, S_k, D]` (V's too where `head_dim_v` is `head_dim`).
    pub fn kv_dims(&self) -> [usize; 4] {
        [self.batch, self.heads_kv, self.seq_k, self.head_dim]
    }

    /// V's logical dims, `[B, H_kv, S_k, D_v]`.
    pub fn v_dims(&self) -> [usize; 4] {
        [self.batch, self.heads_kv, self.seq_k, self.head_dim_v]
    }

    /// The output's logical dims, `[B, H, S_q, D_v]`.
    pub fn out_dims(&self) -> [usize; 4] {
        [self.batch, self.heads, self.seq_q, self.head_dim_v]
    }

    /// Elements of Q (and of the output where `head_dim_v` is `head_dim`). For a shape that
    /// passed [`Shape::validate`]; the launch-time checks use [`Shape::checked_q_len`], which
    /// cannot wrap.
    pub fn q_len(&self) -> usize {
        self.batch * self.heads * self.seq_q * self.head_dim
    }

    /// Elements of K (and of V where `head_dim_v` is `head_dim`).
    pub fn kv_len(&self) -> usize {
        self.batch * self.heads_kv * self.seq_k * self.head_dim
    }

    /// Elements of V.
    pub fn v_len(&self) -> usize {
        self.batch * self.heads_kv * self.seq_k * self.head_dim_v
    }

    /// Elements of the output.
    pub fn out_len(&self) -> usize {
        self.batch * self.heads * self.seq_q * self.head_dim_v
    }

    /// `v_len`, or `None` past `usize`.
    pub fn checked_v_len(&self) -> Option<usize> {
        checked_product(&self.v_dims())
    }

    /// `out_len`, or `None` past `usize`.
    pub fn checked_out_len(&self) -> Option<usize> {
        checked_product(&self.out_dims())
    }

    /// `q_len`, or `None` past `usize`.
    pub fn checked_q_len(&self) -> Option<usize> {
        checked_product(&[self.batch, self.heads, self.seq_q, self.head_dim])
    }

    /// `kv_len`, or `None` past `usize`.
    pub fn checked_kv_len(&self) -> Option<usize> {
        checked_product(&[self.batch, self.heads_kv, self.seq_k, self.head_dim])
    }

    /// Rows of the log-sum-exp, `B * H * S_q`, or `None` past `usize`.
    pub fn lse_len(&self) -> Option<usize> {
        checked_product(&[self.batch, self.heads, self.seq_q])
    }

    /// Floating-point operations of the forward pass: `2 * B * H * S_q * S_k * (D + D_v)`
    /// (`4 B H S_q S_k D` with one head dim), halved when causal (the usual convention, exact for
    /// `S_q = S_k` up to the diagonal).
    pub fn flops(&self, causal: bool) -> f64 {
        let full = 2.0
            * (self.batch * self.heads) as f64
            * self.seq_q as f64
            * self.seq_k as f64
            * (self.head_dim + self.head_dim_v) as f64;
        if causal {
            full / 2.0
        } else {
            full
        }
    }

    /// Checks everything the kernels assume about a shape.
    pub fn validate(&self) -> Result<()> {
        let invalid = |msg: String| Err(Error::InvalidProblem(msg));
        if self.batch == 0 || self.heads == 0 || self.seq_q == 0 || self.seq_k == 0 {
            return invalid(format!("every dimension must be at least 1, got {self}"));
        }
        if self.heads_kv == 0 || !self.heads.is_multiple_of(self.heads_kv) {
            return invalid(format!(
                "key/value heads ({}) must divide query heads ({})",
                self.heads_kv, self.heads
            ));
        }
        if kernel_head_dim(self.head_dim).is_none() {
            return Err(Error::UnsupportedHeadDim(self.head_dim, HEAD_DIMS));
        }
        // V's head dim: Q's, or a smaller multiple of 8 (its tiles are Q's, zero-filled past it).
        let dv = self.head_dim_v;
        if dv != self.head_dim && (dv == 0 || !dv.is_multiple_of(8) || dv > self.head_dim) {
            return invalid(format!(
                "v's head dim {dv} must be q's and k's ({}) or a smaller multiple of 8",
                self.head_dim
            ));
        }
        // The grid's y and z dimensions (65,535 each) hold batch * heads.
        match self.batch.checked_mul(self.heads) {
            Some(heads) if heads <= MAX_BATCH_HEADS => {}
            _ => {
                return invalid(format!(
                    "batch * heads = {} * {} exceeds {MAX_BATCH_HEADS}",
                    self.batch, self.heads
                ))
            }
        }
        // Kernels index with 32-bit sequence positions and 64-bit element offsets.
        if self.seq_q > u32::MAX as usize / 2 || self.seq_k > u32::MAX as usize / 2 {
            return invalid(format!("sequence length too large in {self}"));
        }
        // Every buffer's size in bytes (4 per element at most, the log-sum-exp's) must fit in
        // `isize`: a count that wrapped would let a short buffer pass the length checks.
        let fits = |elements: Option<usize>| {
            elements
                .and_then(|n| n.checked_mul(4))
                .is_some_and(|bytes| bytes <= isize::MAX as usize)
        };
        if !fits(self.checked_q_len()) || !fits(self.checked_kv_len()) {
            return invalid(format!("{self} has more elements than memory can address"));
        }
        Ok(())
    }
}

fn checked_product(dims: &[usize]) -> Option<usize> {
    dims.iter()
        .try_fold(1usize, |product, &dim| product.checked_mul(dim))
}

impl std::fmt::Display for Shape {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let heads = if self.heads_kv == self.heads {
            self.heads.to_string()
        } else {
            format!("{} (kv {})", self.heads, self.heads_kv)
        };
        let d = match self.split_head_dims() {
            false => self.head_dim.to_string(),
            true => format!("{} (v {})", self.head_dim, self.head_dim_v),
        };
        if self.seq_q == self.seq_k {
            write!(f, "({}, {heads}, {}, {d})", self.batch, self.seq_q)
        } else {
            write!(f, "({}, {heads}, {}/{}, {d})", self.batch, self.seq_q, self.seq_k)
        }
    }
}

impl std::str::FromStr for Shape {
    type Err = String;
    /// `B,H,S,D` or `B,H,S_Q,S_K,D`.
    fn from_str(text: &str) -> std::result::Result<Shape, String> {
        let parts: Vec<usize> = text
            .split(',')
            .map(|p| {
                p.trim()
                    .parse::<usize>()
                    .map_err(|_| format!("`{}` is not a non-negative integer", p.escape_debug()))
            })
            .collect::<std::result::Result<_, _>>()
            .map_err(|e| format!("shape `{}`: {e} (expected B,H,S,D)", text.escape_debug()))?;
        match parts[..] {
            [b, h, s, d] => Ok(Shape::new(b, h, s, d)),
            [b, h, sq, sk, d] => Ok(Shape {
                batch: b,
                heads: h,
                heads_kv: h,
                seq_q: sq,
                seq_k: sk,
                head_dim: d,
                head_dim_v: d,
            }),
            _ => Err(format!(
                "shape `{}`: expected 4 numbers B,H,S,D (or 5: B,H,S_Q,S_K,D)",
                text.escape_debug()
            )),
        }
    }
}

/// The 16-bit element types the kernels take and produce (accumulation is always fp32).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum DType {
    /// IEEE half precision.
    F16,
    /// bfloat16: fp32's exponent range with an 8-bit significand.
    Bf16,
}

impl DType {
    /// Both types, f16 first.
    pub const ALL: [DType; 2] = [DType::F16, DType::Bf16];

    /// The suffix of the PTX symbols (`f16`, `bf16`).
    pub fn name(self) -> &'static str {
        match self {
            DType::F16 => "f16",
            DType::Bf16 => "bf16",
        }
    }

    /// NumPy / PyTorch spelling (`float16`, `bfloat16`).
    pub fn long_name(self) -> &'static str {
        match self {
            DType::F16 => "float16",
            DType::Bf16 => "bfloat16",
        }
    }

    /// Bytes per element.
    pub fn bytes(self) -> usize {
        match self {
            DType::F16 | DType::Bf16 => 2,
        }
    }

    /// Rounds to this type (round to nearest even) and returns the bits.
    pub fn encode(self, x: f32) -> u16 {
        match self {
            DType::F16 => half::f16::from_f32(x).to_bits(),
            DType::Bf16 => half::bf16::from_f32(x).to_bits(),
        }
    }

    /// The `f32` value of the bits `bits` of this type (exact).
    pub fn decode(self, bits: u16) -> f32 {
        match self {
            DType::F16 => half::f16::from_bits(bits).to_f32(),
            DType::Bf16 => half::bf16::from_bits(bits).to_f32(),
        }
    }
}

impl std::str::FromStr for DType {
    type Err = String;
    fn from_str(text: &str) -> std::result::Result<DType, String> {
        match text {
            "f16" | "fp16" | "float16" => Ok(DType::F16),
            "bf16" | "bfloat16" => Ok(DType::Bf16),
            other => Err(format!("unknown dtype `{other}` (f16, bf16)")),
        }
    }
}

impl std::fmt::Display for DType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Mask, scale and score modifier of one call.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct Params {
    /// Masks the scores causally, aligned bottom-right: query row `i` sees keys
    /// `0..=i + seq_k - seq_q`.
    pub causal: bool,
    /// Softmax scale; `None` means `1 / sqrt(head_dim)`.
    pub scale: Option<f32>,
    /// A sliding window around each row's diagonal (with `causal`, its right side is 0).
    pub window: Window,
    /// Logit softcap: each scaled score `x` becomes `softcap * tanh(x / softcap)` before the
    /// softmax (Gemma 2's attention); `None` for none. Must be positive and finite.
    pub softcap: Option<f32>,
}

/// A sliding window, aligned bottom-right as the causal mask (FlashAttention's `window_size`):
/// query row `i`, whose diagonal is key `i + seq_k - seq_q`, sees the keys from `left` before its
/// diagonal to `right` after it; `None` on a side leaves that side unbounded. The default has no
/// bound on either side (every key).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Window {
    /// Keys a row sees before its diagonal; `None` for all of them.
    pub left: Option<u32>,
    /// Keys a row sees after its diagonal; `None` for all of them.
    pub right: Option<u32>,
}

impl Window {
    /// The window of `left` keys before each row's diagonal and `right` after it, in
    /// FlashAttention's convention: a negative size is no bound on that side.
    pub fn from_sizes(left: i64, right: i64) -> Result<Window> {
        let side = |size: i64| -> Result<Option<u32>> {
            match size {
                s if s < 0 => Ok(None),
                s => u32::try_from(s)
                    .ok()
                    .filter(|&s| s < u32::MAX / 2)
                    .map(Some)
                    .ok_or_else(|| Error::InvalidProblem(format!("window size {s} is too large"))),
            }
        };
        Ok(Window {
            left: side(left)?,
            right: side(right)?,
        })
    }

    /// Whether the window bounds anything.
    pub fn is_bounded(&self) -> bool {
        self.left.is_some() || self.right.is_some()
    }

    /// The kernels' encoding (`launch.rs`'s `window_left` and `window_right`): each size plus one,
    /// 0 for no bound; the causal mask is a right size of 0 (which the kernels mask by alone).
    pub fn encoded(&self, causal: bool) -> (u32, u32) {
        let side = |size: Option<u32>| size.map_or(0, |s| s + 1);
        let right = if causal { Some(0) } else { self.right };
        (side(self.left), side(right))
    }

    /// The keys `first..end` that query `row` of `shape` sees under this window and the causal
    /// mask: the host's copy of the kernels' rule (`Problem::key_start` and `key_end` in
    /// kernels-rs/src/attention/mod.rs). Empty when the row sees no key.
    pub fn keys(&self, shape: &Shape, causal: bool, row: u32) -> std::ops::Range<u32> {
        let diagonal = row as i64 + shape.seq_k as i64 - shape.seq_q as i64;
        let seq_k = shape.seq_k as i64;
        let right = if causal { Some(0) } else { self.right };
        let end = right.map_or(seq_k, |r| (diagonal + 1 + r as i64).clamp(0, seq_k));
        let start = self.left.map_or(0, |l| (diagonal - l as i64).clamp(0, seq_k));
        start as u32..(end.max(start)) as u32
    }
}

impl Params {
    /// The softmax scale used for `head_dim`: `scale`, or `1 / sqrt(head_dim)` when unset.
    pub fn scale_for(&self, head_dim: usize) -> f32 {
        self.scale.unwrap_or(1.0 / (head_dim as f32).sqrt())
    }

    /// The softcap as the kernels take it (`launch.rs`'s `softcap` and `softcap_inverse`): in
    /// raw-score units for `head_dim` (`softcap / scale`), and its inverse; 0s for none.
    pub fn raw_softcap(&self, head_dim: usize) -> (f32, f32) {
        match self.softcap {
            Some(cap) => {
                let raw = cap / self.scale_for(head_dim);
                (raw, 1.0 / raw)
            }
            None => (0.0, 0.0),
        }
    }

    /// Checks the scale and the softcap: when set each must be positive and finite (else
    /// [`Error::InvalidProblem`]).
    pub fn validate(&self) -> Result<()> {
        match (self.scale, self.softcap) {
            (Some(s), _) if !(s.is_finite() && s > 0.0) => Err(Error::InvalidProblem(format!(
                "scale must be a positive finite number, got {s}"
            ))),
            (_, Some(c)) if !(c.is_finite() && c > 0.0) => Err(Error::InvalidProblem(format!(
                "softcap must be a positive finite number, got {c}"
            ))),
            _ => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_shapes() {
        assert_eq!("2,8,512,64".parse::<Shape>().unwrap(), Shape::new(2, 8, 512, 64));
        assert_eq!(" 1, 2, 3, 4, 64 ".parse::<Shape>().unwrap().seq_k, 4);
        for bad in ["", "1,2,3", "1,2,3,4,5,6", "a,2,3,4", "1,-2,3,64", "1,2,3,4.5"] {
            assert!(bad.parse::<Shape>().is_err(), "{bad}");
        }
    }

    #[test]
    fn parse_errors_are_one_line_whatever_the_text() {
        // A newline inside a field once came back verbatim, making a two-line error.
        for text in ["1,2\nx,3,64", "1,2,3\n", "\n,\r", "1,2,3,4,5,6\n7"] {
            let message = text.parse::<Shape>().unwrap_err();
            assert_eq!(message.lines().count(), 1, "{message}");
        }
        assert!("1,2\nx,3,64".parse::<Shape>().unwrap_err().contains("`2\\nx`"));
    }

    #[test]
    fn padded_head_dims_run_on_the_next_compiled_tiles() {
        for (d, tiles) in [
            (8, 64),
            (56, 64),
            (64, 64),
            (72, 128),
            (96, 128),
            (128, 128),
            (136, 256),
            (192, 256),
            (256, 256),
        ] {
            assert_eq!(kernel_head_dim(d), Some(tiles), "{d}");
            let shape = Shape::new(1, 2, 16, d);
            assert!(shape.validate().is_ok(), "{d}");
            assert_eq!(shape.padded_head_dim(), d != tiles, "{d}");
            assert_eq!(shape.at_kernel_head_dim().head_dim, tiles);
            assert_eq!(shape.require_compiled_head_dim().is_ok(), d == tiles, "{d}");
        }
        for d in [0, 4, 100, 250, 264, 512] {
            assert_eq!(kernel_head_dim(d), None, "{d}");
            let message = Shape::new(1, 2, 16, d).validate().unwrap_err().to_string();
            assert!(message.contains("multiple of 8 up to 256"), "{message}");
        }
    }

    #[test]
    fn validation_names_the_problem() {
        assert!(Shape::new(1, 8, 128, 64).validate().is_ok());
        let err = Shape::new(1, 8, 128, 100).validate().unwrap_err().to_string();
        assert!(err.contains("head dim 100"), "{err}");
        let err = Shape::new(0, 8, 128, 64).validate().unwrap_err().to_string();
        assert!(err.contains("at least 1"), "{err}");
        // More heads than the grid's y holds are fine (they spill into z); past y * z is not.
        assert!(Shape::new(65_536, 1, 1, 64).validate().is_ok());
        let err = Shape::new(65_536, 65_536, 1, 64)
            .validate()
            .unwrap_err()
            .to_string();
        assert!(err.contains("batch * heads"), "{err}");
        assert!(Params {
            causal: false,
            scale: Some(-1.0),
            ..Params::default()
        }
        .validate()
        .is_err());
        assert!(Params {
            causal: false,
            scale: Some(f32::NAN),
            ..Params::default()
        }
        .validate()
        .is_err());
        assert!(Params {
            causal: true,
            scale: None,
            ..Params::default()
        }
        .validate()
        .is_ok());
    }

    #[test]
    fn dtypes_round_trip_and_parse() {
        assert_eq!(DType::F16.decode(DType::F16.encode(1.5)), 1.5);
        assert_eq!(DType::Bf16.decode(DType::Bf16.encode(-3.0)), -3.0);
        // bf16 keeps 8 mantissa bits: 1 + 2^-9 rounds to 1.
        assert_eq!(DType::Bf16.decode(DType::Bf16.encode(1.0 + 1.0 / 512.0)), 1.0);
        assert_eq!("bfloat16".parse::<DType>().unwrap(), DType::Bf16);
        assert!("f32".parse::<DType>().is_err());
    }

    #[test]
    fn key_value_heads_must_divide_query_heads() {
        assert!(Shape::new(1, 8, 16, 64).with_heads_kv(2).validate().is_ok());
        assert!(Shape::new(1, 8, 16, 64).with_heads_kv(1).validate().is_ok());
        assert!(Shape::new(1, 8, 16, 64).with_heads_kv(3).validate().is_err());
        assert!(Shape::new(1, 8, 16, 64).with_heads_kv(0).validate().is_err());
        assert_eq!(
            Shape::new(2, 8, 16, 64).with_heads_kv(2).kv_len(),
            2 * 2 * 16 * 64
        );
    }

    #[test]
    fn flops_convention() {
        let s = Shape::new(2, 16, 4096, 128);
        assert_eq!(s.flops(false), 4.0 * 32.0 * 4096.0 * 4096.0 * 128.0);
        assert_eq!(s.flops(true), s.flops(false) / 2.0);
    }
}

/// Property tests: the parser and the validator on arbitrary input.
#[cfg(test)]
mod properties {
    use super::*;
    use proptest::prelude::*;

    /// The longest sequence `validate` accepts (32-bit positions, with headroom).
    const MAX_SEQ: usize = u32::MAX as usize / 2;

    /// The set the docs describe: every dimension at least 1, `heads_kv` dividing `heads`, a
    /// supported head dim, `B * H` within the grid, sequences within 32-bit positions.
    fn documented_valid(s: &Shape) -> bool {
        s.batch >= 1
            && s.heads >= 1
            && s.seq_q >= 1
            && s.seq_k >= 1
            && s.heads_kv >= 1
            && s.heads.is_multiple_of(s.heads_kv)
            && (HEAD_DIMS.contains(&s.head_dim)
                || (s.head_dim.is_multiple_of(8) && (8..=256).contains(&s.head_dim)))
            && s.batch
                .checked_mul(s.heads)
                .is_some_and(|bh| bh <= MAX_BATCH_HEADS)
            && s.seq_q <= MAX_SEQ
            && s.seq_k <= MAX_SEQ
            && addressable(s.batch as u128 * s.heads as u128 * s.seq_q as u128 * s.head_dim as u128)
            && addressable(s.batch as u128 * s.heads_kv as u128 * s.seq_k as u128 * s.head_dim as u128)
    }

    /// Whether a buffer of `elements` (4 bytes each at most, computed without overflow in u128)
    /// fits in `isize` bytes.
    fn addressable(elements: u128) -> bool {
        elements * 4 <= isize::MAX as u128
    }

    /// Sizes with the edges of every bound over-represented.
    fn size() -> impl Strategy<Value = usize> {
        prop_oneof![
            0usize..5000,
            Just(MAX_SEQ),
            Just(MAX_SEQ + 1),
            Just(65_535),
            Just(65_536),
            Just(usize::MAX),
            any::<usize>(),
        ]
    }

    /// Shapes `validate` accepts, with as many key/value heads as query heads (the text form
    /// carries no `heads_kv`).
    fn valid_shape() -> impl Strategy<Value = Shape> {
        (
            1usize..1024,
            1usize..1024,
            1..=MAX_SEQ,
            1..=MAX_SEQ,
            prop::sample::select(HEAD_DIMS.to_vec()),
        )
            .prop_map(|(batch, heads, seq_q, seq_k, head_dim)| Shape {
                batch,
                heads,
                heads_kv: heads,
                seq_q,
                seq_k,
                head_dim,
                head_dim_v: head_dim,
            })
    }

    proptest! {
        #[test]
        fn any_text_parses_or_errs_without_panicking(text in "\\PC{0,40}|[0-9,\\s]{0,20}") {
            // Errors are one line, whatever the text holds (newlines included).
            if let Err(message) = text.parse::<Shape>() {
                prop_assert_eq!(message.lines().count(), 1, "{}", message);
            }
        }

        #[test]
        fn shape_like_text_parses_or_errs_without_panicking(
            text in "[0-9 ,+\\-]{0,40}|[0-9]{15,30}(,[0-9]{0,30}){3,4}",
        ) {
            // Digits, separators and signs hit the parser's own paths (empty fields, overflow,
            // signs, counts of fields) far more often than arbitrary text does.
            if let Ok(shape) = text.parse::<Shape>() {
                let _ = shape.validate();
                prop_assert_eq!(shape.heads_kv, shape.heads);
            }
        }

        #[test]
        fn valid_shapes_round_trip_through_their_text_form(shape in valid_shape()) {
            prop_assert!(shape.validate().is_ok(), "{:?}", shape);
            let text = if shape.seq_q == shape.seq_k {
                format!("{},{},{},{}", shape.batch, shape.heads, shape.seq_q, shape.head_dim)
            } else {
                format!("{},{},{},{},{}", shape.batch, shape.heads, shape.seq_q, shape.seq_k, shape.head_dim)
            };
            prop_assert_eq!(text.parse::<Shape>(), Ok(shape));
            // The five-number form always works, with spaces around the numbers too.
            let five = format!(" {} ,{}, {},{} , {} ", shape.batch, shape.heads, shape.seq_q, shape.seq_k, shape.head_dim);
            prop_assert_eq!(five.parse::<Shape>(), Ok(shape));
        }

        #[test]
        fn number_lists_parse_to_exactly_those_numbers(
            b in 0usize..100_000, h in 0usize..100_000, sq in 0usize..1 << 40,
            sk in 0usize..1 << 40, d in 0usize..1000,
        ) {
            let four: Shape = format!("{b},{h},{sq},{d}").parse().unwrap();
            prop_assert_eq!(four, Shape::new(b, h, sq, d));
            let five: Shape = format!(" {b}, {h},{sq} ,{sk},{d}").parse().unwrap();
            prop_assert_eq!((five.batch, five.heads, five.heads_kv, five.seq_q, five.seq_k, five.head_dim),
                            (b, h, h, sq, sk, d));
        }

        #[test]
        fn wrong_numbers_of_fields_are_refused(fields in prop::collection::vec(0usize..1000, 0..10)) {
            let text = fields.iter().map(|f| f.to_string()).collect::<Vec<_>>().join(",");
            let parsed = text.parse::<Shape>();
            prop_assert_eq!(parsed.is_ok(), matches!(fields.len(), 4 | 5), "{}", text);
        }

        #[test]
        fn validate_accepts_exactly_the_documented_set(
            b in 0usize..1 << 17, h in 0usize..1 << 17, kv in 0usize..70,
            sq in prop_oneof![0usize..5000, MAX_SEQ - 1..MAX_SEQ + 2],
            sk in prop_oneof![0usize..5000, MAX_SEQ - 1..MAX_SEQ + 2],
            d in prop_oneof![Just(64usize), Just(128), 0usize..300],
        ) {
            let shape = Shape { batch: b, heads: h, heads_kv: kv, seq_q: sq, seq_k: sk, head_dim: d , head_dim_v: d };
            prop_assert_eq!(shape.validate().is_ok(), documented_valid(&shape), "{:?}", shape);
        }

        #[test]
        fn validate_never_panics_and_agrees_on_any_numbers(
            b in size(), h in size(), kv in size(), sq in size(), sk in size(),
            d in prop_oneof![Just(64usize), Just(128), any::<usize>()],
        ) {
            let shape = Shape { batch: b, heads: h, heads_kv: kv, seq_q: sq, seq_k: sk, head_dim: d , head_dim_v: d };
            let verdict = shape.validate();
            prop_assert_eq!(verdict.is_ok(), documented_valid(&shape), "{:?}", shape);
            // Refusals are one line, and so is the shape's own text.
            if let Err(e) = verdict {
                prop_assert_eq!(e.to_string().lines().count(), 1);
            }
            prop_assert_eq!(shape.to_string().lines().count(), 1);
        }

        #[test]
        fn grouped_heads_divide_and_shrink_only_k_and_v(
            b in 1usize..64, kv in 1usize..64, group in 1usize..16, s in 1usize..4096,
            d in prop::sample::select(HEAD_DIMS.to_vec()),
        ) {
            let full = Shape::new(b, kv * group, s, d);
            let grouped = full.with_heads_kv(kv);
            prop_assert!(grouped.validate().is_ok(), "{:?}", grouped);
            prop_assert_eq!(grouped.kv_group(), group);
            prop_assert_eq!(grouped.kv_group() * grouped.heads_kv, grouped.heads);
            prop_assert_eq!(grouped.q_len(), full.q_len());
            prop_assert_eq!(grouped.kv_len() * group, full.kv_len());
            // Only heads_kv changes.
            prop_assert_eq!(Shape { heads_kv: full.heads, ..grouped }, full);
            prop_assert_eq!(grouped.with_heads_kv(grouped.heads), full);
        }

        #[test]
        fn key_value_heads_that_do_not_divide_are_refused(
            h in 1usize..256, kv in 0usize..300, d in prop::sample::select(HEAD_DIMS.to_vec()),
        ) {
            let shape = Shape::new(1, h, 16, d).with_heads_kv(kv);
            let divides = kv >= 1 && h.is_multiple_of(kv);
            prop_assert_eq!(shape.validate().is_ok(), divides);
            if !divides {
                let message = shape.validate().unwrap_err().to_string();
                prop_assert!(message.contains("must divide"), "{}", message);
            }
            // kv_group never divides by zero.
            prop_assert_eq!(shape.kv_group(), h / kv.max(1));
        }
    }
}
