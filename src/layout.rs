//! Memory layouts of the Q, K, V and output tensors.
//!
//! The kernels read either layout through strides (`kernels-rs/src/attention/mod.rs`); the host
//! keeps its references in `[B, H, S, D]` and converts with `from_bhsd` / `to_bhsd`.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// How a `B x H x S x D` tensor is ordered in memory, outermost first.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Layout {
    /// `[B, H, S, D]`: each head's rows contiguous (PyTorch's SDPA convention).
    #[default]
    Bhsd,
    /// `[B, S, H, D]`: each position's heads contiguous (FlashAttention's and most models'
    /// projection output, no transpose needed).
    Bshd,
}

impl Layout {
    /// Both layouts, the default first.
    pub const ALL: [Layout; 2] = [Layout::Bhsd, Layout::Bshd];

    /// The layout's lowercase name (`"bhsd"` or `"bshd"`), as the CLI and JSON spell it.
    pub fn name(self) -> &'static str {
        match self {
            Layout::Bhsd => "bhsd",
            Layout::Bshd => "bshd",
        }
    }

    /// The dims of a tensor of `batch, heads, seq, d` in this layout's order (for `.npy` shapes).
    pub fn dims(self, batch: usize, heads: usize, seq: usize, d: usize) -> [usize; 4] {
        match self {
            Layout::Bhsd => [batch, heads, seq, d],
            Layout::Bshd => [batch, seq, heads, d],
        }
    }

    /// `(batch, heads, seq, d)` of a tensor whose dims are `dims` in this layout.
    pub fn split(self, dims: [usize; 4]) -> (usize, usize, usize, usize) {
        match self {
            Layout::Bhsd => (dims[0], dims[1], dims[2], dims[3]),
            Layout::Bshd => (dims[0], dims[2], dims[1], dims[3]),
        }
    }

    /// Reorders a `[B, H, S, D]` tensor into this layout.
    pub fn from_bhsd<T: Copy>(self, data: &[T], batch: usize, heads: usize, seq: usize, d: usize) -> Vec<T> {
        self.permute(data, batch, heads, seq, d, true)
    }

    /// Reorders a tensor in this layout into `[B, H, S, D]`.
    pub fn to_bhsd<T: Copy>(self, data: &[T], batch: usize, heads: usize, seq: usize, d: usize) -> Vec<T> {
        self.permute(data, batch, heads, seq, d, false)
    }

    // The two layouts differ by swapping H and S; the swap is its own inverse up to the order of
    // the two middle dims, which `forward` picks.
    fn permute<T: Copy>(
        self,
        data: &[T],
        batch: usize,
        heads: usize,
        seq: usize,
        d: usize,
        forward: bool,
    ) -> Vec<T> {
        assert_eq!(
            data.len(),
            batch * heads * seq * d,
            "tensor length does not match its dims"
        );
        if self == Layout::Bhsd {
            return data.to_vec();
        }
        let (outer, inner) = if forward { (heads, seq) } else { (seq, heads) };
        let mut out = Vec::with_capacity(data.len());
        for b in 0..batch {
            for i in 0..inner {
                for o in 0..outer {
                    let start = ((b * outer + o) * inner + i) * d;
                    out.extend_from_slice(&data[start..start + d]);
                }
            }
        }
        out
    }
}

/// Where the elements of a tensor of logical dims `[B, H, S, D]` are: the distance, in elements,
/// between neighbours along each dim, in that order. A contiguous tensor's are its layout's
/// ([`Strides::contiguous`]); a view of another library's tensor may have any (a slice of a KV
/// cache, one of q, k, v of a fused projection, a transpose), which the kernels that read through
/// the copy engine take as they are (`flashrs::tma`), and the others only in their layout.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Strides(pub [usize; 4]);

impl Strides {
    /// The strides of a tensor of `dims` contiguous in `layout`.
    pub fn contiguous(layout: Layout, dims: [usize; 4]) -> Strides {
        let [_, heads, seq, d] = dims;
        Strides(match layout {
            Layout::Bhsd => [heads * seq * d, seq * d, d, 1],
            Layout::Bshd => [seq * heads * d, d, heads * d, 1],
        })
    }

    /// Whether a tensor of `dims` with these strides is contiguous in `layout`: every dim of
    /// size above 1 has the layout's stride (a dim of size 1 is never stepped along).
    pub fn fits(self, layout: Layout, dims: [usize; 4]) -> bool {
        let contiguous = Strides::contiguous(layout, dims).0;
        (0..4).all(|axis| dims[axis] <= 1 || self.0[axis] == contiguous[axis])
    }

