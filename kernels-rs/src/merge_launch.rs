//! The launch parameters of `merge_states` (`attention::merge`), declared once for both sides as
//! `launch.rs` declares the forward's: the host includes this file too (`#[path]` in
//! `src/lib.rs`).

/// Calls `$callback!` with the merge's launch parameters appended to its tokens, as
/// `with_launch_params!` does for the forward's.
macro_rules! with_merge_params {
    ($callback:ident!($($prefix:tt)*)) => {
        $callback! { $($prefix)*
            /// The first partial output, `[B, H, S, D]` (or `[B, S, H, D]` with `seq_major`), the
            /// dtype's bits, normalised as attention's output is.
            out_a: u64 as *const u16,
            /// Its rows' log-sum-exps (natural log), `[B, H, S]` fp32.
            lse_a: u64 as *const f32,
            /// The second partial output, laid out as the first.
            out_b: u64 as *const u16,
            /// Its rows' log-sum-exps.
            lse_b: u64 as *const f32,
            /// The merged output, laid out as the partial ones; it may be `out_a` itself.
            out: u64 as *mut u16,
            /// The merged log-sum-exps; they may be `lse_a` itself.
            lse: u64 as *mut f32,
            /// Rows in all: `B * H * S`.
            rows: u32,
            /// Heads per batch entry (`H`).
            heads: u32,
            /// Rows per head (`S`).
            seq: u32,
            /// Elements per row (`D`).
            head_dim: u32,
            /// 1 when the outputs are `[B, S, H, D]`, 0 for `[B, H, S, D]`.
            seq_major: u32,
        }
    };
}

macro_rules! define_merge_args {
    ($($(#[$doc:meta])* $field:ident: $host:ty $(as $device:ty)?,)*) => {
        /// One merge call's parameters as the host fills them in (device pointers as `u64`), in
        /// kernel parameter order.
        #[derive(Clone, Copy, Debug, Default, PartialEq)]
        pub struct MergeArgs {
            $($(#[$doc])* pub $field: $host,)*
        }

        impl MergeArgs {
            /// Each kernel parameter's size in bytes, in order: what the merge entry points' PTX
            /// declares.
            pub const PARAM_BYTES: &'static [usize] = &[$(core::mem::size_of::<$host>()),*];
        }
    };
}

with_merge_params!(define_merge_args!());

/// Threads of a merge block: a warp per row.
pub const THREADS: u32 = 128;
/// Rows per block.
pub const ROWS_PER_BLOCK: u32 = THREADS / 32;
