//! FP8 e4m3 quantisation on the host: the encoding the FP8 kernel reads, and per-group scales.
//!
//! The format is OCP FP8 E4M3FN (`torch.float8_e4m3fn`, `float8::F8E4M3`): 1 sign bit, 4
//! exponent bits with bias 7, 3 mantissa bits; no infinities, one NaN pattern per sign (`0x7f`,
//! `0xff`), largest finite magnitude 448, smallest subnormal 2^-9. Encoding rounds to nearest,
//! ties to even, and saturates: anything beyond ±448 (infinities included) becomes ±448, as
//! `cvt.rn.satfinite.e4m3x2.f32` does on the GPU. The conversions are the `float8` crate's; the
//! tests hold them to values derived from the format's definition.
//!
//! A tensor is quantised with one scale per (batch, key/value head) group: for K and V that is
//! one head, for Q the `H / H_kv` query heads that share a key/value head, so that the kernel
//! folds one Q descale and one K descale into each score tile. `scale = amax / 448` maps the
//! group's largest magnitude to e4m3's largest finite value (an all-zero group gets 1), and
//! `byte = e4m3(x / scale)`; the true value of a byte is `e4m3(byte) * scale`, which is why the
//! scale is called the descale factor on the GPU side.

use float8::F8E4M3;

use crate::error::{Error, Result};
use crate::layout::Layout;
use crate::problem::Shape;

/// The largest finite e4m3 magnitude.
pub const E4M3_MAX: f32 = 448.0;

/// `x` rounded to e4m3 (nearest, ties to even, saturating at ±448; NaN to NaN), as its byte.
pub fn e4m3_encode(x: f32) -> u8 {
    F8E4M3::from_f32(x).to_bits()
}

/// The value of the e4m3 byte `bits` (exact in f32; `0x7f` and `0xff` are NaN).
pub fn e4m3_decode(bits: u8) -> f32 {
    F8E4M3::from_bits(bits).to_f32()
}

/// The dims `[batch, heads, seq, head_dim]` of one tensor, and how many of its heads share a
/// scale (`heads / groups`).
fn checked(what: &'static str, len: usize, dims: [usize; 4], groups: usize) -> Result<usize> {
    let [batch, heads, _, _] = dims;
    if groups == 0 || !heads.is_multiple_of(groups) {
        return Err(Error::InvalidProblem(format!(
            "{what}: {groups} scale groups per batch must divide its {heads} heads"
        )));
    }
    let expected = dims.iter().try_fold(1usize, |n, &d| n.checked_mul(d));
    let scales = batch.checked_mul(groups);
    match (expected, scales) {
        (Some(expected), Some(_)) if expected == len => Ok(heads / groups),
        (expected, _) => Err(Error::Length {
            what,
            expected: expected.unwrap_or(usize::MAX),
            actual: len,
            shape: format!("{dims:?} ([B, H, S, D])"),
        }),
    }
}

/// The scale group (`b * groups + h / heads_per_group`) of each row of `head_dim` elements, in
/// memory order.
fn row_groups(dims: [usize; 4], layout: Layout, heads_per_group: usize) -> impl Iterator<Item = usize> {
    let [batch, heads, seq, _] = dims;
    let groups = heads / heads_per_group.max(1);
    (0..batch * heads * seq).map(move |row| {
        let (b, h) = match layout {
            Layout::Bhsd => (row / (heads * seq), (row / seq) % heads),
            Layout::Bshd => (row / (seq * heads), row % heads),
        };
        b * groups + h / heads_per_group
    })
}

/// Quantises one tensor of logical dims `dims = [B, H, S, D]`, stored in `layout` order, with
/// one scale per batch and group of `H / groups` consecutive heads (`groups` is `H_kv`: for K
/// and V every head is its own group). Returns the e4m3 bytes, in the same order as `values`,
/// and the `B * groups` descale factors, batch-major.
///
/// Errors: a length that does not match `dims`, `groups` not dividing `H`, or a non-finite
/// value (a scale cannot be derived from one).
pub fn quantize(
    values: &[f32],
    dims: [usize; 4],
    layout: Layout,
    groups: usize,
) -> Result<(Vec<u8>, Vec<f32>)> {
    quantize_named("values", values, dims, layout, groups)
}

