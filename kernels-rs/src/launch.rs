//! The launch parameters of every attention kernel, declared once. The host library includes this
//! file too (`#[path]` in `src/lib.rs`): [`LaunchArgs`] is what the host fills in, and the
//! device's entry points take the same list as their parameters (`kernel!` in `lib.rs`). A new
//! parameter is one new line in `with_launch_params!`.
//!
//! Why a generated parameter list rather than the struct passed by value (tried first): rustc
//! passes a `ptx-kernel` struct argument as one array of integers as wide as the struct's
//! alignment, so (1) the pointers in it reach LLVM as integers, which it cannot mark as pointers
//! to global memory (the sm_90a PTX got 96 generic `ld` and 432 generic `st` in place of `.global`
//! ones), and (2) at alignment 8 pairs of `u32` arrive in one 64-bit word that the kernel shifts
//! apart (`packed(4)` instead splits each pointer in two). Either way ptxas's register counts moved
//! by up to 32 per thread (the `flash_wgmma` d128 kernels up by 4 to 6). Separate parameters,
//! generated from one list, keep the PTX as it was.

/// Calls `$callback!` with the launch parameters appended to its tokens, in the order every
/// kernel declares them: `name: host type [as device type]`, each after its doc comment. The host
/// type is what [`LaunchArgs`] holds (device pointers as `u64`); the device type, when given, is
/// the entry point's parameter type.
macro_rules! with_launch_params {
    ($callback:ident!($($prefix:tt)*)) => {
        $callback! { $($prefix)*
            /// Q, `[B, H, S_q, D]` (or `[B, S_q, H, D]` with `seq_major`), the dtype's bits.
            q: u64 as *const u16,
            /// K, `[B, H / kv_group, S_k, D]` (or `[B, S_k, H / kv_group, D]`).
            k: u64 as *const u16,
            /// V, laid out as K.
            v: u64 as *const u16,
            /// The output, laid out as Q.
            out: u64 as *mut u16,
            /// Query rows per head (`S_q`).
            seq_q: u32,
            /// Key/value rows per head (`S_k`).
            seq_k: u32,
            /// `scale * log2(e)`: scores become base-2 exponents with one multiply.
            scale_log2: f32,
            /// 1 for the bottom-right-aligned causal mask, else 0.
            causal: u32,
            /// Query heads per key/value head (1 for ordinary attention).
            kv_group: u32,
            /// Where each row's log-sum-exp goes (`[B, H, S_q]` fp32), or 0 for none.
            lse: u64 as *mut f32,
            /// Query heads per batch entry (`H`).
            heads: u32,
            /// 1 when the tensors are `[B, S, H, D]`, 0 for `[B, H, S, D]`.
            seq_major: u32,
            /// `B * H`, spread over the grid's y and z.
            batch_heads: u32,
            /// Four `u32` per block written by a `_counted` twin, or 0 (the plain kernels ignore it).
            barrier_log: u64 as *mut u32,
            /// flash_ws: the TMA descriptors the host builds for this call; 0 for every other family.
            tensor_maps: u64,
            /// flash_decode: slices the key range is split into (1: the blocks write the output
            /// directly); 1 for every other family.
            kv_splits: u32,
            /// flash_decode with `kv_splits > 1` (and its combine kernel): fp32 partial outputs
            /// `[kv_splits, B*H, S_q, D]`, then their base-2 log-sum-exps `[kv_splits, B*H, S_q]`;
            /// 0 otherwise.
            workspace: u64 as *mut f32,
            /// flash_decode's paged entry points: the block table `[B, max_blocks]` (int32), the
            /// cache page holding each `block_size` keys of each sequence; 0 for every other kernel.
            block_table: u64 as *const u32,
            /// Paged: each sequence's key count, `[B]` int32; 0 otherwise.
            seqlens_k: u64 as *const u32,
            /// Paged: keys per page, a power of two from 16 to 256; 0 otherwise.
            block_size: u32,
            /// Paged: entries per block-table row (`max_blocks`); 0 otherwise.
            max_blocks: u32,
            /// Variable-length entry points (`_varlen`): `[B + 1]` int32 prefix sums of the
            /// sequences' query counts in the packed `[total_q, H, D]` Q and output (then `seq_q`
            /// is `total_q`, `seq_major` 1); 0 for every other kernel.
            cu_seqlens_q: u64 as *const u32,
            /// Varlen: the same for the keys of the packed `[total_k, H_kv, D]` K and V (`seq_k`
            /// is `total_k`); 0 otherwise.
            cu_seqlens_k: u64 as *const u32,
            /// flash_ws_fp8: the e4m3 inputs' descale factors, `[3, B, H_kv]` fp32 (Q's, K's,
            /// V's; a query head uses its KV head's entry); 0 for every other kernel.
            descale: u64 as *const f32,
        }
    };
}

/// The geometry of `fp8_transpose_v` (e4m3 V transposed before `flash_ws_fp8`), which the host
/// launches with these numbers: blocks of `TILE` keys by `TILE` columns, `THREADS` threads,
/// `SMEM_BYTES` of dynamic shared memory.
pub mod fp8_transpose {
    /// Keys one block transposes, and head-dim columns.
    pub const TILE: u32 = 64;
    /// Threads per block.
    pub const THREADS: u32 = 256;
    /// Bytes between keys in the block's shared copy: 64 columns and one word, so that the 16
    /// keys one thread gathers from a column fall into different banks.
    pub const PITCH: u32 = TILE + 4;
    /// Dynamic shared memory per block.
    pub const SMEM_BYTES: u32 = TILE * PITCH;
}

/// The parameter type of a `with_launch_params!` entry on the device: its device type if it has
/// one, else its host type.
#[allow(unused_macros)]
macro_rules! launch_param_type {
    ($host:ty as $device:ty) => {
        $device
    };
    ($host:ty) => {
        $host
    };
}

macro_rules! define_launch_args {
    ($($(#[$doc:meta])* $field:ident: $host:ty $(as $device:ty)?,)*) => {
        /// One kernel call's parameters as the host fills them in (device pointers as `u64`), in
        /// kernel parameter order. Grid: `(ceil(seq_q / BLOCK_M), min(B*H, 65535),
        /// ceil(B*H / 65535))`.
        #[derive(Clone, Copy, Debug, Default, PartialEq)]
        pub struct LaunchArgs {
            $($(#[$doc])* pub $field: $host,)*
        }

        impl LaunchArgs {
            /// Each kernel parameter's size in bytes, in order: what every entry point's PTX
            /// declares.
            pub const PARAM_BYTES: &'static [usize] = &[$(core::mem::size_of::<$host>()),*];
        }
    };
}

with_launch_params!(define_launch_args!());
