//! Tensor maps for the warp-specialised kernels (`flash_ws`): what the copy engine needs to know
//! to move a tile of Q, K or V into shared memory, and one of the output back out, by itself.
//!
//! Each tensor is described as 4-d, innermost first: (head dim, sequence, head, batch) (a paged
//! cache's maps split the head dim instead: [`MapGeometry::paged`]). The two
//! memory layouts differ only in the strides, so the kernel reads `[B, H, S, D]` and `[B, S, H, D]`
//! through the same coordinates. A box is 64 columns (128 bytes: the span of the 128-byte swizzle,
//! which is the layout `wgmma` reads) by a tile's rows; rows past the sequence's end arrive as
//! zeros, and rows of an output box past it are not written, so the kernels need no tail handling.
//!
//! The maps go to the GPU in a small buffer (see `kernels-rs/src/arch/tma.rs` for why not as
//! kernel parameters): `MAPS` of them, Q, K, V, O, `MAP_BYTES` apart.

use cudarc::driver::sys;

use crate::error::{Error, Result};
use crate::gpu::L2Promotion;
use crate::layout::{Layout, Strides};
use crate::problem::{DType, Shape};

#[allow(unused_imports)] // Q's and O's places: read by the lab's tools.
pub use crate::launch::maps::{MAPS, MAP_BYTES, MAP_K, MAP_O, MAP_Q, MAP_V};

/// Rows of the output map's box: one consumer warpgroup's rows, which it stores on its own.
pub const OUTPUT_BOX_ROWS: u32 = 64;
/// Columns per box: 128 bytes of 16-bit elements.
pub const BOX_COLUMNS: u32 = 64;
/// Bytes per box row: the span of the 128-byte swizzle.
pub const BOX_BYTES: u32 = 128;

/// The geometry of one tensor map, before encoding.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MapGeometry {
    /// Elements per dimension, innermost first: head dim, sequence, heads, batch.
    pub dims: [u64; 4],
    /// Bytes between consecutive indices of dimensions 1..4 (dimension 0 is contiguous).
    pub strides: [u64; 3],
    /// The box one copy moves: `BOX_COLUMNS` x rows x 1 x 1.
    pub box_dims: [u32; 4],
}

impl MapGeometry {
    /// The geometry of a `batch x heads x seq x d` tensor of 16-bit elements in `layout`, copied
    /// in boxes of `rows` rows.
    pub fn new(layout: Layout, batch: usize, heads: usize, seq: usize, d: usize, rows: u32) -> MapGeometry {
        MapGeometry::of_elements(2, layout, batch, heads, seq, d, rows)
    }

    /// As [`MapGeometry::new`] for elements of `element_bytes` (2, or 1 for e4m3): boxes of
    /// `BOX_BYTES` of each row.
    pub fn of_elements(
        element_bytes: u32,
        layout: Layout,
        batch: usize,
        heads: usize,
        seq: usize,
        d: usize,
        rows: u32,
    ) -> MapGeometry {
        let (seq_stride, head_stride) = match layout {
            Layout::Bhsd => (d, seq * d),
            Layout::Bshd => (heads * d, d),
        };
        let bytes = |elements: usize| element_bytes as u64 * elements as u64;
        MapGeometry {
            dims: [d as u64, seq as u64, heads as u64, batch as u64],
            strides: [bytes(seq_stride), bytes(head_stride), bytes(heads * seq * d)],
            box_dims: [BOX_BYTES / element_bytes, rows, 1, 1],
        }
    }

    /// The geometry of a 16-bit tensor of logical dims `[B, H, S, D]` whose elements are
    /// `strides` apart (elements, D's 1), copied in boxes of `rows` rows: the same coordinates as
    /// a contiguous tensor's, only the strides differ ([`MapGeometry::check`] refuses strides the
    /// copy engine cannot take).
    pub fn strided(dims: [usize; 4], strides: Strides, rows: u32) -> MapGeometry {
        let [batch, heads, seq, d] = dims;
        let bytes = |elements: usize| 2 * elements as u64;
        MapGeometry {
            dims: [d as u64, seq as u64, heads as u64, batch as u64],
            strides: [bytes(strides.0[2]), bytes(strides.0[1]), bytes(strides.0[0])],
            box_dims: [BOX_COLUMNS, rows, 1, 1],
        }
    }

    /// The map of e4m3 V transposed (`kernels-rs/src/attention/fp8.rs`): `[B, H_kv, D,
    /// keys_padded]` bytes, dimensions innermost first (keys, head dim, head, batch), in boxes of
    /// `BOX_BYTES` keys by all `d` columns.
    pub fn transposed(batch: usize, heads_kv: usize, keys_padded: usize, d: usize) -> MapGeometry {
        let row = keys_padded as u64;
        MapGeometry {
            dims: [row, d as u64, heads_kv as u64, batch as u64],
            strides: [row, row * d as u64, row * d as u64 * heads_kv as u64],
            box_dims: [BOX_BYTES, d as u32, 1, 1],
        }
    }