fn quantize_named(
    what: &'static str,
    values: &[f32],
    dims: [usize; 4],
    layout: Layout,
    groups: usize,
) -> Result<(Vec<u8>, Vec<f32>)> {
    let per_group = checked(what, values.len(), dims, groups)?;
    if let Some(i) = values.iter().position(|x| !x.is_finite()) {
        return Err(Error::InvalidProblem(format!(
            "{what}: element {i} is {}: FP8 quantisation needs finite values",
            values[i]
        )));
    }
    let d = dims[3];
    let mut amax = vec![0.0f32; dims[0] * groups];
    if d > 0 {
        for (row, group) in values.chunks_exact(d).zip(row_groups(dims, layout, per_group)) {
            let m = row.iter().fold(0.0f32, |m, x| m.max(x.abs()));
            amax[group] = amax[group].max(m);
        }
    }
    let descale: Vec<f32> = amax.iter().map(|&a| scale_for(a)).collect();
    let mut bytes = Vec::with_capacity(values.len());
    if d > 0 {
        for (row, group) in values.chunks_exact(d).zip(row_groups(dims, layout, per_group)) {
            let s = descale[group];
            bytes.extend(row.iter().map(|&x| e4m3_encode(x / s)));
        }
    }
    Ok((bytes, descale))
}

/// `amax / 448`; 1 for an all-zero group. A group so small that the quotient underflows to zero
/// (amax below ~6e-43) gets the smallest positive f32, so that no division by zero can happen;
/// its values then quantise to zero or close to it, as they are.
fn scale_for(amax: f32) -> f32 {
    if amax == 0.0 {
        return 1.0;
    }
    (amax / E4M3_MAX).max(f32::from_bits(1))
}

/// The values of e4m3 `bytes` laid out as [`quantize`] takes them, each multiplied by its
/// group's factor in `descale` (`B * groups` entries). NaN bytes give NaN.
pub fn dequantize(
    bytes: &[u8],
    dims: [usize; 4],
    layout: Layout,
    groups: usize,
    descale: &[f32],
) -> Result<Vec<f32>> {
    dequantize_named("bytes", bytes, dims, layout, groups, descale)
}

fn dequantize_named(
    what: &'static str,
    bytes: &[u8],
    dims: [usize; 4],
    layout: Layout,
    groups: usize,
    descale: &[f32],
) -> Result<Vec<f32>> {
    let per_group = checked(what, bytes.len(), dims, groups)?;
    let scales = dims[0] * groups;
    if descale.len() != scales {
        return Err(Error::Length {
            what: "descale",
            expected: scales,
            actual: descale.len(),
            shape: format!("{dims:?} ([B, H, S, D]) in {groups} groups per batch"),
        });
    }
    let d = dims[3];
    let mut out = Vec::with_capacity(bytes.len());
    if d > 0 {
        for (row, group) in bytes.chunks_exact(d).zip(row_groups(dims, layout, per_group)) {
            let s = descale[group];
            out.extend(row.iter().map(|&b| e4m3_decode(b) * s));
        }
    }
    Ok(out)
}

/// Q, K and V quantised for [`Gpu::fp8_tensors`](crate::Gpu::fp8_tensors): the e4m3 bytes in
/// the layout they were given in, and the descale factors in the order the kernel reads them
/// (Q's `[B, H_kv]`, then K's, then V's; `3 * B * H_kv` in all).
#[derive(Clone, Debug, PartialEq)]
pub struct Fp8Inputs {
    /// Q's bytes.
    pub q: Vec<u8>,
    /// K's bytes.
    pub k: Vec<u8>,
    /// V's bytes.
    pub v: Vec<u8>,
    /// Q's, K's and V's descale factors, `[3, B, H_kv]`.
    pub descale: Vec<f32>,
}

impl Fp8Inputs {
    /// Quantises f32 `q` (`[B, H, S_q, D]` in `layout` order), `k` and `v` (`[B, H_kv, S_k, D]`)
    /// of `shape`: Q with one scale per batch and key/value head's group of query heads, K and V
    /// one per batch and head.
    pub fn quantize(shape: Shape, layout: Layout, q: &[f32], k: &[f32], v: &[f32]) -> Result<Fp8Inputs> {
        let (dims_q, dims_kv) = dims(shape);
        let h_kv = shape.heads_kv;
        let (q, dq) = quantize_named("q", q, dims_q, layout, h_kv)?;
        let (k, dk) = quantize_named("k", k, dims_kv, layout, h_kv)?;
        let (v, dv) = quantize_named("v", v, dims_kv, layout, h_kv)?;
        Ok(Fp8Inputs {
            q,
            k,
            v,
            descale: [dq, dk, dv].concat(),
        })
    }

