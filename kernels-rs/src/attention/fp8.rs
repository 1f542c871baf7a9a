//! What the e4m3 kernels (`flash_ws_fp8`) need besides `flash_ws` itself: V transposed.
//!
//! 8-bit `wgmma` reads its B operand only K-major, and in O += P V the K dimension is the keys, so
//! V must sit in shared memory as `[D, keys]` with the keys contiguous, where its tensor is
//! `[keys, D]`. `transpose_v` writes that copy before the attention kernel runs:
//! `[B, H_kv, D, keys_padded]`, the keys padded with zeros to a multiple of 16 (the copy engine's
//! row pitch must be a multiple of 16 bytes) and, inside each group of 16, put in the order the
//! kernel's P fragments take them (`key_of_slot`), so that no byte of P has to move between threads.

use crate::arch::{self, SharedAddr};
use crate::launch::fp8_transpose::{PITCH, TILE};

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
/// `(B * H_kv, keys_padded / 64 rounded up, D / 64)`, with the threads and shared memory of
/// `launch::fp8_transpose`. Block `(x, y, z)` moves keys `64y ..` and columns `64z ..` of KV head `x`
/// through shared memory: coalesced 16-byte reads of key rows, coalesced 16-byte writes of
/// column rows.
///
/// # Safety
/// `v` holds the `B * H_kv` heads of `seq_k` rows of `d` bytes the layout says, `out` the
/// transposed copy of `B * H_kv * d * keys_padded` bytes, `keys_padded` the smallest multiple of 16
/// at least `seq_k`, and the launch is the grid above.
pub unsafe fn transpose_v(v: *const u8, out: *mut u8, seq_k: u32, heads_kv: u32, d: u32, seq_major: bool) {
    let keys_padded = seq_k.div_ceil(16) * 16;
    let (head, first_key, first_column) = (
        arch::block_idx_x(),
        arch::block_idx_y() * TILE,
        arch::block_idx_z() * TILE,
    );
    let thread = arch::thread_idx_x();
    let tile: SharedAddr = arch::dynamic_smem_base();

    // Each thread reads 16 columns of one key: four threads a key's 64 bytes.
    let (row, chunk) = (thread / 4, thread % 4);
    let key = first_key + row;
    let words: [u32; 4] = if key < seq_k {
        let (batch, h) = ((head / heads_kv) as usize, (head % heads_kv) as usize);
        let row_index = if seq_major {
            (batch * seq_k as usize + key as usize) * heads_kv as usize + h
        } else {
            head as usize * seq_k as usize + key as usize
        };
        let src = v.add(row_index * d as usize + (first_column + 16 * chunk) as usize);
        // Safety: inside V (the caller's contract); rows and chunks are 16-byte aligned.
        unsafe { (src as *const [u32; 4]).read() }
    } else {
        [0; 4]
    };
    for (i, word) in words.into_iter().enumerate() {
        // Safety: inside the block's `SMEM_BYTES`.
        unsafe { arch::st_shared_u32(tile + row * PITCH + 16 * chunk + 4 * i as u32, word) };
    }
    arch::sync_threads();

    // Each thread writes 16 keys (slots) of one column.
    let (column, group) = (thread / 4, thread % 4);
    let first_slot = first_key + 16 * group;
    if first_slot >= keys_padded {
        return;
    }
    let byte = |slot: u32| {
        let key = 16 * group + key_of_slot(slot);
        // Safety: inside the block's `SMEM_BYTES`.
        let word = unsafe { arch::ld_shared_u32(tile + key * PITCH + (column & !3)) };
        (word >> (8 * (column % 4))) & 0xff
    };
    let packed: [u32; 4] = core::array::from_fn(|w| {
        byte(4 * w as u32)
            | byte(4 * w as u32 + 1) << 8
            | byte(4 * w as u32 + 2) << 16
            | byte(4 * w as u32 + 3) << 24
    });
    let row = (head as usize * d as usize + (first_column + column) as usize) * keys_padded as usize;
    let dst = out.add(row + first_slot as usize);
    // Safety: inside the copy (the caller's contract); `keys_padded` and `first_slot` are multiples
    // of 16, so the 16 bytes are aligned and inside the row.
    unsafe { (dst as *mut [u32; 4]).write(packed) };
}
