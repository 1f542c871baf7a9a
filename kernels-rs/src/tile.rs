//! Tiles in shared memory: a tile is `ROWS x D` 16-bit elements, each row padded by 16 bytes.
//!
//! The padding makes the row stride `2*D + 16` bytes, which is 16 more than a multiple of 128 for
//! the head dims used here; so eight consecutive rows read at the same column (one `ldmatrix`
//! matrix, or one phase of 16-byte vector loads) fall into eight different groups of four banks:
//! conflict-free without a swizzle, at the cost of 16 bytes per row.

use crate::arch::{self, SharedAddr};

/// Bytes between consecutive rows of a padded shared tile of head dim `D`.
pub const fn row_stride_bytes(d: usize) -> u32 {
    (2 * d + 16) as u32
}

/// Bytes of one padded `ROWS x D` tile.
pub const fn tile_bytes(rows: usize, d: usize) -> u32 {
    rows as u32 * row_stride_bytes(d)
}

/// The rows of one head in global memory: `count` rows of `D` elements, `stride` elements apart
/// (`D` in the `[B, H, S, D]` layout, `H * D` in `[B, S, H, D]`).
#[derive(Clone, Copy)]
pub struct Rows {
    pub base: *const u16,
    pub stride: u32,
    pub count: u32,
}

impl Rows {
    /// Bytes from row `i` to row `i + rows`. With `PACKED` the rows are known to be `D` apart
    /// (the `[B, H, S, D]` layout), so every offset is a constant folded into the copy
    /// instruction; otherwise it is computed where it is used (see `arch::in_place`), since a
    /// run-time stride would have every row's offset hoisted out of the KV loop into registers.
    #[inline(always)]
    pub(crate) fn bytes<const D: usize, const PACKED: bool>(&self, rows: u32) -> usize {
        let stride = if PACKED {
            D
        } else {
            arch::in_place(self.stride) as usize
        };
        rows as usize * stride * 2
    }

    /// Issues `cp.async` copies of rows `first_row .. first_row + rows` into a shared tile,
    /// 16 bytes per copy spread over `threads` threads (a multiple of `D / 8`); rows at or past
    /// `count` are zero-filled and read nothing. The tile layout enters through two numbers:
    /// `first_chunk(row, chunk)`, where this thread's first 16-byte chunk goes, and `row_bytes`,
    /// the distance between tile rows at the same chunk. Thread `t` always copies chunk
    /// `t % (D / 8)` of rows `t / (D / 8) + i * step`, so the whole tile is addressed from one
    /// pointer plus offsets: no per-chunk 64-bit address stays live across the KV loop (that cost
    /// 32 registers at head dim 128). Rows `D` apart (`[B, H, S, D]`) take a copy of the loop
    /// whose offsets are constants; one branch per call, and that layout pays nothing for the other.
    ///
    /// # Safety
    /// `self` must be readable for its `count` rows; `first_chunk` and `row_bytes` must place every
    /// chunk of the `rows` rows inside one shared tile that nobody reads or writes until the copies have
    /// landed (`cp.async.wait_group`, then a barrier).
    #[inline(always)]
    pub(crate) unsafe fn copy_async<const D: usize>(
        &self,
        first_row: u32,
        rows: u32,
        thread: u32,
        threads: u32,
        first_chunk: impl Fn(u32, u32) -> SharedAddr,
        row_bytes: u32,
    ) {
        if self.stride as usize == D {
            self.copy_rows::<D, true>(first_row, rows, thread, threads, first_chunk, row_bytes)
        } else {
            self.copy_rows::<D, false>(first_row, rows, thread, threads, first_chunk, row_bytes)
        }
    }

    /// # Safety
    /// As `copy_async`; `PACKED` only when the rows are `D` apart.
    #[inline(always)]
    unsafe fn copy_rows<const D: usize, const PACKED: bool>(
        &self,
        first_row: u32,
        rows: u32,
        thread: u32,
        threads: u32,
        first_chunk: impl Fn(u32, u32) -> SharedAddr,
        row_bytes: u32,
    ) {
        let chunks_per_row = D as u32 / 8;
        let step = threads / chunks_per_row; // rows covered per pass
        let row0 = thread / chunks_per_row;
        let chunk = thread % chunks_per_row;
        let src0 =
            (self.base.add((chunk * 8) as usize) as *const u8).add(self.bytes::<D, PACKED>(first_row + row0));
        let dst0 = first_chunk(row0, chunk);
        // `rows` and `threads` are compile-time constants at every call site, so this loop unrolls.
        let mut pass = 0;
        while pass * step < rows {
            let row = row0 + pass * step;
            if row < rows {
                let in_bounds = first_row + row < self.count;
                let from = if in_bounds {
                    src0.add(self.bytes::<D, PACKED>(pass * step))
                } else {
                    self.base as *const u8
                };
                arch::cp_async_16(
                    dst0 + pass * step * row_bytes,
                    from,
                    if in_bounds { 16 } else { 0 },
                );
            }
            pass += 1;
        }
    }
}