    /// Takes e4m3 bytes and descale factors made elsewhere (raw `.npy` files, a framework's
    /// FP8 tensors), checking every length against `shape`; a descale factor must be finite
    /// and positive.
    pub fn from_parts(
        shape: Shape,
        q: Vec<u8>,
        k: Vec<u8>,
        v: Vec<u8>,
        descale: Vec<f32>,
    ) -> Result<Fp8Inputs> {
        let (dims_q, dims_kv) = dims(shape);
        checked("q", q.len(), dims_q, shape.heads_kv)?;
        checked("k", k.len(), dims_kv, shape.heads_kv)?;
        checked("v", v.len(), dims_kv, shape.heads_kv)?;
        let scales = 3 * shape.batch * shape.heads_kv;
        if descale.len() != scales {
            return Err(Error::Length {
                what: "descale",
                expected: scales,
                actual: descale.len(),
                shape: format!("{shape} (3 * B * H_kv factors)"),
            });
        }
        if let Some(i) = descale.iter().position(|s| !(s.is_finite() && *s > 0.0)) {
            return Err(Error::InvalidProblem(format!(
                "descale factor {i} is {}: each must be finite and positive",
                descale[i]
            )));
        }
        Ok(Fp8Inputs { q, k, v, descale })
    }

    /// Q's descale factors, `[B, H_kv]`.
    pub fn descale_q(&self) -> &[f32] {
        &self.descale[..self.descale.len() / 3]
    }

    /// K's descale factors, `[B, H_kv]`.
    pub fn descale_k(&self) -> &[f32] {
        let n = self.descale.len() / 3;
        &self.descale[n..2 * n]
    }

    /// V's descale factors, `[B, H_kv]`.
    pub fn descale_v(&self) -> &[f32] {
        let n = self.descale.len() / 3;
        &self.descale[2 * n..]
    }

    /// The values the kernel sees, as f32 in `layout` order: `(q, k, v)`.
    pub fn dequantize(&self, shape: Shape, layout: Layout) -> Result<(Vec<f32>, Vec<f32>, Vec<f32>)> {
        let (dims_q, dims_kv) = dims(shape);
        let h_kv = shape.heads_kv;
        Ok((
            dequantize_named("q", &self.q, dims_q, layout, h_kv, self.descale_q())?,
            dequantize_named("k", &self.k, dims_kv, layout, h_kv, self.descale_k())?,
            dequantize_named("v", &self.v, dims_kv, layout, h_kv, self.descale_v())?,
        ))
    }
}

