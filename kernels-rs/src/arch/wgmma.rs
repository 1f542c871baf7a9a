//! Warpgroup tensor-core matrix multiply (`wgmma.mma_async`, sm_90a only).
//!
//! One `wgmma` is issued by the four warps of a warpgroup together and computes a 64 x N x 16
//! product into fp32 accumulators spread over the warpgroup's 128 threads (N / 2 per thread, in
//! the same per-warp layout as `mma.sync.m16n8`: warp `w` holds rows `16w .. 16w + 15`). B always
//! comes from shared memory through a descriptor; A from shared memory too (`ss`) or from four
//! registers per thread (`rs`, the layout of an `mma.sync` A fragment).
//!
//! The instruction is asynchronous. The wrappers therefore come in chains: the first product of a
//! chain also emits `wgmma.fence` (the accumulators and A registers were last written by ordinary
//! instructions), the last one commits the group and waits for it. Putting the fence and the wait
//! *inside* the same `asm!` as a product is what keeps the compiler from moving a read or write of
//! an accumulator across them: to the compiler the registers are simply that statement's operands.

use core::arch::asm;

use super::SharedAddr;

/// Where a product sits in its chain of `wgmma`s.
pub mod chain {
    /// First of several: fence, then issue.
    pub const FIRST: u8 = 0;
    /// Neither first nor last: issue only.
    pub const MIDDLE: u8 = 1;
    /// Last of several: issue, commit, and wait until the whole chain has completed.
    pub const LAST: u8 = 2;
    /// The only one: fence, issue, commit, wait.
    pub const ONLY: u8 = 3;
    /// Last of several, left running: issue and commit; `wgmma_wait` collects it later.
    pub const LAST_ASYNC: u8 = 4;
    /// The only one, left running: fence, issue, commit.
    pub const ONLY_ASYNC: u8 = 5;
}

/// A `wgmma` shared-memory matrix descriptor for an operand stored in the 128-byte swizzle layout:
/// 8-row atoms of 128-byte rows whose 16-byte chunks are permuted by XOR with the row index
/// (mod 8), atoms 1024-byte aligned. `leading_bytes` and `stride_bytes` are the distances between
/// atoms along the leading and strided dimensions (see `tile::swizzled`).
#[inline(always)]
pub const fn smem_descriptor_sw128(addr: SharedAddr, leading_bytes: u32, stride_bytes: u32) -> u64 {
    SmemDescriptor::sw128(addr, leading_bytes, stride_bytes).get()
}

/// A `wgmma` shared-memory descriptor kept as its two 32-bit words, so that the descriptor of an
/// operand further along is one 32-bit add to the low word (the start address, in 16-byte units,
/// is its bits 0-13), not a descriptor built again: building one costs a shift, two masks and
/// two moves into uniform registers per `wgmma` (docs/kernels/flash_ws.md, the products).
#[derive(Clone, Copy)]
pub struct SmemDescriptor {
    low: u32,
    high: u32,
}

impl SmemDescriptor {
    /// The descriptor of `addr` in the 128-byte swizzle layout (see [`smem_descriptor_sw128`]).
    #[inline(always)]
    pub const fn sw128(addr: SharedAddr, leading_bytes: u32, stride_bytes: u32) -> Self {
        const SWIZZLE_128B: u32 = 1 << 30;
        SmemDescriptor {
            low: ((addr.get() & 0x3_ffff) >> 4) | (((leading_bytes >> 4) & 0x3fff) << 16),
            high: ((stride_bytes >> 4) & 0x3fff) | SWIZZLE_128B,
        }
    }

    /// The descriptor of the operand `bytes` further on (a multiple of 16). The address field
    /// cannot carry into the leading-byte field: any shared address, in 16-byte units, fits in
    /// its 14 bits.
    #[inline(always)]
    pub const fn offset(self, bytes: u32) -> Self {
        SmemDescriptor {
            low: self.low + (bytes >> 4),
            high: self.high,
        }
    }