/// Issues `cp.async` copies of rows `first_row .. first_row + rows` of `src` into the tile at
/// `dst`, spread over `threads` threads, 16 bytes per copy. Rows at or past `src.count` are
/// zero-filled (and nothing is read for them), so tails need no other care: a zero key gets
/// masked anyway and a zero value row contributes nothing.
///
/// Thread `t` always copies the same 16-byte column of rows `t / chunks_per_row + i * step`, so
/// the whole tile is addressed from one pointer plus compile-time offsets: no per-chunk 64-bit
/// address stays live across the KV loop (that cost 32 registers at head dim 128).
///
/// # Safety
/// `src` must be readable for its `count` rows, and `dst` a padded tile of `rows` rows in this
/// block's shared memory that nobody reads or writes until the copies have landed.
#[inline(always)]
pub unsafe fn load_async<const D: usize>(
    dst: SharedAddr,
    src: Rows,
    first_row: u32,
    rows: u32,
    thread: u32,
    threads: u32,
) {
    if !threads.is_multiple_of(D as u32 / 8) {
        arch::trap(); // every compiled variant has a multiple of 8 or 16 threads
    }
    let stride = row_stride_bytes(D);
    let first_chunk = |row: u32, chunk: u32| dst + row * stride + chunk * 16;
    src.copy_async::<D>(first_row, rows, thread, threads, first_chunk, stride);
}

/// How a tile sits in shared memory, for the code that stages K and V tiles whatever their
/// layout (`attention::pipeline`).
pub trait TileLayout {
    /// Bytes of a `rows x D` tile.
    fn tile_bytes<const D: usize>(rows: u32) -> u32;

    /// Where the 16-byte chunk `chunk` (elements `8 chunk ..`) of row `row` sits in the tile of
    /// `rows` rows of `d` elements at `tile`: what one lane of an `ldmatrix` points at.
    fn chunk(tile: SharedAddr, d: usize, rows: u32, row: u32, chunk: u32) -> SharedAddr;

    /// Issues the `cp.async` copies of rows `first_row .. first_row + rows` of `src` into the tile
    /// at `dst`, spread over `threads` threads; rows past `src.count` are zero-filled.
    ///
    /// # Safety
    /// As the layout's `load_async`: `src` must be readable for its `count` rows, and `dst` must
    /// be a tile of `rows` rows that no other thread reads until the copies have landed.
    unsafe fn load_async<const D: usize>(
        dst: SharedAddr,
        src: Rows,
        first_row: u32,
        rows: u32,
        thread: u32,
        threads: u32,
    );
}

/// The padded layout of this module: rows `row_stride_bytes(D)` apart, read through `ldmatrix`.
pub struct Padded;
impl TileLayout for Padded {
    #[inline(always)]
    fn tile_bytes<const D: usize>(rows: u32) -> u32 {
        rows * row_stride_bytes(D)
    }

    #[inline(always)]
    fn chunk(tile: SharedAddr, d: usize, _rows: u32, row: u32, chunk: u32) -> SharedAddr {
        tile + row * row_stride_bytes(d) + chunk * 16
    }

    /// # Safety
    /// As `tile::load_async`.
    #[inline(always)]
    unsafe fn load_async<const D: usize>(
        dst: SharedAddr,
        src: Rows,
        first_row: u32,
        rows: u32,
        thread: u32,
        threads: u32,
    ) {
        load_async::<D>(dst, src, first_row, rows, thread, threads)
    }
}

/// The 128-byte swizzle layout of `swizzled`, read by `wgmma` through descriptors.
pub struct Swizzled128;
impl TileLayout for Swizzled128 {
    #[inline(always)]
    fn tile_bytes<const D: usize>(rows: u32) -> u32 {
        swizzled::tile_bytes(rows as usize, D)
    }

    #[inline(always)]
    fn chunk(tile: SharedAddr, _d: usize, rows: u32, row: u32, chunk: u32) -> SharedAddr {
        tile + swizzled::chunk_offset(row, chunk, rows)
    }