fn dims(shape: Shape) -> ([usize; 4], [usize; 4]) {
    (
        [shape.batch, shape.heads, shape.seq_q, shape.head_dim],
        [shape.batch, shape.heads_kv, shape.seq_k, shape.head_dim],
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The value of an e4m3 byte from the format's definition alone.
    fn by_definition(bits: u8) -> f64 {
        let sign = if bits & 0x80 != 0 { -1.0 } else { 1.0 };
        let (e, m) = (((bits >> 3) & 0xf) as i32, (bits & 7) as f64);
        if e == 15 && m == 7.0 {
            f64::NAN
        } else if e == 0 {
            sign * m / 8.0 * 2f64.powi(-6)
        } else {
            sign * (1.0 + m / 8.0) * 2f64.powi(e - 7)
        }
    }

    /// Round to nearest, ties to the even byte, saturating at ±448, by search over every finite
    /// byte of the input's sign (so -0 stays -0).
    fn nearest(x: f64) -> u8 {
        if x.is_nan() {
            return 0x7f;
        }
        let sign = if x.is_sign_negative() { 0x80u8 } else { 0 };
        let mut best = sign;
        for bits in (0u8..0x7f).map(|b| b | sign) {
            let (d, d_best) = ((by_definition(bits) - x).abs(), (by_definition(best) - x).abs());
            if d < d_best || (d == d_best && bits & 1 == 0) {
                best = bits;
            }
        }
        best
    }

    #[test]
    fn decoding_matches_the_definition_for_every_byte() {
        for bits in 0..=255u8 {
            let (ours, defined) = (e4m3_decode(bits) as f64, by_definition(bits));
            if defined.is_nan() {
                assert!(ours.is_nan(), "{bits:#04x}");
            } else {
                assert_eq!(ours, defined, "{bits:#04x}");
                assert_eq!(ours.is_sign_negative(), bits & 0x80 != 0, "{bits:#04x}");
            }
        }
        assert_eq!(e4m3_decode(0x7e), E4M3_MAX);
        assert_eq!(e4m3_decode(0x01), 2f32.powi(-9));
        assert_eq!(e4m3_decode(0x08), 2f32.powi(-6));
    }

    #[test]
    fn encoding_rounds_to_nearest_even_and_saturates() {
        // Every representable value, every midpoint between neighbours (exact ties) and the
        // f32 values either side of each midpoint, both signs.
        let finite: Vec<f64> = (0u8..0x7f).map(by_definition).collect();
        let mut xs = Vec::new();
        for pair in finite.windows(2) {
            let mid = ((pair[0] + pair[1]) / 2.0) as f32;
            xs.extend([
                pair[0] as f32,
                mid,
                f32::from_bits(mid.to_bits() + 1),
                f32::from_bits(mid.to_bits() - 1),
            ]);
        }
        xs.extend([
            448.0,
            449.0,
            463.9,
            464.0,
            464.1,
            480.0,
            1e6,
            f32::MAX,
            1e-3,
            9.7e-4,
            1e-30,
        ]);
        xs.extend([f32::from_bits(1), 2f32.powi(-10), 2f32.powi(-10) * 1.0001]);
        // A dense sweep, too.
        xs.extend((0..20_000).map(|i| (i as f32 - 10_000.0) * 0.0473));
        for x in xs.iter().flat_map(|&x| [x, -x]) {
            assert_eq!(e4m3_encode(x), nearest(x as f64), "{x:e}");
        }
        for (x, bits) in [(1.0625f32, 0x38), (1.1875, 0x3a), (17.0, 0x58), (-0.0, 0x80)] {
            assert_eq!(e4m3_encode(x), bits, "{x}");
        }
        assert_eq!(e4m3_encode(f32::INFINITY), 0x7e);
        assert_eq!(e4m3_encode(f32::NEG_INFINITY), 0xfe);
        assert_eq!(e4m3_encode(f32::NAN) & 0x7f, 0x7f);
    }

    #[test]
    fn every_byte_round_trips() {
        for bits in (0..=255u8).filter(|b| b & 0x7f != 0x7f) {
            assert_eq!(e4m3_encode(e4m3_decode(bits)), bits, "{bits:#04x}");
        }
    }

    fn wave(n: usize, salt: f32) -> Vec<f32> {
        (0..n)
            .map(|i| ((i as f32) * 0.61 + salt).sin() * (1.0 + salt))
            .collect()
    }

    #[test]
    fn each_group_gets_its_amax_over_448() {
        // B=2, H=4, S=3, D=2 in 2 groups of 2 heads: group (b, g) holds heads 2g and 2g+1.
        let dims = [2, 4, 3, 2];
        let bhsd: Vec<f32> = (0..48)
            .map(|i| {
                let (b, h) = (i / 24, (i / 6) % 4);
                (1 + b * 4 + h / 2 * 2) as f32 * if i % 5 == 0 { -1.0 } else { 0.5 }
            })
            .collect();
        for layout in Layout::ALL {
            let values = layout.from_bhsd(&bhsd, 2, 4, 3, 2);
            let (bytes, descale) = quantize(&values, dims, layout, 2).unwrap();
            assert_eq!(
                descale,
                [1.0 / 448.0, 3.0 / 448.0, 5.0 / 448.0, 7.0 / 448.0],
                "{layout}"
            );
            // The group's largest magnitude lands on ±448 exactly.
            let back = dequantize(&bytes, dims, layout, 2, &descale).unwrap();
            let back = layout.to_bhsd(&back, 2, 4, 3, 2);
            for (x, y) in bhsd.iter().zip(&back) {
                assert!((x - y).abs() <= x.abs() / 16.0 + 1e-7, "{layout}: {x} -> {y}");
            }
            assert_eq!(back[0], bhsd[0], "amax is exact");
        }
    }

    #[test]
    fn round_trip_error_is_within_half_an_ulp_of_the_group() {
        let shape = Shape::new(2, 8, 33, 128).with_heads_kv(2);
        for layout in Layout::ALL {
            let (q, k, v) = (
                wave(shape.q_len(), 0.1),
                wave(shape.kv_len(), 2.0),
                wave(shape.kv_len(), 5.0),
            );
            let fp8 = Fp8Inputs::quantize(shape, layout, &q, &k, &v).unwrap();
            assert_eq!(fp8.descale.len(), 3 * 2 * 2);
            let (q8, k8, v8) = fp8.dequantize(shape, layout).unwrap();
            for (orig, back, amax) in [(&q, &q8, 1.1), (&k, &k8, 3.0), (&v, &v8, 6.0)] {
                for (x, y) in orig.iter().zip(back) {
                    // Relative 2^-4 in the normal range; below it, half the subnormal spacing.
                    let bound = (x.abs() / 16.0).max(amax / 448.0 * 2f32.powi(-10)) * 1.0001;
                    assert!((x - y).abs() <= bound, "{x} -> {y}");
                }
            }
        }
    }

    #[test]
    fn zero_and_tiny_groups_are_safe() {
        let (bytes, descale) = quantize(&[0.0; 8], [1, 2, 2, 2], Layout::Bhsd, 2).unwrap();
        assert_eq!((bytes, descale), (vec![0; 8], vec![1.0, 1.0]));
        let tiny = [f32::from_bits(3), 0.0, -f32::from_bits(2), 0.0];
        let (bytes, descale) = quantize(&tiny, [1, 1, 2, 2], Layout::Bhsd, 1).unwrap();
        assert!(descale[0] > 0.0 && descale[0].is_finite());
        assert!(bytes.iter().all(|&b| b & 0x7f != 0x7f), "{bytes:?}");
    }

    #[test]
    fn bad_input_is_a_typed_error() {
        let err = quantize(&[1.0; 7], [1, 2, 2, 2], Layout::Bhsd, 1).unwrap_err();
        assert!(
            matches!(
                err,
                Error::Length {
                    expected: 8,
                    actual: 7,
                    ..
                }
            ),
            "{err}"
        );
        let err = quantize(&[1.0; 8], [1, 2, 2, 2], Layout::Bhsd, 3).unwrap_err();
        assert!(matches!(err, Error::InvalidProblem(_)), "{err}");
        let err = quantize(&[1.0; 8], [1, 2, 2, 2], Layout::Bhsd, 0).unwrap_err();
        assert!(matches!(err, Error::InvalidProblem(_)), "{err}");
        let err = quantize(&[1.0, f32::NAN, 0.0, 0.0], [1, 1, 2, 2], Layout::Bshd, 1).unwrap_err();
        assert!(err.to_string().contains("element 1 is NaN"), "{err}");
        let huge = [usize::MAX, 2, 2, 2];
        assert!(matches!(
            quantize(&[1.0; 8], huge, Layout::Bhsd, 1),
            Err(Error::Length { .. })
        ));
        let err = dequantize(&[0; 8], [1, 2, 2, 2], Layout::Bhsd, 2, &[1.0]).unwrap_err();
        assert!(matches!(err, Error::Length { what: "descale", .. }), "{err}");
        let shape = Shape::new(1, 4, 8, 2).with_heads_kv(2);
        let parts =
            |q: usize, d: Vec<f32>| Fp8Inputs::from_parts(shape, vec![0; q], vec![0; 32], vec![0; 32], d);
        assert!(parts(64, vec![1.0; 6]).is_ok());
        assert!(matches!(
            parts(63, vec![1.0; 6]),
            Err(Error::Length { what: "q", .. })
        ));
        assert!(matches!(
            parts(64, vec![1.0; 5]),
            Err(Error::Length { what: "descale", .. })
        ));
        let err = parts(64, vec![1.0, 1.0, 0.0, 1.0, 1.0, 1.0]).unwrap_err();
        assert!(err.to_string().contains("descale factor 2"), "{err}");
        for e in [err, parts(64, vec![f32::INFINITY; 6]).unwrap_err()] {
            assert_eq!(e.to_string().lines().count(), 1);
        }
    }

    #[test]
    fn descale_parts_are_q_then_k_then_v() {
        let shape = Shape::new(2, 2, 4, 2).with_heads_kv(1);
        let q = vec![2.0; shape.q_len()];
        let (k, v) = (vec![4.0; shape.kv_len()], vec![-8.0; shape.kv_len()]);
        let fp8 = Fp8Inputs::quantize(shape, Layout::Bhsd, &q, &k, &v).unwrap();
        assert_eq!(fp8.descale_q(), [2.0 / 448.0; 2]);
        assert_eq!(fp8.descale_k(), [4.0 / 448.0; 2]);
        assert_eq!(fp8.descale_v(), [8.0 / 448.0; 2]);
        assert!(fp8.v.iter().all(|&b| b == 0xfe));
    }
}
