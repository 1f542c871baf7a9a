//! Tensor-core fragments: `ldmatrix` from shared memory and `mma.sync.m16n8k16`.

use core::arch::asm;

use super::SharedAddr;

/// Emits `ldmatrix.sync.aligned.m8n8.x4.shared.b16`: four 8x8 b16 matrices; lanes 8i..8i+7 give the
/// row addresses of matrix i, and each lane receives one 32-bit piece of each matrix.
///
/// # Safety
/// Every lane of the warp must call it together (`.sync.aligned`), each giving the address of one
/// 16-byte matrix row in this block's shared memory, 16-byte aligned, that no thread writes
/// concurrently.
#[inline(always)]
pub unsafe fn ldmatrix_x4(addr: SharedAddr) -> [u32; 4] {
    let (a, b, c, d): (u32, u32, u32, u32);
    // Safety: the caller's contract.
    unsafe {
        asm!("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {{{a}, {b}, {c}, {d}}}, [{p}];",
             a = out(reg32) a, b = out(reg32) b, c = out(reg32) c, d = out(reg32) d,
             p = in(reg32) addr.0, options(readonly, nostack))
    };
    [a, b, c, d]
}

/// Emits `ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16`: as `ldmatrix_x4`, each matrix transposed.
///
/// # Safety
/// As `ldmatrix_x4`.
#[inline(always)]
pub unsafe fn ldmatrix_x4_trans(addr: SharedAddr) -> [u32; 4] {
    let (a, b, c, d): (u32, u32, u32, u32);
    // Safety: the caller's contract.
    unsafe {
        asm!("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {{{a}, {b}, {c}, {d}}}, [{p}];",
             a = out(reg32) a, b = out(reg32) b, c = out(reg32) c, d = out(reg32) d,
             p = in(reg32) addr.0, options(readonly, nostack))
    };
    [a, b, c, d]
}

/// Emits `ldmatrix.sync.aligned.m8n8.x2.shared.b16`: two 8x8 matrices (lanes 0..15 give addresses).
///
/// # Safety
/// As `ldmatrix_x4`.
#[inline(always)]
pub unsafe fn ldmatrix_x2(addr: SharedAddr) -> [u32; 2] {
    let (a, b): (u32, u32);
    // Safety: the caller's contract.
    unsafe {
        asm!("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {{{a}, {b}}}, [{p}];",
             a = out(reg32) a, b = out(reg32) b, p = in(reg32) addr.0, options(readonly, nostack))
    };
    [a, b]
}

/// Emits `ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16`.
///
/// # Safety
/// As `ldmatrix_x4`.
#[inline(always)]
pub unsafe fn ldmatrix_x2_trans(addr: SharedAddr) -> [u32; 2] {
    let (a, b): (u32, u32);
    // Safety: the caller's contract.
    unsafe {
        asm!("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {{{a}, {b}}}, [{p}];",
             a = out(reg32) a, b = out(reg32) b, p = in(reg32) addr.0, options(readonly, nostack))
    };
    [a, b]
}

/// Emits `mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32`: `acc += a * b` for a 16x16 f16 A
/// fragment (4 registers), a 16x8 f16 B fragment (2 registers) and a 16x8 f32 accumulator.
#[inline(always)]
pub fn mma_f16_m16n8k16(acc: &mut [f32; 4], a: [u32; 4], b: [u32; 2]) {
    // Safety: a warp-synchronous instruction on registers only; the kernels issue it with
    // the whole warp converged.
    unsafe {
        asm!("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {{{d0}, {d1}, {d2}, {d3}}}, \
              {{{a0}, {a1}, {a2}, {a3}}}, {{{b0}, {b1}}}, {{{d0}, {d1}, {d2}, {d3}}};",
             d0 = inout(reg32) acc[0], d1 = inout(reg32) acc[1], d2 = inout(reg32) acc[2],
             d3 = inout(reg32) acc[3], a0 = in(reg32) a[0], a1 = in(reg32) a[1],
             a2 = in(reg32) a[2], a3 = in(reg32) a[3], b0 = in(reg32) b[0], b1 = in(reg32) b[1],
             options(pure, nomem, nostack))
    };
}

/// Emits `mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32`: as `mma_f16_m16n8k16` for bf16.
#[inline(always)]
pub fn mma_bf16_m16n8k16(acc: &mut [f32; 4], a: [u32; 4], b: [u32; 2]) {
    // Safety: a warp-synchronous instruction on registers only; the kernels issue it with
    // the whole warp converged.
    unsafe {
        asm!("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {{{d0}, {d1}, {d2}, {d3}}}, \
              {{{a0}, {a1}, {a2}, {a3}}}, {{{b0}, {b1}}}, {{{d0}, {d1}, {d2}, {d3}}};",
             d0 = inout(reg32) acc[0], d1 = inout(reg32) acc[1], d2 = inout(reg32) acc[2],
             d3 = inout(reg32) acc[3], a0 = in(reg32) a[0], a1 = in(reg32) a[1],
             a2 = in(reg32) a[2], a3 = in(reg32) a[3], b0 = in(reg32) b[0], b1 = in(reg32) b[1],
             options(pure, nomem, nostack))
    };
}