    /// # Safety
    /// As `swizzled::load_async`.
    #[inline(always)]
    unsafe fn load_async<const D: usize>(
        dst: SharedAddr,
        src: Rows,
        first_row: u32,
        rows: u32,
        thread: u32,
        threads: u32,
    ) {
        swizzled::load_async::<D>(dst, src, first_row, rows, thread, threads)
    }
}

/// Reads `VEC` consecutive 16-bit floats (f16 or bf16 as `T` decides) at `addr` as f32, with one
/// vector load (`VEC` = 2, 4 or 8: 4, 8 or 16 bytes).
///
/// # Safety
/// As `arch::ld_shared_f32`, for `2 * VEC` bytes at an `addr` aligned to them.
#[inline(always)]
pub unsafe fn read_f32<T: Element, const VEC: usize>(addr: SharedAddr) -> [f32; VEC] {
    let mut out = [0.0f32; VEC];
    let mut words = [0u32; 4];
    match VEC {
        2 => words[0] = arch::ld_shared_u32(addr),
        4 => {
            let w = arch::ld_shared_v2_u32(addr);
            words[0] = w[0];
            words[1] = w[1];
        }
        8 => words = arch::ld_shared_v4_u32(addr),
        _ => arch::trap(),
    }
    let mut i = 0;
    while i < VEC {
        let (lo, hi) = T::unpack(words[i / 2]);
        out[i] = lo;
        out[i + 1] = hi;
        i += 2;
    }
    out
}

/// A 16-bit element type the kernels take as input and produce as output; as a `wgmma` operand
/// (its products and P's fragments) it is an [`Operand`].
pub trait Element: Operand {
    /// Widens one element.
    fn to_f32(bits: u16) -> f32;
    /// Rounds one value to this type.
    fn from_f32(x: f32) -> u16;
    /// Widens both halves of a packed pair, low half first.
    #[inline(always)]
    fn unpack(pair: u32) -> (f32, f32) {
        (Self::to_f32(pair as u16), Self::to_f32((pair >> 16) as u16))
    }
    /// Packs two values, `lo` in the low half.
    fn pack(lo: f32, hi: f32) -> u32;
    /// `acc += a * b` on tensor cores for this element type.
    fn mma(acc: &mut [f32; 4], a: [u32; 4], b: [u32; 2]);
    /// `acc (+)= A B` on warpgroup tensor cores, A and B both MN-major in shared memory
    /// (`arch::wgmma_ss_mn`).
    ///
    /// # Safety
    /// As `arch::wgmma_ss_mn`.
    unsafe fn wgmma_ss_mn<const CHAIN: u8, const R: usize>(
        acc: &mut [f32; R],
        a: u64,
        b: u64,
        accumulate: bool,
    );
}

// A 16-bit type as a `wgmma` operand: the type is part of the instruction's name, so each forwards
// with its flag; its A fragment is the accumulator layout of two 8-key column blocks, pair by pair.
macro_rules! sixteen_bit_operand {
    ($t:ty, $bf16:literal) => {
        impl Operand for $t {
            const BYTES: usize = 2;
            const V_TRANSPOSED: bool = false;

            #[inline(always)]
            unsafe fn wgmma_ss<const CHAIN: u8, const R: usize>(
                acc: &mut [f32; R],
                a: u64,
                b: u64,
                accumulate: bool,
            ) {
                arch::wgmma_ss::<$bf16, CHAIN, R>(acc, a, b, accumulate)
            }

            #[inline(always)]
            unsafe fn wgmma_rs<const CHAIN: u8, const R: usize>(
                acc: &mut [f32; R],
                a: [u32; 4],
                b: u64,
                accumulate: bool,
            ) {
                arch::wgmma_rs::<$bf16, CHAIN, R>(acc, a, b, accumulate)
            }

            #[inline(always)]
            fn pack_probabilities<const R: usize>(s: &[f32; R], step: usize) -> [u32; 4] {
                core::array::from_fn(|i| <$t as Element>::pack(s[8 * step + 2 * i], s[8 * step + 2 * i + 1]))
            }
        }
    };
}

/// IEEE binary16.
pub struct F16;
impl Element for F16 {
    #[inline(always)]
    fn to_f32(bits: u16) -> f32 {
        arch::f16_to_f32(bits)
    }
    #[inline(always)]
    fn from_f32(x: f32) -> u16 {
        arch::f32_to_f16(x)
    }
    #[inline(always)]
    fn pack(lo: f32, hi: f32) -> u32 {
        arch::pack_f16x2(lo, hi)
    }
    #[inline(always)]
    fn mma(acc: &mut [f32; 4], a: [u32; 4], b: [u32; 2]) {
        arch::mma_f16_m16n8k16(acc, a, b)
    }
    #[inline(always)]
    unsafe fn wgmma_ss_mn<const CHAIN: u8, const R: usize>(
        acc: &mut [f32; R],
        a: u64,
        b: u64,
        accumulate: bool,
    ) {
        arch::wgmma_ss_mn::<false, CHAIN, R>(acc, a, b, accumulate)
    }
}
sixteen_bit_operand!(F16, false);