    /// Q's map for query tiles of `block_m` rows.
    pub fn q(layout: Layout, shape: Shape, block_m: u32) -> MapGeometry {
        MapGeometry::new(
            layout,
            shape.batch,
            shape.heads,
            shape.seq_q,
            shape.head_dim,
            block_m,
        )
    }

    /// The output's map (`[B, H, S_q, D_v]`), for the warpgroups' stores of `OUTPUT_BOX_ROWS`
    /// rows each.
    pub fn out(layout: Layout, shape: Shape) -> MapGeometry {
        MapGeometry::new(
            layout,
            shape.batch,
            shape.heads,
            shape.seq_q,
            shape.head_dim_v,
            OUTPUT_BOX_ROWS,
        )
    }

    /// K's or V's map for key tiles of `block_n` rows (`H_kv` heads).
    pub fn kv(layout: Layout, shape: Shape, block_n: u32) -> MapGeometry {
        let heads_kv = shape.heads / shape.kv_group();
        MapGeometry::new(
            layout,
            shape.batch,
            heads_kv,
            shape.seq_k,
            shape.head_dim,
            block_n,
        )
    }

    /// A paged KV cache `[num_blocks, block_size, H_kv, D]` of 16-bit elements as the copy
    /// engine reads it (`kernels-rs/src/attention/paged.rs`): `slots = num_blocks x block_size`
    /// key rows, so that key `k` of a sequence is row `page(k) x block_size + k % block_size`.
    /// Unlike the other maps the dimensions are (64 columns, key slot, column block, head): a
    /// box of `box_rows` rows (a page, or a tile where a page holds more) by all `d / 64` column
    /// blocks lands as those rows' column blocks one after the other, the swizzled layout of a
    /// `box_rows`-row tile, so one copy per page brings every column.
    pub fn paged(slots: usize, heads_kv: usize, d: usize, box_rows: u32) -> MapGeometry {
        let row_bytes = 2 * d as u64;
        MapGeometry {
            dims: [
                BOX_COLUMNS as u64,
                slots as u64,
                d as u64 / BOX_COLUMNS as u64,
                heads_kv as u64,
            ],
            strides: [heads_kv as u64 * row_bytes, BOX_BYTES as u64, row_bytes],
            box_dims: [BOX_COLUMNS, box_rows, d as u32 / BOX_COLUMNS, 1],
        }
    }

    /// The copy engine's limits, as `cuTensorMapEncodeTiled` documents them (strides multiples of
    /// 16 bytes below 2^40, box sides 1..=256), and dimensions the kernels' signed 32-bit
    /// coordinates reach: at most 2^31 - 1 elements each.
    pub fn check(&self) -> Result<()> {
        let fits = self.dims.iter().all(|&n| (1..=i32::MAX as u64).contains(&n))
            && self.strides.iter().all(|&s| s % 16 == 0 && s < 1 << 40)
            && self.box_dims.iter().all(|&b| (1..=256).contains(&b));
        if fits {
            Ok(())
        } else {
            Err(Error::InvalidProblem(format!(
                "the tensor (dims {:?}, byte strides {:?}) is beyond what the copy engine can address \
                 in boxes of {:?}",
                self.dims, self.strides, self.box_dims
            )))
        }
    }

    /// Encodes the map of the tensor at device address `address`: 128-byte swizzle, zero fill,
    /// L2 misses promoted as `promotion` says ([`GpuOptions`](crate::GpuOptions)).
    pub fn encode(&self, dtype: DType, address: u64, promotion: L2Promotion) -> Result<[u8; MAP_BYTES]> {
        let data_type = match dtype {
            DType::F16 => sys::CUtensorMapDataType::CU_TENSOR_MAP_DATA_TYPE_FLOAT16,
            DType::Bf16 => sys::CUtensorMapDataType::CU_TENSOR_MAP_DATA_TYPE_BFLOAT16,
        };
        self.encode_as(data_type, address, promotion)
    }

    /// [`MapGeometry::encode`] for bytes (the e4m3 tensors: the copy engine only moves them).
    pub fn encode_bytes(&self, address: u64, promotion: L2Promotion) -> Result<[u8; MAP_BYTES]> {
        self.encode_as(
            sys::CUtensorMapDataType::CU_TENSOR_MAP_DATA_TYPE_UINT8,
            address,
            promotion,
        )
    }