    /// The 64-bit descriptor `wgmma` takes.
    #[inline(always)]
    pub const fn get(self) -> u64 {
        ((self.high as u64) << 32) | self.low as u64
    }
}

// One `asm!` for one chain position. The accumulators are the positional operands, so the template
// lists them as `{0}, {1}, ...` from the index list; `scale-d` is a predicate made from `accumulate`
// (false: the accumulators are overwritten, not added to).
macro_rules! wgmma_asm {
    // The K extent of one product: 32 bytes of each row, 16 16-bit or 32 8-bit elements.
    (@k "e4m3") => { "k32" };
    (@k $ty:tt) => { "k16" };
    // The transpose immediates: 16-bit types read A and B K-major (0, 0), or, with A in registers,
    // B MN-major (1), which is how V sits in shared memory; 8-bit types have no transposed form.
    (@transpose $form:ident "e4m3") => { "" };
    // The backward's dQ = dS K reads both MN-major (1, 1): dS^T and K as they sit in shared memory.
    (@transpose ss $ty:tt) => { ", 0, 0" };
    (@transpose ss_mn $ty:tt) => { ", 1, 1" };
    (@transpose rs $ty:tt) => { ", 1" };
    (ss $($rest:tt)*) => { wgmma_asm!(@descriptors ss $($rest)*) };
    (ss_mn $($rest:tt)*) => { wgmma_asm!(@descriptors ss_mn $($rest)*) };
    (@descriptors $form:ident $pre:expr, $post:expr, $n:literal, $ty:tt, [$i0:literal $($i:literal)*],
     $acc:ident, $a:ident, $b:ident, $accumulate:ident) => {
        asm!(
            concat!(
                "{{\n.reg .pred p;\nsetp.ne.b32 p, {scale_d}, 0;\n", $pre,
                "wgmma.mma_async.sync.aligned.m64n", stringify!($n), wgmma_asm!(@k $ty), ".f32.", $ty, ".",
                $ty, " {{{", stringify!($i0), "}" $(, ", {", stringify!($i), "}")*,
                "}}, {a}, {b}, p, 1, 1", wgmma_asm!(@transpose $form $ty), ";\n", $post, "}}"
            ),
            inout(reg32) $acc[$i0], $(inout(reg32) $acc[$i],)*
            a = in(reg64) $a, b = in(reg64) $b, scale_d = in(reg32) $accumulate as u32,
            options(nostack)
        )
    };
    (rs $pre:expr, $post:expr, $n:literal, $ty:tt, [$i0:literal $($i:literal)*],
     $acc:ident, $a:ident, $b:ident, $accumulate:ident) => {
        asm!(
            concat!(
                "{{\n.reg .pred p;\nsetp.ne.b32 p, {scale_d}, 0;\n", $pre,
                "wgmma.mma_async.sync.aligned.m64n", stringify!($n), wgmma_asm!(@k $ty), ".f32.", $ty, ".",
                $ty, " {{{", stringify!($i0), "}" $(, ", {", stringify!($i), "}")*,
                "}}, {{{a0}, {a1}, {a2}, {a3}}}, {b}, p, 1, 1", wgmma_asm!(@transpose rs $ty), ";\n",
                $post, "}}"
            ),
            inout(reg32) $acc[$i0], $(inout(reg32) $acc[$i],)*
            a0 = in(reg32) $a[0], a1 = in(reg32) $a[1], a2 = in(reg32) $a[2], a3 = in(reg32) $a[3],
            b = in(reg64) $b, scale_d = in(reg32) $accumulate as u32,
            options(nostack)
        )
    };
}