/// bfloat16: the top half of an f32, so widening is a shift.
pub struct Bf16;
impl Element for Bf16 {
    #[inline(always)]
    fn to_f32(bits: u16) -> f32 {
        f32::from_bits((bits as u32) << 16)
    }
    #[inline(always)]
    fn from_f32(x: f32) -> u16 {
        arch::pack_bf16x2(x, 0.0) as u16
    }
    #[inline(always)]
    fn pack(lo: f32, hi: f32) -> u32 {
        arch::pack_bf16x2(lo, hi)
    }
    #[inline(always)]
    fn mma(acc: &mut [f32; 4], a: [u32; 4], b: [u32; 2]) {
        arch::mma_bf16_m16n8k16(acc, a, b)
    }
    #[inline(always)]
    unsafe fn wgmma_ss_mn<const CHAIN: u8, const R: usize>(
        acc: &mut [f32; R],
        a: u64,
        b: u64,
        accumulate: bool,
    ) {
        arch::wgmma_ss_mn::<true, CHAIN, R>(acc, a, b, accumulate)
    }
}
sixteen_bit_operand!(Bf16, true);

/// What Hopper's warpgroup tensor cores read Q, K and V as (`flash_ws`): a 16-bit [`Element`], or
/// [`E4m3`]. Its products cover 32 bytes of each
/// row per `wgmma`, so the K extent is 16 elements of 16 bits or 32 of 8.
pub trait Operand {
    /// Bytes per element.
    const BYTES: usize;
    /// Elements along K per `wgmma` (32 bytes of a row).
    const K_STEP: usize = 32 / Self::BYTES;
    /// Whether V arrives transposed (`[D, keys]`, keys contiguous): 8-bit `wgmma` reads its B
    /// operand only K-major, where 16-bit ones read V's own rows (MN-major).
    const V_TRANSPOSED: bool;
    /// Whether V comes in its own rows and the producer warpgroup transposes each tile in shared
    /// memory (`attention::fp8::transpose_tile`), instead of a transposed copy made before.
    const TRANSPOSES_V: bool = false;

    /// `acc (+)= A B`, A and B from shared-memory descriptors (K-major).
    ///
    /// # Safety
    /// As `arch::wgmma_ss`.
    unsafe fn wgmma_ss<const CHAIN: u8, const R: usize>(acc: &mut [f32; R], a: u64, b: u64, accumulate: bool);

    /// `acc (+)= A B`, A in registers (`pack_probabilities`), B as V sits in shared memory.
    ///
    /// # Safety
    /// As `arch::wgmma_rs`.
    unsafe fn wgmma_rs<const CHAIN: u8, const R: usize>(
        acc: &mut [f32; R],
        a: [u32; 4],
        b: u64,
        accumulate: bool,
    );

    /// The A fragment of product `step` of O += P V: the probabilities of keys
    /// `K_STEP * step ..` from a row pair's scores in the accumulator layout (`s`, the layout of
    /// `mma.sync.m16n8`: 4 values per 8 keys).
    fn pack_probabilities<const R: usize>(s: &[f32; R], step: usize) -> [u32; 4];
}

/// OCP FP8 E4M3 (1 sign, 4 exponent and 3 mantissa bits, no infinities, largest 448): an input
/// type only, read with a descale factor per tensor and KV head (`Problem::descales`). V reaches
/// the products transposed either way: from a copy transposed before the kernel, or, with
/// `V_ROWS`, from V's own rows, transposed tile by tile in the kernel (`Operand::TRANSPOSES_V`).
pub struct E4m3<const V_ROWS: bool = false>;

impl<const V_ROWS: bool> Operand for E4m3<V_ROWS> {
    const BYTES: usize = 1;
    const V_TRANSPOSED: bool = true;
    const TRANSPOSES_V: bool = V_ROWS;

    #[inline(always)]
    unsafe fn wgmma_ss<const CHAIN: u8, const R: usize>(
        acc: &mut [f32; R],
        a: u64,
        b: u64,
        accumulate: bool,
    ) {
        arch::wgmma_ss_e4m3::<CHAIN, R>(acc, a, b, accumulate)
    }