    fn encode_as(
        &self,
        data_type: sys::CUtensorMapDataType,
        address: u64,
        promotion: L2Promotion,
    ) -> Result<[u8; MAP_BYTES]> {
        self.check()?;
        let element_strides = [1u32; 4];
        let mut map = sys::CUtensorMap { opaque: [0; 16] };
        // Safety: every pointer names a live array of the length the rank (4) implies (strides:
        // rank - 1), and `map` is a properly aligned CUtensorMap the call writes.
        let result = unsafe {
            sys::cuTensorMapEncodeTiled(
                &mut map,
                data_type,
                4,
                address as *mut std::ffi::c_void,
                self.dims.as_ptr(),
                self.strides.as_ptr(),
                self.box_dims.as_ptr(),
                element_strides.as_ptr(),
                sys::CUtensorMapInterleave::CU_TENSOR_MAP_INTERLEAVE_NONE,
                sys::CUtensorMapSwizzle::CU_TENSOR_MAP_SWIZZLE_128B,
                promotion.encoded(),
                sys::CUtensorMapFloatOOBfill::CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE,
            )
        };
        result.result()?;
        let mut bytes = [0u8; MAP_BYTES];
        for (chunk, word) in bytes.chunks_exact_mut(8).zip(map.opaque) {
            chunk.copy_from_slice(&word.to_ne_bytes());
        }
        Ok(bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_layouts_describe_the_same_elements() {
        // Element (b, h, s, d) must sit at the same byte offset the layout's own formula gives.
        let (batch, heads, seq, d) = (2, 3, 5, 64);
        for layout in Layout::ALL {
            let g = MapGeometry::new(layout, batch, heads, seq, d, 64);
            for (b, h, s, c) in [(0, 0, 0, 0), (1, 2, 4, 63), (1, 0, 3, 7), (0, 2, 1, 32)] {
                let offset = 2 * c as u64
                    + s as u64 * g.strides[0]
                    + h as u64 * g.strides[1]
                    + b as u64 * g.strides[2];
                let dims = layout.dims(batch, heads, seq, d);
                let index = match layout {
                    Layout::Bhsd => ((b * dims[1] + h) * dims[2] + s) * dims[3] + c,
                    Layout::Bshd => ((b * dims[1] + s) * dims[2] + h) * dims[3] + c,
                };
                assert_eq!(offset, 2 * index as u64, "{layout:?} ({b},{h},{s},{c})");
            }
        }
    }

    #[test]
    fn kv_maps_have_the_kv_heads() {
        let shape = Shape::new(2, 8, 100, 128).with_heads_kv(2);
        let g = MapGeometry::kv(Layout::Bshd, shape, 128);
        assert_eq!(g.dims, [128, 100, 2, 2]);
        assert_eq!(
            g.strides[0],
            2 * 2 * 128,
            "a key row is H_kv * D elements from the next"
        );
        assert_eq!(g.box_dims, [64, 128, 1, 1]);
        assert!(g.check().is_ok());
    }

    #[test]
    fn a_paged_cache_is_key_slots_of_column_blocks() {
        // 10 pages of 16 keys, 4 KV heads of 128: column block c of key slot s of head h at
        // (s * 4 + h) * 128 + 64 c elements; a box is a page's rows, both column blocks.
        let g = MapGeometry::paged(10 * 16, 4, 128, 16);
        assert_eq!(g.dims, [64, 160, 2, 4]);
        assert_eq!(g.strides, [2 * 4 * 128, 128, 2 * 128]);
        assert_eq!(g.box_dims, [64, 16, 2, 1]);
        assert!(g.check().is_ok());
        assert_eq!(MapGeometry::paged(160, 4, 64, 128).box_dims, [64, 128, 1, 1]);
        assert!(
            MapGeometry::paged(1 << 31, 1, 64, 16).check().is_err(),
            "rows past i32"
        );
    }

    #[test]
    fn byte_maps_take_128_columns_per_box_and_transposed_v_its_keys() {
        let g = MapGeometry::of_elements(1, Layout::Bshd, 2, 4, 100, 128, 128);
        assert_eq!(g.box_dims, [128, 128, 1, 1]);
        assert_eq!(g.strides, [4 * 128, 128, 4 * 100 * 128]);
        let t = MapGeometry::transposed(2, 4, 112, 256);
        assert_eq!(t.dims, [112, 256, 4, 2]);
        assert_eq!(t.strides, [112, 112 * 256, 112 * 256 * 4]);
        assert_eq!(t.box_dims, [128, 256, 1, 1]);
        assert!(t.check().is_ok());
    }

    #[test]
    fn limits_are_checked_before_the_driver() {
        let mut g = MapGeometry::q(Layout::Bhsd, Shape::new(1, 1, 16, 64), 128);
        assert!(g.check().is_ok());
        g.box_dims[1] = 512;
        assert!(g.check().is_err(), "box side over 256");
        let mut g = MapGeometry::q(Layout::Bhsd, Shape::new(1, 1, 16, 64), 128);
        g.strides[0] = 24;
        assert!(g.check().is_err(), "stride not a multiple of 16");
    }
}