    /// The contiguous layout a tensor of `dims` with these strides is in, if any (`[B, H, S, D]`
    /// when both fit: one head or one position).
    pub fn layout(self, dims: [usize; 4]) -> Option<Layout> {
        Layout::ALL.into_iter().find(|&layout| self.fits(layout, dims))
    }

    /// Elements from the first to one past the last, what a buffer of the tensor must hold: 0
    /// for an empty tensor, `None` past `usize`.
    pub fn extent(self, dims: [usize; 4]) -> Option<usize> {
        if dims.contains(&0) {
            return Some(0);
        }
        (0..4).try_fold(1usize, |end, axis| {
            (dims[axis] - 1).checked_mul(self.0[axis])?.checked_add(end)
        })
    }
}

impl fmt::Display for Layout {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Layout {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim().to_ascii_lowercase().as_str() {
            "bhsd" => Ok(Layout::Bhsd),
            "bshd" => Ok(Layout::Bshd),
            other => Err(format!(
                "unknown layout `{other}`: bhsd ([B,H,S,D]) or bshd ([B,S,H,D])"
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bshd_puts_each_positions_heads_together() {
        // B=1, H=2, S=3, D=1: element value = 10h + s.
        let bhsd = [0, 1, 2, 10, 11, 12];
        assert_eq!(
            Layout::Bshd.from_bhsd(&bhsd, 1, 2, 3, 1),
            vec![0, 10, 1, 11, 2, 12]
        );
        assert_eq!(Layout::Bhsd.from_bhsd(&bhsd, 1, 2, 3, 1), bhsd.to_vec());
    }

    #[test]
    fn conversions_round_trip() {
        let (b, h, s, d) = (2, 3, 5, 4);
        let data: Vec<u32> = (0..(b * h * s * d) as u32).collect();
        for layout in Layout::ALL {
            let there = layout.from_bhsd(&data, b, h, s, d);
            assert_eq!(layout.to_bhsd(&there, b, h, s, d), data, "{layout}");
        }
        // Element (b=1, h=1, s=2, x=3) of the original sits at [b][s][h][x] of the bshd copy.
        let bshd = Layout::Bshd.from_bhsd(&data, b, h, s, d);
        let at = |bi: usize, hi: usize, si: usize, x: usize| ((bi * h + hi) * s + si) * d + x;
        assert_eq!(bshd[((s + 2) * h + 1) * d + 3], data[at(1, 1, 2, 3)]);
    }

    #[test]
    fn dims_and_split_agree() {
        for layout in Layout::ALL {
            assert_eq!(layout.split(layout.dims(2, 3, 5, 64)), (2, 3, 5, 64));
        }
        assert_eq!(Layout::Bshd.dims(2, 3, 5, 64), [2, 5, 3, 64]);
    }

    #[test]
    fn strides_tell_contiguous_layouts_and_extents() {
        let dims = [2, 3, 5, 64];
        for layout in Layout::ALL {
            let strides = Strides::contiguous(layout, dims);
            assert_eq!(strides.layout(dims), Some(layout));
            assert_eq!(strides.extent(dims), Some(2 * 3 * 5 * 64));
        }
        // One of q, k, v of a fused [B, S, 3, H, D] projection: every S step skips the other two.
        let fused = Strides([5 * 3 * 3 * 64, 64, 3 * 3 * 64, 1]);
        assert_eq!(fused.layout(dims), None);
        // The last element: batch 1, head 2, position 4, column 63.
        assert_eq!(fused.extent(dims), Some(2880 + 2 * 64 + 4 * 576 + 63 + 1));
        // A dim of one element fits any stride; an empty tensor holds nothing.
        let one_head = [2, 1, 5, 64];
        assert_eq!(Strides([5 * 64, 7, 64, 1]).layout(one_head), Some(Layout::Bhsd));
        assert_eq!(Strides([1, 1, 1, 1]).extent([0, 3, 5, 64]), Some(0));
        assert_eq!(Strides([usize::MAX, 1, 1, 1]).extent(dims), None);
    }

    #[test]
    fn parses_names_and_rejects_others() {
        assert_eq!("BSHD".parse::<Layout>(), Ok(Layout::Bshd));
        assert_eq!("bhsd".parse::<Layout>(), Ok(Layout::Bhsd));
        assert!("bsdh".parse::<Layout>().unwrap_err().contains("bshd"));
    }
}
