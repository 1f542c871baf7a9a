//! What the e4m3 kernels (`flash_ws_fp8`) need besides `flash_ws` itself: V transposed.
//!
//! 8-bit `wgmma` reads its B operand only K-major, and in O += P V the K dimension is the keys, so
//! V must sit in shared memory as `[D, keys]` with the keys contiguous, where its tensor is
//! `[keys, D]`. `transpose_v` writes that copy before the attention kernel runs:
//! `[B, H_kv, D, keys_padded]`, the keys padded with zeros to a multiple of 16 (the copy engine's
//! row pitch must be a multiple of 16 bytes) and, inside each group of 16, put in the order the
//! kernel's P fragments take them (`key_of_slot`), so that no byte of P has to move between threads.
//!
//! Or the kernel transposes V itself (`tile::E4m3<true>`): the producer warpgroup's idle warps
//! turn each tile around in shared memory as it lands (`transpose_tile`), which saves the pass over
//! V in memory that `transpose_v` is.

use crate::arch::{self, SharedAddr};
use crate::launch::fp8_transpose::{COLUMNS_PER_WARP, KEYS_PER_BLOCK, THREADS};

/// The key (of its group of 16) that slot `slot` of the transposed copy holds: the 8-bit `wgmma`
/// A fragment gives a thread slots `4t .. 4t + 3` of each 16 (`tile::E4m3`), where its scores are
/// keys `2t, 2t + 1, 8 + 2t, 9 + 2t`.
#[inline(always)]
pub const fn key_of_slot(slot: u32) -> u32 {
    let (t, i) = (slot / 4, slot % 4);
    8 * (i / 2) + 2 * t + i % 2
}

/// Transposes V (e4m3 bytes, `[B, H_kv, S_k, D]`, or `[B, S_k, H_kv, D]` with `seq_major`) into
/// `out`, `[B, H_kv, D, keys_padded]` in `key_of_slot` order, zeros past `seq_k`. Grid
/// `(B * H_kv, keys_padded / KEYS_PER_BLOCK rounded up, D / COLUMNS_PER_BLOCK)` with
/// `launch::fp8_transpose`'s threads and no shared memory.
///
/// Lane `4g + w` of a warp takes group `g` (of the block's eight groups of 16 keys) and the four
/// keys that its slots `4w .. 4w + 3` hold, reads 16 bytes (the warp's 16 columns) of each key,
/// turns the 4 x 4 byte blocks around in registers and writes its four slots of each column:
/// a warp's store is then 128 contiguous bytes of one column's row, and nothing goes through
/// shared memory (the first version gathered bytes there and reached a third of the copy rate:
/// docs/kernels/fp8.md, V transposed first).
///
/// # Safety
/// `v` holds the `B * H_kv` heads of `seq_k` rows of `d` bytes the layout says, `out` the
/// transposed copy of `B * H_kv * d * keys_padded` bytes, `keys_padded` the smallest multiple of 16
/// at least `seq_k`, and the launch is the grid above.
pub unsafe fn transpose_v(v: *const u8, out: *mut u8, seq_k: u32, heads_kv: u32, d: u32, seq_major: bool) {
    let keys_padded = seq_k.div_ceil(16) * 16;
    let head = arch::block_idx_x();
    let lane = arch::lane_id();
    let (group, quad) = (lane / 4, lane % 4);
    let first_slot = arch::block_idx_y() * KEYS_PER_BLOCK + 16 * group;
    if first_slot >= keys_padded {
        return;
    }
    let column = (arch::block_idx_z() * (THREADS / 32) + arch::warp_id()) * COLUMNS_PER_WARP;
    let (batch, h) = ((head / heads_kv) as usize, (head % heads_kv) as usize);
    // Row `i` is the key in slot `4 quad + i`; its word `j` holds columns `column + 4j ..`.
    let rows: [[u32; 4]; 4] = core::array::from_fn(|i| {
        let key = first_slot + key_of_slot(4 * quad + i as u32);
        if key >= seq_k {
            return [0; 4];
        }
        let row = if seq_major {
            (batch * seq_k as usize + key as usize) * heads_kv as usize + h
        } else {
            head as usize * seq_k as usize + key as usize
        };
        // Safety: inside V (the caller's contract); rows and the 16 columns are 16-byte aligned.
        unsafe { arch::ld_global_v4_u32(v.add(row * d as usize + column as usize) as *const u32) }
    });
    for j in 0..4 {
        let columns = transpose_4x4([rows[0][j], rows[1][j], rows[2][j], rows[3][j]]);
        for (b, word) in columns.into_iter().enumerate() {
            let c = column as usize + 4 * j + b;
            let at =
                (head as usize * d as usize + c) * keys_padded as usize + (first_slot + 4 * quad) as usize;
            // Safety: inside the copy (the caller's contract); `keys_padded` and `first_slot` are
            // multiples of 16, so the word is aligned and inside the row.
            unsafe { arch::st_global_u32(out.add(at) as *mut u32, word) };
        }
    }
}

/// Warps of the producer warpgroup that transpose V tiles (all but the one whose thread issues
/// the copies).
pub const TRANSPOSER_WARPS: u32 = 3;