    #[inline(always)]
    unsafe fn wgmma_rs<const CHAIN: u8, const R: usize>(
        acc: &mut [f32; R],
        a: [u32; 4],
        b: u64,
        accumulate: bool,
    ) {
        arch::wgmma_rs_e4m3::<CHAIN, R>(acc, a, b, accumulate)
    }

    /// The 8-bit A fragment holds, per row, 4 consecutive key slots `4t ..` and `16 + 4t ..` of
    /// the 32, where the accumulator has keys `2t, 2t + 1` of each 8-key column block. Rather
    /// than move bytes between threads, the slots take the keys the thread already has: slot
    /// `16h + 4t + i` is key `16h + 8(i / 2) + 2t + i % 2`. V's transpose puts its rows in the same
    /// order (`attention::fp8::key_of_slot`), so P V sums the same products.
    #[inline(always)]
    fn pack_probabilities<const R: usize>(s: &[f32; R], step: usize) -> [u32; 4] {
        core::array::from_fn(|j| {
            // Register j: row half j % 2, key half j / 2 (column blocks 2(j / 2) and 2(j / 2) + 1).
            let base = 16 * step + 8 * (j / 2) + 2 * (j % 2);
            arch::pack_e4m3x4([s[base], s[base + 1], s[base + 4], s[base + 5]])
        })
    }
}

/// The 128-byte swizzle layout that `wgmma` reads from shared memory.
///
/// A `ROWS x D` tile is stored as `D / 64` column blocks, one after the other; a column block is
/// `ROWS` rows of 128 bytes (64 elements), and in row `r` the 16-byte chunk `c` sits at position
/// `c ^ (r % 8)`. Eight rows read at one column then fall into eight different groups of four
/// banks with no padding, which is what the tensor cores' own address swizzle expects. Tiles must
/// start 1024-byte aligned (the swizzle is taken from address bits, so every 8-row atom must
/// start on a 1024-byte boundary).
pub mod swizzled {
    use crate::arch::{self, SharedAddr};

    /// Bytes of a 128-byte row: 64 elements of one column block.
    pub const ROW_BYTES: u32 = 128;
    /// Bytes of one 8-row swizzle atom: the stride between row groups in a `wgmma` descriptor.
    pub const ATOM_BYTES: u32 = 8 * ROW_BYTES;

    /// `addr` rounded up to the next swizzle atom (1024 bytes), where a swizzled tile may start.
    #[inline(always)]
    pub fn atom_aligned(addr: SharedAddr) -> SharedAddr {
        (addr + ATOM_BYTES - 1) & !(ATOM_BYTES - 1)
    }

    /// Bytes of a `rows x d` tile.
    pub const fn tile_bytes(rows: usize, d: usize) -> u32 {
        (rows * d * 2) as u32
    }

    /// Bytes of one 64-column block of a tile with `rows` rows.
    pub const fn column_block_bytes(rows: u32) -> u32 {
        rows * ROW_BYTES
    }

    /// Byte offset of the 16-byte chunk `chunk` (8 elements) of row `row` in a tile of `rows` rows.
    #[inline(always)]
    pub const fn chunk_offset(row: u32, chunk: u32, rows: u32) -> u32 {
        (chunk / 8) * column_block_bytes(rows) + row * ROW_BYTES + ((chunk % 8) ^ (row % 8)) * 16
    }

    /// Issues `cp.async` copies of rows `first_row .. first_row + rows` of `src` into the swizzled
    /// tile at `dst`, 16 bytes per copy. As `super::load_async`: rows past `src.count` are
    /// zero-filled, and each thread keeps one source pointer. Consecutive threads
    /// take consecutive chunks of a row, so a warp reads whole rows from global memory and each
    /// eight threads write one 128-byte row of shared memory: coalesced and conflict-free.
    ///
    /// # Safety
    /// `src` must be readable for its `count` rows, and `dst` a swizzled tile of `rows` rows,
    /// 1024-byte aligned, in this block's shared memory that nobody reads or writes until the copies
    /// have landed.
    #[inline(always)]
    pub unsafe fn load_async<const D: usize>(
        dst: SharedAddr,
        src: super::Rows,
        first_row: u32,
        rows: u32,
        thread: u32,
        threads: u32,
    ) {
        let step = threads / (D as u32 / 8);
        if !threads.is_multiple_of(D as u32 / 8) || !step.is_multiple_of(8) {
            // Every pass must keep the thread's row index mod 8, so its swizzled column is fixed.
            arch::trap();
        }
        let first_chunk = |row: u32, chunk: u32| dst + chunk_offset(row, chunk, rows);
        src.copy_async::<D>(first_row, rows, thread, threads, first_chunk, ROW_BYTES);
    }
}
