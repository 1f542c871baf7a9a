//! Floating-point helpers and conversions between f32 and the 16-bit types.

use core::arch::asm;

/// Emits `ex2.approx.ftz.f32`: 2^x, with `ex2(-inf) = 0`. The softmax works in base 2 so this is
/// its only transcendental.
#[inline(always)]
pub fn exp2(x: f32) -> f32 {
    let r: f32;
    // Safety: arithmetic on registers; touches no memory.
    unsafe {
        asm!("ex2.approx.ftz.f32 {r}, {x};", r = out(reg32) r, x = in(reg32) x,
             options(pure, nomem, nostack))
    };
    r
}

/// Emits `lg2.approx.ftz.f32`: log2(x), for the log-sum-exp output.
#[inline(always)]
pub fn log2(x: f32) -> f32 {
    let r: f32;
    // Safety: arithmetic on registers; touches no memory.
    unsafe {
        asm!("lg2.approx.ftz.f32 {r}, {x};", r = out(reg32) r, x = in(reg32) x, options(pure, nomem, nostack))
    };
    r
}

/// Emits `tanh.approx.f32`: tanh(x) in one MUFU op, to 2^-11 relative.
#[inline(always)]
pub fn tanh_approx(x: f32) -> f32 {
    let r: f32;
    // Safety: arithmetic on registers; touches no memory.
    unsafe {
        asm!("tanh.approx.f32 {r}, {x};", r = out(reg32) r, x = in(reg32) x,
             options(pure, nomem, nostack))
    };
    r
}

/// Emits `rcp.rn.f32`: 1/x, correctly rounded.
#[inline(always)]
pub fn recip(x: f32) -> f32 {
    let r: f32;
    // Safety: arithmetic on registers; touches no memory.
    unsafe {
        asm!("rcp.rn.f32 {r}, {x};", r = out(reg32) r, x = in(reg32) x,
             options(pure, nomem, nostack))
    };
    r
}

/// Emits `fma.rn.f32`: a*b + c with one rounding.
#[inline(always)]
pub fn fma(a: f32, b: f32, c: f32) -> f32 {
    let r: f32;
    // Safety: arithmetic on registers; touches no memory.
    unsafe {
        asm!("fma.rn.f32 {r}, {a}, {b}, {c};", r = out(reg32) r, a = in(reg32) a,
             b = in(reg32) b, c = in(reg32) c, options(pure, nomem, nostack))
    };
    r
}

/// Emits `cvt.f32.f16`: widens the f16 bit pattern `h`.
#[inline(always)]
pub fn f16_to_f32(h: u16) -> f32 {
    let r: f32;
    // Safety: arithmetic on registers; touches no memory.
    unsafe {
        asm!("cvt.f32.f16 {r}, {h};", r = out(reg32) r, h = in(reg16) h,
             options(pure, nomem, nostack))
    };
    r
}

/// Emits `cvt.rn.f16.f32`: rounds to the nearest f16 bit pattern.
#[inline(always)]
pub fn f32_to_f16(x: f32) -> u16 {
    let r: u16;
    // Safety: arithmetic on registers; touches no memory.
    unsafe {
        asm!("cvt.rn.f16.f32 {r}, {x};", r = out(reg16) r, x = in(reg32) x,
             options(pure, nomem, nostack))
    };
    r
}

/// Emits `cvt.rn.f16x2.f32`: packs two f32 into one register of two f16, `lo` in the low half
/// (the order `mma` expects for consecutive columns).
#[inline(always)]
pub fn pack_f16x2(lo: f32, hi: f32) -> u32 {
    let r: u32;
    // Safety: arithmetic on registers; touches no memory.
    unsafe {
        asm!("cvt.rn.f16x2.f32 {r}, {hi}, {lo};", r = out(reg32) r, hi = in(reg32) hi,
             lo = in(reg32) lo, options(pure, nomem, nostack))
    };
    r
}

/// Emits `cvt.rn.bf16x2.f32`: packs two f32 into one register of two bf16, `lo` in the low half.
#[inline(always)]
pub fn pack_bf16x2(lo: f32, hi: f32) -> u32 {
    let r: u32;
    // Safety: arithmetic on registers; touches no memory.
    unsafe {
        asm!("cvt.rn.bf16x2.f32 {r}, {hi}, {lo};", r = out(reg32) r, hi = in(reg32) hi,
             lo = in(reg32) lo, options(pure, nomem, nostack))
    };
    r
}

/// Emits two `cvt.rn.satfinite.e4m3x2.f32` and a `mov.b32`: packs four f32 into one register of
/// four e4m3 (sm_89+), `x[0]` in the lowest byte, values beyond 448 saturated.
#[inline(always)]
pub fn pack_e4m3x4(x: [f32; 4]) -> u32 {
    let r: u32;
    // Safety: arithmetic on registers; touches no memory.
    unsafe {
        asm!("{{\n.reg .b16 lo, hi;\ncvt.rn.satfinite.e4m3x2.f32 lo, {x1}, {x0};\n\
              cvt.rn.satfinite.e4m3x2.f32 hi, {x3}, {x2};\nmov.b32 {r}, {{lo, hi}};\n}}",
             r = out(reg32) r, x0 = in(reg32) x[0], x1 = in(reg32) x[1], x2 = in(reg32) x[2],
             x3 = in(reg32) x[3], options(pure, nomem, nostack))
    };
    r
}

/// Widens both halves of an f16x2 register (two `cvt.f32.f16`), low half first.
#[inline(always)]
pub fn unpack_f16x2(packed: u32) -> (f32, f32) {
    (f16_to_f32(packed as u16), f16_to_f32((packed >> 16) as u16))
}

/// Emits `prmt.b32 r, a, b, SELECTOR`: byte `i` of `r` is byte `SELECTOR`'s nibble `i` of the
/// eight bytes `b:a` (0-3 from `a`, 4-7 from `b`).
#[inline(always)]
pub fn byte_perm<const SELECTOR: u32>(a: u32, b: u32) -> u32 {
    let r: u32;
    // Safety: arithmetic on registers; touches no memory.
    unsafe {
        asm!("prmt.b32 {r}, {a}, {b}, {s};", r = out(reg32) r, a = in(reg32) a, b = in(reg32) b,
             s = const SELECTOR, options(pure, nomem, nostack))
    };
    r
}