/// Keys of a tile that `transpose_tile` turns around: one 128-byte swizzle span of the transposed
/// rows.
pub const TRANSPOSED_KEYS: u32 = 128;

/// Turns a tile of `TRANSPOSED_KEYS` keys of V around, as warp `part` of the `TRANSPOSER_WARPS`:
/// from its own rows at `rows` (as the copy engine lays out a K tile: column blocks of 128 bytes
/// of each key's `d` bytes, 128-byte swizzle) into `transposed`, as the copy engine lays out a
/// tile of the copy `transpose_v` makes (`d` rows of the 128 keys in `key_of_slot` order, 128-byte
/// swizzle).
///
/// A pass moves 4 bytes of D of every key: lane `(g, w)` = `(lane / 4, lane % 4)` reads a word of
/// each of the four keys its slots `4w .. 4w + 3` of group `g` hold, turns the 4 x 4 bytes around
/// and writes a word to each of four rows of D. Its word of D is chunk `(g + pass) % 8`, word
/// `(w + pass / 8) % 4` of the row: the 32 loads then fall in 32 different banks (lanes of one `w`
/// read different chunks; the four `w` read different words), and so do the 32 stores (one row of
/// D and word `w` per lane of one `w`, chunk `g` swizzled by that row). The warps take the
/// passes in turn, `32 * d / 128` of them.
///
/// # Safety
/// `rows` and `transposed` are 1024-byte aligned tiles of `TRANSPOSED_KEYS * d` bytes that no
/// other thread writes meanwhile; `d` is a multiple of 128; `part < TRANSPOSER_WARPS`.
#[inline(always)]
pub unsafe fn transpose_tile(rows: SharedAddr, transposed: SharedAddr, part: u32, d: u32) {
    const ROW: u32 = 128;
    let lane = arch::lane_id();
    let (g, w) = (lane / 4, lane % 4);
    // The lane's keys are 16g + 2w + {0, 1, 8, 9} (`key_of_slot(4w + i)`): rows of 128 bytes,
    // swizzled by their index mod 8, which is 2w for the first and third, 2w + 1 for the others.
    let first_row = rows + (16 * g + 2 * w) * ROW;
    for block in 0..d / 128 {
        let (rows, transposed) = (
            first_row + block * TRANSPOSED_KEYS * ROW,
            transposed + block * 128 * ROW,
        );
        // The lane's column of pass `pass`: chunk (g + pass) % 8, word (w + pass / 8) % 4.
        let column = |pass: u32| 4 * ((g + pass) % 8) + (w + pass / 8) % 4;
        let load = |pass: u32| {
            let (chunk, word) = (column(pass) / 4, column(pass) % 4);
            let even = chunk ^ (2 * w);
            let at = rows + 4 * word;
            [
                arch::ld_shared_u32(at + 16 * even),
                arch::ld_shared_u32(at + ROW + 16 * (even ^ 1)),
                arch::ld_shared_u32(at + 8 * ROW + 16 * even),
                arch::ld_shared_u32(at + 9 * ROW + 16 * (even ^ 1)),
            ]
        };
        // Word b is row d = 128 block + 4 column + b of D, whose chunk g sits at g ^ (d % 8),
        // d % 8 being 4 (column % 2) + b.
        let store = |pass: u32, keys: [u32; 4]| {
            let column = column(pass);
            let group = g ^ (4 * (column % 2));
            let row = transposed + 4 * column * ROW + 4 * w;
            for (b, word) in transpose_4x4(keys).into_iter().enumerate() {
                let b = b as u32;
                arch::st_shared_u32(row + b * ROW + 16 * (group ^ b), word);
            }
        };
        // Two passes at a time, both loads first: the stores may alias the loads for all the
        // compiler knows, so each pass alone would wait out its loads' latency.
        let mut pass = part;
        while pass + TRANSPOSER_WARPS < 32 {
            let (first, second) = (load(pass), load(pass + TRANSPOSER_WARPS));
            store(pass, first);
            store(pass + TRANSPOSER_WARPS, second);
            pass += 2 * TRANSPOSER_WARPS;
        }
        if pass < 32 {
            store(pass, load(pass));
        }
    }
}

/// Byte `i` of word `b` of the result is byte `b` of word `i` of `rows`: a 4 x 4 transpose of
/// bytes in eight byte permutes.
#[inline(always)]
fn transpose_4x4([r0, r1, r2, r3]: [u32; 4]) -> [u32; 4] {
    // Interleave bytes 0-1 and 2-3 of each pair of rows, then the pairs' halves.
    let low01 = arch::byte_perm::<0x5140>(r0, r1);
    let high01 = arch::byte_perm::<0x7362>(r0, r1);
    let low23 = arch::byte_perm::<0x5140>(r2, r3);
    let high23 = arch::byte_perm::<0x7362>(r2, r3);
    [
        arch::byte_perm::<0x5410>(low01, low23),
        arch::byte_perm::<0x7632>(low01, low23),
        arch::byte_perm::<0x5410>(high01, high23),
        arch::byte_perm::<0x7632>(high01, high23),
    ]
}