// A product at any chain position: one function per (A source, N, type).
macro_rules! wgmma_fn {
    ($(#[$doc:meta])* $form:ident $name:ident, $a_ty:ty, $n:literal, $ty:tt, $regs:tt) => {
        $(#[$doc])*
        ///
        /// # Safety
        /// The 128 threads of a warpgroup must issue it together, at the same chain position `CHAIN`
        /// (a chain starts with `FIRST` or `ONLY`); the descriptors must describe operands in this
        /// block's shared memory, made visible to the async proxy (`fence_proxy_async_shared`, then
        /// a barrier) and not written until the chain has completed; sm_90a only.
        #[inline(always)]
        pub unsafe fn $name<const CHAIN: u8>(acc: &mut [f32; $n / 2], a: $a_ty, b: u64, accumulate: bool) {
            match CHAIN {
                chain::FIRST => wgmma_asm!($form "wgmma.fence.sync.aligned;\n", "", $n, $ty, $regs,
                                           acc, a, b, accumulate),
                chain::MIDDLE => wgmma_asm!($form "", "", $n, $ty, $regs, acc, a, b, accumulate),
                chain::LAST => wgmma_asm!($form "", "wgmma.commit_group.sync.aligned;\n\
                                          wgmma.wait_group.sync.aligned 0;\n",
                                          $n, $ty, $regs, acc, a, b, accumulate),
                chain::LAST_ASYNC => wgmma_asm!($form "", "wgmma.commit_group.sync.aligned;\n",
                                                $n, $ty, $regs, acc, a, b, accumulate),
                chain::ONLY_ASYNC => wgmma_asm!($form "wgmma.fence.sync.aligned;\n",
                                                "wgmma.commit_group.sync.aligned;\n",
                                                $n, $ty, $regs, acc, a, b, accumulate),
                _ => wgmma_asm!($form "wgmma.fence.sync.aligned;\n", "wgmma.commit_group.sync.aligned;\n\
                                 wgmma.wait_group.sync.aligned 0;\n", $n, $ty, $regs, acc, a, b, accumulate),
            }
        }
    };
}

macro_rules! wgmma_family {
    ($n:literal, $regs:tt, $ss_f16:ident, $ss_bf16:ident, $rs_f16:ident, $rs_bf16:ident) => {
        wgmma_fn!(
            /// Emits `wgmma.mma_async.sync.aligned.m64nNk16.f32.f16.f16` with A and B descriptors.
            ss $ss_f16, u64, $n, "f16", $regs);
        wgmma_fn!(
            /// Emits `wgmma.mma_async.sync.aligned.m64nNk16.f32.bf16.bf16` with A and B descriptors.
            ss $ss_bf16, u64, $n, "bf16", $regs);
        wgmma_fn!(
            /// Emits `wgmma.mma_async.sync.aligned.m64nNk16.f32.f16.f16`, A in registers, B transposed.
            rs $rs_f16, [u32; 4], $n, "f16", $regs);
        wgmma_fn!(
            /// Emits `wgmma.mma_async.sync.aligned.m64nNk16.f32.bf16.bf16`, A in registers, B transposed.
            rs $rs_bf16, [u32; 4], $n, "bf16", $regs);
    };
}

// e4m3 products (`flash_ws_fp8`): S = Q K^T with N = the key tile (128), O += P V with N = the
// head dim (128 or 256); both operands K-major, so V is transposed before the kernel.
macro_rules! wgmma_family_e4m3 {
    ($n:literal, $regs:tt, $ss:ident, $rs:ident) => {
        wgmma_fn!(
            /// Emits `wgmma.mma_async.sync.aligned.m64nNk32.f32.e4m3.e4m3` with A and B descriptors.
            ss $ss, u64, $n, "e4m3", $regs);
        wgmma_fn!(
            /// Emits `wgmma.mma_async.sync.aligned.m64nNk32.f32.e4m3.e4m3`, A in registers, B K-major.
            rs $rs, [u32; 4], $n, "e4m3", $regs);
    };
}

wgmma_family_e4m3!(128, [0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21 22 23 24 25 26 27 28 29 30 31
    32 33 34 35 36 37 38 39 40 41 42 43 44 45 46 47 48 49 50 51 52 53 54 55 56 57 58 59 60 61 62 63],
    wgmma_m64n128k32_ss_e4m3, wgmma_m64n128k32_rs_e4m3);
wgmma_family_e4m3!(256, [0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21 22 23 24 25 26 27 28 29 30 31
    32 33 34 35 36 37 38 39 40 41 42 43 44 45 46 47 48 49 50 51 52 53 54 55 56 57 58 59 60 61 62 63
    64 65 66 67 68 69 70 71 72 73 74 75 76 77 78 79 80 81 82 83 84 85 86 87 88 89 90 91 92 93 94 95
    96 97 98 99 100 101 102 103 104 105 106 107 108 109 110 111 112 113 114 115 116 117 118 119 120 121 122 123 124 125 126 127],
    wgmma_m64n256k32_ss_e4m3, wgmma_m64n256k32_rs_e4m3);

// The other e4m3 key tiles at head dim 128 (S = Q K^T only; O += P V stays n128 or n256).
wgmma_fn!(
    /// Emits `wgmma.mma_async.sync.aligned.m64n96k32.f32.e4m3.e4m3` with A and B descriptors.
    ss wgmma_m64n96k32_ss_e4m3, u64, 96, "e4m3", [0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21 22 23 24 25 26 27 28 29 30 31
    32 33 34 35 36 37 38 39 40 41 42 43 44 45 46 47]);
wgmma_fn!(
    /// Emits `wgmma.mma_async.sync.aligned.m64n192k32.f32.e4m3.e4m3` with A and B descriptors.
    ss wgmma_m64n192k32_ss_e4m3, u64, 192, "e4m3", [0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21 22 23 24 25 26 27 28 29 30 31
    32 33 34 35 36 37 38 39 40 41 42 43 44 45 46 47 48 49 50 51 52 53 54 55 56 57 58 59 60 61 62 63
    64 65 66 67 68 69 70 71 72 73 74 75 76 77 78 79 80 81 82 83 84 85 86 87 88 89 90 91 92 93 94 95]);
wgmma_fn!(
    /// Emits `wgmma.mma_async.sync.aligned.m64n224k32.f32.e4m3.e4m3` with A and B descriptors.
    ss wgmma_m64n224k32_ss_e4m3, u64, 224, "e4m3", [0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21 22 23 24 25 26 27 28 29 30 31
    32 33 34 35 36 37 38 39 40 41 42 43 44 45 46 47 48 49 50 51 52 53 54 55 56 57 58 59 60 61 62 63
    64 65 66 67 68 69 70 71 72 73 74 75 76 77 78 79 80 81 82 83 84 85 86 87 88 89 90 91 92 93 94 95
    96 97 98 99 100 101 102 103 104 105 106 107 108 109 110 111]);

wgmma_family!(64, [0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21 22 23 24 25 26 27 28 29 30 31],
    wgmma_m64n64k16_ss_f16, wgmma_m64n64k16_ss_bf16, wgmma_m64n64k16_rs_f16, wgmma_m64n64k16_rs_bf16);
wgmma_family!(80, [0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21 22 23 24 25 26 27 28 29 30 31
    32 33 34 35 36 37 38 39],
    wgmma_m64n80k16_ss_f16, wgmma_m64n80k16_ss_bf16, wgmma_m64n80k16_rs_f16, wgmma_m64n80k16_rs_bf16);
wgmma_family!(96, [0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21 22 23 24 25 26 27 28 29 30 31
    32 33 34 35 36 37 38 39 40 41 42 43 44 45 46 47],
    wgmma_m64n96k16_ss_f16, wgmma_m64n96k16_ss_bf16, wgmma_m64n96k16_rs_f16, wgmma_m64n96k16_rs_bf16);
wgmma_family!(128, [0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21 22 23 24 25 26 27 28 29 30 31
    32 33 34 35 36 37 38 39 40 41 42 43 44 45 46 47 48 49 50 51 52 53 54 55 56 57 58 59 60 61 62 63],
    wgmma_m64n128k16_ss_f16, wgmma_m64n128k16_ss_bf16, wgmma_m64n128k16_rs_f16, wgmma_m64n128k16_rs_bf16);
wgmma_family!(176, [0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21 22 23 24 25 26 27 28 29 30 31
    32 33 34 35 36 37 38 39 40 41 42 43 44 45 46 47 48 49 50 51 52 53 54 55 56 57 58 59 60 61 62 63
    64 65 66 67 68 69 70 71 72 73 74 75 76 77 78 79 80 81 82 83 84 85 86 87],
    wgmma_m64n176k16_ss_f16, wgmma_m64n176k16_ss_bf16, wgmma_m64n176k16_rs_f16, wgmma_m64n176k16_rs_bf16);
wgmma_family!(192, [0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21 22 23 24 25 26 27 28 29 30 31
    32 33 34 35 36 37 38 39 40 41 42 43 44 45 46 47 48 49 50 51 52 53 54 55 56 57 58 59 60 61 62 63
    64 65 66 67 68 69 70 71 72 73 74 75 76 77 78 79 80 81 82 83 84 85 86 87 88 89 90 91 92 93 94 95],
    wgmma_m64n192k16_ss_f16, wgmma_m64n192k16_ss_bf16, wgmma_m64n192k16_rs_f16, wgmma_m64n192k16_rs_bf16);
wgmma_family!(256, [0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21 22 23 24 25 26 27 28 29 30 31
    32 33 34 35 36 37 38 39 40 41 42 43 44 45 46 47 48 49 50 51 52 53 54 55 56 57 58 59 60 61 62 63
    64 65 66 67 68 69 70 71 72 73 74 75 76 77 78 79 80 81 82 83 84 85 86 87 88 89 90 91 92 93 94 95
    96 97 98 99 100 101 102 103 104 105 106 107 108 109 110 111 112 113 114 115 116 117 118 119 120 121 122 123 124 125 126 127],
    wgmma_m64n256k16_ss_f16, wgmma_m64n256k16_ss_bf16, wgmma_m64n256k16_rs_f16, wgmma_m64n256k16_rs_bf16);

// The backward's dQ = dS K, both operands MN-major: N = 64 (half of head dim 128, or all of 64).
wgmma_fn!(
    /// Emits `wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16` with A and B descriptors, both transposed.
    ss_mn wgmma_m64n64k16_ss_mn_f16, u64, 64, "f16", [0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21 22 23 24 25 26 27 28 29 30 31]);
wgmma_fn!(
    /// Emits `wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16` with A and B descriptors, both transposed.
    ss_mn wgmma_m64n64k16_ss_mn_bf16, u64, 64, "bf16", [0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21 22 23 24 25 26 27 28 29 30 31]);

/// Reinterprets an accumulator array of `R` registers as one of `N` (the caller checked R == N).
///
/// # Safety
/// `R` must equal `N`.
#[inline(always)]
unsafe fn cast<const R: usize, const N: usize>(acc: &mut [f32; R]) -> &mut [f32; N] {
    &mut *(acc as *mut [f32; R] as *mut [f32; N])
}

/// `acc (+)= A B` for a 64 x (2R) x 16 product, A and B from shared-memory descriptors; `BF16`
/// picks the input type. R (accumulators per thread) is half of N, one of the shapes instantiated
/// above (N = 64, 80, 96, 128, 176, 192, 256).
///
/// # Safety
/// As the products it dispatches to (`wgmma_m64n64k16_ss_f16` and its kin).
#[inline(always)]
pub unsafe fn wgmma_ss<const BF16: bool, const CHAIN: u8, const R: usize>(
    acc: &mut [f32; R],
    a: u64,
    b: u64,
    accumulate: bool,
) {
    match (R, BF16) {
        (32, false) => wgmma_m64n64k16_ss_f16::<CHAIN>(cast(acc), a, b, accumulate),
        (32, true) => wgmma_m64n64k16_ss_bf16::<CHAIN>(cast(acc), a, b, accumulate),
        (40, false) => wgmma_m64n80k16_ss_f16::<CHAIN>(cast(acc), a, b, accumulate),
        (40, true) => wgmma_m64n80k16_ss_bf16::<CHAIN>(cast(acc), a, b, accumulate),
        (48, false) => wgmma_m64n96k16_ss_f16::<CHAIN>(cast(acc), a, b, accumulate),
        (48, true) => wgmma_m64n96k16_ss_bf16::<CHAIN>(cast(acc), a, b, accumulate),
        (64, false) => wgmma_m64n128k16_ss_f16::<CHAIN>(cast(acc), a, b, accumulate),
        (64, true) => wgmma_m64n128k16_ss_bf16::<CHAIN>(cast(acc), a, b, accumulate),
        (88, false) => wgmma_m64n176k16_ss_f16::<CHAIN>(cast(acc), a, b, accumulate),
        (88, true) => wgmma_m64n176k16_ss_bf16::<CHAIN>(cast(acc), a, b, accumulate),
        (96, false) => wgmma_m64n192k16_ss_f16::<CHAIN>(cast(acc), a, b, accumulate),
        (96, true) => wgmma_m64n192k16_ss_bf16::<CHAIN>(cast(acc), a, b, accumulate),
        (128, false) => wgmma_m64n256k16_ss_f16::<CHAIN>(cast(acc), a, b, accumulate),
        (128, true) => wgmma_m64n256k16_ss_bf16::<CHAIN>(cast(acc), a, b, accumulate),
        _ => super::trap(),
    }
}

/// `acc (+)= A B` for a 64 x (2R) x 16 product, A from registers, B from a descriptor of an
/// MN-major (transposed) operand.
///
/// # Safety
/// As `wgmma_ss`.
#[inline(always)]
pub unsafe fn wgmma_rs<const BF16: bool, const CHAIN: u8, const R: usize>(
    acc: &mut [f32; R],
    a: [u32; 4],
    b: u64,
    accumulate: bool,
) {
    match (R, BF16) {
        (32, false) => wgmma_m64n64k16_rs_f16::<CHAIN>(cast(acc), a, b, accumulate),
        (32, true) => wgmma_m64n64k16_rs_bf16::<CHAIN>(cast(acc), a, b, accumulate),
        (40, false) => wgmma_m64n80k16_rs_f16::<CHAIN>(cast(acc), a, b, accumulate),
        (40, true) => wgmma_m64n80k16_rs_bf16::<CHAIN>(cast(acc), a, b, accumulate),
        (48, false) => wgmma_m64n96k16_rs_f16::<CHAIN>(cast(acc), a, b, accumulate),
        (48, true) => wgmma_m64n96k16_rs_bf16::<CHAIN>(cast(acc), a, b, accumulate),
        (64, false) => wgmma_m64n128k16_rs_f16::<CHAIN>(cast(acc), a, b, accumulate),
        (64, true) => wgmma_m64n128k16_rs_bf16::<CHAIN>(cast(acc), a, b, accumulate),
        (88, false) => wgmma_m64n176k16_rs_f16::<CHAIN>(cast(acc), a, b, accumulate),
        (88, true) => wgmma_m64n176k16_rs_bf16::<CHAIN>(cast(acc), a, b, accumulate),
        (96, false) => wgmma_m64n192k16_rs_f16::<CHAIN>(cast(acc), a, b, accumulate),
        (96, true) => wgmma_m64n192k16_rs_bf16::<CHAIN>(cast(acc), a, b, accumulate),
        (128, false) => wgmma_m64n256k16_rs_f16::<CHAIN>(cast(acc), a, b, accumulate),
        (128, true) => wgmma_m64n256k16_rs_bf16::<CHAIN>(cast(acc), a, b, accumulate),
        _ => super::trap(),
    }
}

/// `acc (+)= A B` for a 64 x 64 x 16 product, A and B from descriptors of MN-major (transposed)
/// operands: the M and N dimensions contiguous in shared memory; R = 32.
///
/// # Safety
/// As `wgmma_ss`.
#[inline(always)]
pub unsafe fn wgmma_ss_mn<const BF16: bool, const CHAIN: u8, const R: usize>(
    acc: &mut [f32; R],
    a: u64,
    b: u64,
    accumulate: bool,
) {
    match (R, BF16) {
        (32, false) => wgmma_m64n64k16_ss_mn_f16::<CHAIN>(cast(acc), a, b, accumulate),
        (32, true) => wgmma_m64n64k16_ss_mn_bf16::<CHAIN>(cast(acc), a, b, accumulate),
        _ => super::trap(),
    }
}

/// `acc (+)= A B` for a 64 x (2R) x 32 e4m3 product, A and B from shared-memory descriptors
/// (both K-major); R = 48, 64, 96, 112 or 128.
///
/// # Safety
/// As the products it dispatches to (`wgmma_m64n128k32_ss_e4m3` and its kin).
#[inline(always)]
pub unsafe fn wgmma_ss_e4m3<const CHAIN: u8, const R: usize>(
    acc: &mut [f32; R],
    a: u64,
    b: u64,
    accumulate: bool,
) {
    match R {
        48 => wgmma_m64n96k32_ss_e4m3::<CHAIN>(cast(acc), a, b, accumulate),
        64 => wgmma_m64n128k32_ss_e4m3::<CHAIN>(cast(acc), a, b, accumulate),
        96 => wgmma_m64n192k32_ss_e4m3::<CHAIN>(cast(acc), a, b, accumulate),
        112 => wgmma_m64n224k32_ss_e4m3::<CHAIN>(cast(acc), a, b, accumulate),
        128 => wgmma_m64n256k32_ss_e4m3::<CHAIN>(cast(acc), a, b, accumulate),
        _ => super::trap(),
    }
}

/// `acc (+)= A B` for a 64 x (2R) x 32 e4m3 product, A from registers (16 e4m3 per thread), B a
/// K-major shared-memory operand; R = 64 or 128.
///
/// # Safety
/// As `wgmma_ss_e4m3`.
#[inline(always)]
pub unsafe fn wgmma_rs_e4m3<const CHAIN: u8, const R: usize>(
    acc: &mut [f32; R],
    a: [u32; 4],
    b: u64,
    accumulate: bool,
) {
    match R {
        64 => wgmma_m64n128k32_rs_e4m3::<CHAIN>(cast(acc), a, b, accumulate),
        128 => wgmma_m64n256k32_rs_e4m3::<CHAIN>(cast(acc), a, b, accumulate),
        _ => super::trap(),
    }
}

/// Emits `fence.proxy.async.shared::cta`: makes this thread's ordinary (and `cp.async`) writes to
/// shared memory visible to the async proxy that `wgmma` reads through; a barrier must follow
/// before another thread's `wgmma` reads them.
#[inline(always)]
pub fn fence_proxy_async_shared() {
    // Safety: a fence; touches no memory itself.
    unsafe { asm!("fence.proxy.async.shared::cta;", options(nostack)) };
}

/// Emits nothing (a PTX comment naming the register): pins `value` in program order. The asm is
/// not pure, so the compiler keeps it, and the computation of `value`, before any later `wgmma`;
/// without it the compiler interleaves the packing of P with the chain of products that reads it,
/// and ptxas has to fence (and so serialise) every one of them.
#[inline(always)]
pub fn fence_operand(value: &mut u32) {
    // Safety: emits nothing; only ties `value` to program order.
    unsafe {
        asm!(
            "// fence operand {v}",
            v = inout(reg32) * value,
            options(nostack, nomem)
        )
    };
}

/// Emits `wgmma.wait_group.sync.aligned N`, then pins every accumulator of the chain it collects:
/// waits until at most `N` committed chains of this warpgroup are still running. The pins (one
/// empty `asm!` per register, ordered after the wait like every other `asm!`) are what keep the
/// compiler from reading an accumulator of a chain left running before this point. A slice, so
/// that a kernel whose accumulators are a shape's associated type passes `registers_mut()`
/// straight in: a trait method wrapped around this call moved code in the overlapped loop.
#[inline(always)]
pub fn wgmma_wait<const N: u32>(acc: &mut [f32]) {
    // Safety: waiting touches no memory.
    unsafe { asm!("wgmma.wait_group.sync.aligned {n};", n = const N, options(nostack)) };
    for x in acc.iter_mut() {
        let mut bits = x.to_bits();
        fence_operand(&mut bits);
        *x = f32::from_bits(bits);
    }
}
