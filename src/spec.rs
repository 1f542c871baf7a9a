//! One typed description of a kernel variant: the family and policy enums, every compile-time
//! parameter, the derived name and the consistency rules.
//!
//! `build.rs` includes this file too (`#[path]`): it reads each `[[variant]]` of `kernels.toml`
//! into an [`Entry`], resolves it into a [`Spec`] ([`Spec::from_entry`]), and writes both the
//! device's `kernel!` invocations ([`Spec::kernel_args`]) and the library's variant table from it.
//! The search (`search.rs`) moves between `Spec`s. Names are only ever derived ([`Spec::name`]),
//! never parsed back, and every `match` over [`Family`] is exhaustive: a new family does not
//! compile until each of them says what it means for it.

use std::fmt::Write as _;

use serde::{Deserialize, Serialize};

/// A kernel family: one generic kernel body in `kernels-rs/src/attention/`. Declared in hardware
/// order (CUDA cores, `mma.sync`, `wgmma`, warp-specialised `wgmma`), which the search uses as the
/// family's ordinal.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Family {
    /// One warp per query row: the GPU reference.
    Naive,
    /// Tiled FlashAttention on CUDA cores.
    FlashScalar,
    /// Tiled FlashAttention on tensor cores (`mma.sync`).
    FlashMma,
    /// Tiled FlashAttention on Hopper's warpgroup tensor cores (`wgmma`, sm_90a).
    FlashWgmma,
    /// Hopper warp-specialised: a producer warpgroup feeding consumer warpgroups through TMA and
    /// mbarriers (sm_90a).
    FlashWs,
    /// Decode (few query rows per KV head, long keys): split-KV and grouped-query packing on
    /// `mma.sync`, with a combine kernel (`src/decode.rs` plans it).
    FlashDecode,
    /// `flash_ws` on e4m3 Q, K and V with per-head descales (FP8 `wgmma`, sm_90a), V transposed
    /// by a kernel before it; the output fp16 or bf16 (`src/fp8.rs` launches both).
    FlashWsFp8,
}

impl Family {
    /// The `kernels.toml` parameters a variant of this family takes (the others must be left
    /// out).
    pub fn parameters(self) -> &'static [&'static str] {
        match self {
            Family::Naive => &[],
            Family::FlashScalar => &[
                "block_m",
                "block_n",
                "warps",
                "vec",
                "stages",
                "policy",
                "min_blocks_per_sm",
            ],
            Family::FlashMma => &[
                "block_m",
                "block_n",
                "warps",
                "stages",
                "policy",
                "q_in_regs",
                "min_blocks_per_sm",
                "sub_n",
            ],
            Family::FlashWgmma => &[
                "block_m",
                "block_n",
                "stages",
                "policy",
                "min_blocks_per_sm",
                "pingpong",
            ],
            Family::FlashWs => &[
                "block_m",
                "block_n",
                "stages",
                "policy",
                "min_blocks_per_sm",
                "pingpong",
                "overlap",
                "persistent",
            ],
            Family::FlashDecode => &["block_m", "block_n", "warps", "stages", "policy"],
            Family::FlashWsFp8 => &[
                "block_m",
                "block_n",
                "stages",
                "policy",
                "pingpong",
                "overlap",
                "persistent",
                "v_rows",
            ],
        }
    }

    /// The name in `kernels.toml`, in variant names and in the device's `kernel!` arms.
    pub fn name(self) -> &'static str {
        match self {
            Family::Naive => "naive",
            Family::FlashScalar => "flash_scalar",
            Family::FlashMma => "flash_mma",
            Family::FlashWgmma => "flash_wgmma",
            Family::FlashWs => "flash_ws",
            Family::FlashDecode => "flash_decode",
            Family::FlashWsFp8 => "flash_ws_fp8",
        }
    }

    /// The oldest architecture (x10) whose PTX includes the family: 90 for what needs `wgmma`.
    pub fn min_arch(self) -> u32 {
        match self {
            Family::Naive | Family::FlashScalar | Family::FlashMma | Family::FlashDecode => 80,
            Family::FlashWgmma | Family::FlashWs | Family::FlashWsFp8 => 90,
        }
    }

    /// Whether the family's body is written for head dim `d`.
    pub fn supports_head_dim(self, d: u32) -> bool {
        match self {
            Family::Naive
            | Family::FlashScalar
            | Family::FlashMma
            | Family::FlashWgmma
            | Family::FlashDecode => matches!(d, 64 | 128),
            Family::FlashWs => matches!(d, 64 | 128 | 256),
            // Rows of whole 128-byte swizzle spans.
            Family::FlashWsFp8 => matches!(d, 128 | 256),
        }
    }

    /// Whether the family reads e4m3 Q, K and V (its variants are `FP8_VARIANTS`, apart from the
    /// 16-bit ones that `verify`, `bench`, the search and the dispatch walk).
    pub fn fp8(self) -> bool {
        match self {
            Family::FlashWsFp8 => true,
            Family::Naive
            | Family::FlashScalar
            | Family::FlashMma
            | Family::FlashWgmma
            | Family::FlashWs
            | Family::FlashDecode => false,
        }
    }
}

/// Key-tile widths `flash_ws` can take: `wgmma` shapes `arch/wgmma.rs` instantiates (S = Q K^T is
/// a 64 x `block_n` product).
pub const WS_BLOCK_N: [u32; 6] = [64, 80, 96, 128, 176, 192];

/// The key tiles `flash_ws_fp8` can have: widths of an e4m3 S = Q K^T product
/// (`kernels-rs/src/arch/wgmma.rs`), each a whole number of K's boxes (`FP8_K_BOX_ROWS`).
pub const FP8_BLOCK_N: [u32; 4] = [96, 128, 192, 224];

/// Dynamic shared memory one block can have on sm_90 (227 KB).
pub const MAX_SMEM_BYTES: u32 = 227 * 1024;

/// A barrier policy (`kernels-rs/src/policy.rs`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Policy {
    /// A block barrier after every phase of the KV-tile loop.
    Legacy,
    /// Only the barriers that shared-memory dependencies between warps need.
    Light,
    /// No block barrier in the KV loop: mbarriers hand tiles between a producer and consumers.
    Mbarrier,
}

impl Policy {
    /// The name in `kernels.toml` and at the end of variant names.
    pub fn name(self) -> &'static str {
        match self {
            Policy::Legacy => "legacy",
            Policy::Light => "light",
            Policy::Mbarrier => "mbarrier",
        }
    }

    /// The policy's type in `kernels-rs/src/policy.rs`.
    pub fn device_type(self) -> &'static str {
        match self {
            Policy::Legacy => "Legacy",
            Policy::Light => "Light",
            Policy::Mbarrier => "Mbarrier",
        }
    }
}

/// One `[[variant]]` of `kernels.toml` as written: parameters a family derives or defaults are
/// optional here, and [`Spec::from_entry`] says which a family takes.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Entry {
    /// The kernel family.
    pub family: Family,
    /// Query rows per block ([`Spec::block_m`]).
    pub block_m: Option<u32>,
    /// Keys per KV tile ([`Spec::block_n`]).
    pub block_n: Option<u32>,
    /// Warps per block ([`Spec::warps`]).
    pub warps: Option<u32>,
    /// Elements per shared-memory vector load ([`Spec::vec`]).
    pub vec: Option<u32>,
    /// Depth of the K/V copy pipeline ([`Spec::stages`]).
    pub stages: Option<u32>,
    /// The barrier policy ([`Spec::policy`]).
    pub policy: Option<Policy>,
    /// Whether Q stays in registers ([`Spec::q_in_regs`]).
    pub q_in_regs: Option<bool>,
    /// Head dims to compile this variant for (default: the table's `head_dims`).
    pub head_dims: Option<Vec<u32>>,
    /// Blocks per SM that ptxas must fit ([`Spec::min_blocks_per_sm`]).
    pub min_blocks_per_sm: Option<u32>,
    /// Keys per compute step inside a KV tile ([`Spec::sub_n`]).
    pub sub_n: Option<u32>,
    /// Whether consumer warpgroups take turns ([`Spec::pingpong`]).
    pub pingpong: Option<bool>,
    /// Whether QK^T overlaps the softmax ([`Spec::overlap`]).
    pub overlap: Option<bool>,
    /// Whether one block per SM walks a list of work items ([`Spec::persistent`]).
    pub persistent: Option<bool>,
    /// Whether the kernel transposes V itself ([`Spec::v_rows`]).
    pub v_rows: Option<bool>,
    /// Compiled (and so checked by ptxas) but not yet trusted: outside the variant list that
    /// `verify`, `bench`, the search and the dispatch walk; reachable by name only. Not a kernel
    /// parameter, so not part of the name.
    pub experimental: Option<bool>,
    /// Compiled by every build (the dispatch's picks and the GPU reference); the other variants,
    /// and every instrumentation twin, only when `FLASHRS_VARIANTS` asks for them (`build.rs`).
    /// Not a kernel parameter, so not part of the name.
    pub shipped: Option<bool>,
}

/// A variant's compile-time parameters, every one resolved.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Spec {
    /// The kernel family, which picks the kernel body.
    pub family: Family,
    /// Query rows per block.
    pub block_m: u32,
    /// Keys per KV tile.
    pub block_n: u32,
    /// flash_mma: keys per compute step inside a KV tile (`_c<N>` in the name); `None` when the
    /// tile is consumed whole. An option rather than `block_n` by default, so that two variants
    /// can differ in `block_n` alone.
    pub sub_n: Option<u32>,
    /// Warps per block, producer warps included.
    pub warps: u32,
    /// Elements per shared-memory vector load (flash_scalar; 8 for the tensor-core families).
    pub vec: u32,
    /// Depth of the K/V copy pipeline.
    pub stages: u32,
    /// `None` for `naive` only.
    pub policy: Option<Policy>,
    /// flash_mma: Q's fragments stay in registers for the whole KV loop (else re-read per tile,
    /// `_qsmem`).
    pub q_in_regs: bool,
    /// flash_wgmma, flash_ws: consumer warpgroups take turns at the tensor cores (`_pp`).
    pub pingpong: bool,
    /// flash_ws: the next tile's QK^T overlaps this tile's softmax inside a warpgroup (`_ov`).
    pub overlap: bool,
    /// flash_ws: one block per SM walks the (row block, head) work items, the next item's copies
    /// under this one's epilogue (`_ps`).
    pub persistent: bool,
    /// flash_ws_fp8: V is read in its own rows and the producer warpgroup's idle warps transpose
    /// each tile in shared memory (`_vr`), instead of a transposed copy of V made before the
    /// kernel by `fp8_transpose_v`.
    pub v_rows: bool,
    /// Launch bounds: ptxas fits this many blocks per SM (`.minnctapersm`, `_b<N>`), which caps
    /// registers per thread.
    pub min_blocks_per_sm: Option<u32>,
}

impl Spec {
    /// Resolves an entry of `kernels.toml`: the parameters its family needs, derived or fixed
    /// values for the others; a parameter the family does not take is an error, not ignored.
    pub fn from_entry(entry: &Entry) -> Result<Spec, String> {
        let family = entry.family;
        let need = |field: Option<u32>, name: &str| {
            field.ok_or_else(|| format!("{} variant needs `{name}`", family.name()))
        };
        check_parameters_taken(entry)?;
        let policy = if family == Family::Naive {
            None
        } else {
            Some(
                entry
                    .policy
                    .ok_or_else(|| format!("{} variant needs `policy`", family.name()))?,
            )
        };
        let mut spec = Spec {
            family,
            block_m: 0,
            block_n: 0,
            sub_n: None,
            warps: 0,
            vec: 8,
            stages: 1,
            policy,
            q_in_regs: false,
            pingpong: entry.pingpong.unwrap_or(false),
            overlap: entry.overlap.unwrap_or(false),
            persistent: entry.persistent.unwrap_or(false),
            v_rows: entry.v_rows.unwrap_or(false),
            min_blocks_per_sm: entry.min_blocks_per_sm,
        };
        match family {
            Family::Naive => {
                // One warp per query row, four rows per block, one key at a time.
                spec.block_m = 4;
                spec.block_n = 1;
                spec.warps = 4;
                spec.vec = 1;
                spec.q_in_regs = true;
            }
            Family::FlashScalar => {
                spec.block_m = need(entry.block_m, "block_m")?;
                spec.block_n = need(entry.block_n, "block_n")?;
                spec.warps = need(entry.warps, "warps")?;
                spec.vec = need(entry.vec, "vec")?;
                spec.stages = need(entry.stages, "stages")?;
                // Q is always staged in registers; the flag only varies for flash_mma.
                spec.q_in_regs = true;
            }
            Family::FlashMma => {
                spec.block_m = need(entry.block_m, "block_m")?;
                spec.block_n = need(entry.block_n, "block_n")?;
                spec.warps = need(entry.warps, "warps")?;
                spec.stages = need(entry.stages, "stages")?;
                spec.q_in_regs = entry.q_in_regs.unwrap_or(true);
                spec.sub_n = entry.sub_n.filter(|&n| n != spec.block_n);
            }
            Family::FlashWgmma => {
                spec.block_m = need(entry.block_m, "block_m")?;
                spec.block_n = need(entry.block_n, "block_n")?;
                spec.stages = need(entry.stages, "stages")?;
                // One warpgroup (4 warps) per 64 rows.
                spec.warps = spec.block_m / 16;
            }
            Family::FlashWs | Family::FlashWsFp8 => {
                spec.block_m = need(entry.block_m, "block_m")?;
                spec.block_n = need(entry.block_n, "block_n")?;
                spec.stages = need(entry.stages, "stages")?;
                // One consumer warpgroup per 64 rows and the producer warpgroup.
                spec.warps = 4 * (spec.block_m / 64 + 1);
            }
            Family::FlashDecode => {
                spec.block_m = need(entry.block_m, "block_m")?;
                spec.block_n = need(entry.block_n, "block_n")?;
                spec.warps = need(entry.warps, "warps")?;
                spec.stages = need(entry.stages, "stages")?;
            }
        }
        spec.validate()?;
        Ok(spec)
    }

    /// Whether a `flash_decode` variant reads K and V through the copy engine (its mbarrier
    /// policy): sm_90a only; contiguous K and V, or a paged cache, not packed sequences.
    pub fn copy_engine(&self) -> bool {
        self.family == Family::FlashDecode && self.policy == Some(Policy::Mbarrier)
    }

    /// The oldest architecture (x10) whose PTX has the variant: its family's, and 90 for a
    /// `flash_decode` variant that reads through the copy engine.
    pub fn min_arch(&self) -> u32 {
        if self.copy_engine() {
            90
        } else {
            self.family.min_arch()
        }
    }

    /// Whether the variant has paged-cache entry points (`_paged`): every `flash_decode` one
    /// (with `cp.async`, a copy per row; through the copy engine, a box per page).
    pub fn has_paged(&self) -> bool {
        self.family == Family::FlashDecode
    }

    /// Whether the variant has variable-length entry points (`_varlen`, packed sequences) at
    /// some head dim: `flash_decode` with `cp.async` copies, `flash_ws` without `persistent`, and
    /// the persistent `flash_ws` of the 128 x 128 tiles that varlen batches take
    /// (`varlen::dense_tiles`), at head dim 128 only ([`Spec::has_varlen_at`]).
    pub fn has_varlen(&self) -> bool {
        match self.family {
            Family::FlashDecode => !self.copy_engine(),
            Family::FlashWs => !self.persistent || (self.block_m == 128 && self.block_n == 128),
            Family::Naive
            | Family::FlashScalar
            | Family::FlashMma
            | Family::FlashWgmma
            | Family::FlashWsFp8 => false,
        }
    }

    /// Whether the variant has a variable-length entry point at `head_dim` (among its head
    /// dims): the persistent `flash_ws`'s consumers hold a sequence's bounds beside their
    /// accumulators without spilling at head dim 128; at 64 ptxas spilled 12 bytes.
    pub fn has_varlen_at(&self, head_dim: usize) -> bool {
        self.has_varlen() && (!self.persistent || head_dim == 128)
    }

    /// The variant's name: `<family>_m<block_m>_n<block_n>[_c<sub_n>][_w<warps>][_v<vec>]
    /// _s<stages>[_qsmem][_pp][_ov][_b<min_blocks_per_sm>]_<policy>`, each family writing the
    /// parameters it takes. Tuned tables and evidence refer to variants by these names.
    pub fn name(&self) -> String {
        let mut name = String::from(self.family.name());
        let (m, n, w, s) = (self.block_m, self.block_n, self.warps, self.stages);
        match self.family {
            Family::Naive => return name,
            Family::FlashScalar => write!(name, "_m{m}_n{n}_w{w}_v{}_s{s}", self.vec),
            Family::FlashMma => {
                write!(name, "_m{m}_n{n}").unwrap();
                if let Some(sub_n) = self.sub_n {
                    write!(name, "_c{sub_n}").unwrap();
                }
                write!(name, "_w{w}_s{s}{}", if self.q_in_regs { "" } else { "_qsmem" })
            }
            Family::FlashWgmma => write!(name, "_m{m}_n{n}_w{w}_s{s}{}", flag(self.pingpong, "_pp")),
            Family::FlashWs | Family::FlashWsFp8 => write!(
                name,
                "_m{m}_n{n}_s{s}{}{}{}{}",
                flag(self.pingpong, "_pp"),
                flag(self.overlap, "_ov"),
                flag(self.persistent, "_ps"),
                flag(self.v_rows, "_vr")
            ),
            Family::FlashDecode => write!(name, "_m{m}_n{n}_w{w}_s{s}"),
        }
        .unwrap();
        if let Some(blocks) = self.min_blocks_per_sm {
            write!(name, "_b{blocks}").unwrap();
        }
        if let Some(policy) = self.policy {
            write!(name, "_{}", policy.name()).unwrap();
        }
        name
    }

    /// The consistency rules: what each family's body asserts at compile time, checked here first
    /// so that a bad table entry is a message naming the variant, not a const-evaluation error in
    /// the nested device build.
    pub fn validate(&self) -> Result<(), String> {
        let problem = |why: &str| Err(format!("{}: {why}", self.name()));
        if (self.family == Family::Naive) != self.policy.is_none() {
            return problem("every family but naive needs a barrier policy");
        }
        if self.min_blocks_per_sm == Some(0) {
            return problem("min_blocks_per_sm must be at least 1");
        }
        let warp_specialised = matches!(self.family, Family::FlashWs | Family::FlashWsFp8);
        if self.pingpong && !(warp_specialised || self.family == Family::FlashWgmma) {
            return problem("pingpong is for the warpgroup families (flash_wgmma, flash_ws, flash_ws_fp8)");
        }
        if self.overlap && !warp_specialised {
            return problem("overlap is for flash_ws and flash_ws_fp8");
        }
        if self.persistent && !warp_specialised {
            return problem("persistent is for flash_ws and flash_ws_fp8");
        }
        // The producer's warps turn around whole 128-key tiles, one item per block
        // (`attention::ws`'s compile-time checks).
        if self.v_rows && (self.block_n != 128 || self.persistent) {
            return problem("v_rows takes 128-key tiles and no persistent walk");
        }
        if self.sub_n.is_some() && self.family != Family::FlashMma {
            return problem("sub_n is for flash_mma");
        }
        self.check_tiles()
    }

    /// The family's own rules on the tiles, warps, stages and policy (`validate`'s second half).
    fn check_tiles(&self) -> Result<(), String> {
        let problem = |why: &str| Err(format!("{}: {why}", self.name()));
        let light = self.policy == Some(Policy::Light);
        let (m, n, w) = (self.block_m, self.block_n, self.warps);
        match self.family {
            Family::Naive => Ok(()),
            Family::FlashScalar => {
                if m % w == 0 && n % 32 == 0 && matches!(self.vec, 4 | 8) && self.stages >= 1 {
                    Ok(())
                } else {
                    problem("warps divide block_m, block_n a multiple of 32, vec 4 or 8, stages >= 1")
                }
            }
            Family::FlashMma => {
                if !(w >= 1 && m % (16 * w) == 0 && n % 16 == 0 && self.stages >= 1) {
                    return problem(
                        "block_m a multiple of 16 * warps, block_n a multiple of 16, stages >= 1",
                    );
                }
                match self.sub_n {
                    // Its middle sync points repeat per step, which only the light policy allows.
                    Some(sub) if !(light && sub % 16 == 0 && sub < n && n % sub == 0) => {
                        problem("sub_n needs the light policy and must be a multiple of 16 dividing block_n")
                    }
                    _ => Ok(()),
                }
            }
            // One warpgroup per 64 rows; its wgmma shapes are n64 and n128, for S (block_n) and O
            // (the head dim); only the light policy, whose block barriers are outside the
            // warpgroup-uniform branch that skips a warpgroup's fully masked tiles.
            Family::FlashWgmma => {
                if m % 64 == 0 && matches!(n, 64 | 128) && self.stages >= 1 && light {
                    if self.pingpong && m < 128 {
                        problem("pingpong needs two warpgroups or more")
                    } else {
                        Ok(())
                    }
                } else {
                    problem("block_m a multiple of 64, block_n 64 or 128, stages >= 1, light policy")
                }
            }
            // 64 rows per consumer warpgroup, two to four of them (the register splits of
            // `setmaxnreg` in `kernels-rs/src/attention/ws/mod.rs`); key tiles of a width `wgmma` has
            // an instance for (the P V product steps 16 keys at a time); mbarriers, no block
            // barriers.
            Family::FlashWs => {
                let mbarrier = self.policy == Some(Policy::Mbarrier);
                if (m == 128 || m == 192 || m == 256)
                    && WS_BLOCK_N.contains(&n)
                    && self.stages >= 1
                    && mbarrier
                    && self.min_blocks_per_sm.is_none()
                {
                    Ok(())
                } else {
                    problem(&format!(
                        "block_m 128, 192 or 256, block_n one of {WS_BLOCK_N:?}, stages >= 1, mbarrier policy, no min_blocks_per_sm"
                    ))
                }
            }
            // flash_ws's rules, and key tiles of a width the e4m3 S = Q K^T has an instance for
            // (`FP8_BLOCK_N`; O += P V is n128 or n256, the head dims).
            Family::FlashWsFp8 => {
                let mbarrier = self.policy == Some(Policy::Mbarrier);
                if (m == 128 || m == 192)
                    && FP8_BLOCK_N.contains(&n)
                    && self.stages >= 1
                    && mbarrier
                    && self.min_blocks_per_sm.is_none()
                {
                    Ok(())
                } else {
                    problem(&format!(
                        "block_m 128 or 192, block_n one of {FP8_BLOCK_N:?}, stages >= 1, mbarrier policy, no min_blocks_per_sm"
                    ))
                }
            }
            // Every warp holds all the rows (16 or 32: the output accumulators of two row tiles
            // are 128 registers at head dim 128) and takes a multiple of 16 keys of each tile
            // (one P V k-step); the block barriers are the light or legacy policy's, or, under
            // the mbarrier policy, the copy engine brings the tiles: a box is at most 256 rows,
            // and the paged twins copy a box per page, so a tile must hold whole pages or lie
            // inside one (pages are powers of two, `src/paged.rs`): a power-of-two tile; and a
            // tile of short pages is read page by page, so each warp's keys must lie in one page
            // of the smallest size, 16 (`TileStream::rows_from`): 16 keys per warp.
            Family::FlashDecode => {
                let copy_engine = self.policy == Some(Policy::Mbarrier);
                if matches!(m, 16 | 32)
                    && w >= 1
                    && n % (16 * w) == 0
                    && self.stages >= 1
                    && (!copy_engine || (n <= 256 && n.is_power_of_two() && n == 16 * w))
                {
                    Ok(())
                } else {
                    problem("block_m 16 or 32, block_n a multiple of 16 * warps (under the mbarrier policy exactly 16 * warps, a power of two, at most 256), stages >= 1")
                }
            }
        }
    }

    /// Whether head dim `d` has a body in this family and, for `flash_ws`, whether its tiles fit
    /// in shared memory (Q, then `stages` K and V tiles: `kernels-rs/src/attention/ws/smem.rs`).
    pub fn check_head_dim(&self, d: u32) -> Result<(), String> {
        if !self.family.supports_head_dim(d) {
            return Err(format!(
                "{}: {} has no body for head dim {d}",
                self.name(),
                self.family.name()
            ));
        }
        if self.family == Family::FlashDecode {
            // kernels-rs/src/attention/decode/mod.rs (`smem_bytes`): a padded Q tile and the larger
            // of the K/V slots and the cross-warp merge buffers; through the copy engine, the
            // swizzled slots (which must hold the merge buffers), their barriers and 1024 bytes
            // of alignment slack.
            let padded = |rows: u32| rows * (2 * d + 16);
            let merge = self.warps * self.block_m * (8 + 4 * d + 16);
            let bytes = if self.copy_engine() {
                let slots = 2 * self.stages * self.block_n * d * 2;
                if merge > slots {
                    return Err(format!(
                        "{}: at head dim {d} the merge buffers ({merge} bytes) do not fit in the K/V slots ({slots})",
                        self.name()
                    ));
                }
                1024 + slots + 16 * self.stages + padded(self.block_m)
            } else {
                padded(self.block_m) + (2 * self.stages * padded(self.block_n)).max(merge)
            };
            if bytes > MAX_SMEM_BYTES {
                return Err(format!(
                    "{}: at head dim {d} the tiles take {bytes} bytes of shared memory, more than the {MAX_SMEM_BYTES} a block can have",
                    self.name()
                ));
            }
        }
        if self.family == Family::FlashWs && self.block_m > 128 && d != 64 {
            // Three consumers have 160 registers each, four 112: the 64 x D accumulators of O
            // leave room for a tile's scores and probabilities only at head dim 64.
            return Err(format!(
                "{}: {} consumer warpgroups (block_m {}) only at head dim 64, not {d}",
                self.name(),
                self.block_m / 64,
                self.block_m
            ));
        }
        if self.family == Family::FlashWsFp8 {
            // Two consumers have 240 registers each, three 160: beside O's 64 x D accumulators
            // a tile's scores and probabilities fit at head dim 256 with 128 keys, and with three
            // consumers at head dim 128 with 96 keys at most (`kernels-rs/src/attention/ws/mod.rs`).
            let fits = match (self.block_m, d) {
                (128, 128) => true,
                (128, _) => self.block_n == 128,
                (_, 128) => self.block_n <= 96,
                _ => false,
            };
            if !fits {
                return Err(format!(
                    "{}: e4m3 tiles of {} rows by {} keys do not fit the registers at head dim {d}",
                    self.name(),
                    self.block_m,
                    self.block_n
                ));
            }
        }
        if matches!(self.family, Family::FlashWs | Family::FlashWsFp8) {
            // Q's buffer holds 16-bit elements either way (the output leaves through it); a slot
            // of e4m3 tiles holds K and transposed V in whole boxes of 128 keys
            // (`kernels-rs/src/attention/ws/smem.rs`, `v_tile_bytes`).
            let (k_tile, v_tile) = if self.family.fp8() {
                (self.block_n * d, self.block_n.div_ceil(128) * 128 * d)
            } else {
                (self.block_n * d * 2, self.block_n * d * 2)
            };
            let bytes =
                1024 + self.block_m * d * 2 + self.stages * (k_tile + v_tile) + 8 * (2 + 4 * self.stages);
            if bytes > MAX_SMEM_BYTES {
                return Err(format!(
                    "{}: at head dim {d} the tiles take {bytes} bytes of shared memory, more than the {MAX_SMEM_BYTES} a block can have",
                    self.name()
                ));
            }
        }
        Ok(())
    }

    /// Launch bounds (`.maxntid` with `.minnctapersm`) for the entry, if any: what
    /// `min_blocks_per_sm` asks for, and always one block for `flash_ws`, whose `setmaxnreg` takes
    /// effect only under a register cap at entry.
    pub fn launch_bounds(&self) -> Option<u32> {
        match self.family {
            Family::FlashWs | Family::FlashWsFp8 => Some(1),
            Family::Naive
            | Family::FlashScalar
            | Family::FlashMma
            | Family::FlashWgmma
            | Family::FlashDecode => self.min_blocks_per_sm,
        }
    }

    /// Threads per block.
    pub fn threads(&self) -> u32 {
        self.warps * 32
    }

    /// The arguments of this variant's `kernel!` invocation in `kernels-rs/src/lib.rs` after the
    /// symbol names, for element type `element` (`F16`, `Bf16`) and head dim `d`: the const
    /// parameters the family's macro arm takes.
    pub fn kernel_args(&self, element: &str, d: u32) -> String {
        let policy = self.policy.map_or("", Policy::device_type);
        let (m, n, w, s) = (self.block_m, self.block_n, self.warps, self.stages);
        match self.family {
            Family::Naive => format!("{element}, d = {d}"),
            Family::FlashScalar => {
                format!("{element}, {policy}, d = {d}, m = {m}, n = {n}, w = {w}, vec = {}, stages = {s}", self.vec)
            }
            Family::FlashMma => format!(
                "{element}, {policy}, d = {d}, m = {m}, n = {n}, w = {w}, stages = {s}, q_in_regs = {}, sub_n = {}",
                self.q_in_regs,
                self.sub_n.unwrap_or(n)
            ),
            Family::FlashWgmma => {
                format!("{element}, {policy}, d = {d}, m = {m}, n = {n}, stages = {s}, pingpong = {}", self.pingpong)
            }
            Family::FlashWs => format!(
                "{element}, {policy}, d = {d}, m = {m}, n = {n}, stages = {s}, pingpong = {}, overlap = {}, persistent = {}",
                self.pingpong, self.overlap, self.persistent
            ),
            Family::FlashWsFp8 => format!(
                "{element}, {policy}, d = {d}, m = {m}, n = {n}, stages = {s}, pingpong = {}, overlap = {}, persistent = {}, v_rows = {}",
                self.pingpong, self.overlap, self.persistent, self.v_rows
            ),
            Family::FlashDecode => {
                format!("{element}, {policy}, d = {d}, m = {m}, n = {n}, w = {w}, stages = {s}")
            }
        }
    }
}

/// Refuses a `kernels.toml` entry that sets a parameter its family does not take.
fn check_parameters_taken(entry: &Entry) -> Result<(), String> {
    let family = entry.family;
    // Destructured in full, so that a new field of `Entry` cannot be left out of the check.
    let Entry {
        family: _,
        block_m,
        block_n,
        warps,
        vec,
        stages,
        policy,
        q_in_regs,
        head_dims: _,
        experimental: _,
        shipped: _,
        min_blocks_per_sm,
        sub_n,
        pingpong,
        overlap,
        persistent,
        v_rows,
    } = entry;
    let given = [
        ("block_m", block_m.is_some()),
        ("block_n", block_n.is_some()),
        ("warps", warps.is_some()),
        ("vec", vec.is_some()),
        ("stages", stages.is_some()),
        ("policy", policy.is_some()),
        ("q_in_regs", q_in_regs.is_some()),
        ("min_blocks_per_sm", min_blocks_per_sm.is_some()),
        ("sub_n", sub_n.is_some()),
        ("pingpong", pingpong.is_some()),
        ("overlap", overlap.is_some()),
        ("persistent", persistent.is_some()),
        ("v_rows", v_rows.is_some()),
    ];
    let takes = family.parameters();
    if let Some((name, _)) = given.iter().find(|(name, set)| *set && !takes.contains(name)) {
        return Err(format!("`{name}` is not a {} parameter", family.name()));
    }
    Ok(())
}

fn flag(on: bool, text: &'static str) -> &'static str {
    if on {
        text
    } else {
        ""
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(family: Family) -> Entry {
        Entry {
            family,
            block_m: None,
            block_n: None,
            warps: None,
            vec: None,
            stages: None,
            policy: None,
            q_in_regs: None,
            head_dims: None,
            min_blocks_per_sm: None,
            sub_n: None,
            pingpong: None,
            overlap: None,
            persistent: None,
            v_rows: None,
            experimental: None,
            shipped: None,
        }
    }

    fn ws(block_m: u32, block_n: u32, pingpong: bool, overlap: bool) -> Entry {
        Entry {
            block_m: Some(block_m),
            block_n: Some(block_n),
            stages: Some(2),
            policy: Some(Policy::Mbarrier),
            pingpong: Some(pingpong),
            overlap: Some(overlap),
            ..entry(Family::FlashWs)
        }
    }

    fn mma() -> Entry {
        Entry {
            block_m: Some(128),
            block_n: Some(64),
            warps: Some(4),
            stages: Some(2),
            policy: Some(Policy::Light),
            ..entry(Family::FlashMma)
        }
    }

    #[test]
    fn flash_ws_names_its_parameters() {
        let spec = Spec::from_entry(&ws(128, 128, true, true)).unwrap();
        assert_eq!(spec.name(), "flash_ws_m128_n128_s2_pp_ov_mbarrier");
        // Two consumer warpgroups and the producer, always under launch bounds (setmaxnreg).
        assert_eq!(spec.threads(), 384);
        assert_eq!(spec.launch_bounds(), Some(1));
        assert_eq!(spec.family.min_arch(), 90);
        assert_eq!(
            Spec::from_entry(&ws(128, 64, false, false)).unwrap().name(),
            "flash_ws_m128_n64_s2_mbarrier"
        );
        let light = Entry {
            policy: Some(Policy::Light),
            ..ws(128, 64, false, true)
        };
        assert!(
            Spec::from_entry(&light).is_err(),
            "flash_ws synchronises by mbarriers only"
        );
        // Three consumer warpgroups: 512 threads, at head dim 64 only (160 registers each).
        let three = Spec::from_entry(&ws(192, 128, true, true)).unwrap();
        assert_eq!(three.threads(), 512);
        assert!(three.check_head_dim(64).is_ok());
        assert!(three.check_head_dim(128).unwrap_err().contains("head dim 64"));
        // Four: 640 threads, head dim 64 only (112 registers each).
        let four = Spec::from_entry(&ws(256, 64, true, true)).unwrap();
        assert_eq!(four.threads(), 640);
        assert!(four.check_head_dim(64).is_ok());
        assert!(four.check_head_dim(128).unwrap_err().contains("head dim 64"));
        assert!(
            Spec::from_entry(&ws(320, 64, false, false)).is_err(),
            "two to four consumer warpgroups"
        );
        assert!(Family::FlashWs.supports_head_dim(256));
        let wide = Spec::from_entry(&ws(128, 176, false, true)).unwrap();
        assert!(wide.check_head_dim(128).is_ok());
        assert!(
            wide.check_head_dim(256).unwrap_err().contains("shared memory"),
            "176-key tiles at head dim 256 do not fit"
        );
        assert!(Spec::from_entry(&ws(128, 80, false, true))
            .unwrap()
            .check_head_dim(256)
            .is_ok());
        assert!(
            Spec::from_entry(&ws(128, 112, false, true)).is_err(),
            "no wgmma n112 instance"
        );
    }

    fn decode(block_m: u32, block_n: u32, warps: u32, stages: u32) -> Entry {
        Entry {
            block_m: Some(block_m),
            block_n: Some(block_n),
            warps: Some(warps),
            stages: Some(stages),
            policy: Some(Policy::Light),
            ..entry(Family::FlashDecode)
        }
    }

    #[test]
    fn flash_decode_names_and_checks_its_parameters() {
        let spec = Spec::from_entry(&decode(16, 64, 4, 3)).unwrap();
        assert_eq!(spec.name(), "flash_decode_m16_n64_w4_s3_light");
        assert_eq!(
            spec.family.min_arch(),
            80,
            "runs on sm_80 and, through its PTX, on Hopper"
        );
        assert_eq!(
            spec.kernel_args("F16", 128),
            "F16, Light, d = 128, m = 16, n = 64, w = 4, stages = 3"
        );
        assert!(spec.check_head_dim(128).is_ok() && spec.check_head_dim(64).is_ok());
        assert!(spec.check_head_dim(256).is_err());
        assert!(Spec::from_entry(&decode(32, 64, 4, 3)).is_ok());
        // 48 rows; warps whose key share is not a multiple of 16; no stages.
        assert!(Spec::from_entry(&decode(48, 64, 4, 3)).is_err());
        assert!(Spec::from_entry(&decode(16, 64, 8, 3)).is_err());
        assert!(Spec::from_entry(&decode(16, 64, 4, 0)).is_err());
        // Under the mbarrier policy the copy engine brings the tiles: sm_90a, contiguous or
        // paged K/V, not packed sequences.
        let mbarrier = Spec::from_entry(&Entry {
            policy: Some(Policy::Mbarrier),
            ..decode(16, 128, 8, 3)
        })
        .unwrap();
        assert_eq!(mbarrier.name(), "flash_decode_m16_n128_w8_s3_mbarrier");
        assert_eq!((mbarrier.min_arch(), spec.min_arch()), (90, 80));
        assert!(mbarrier.has_paged() && !mbarrier.has_varlen());
        assert!(spec.has_paged() && spec.has_varlen());
        assert!(mbarrier.check_head_dim(128).is_ok() && mbarrier.check_head_dim(64).is_ok());
        // Two stages of 16-key tiles cannot hold eight warps' merge buffers.
        let small = Spec::from_entry(&Entry {
            policy: Some(Policy::Mbarrier),
            ..decode(16, 128, 8, 1)
        })
        .unwrap();
        assert!(small.check_head_dim(128).unwrap_err().contains("merge buffers"));
        assert!(Spec::from_entry(&Entry {
            policy: Some(Policy::Mbarrier),
            ..decode(16, 512, 8, 1)
        })
        .is_err());
        // 48-key tiles straddle 64-key pages (a 48-key variant measured on the H200 read them wrong).
        assert!(Spec::from_entry(&Entry {
            policy: Some(Policy::Mbarrier),
            ..decode(16, 48, 3, 9)
        })
        .is_err());
        assert!(Spec::from_entry(&decode(16, 48, 3, 9)).is_ok());
        // 32 keys per warp would straddle 16-key pages, which the paged twins read page by page.
        assert!(Spec::from_entry(&Entry {
            policy: Some(Policy::Mbarrier),
            ..decode(16, 128, 4, 3)
        })
        .is_err());
        assert!(Spec::from_entry(&decode(16, 128, 4, 3)).is_ok());
        let err = Spec::from_entry(&Entry {
            pingpong: Some(true),
            ..decode(16, 64, 4, 3)
        })
        .unwrap_err();
        assert!(
            err.contains("`pingpong` is not a flash_decode parameter"),
            "{err}"
        );
        // Eight stages of 128-key tiles at head dim 128 are more than a block's shared memory.
        let deep = Spec::from_entry(&decode(16, 128, 4, 8)).unwrap();
        assert!(deep.check_head_dim(128).unwrap_err().contains("shared memory"));
    }

    #[test]
    fn v_rows_is_an_e4m3_flag_for_128_key_tiles_without_a_persistent_walk() {
        let fp8 = |block_n: u32, persistent: bool| Entry {
            family: Family::FlashWsFp8,
            block_n: Some(block_n),
            persistent: Some(persistent),
            v_rows: Some(true),
            ..ws(128, block_n, true, true)
        };
        let spec = Spec::from_entry(&fp8(128, false)).unwrap();
        assert_eq!(spec.name(), "flash_ws_fp8_m128_n128_s2_pp_ov_vr_mbarrier");
        assert!(spec.kernel_args("F16", 128).ends_with("v_rows = true"));
        for (block_n, persistent) in [(192, false), (128, true)] {
            let err = Spec::from_entry(&fp8(block_n, persistent)).unwrap_err();
            assert!(err.contains("v_rows takes 128-key tiles"), "{err}");
        }
        let err = Spec::from_entry(&Entry {
            v_rows: Some(true),
            ..ws(128, 128, true, true)
        })
        .unwrap_err();
        assert!(err.contains("`v_rows` is not a flash_ws parameter"), "{err}");
    }

    #[test]
    fn a_parameter_the_family_does_not_take_is_an_error() {
        let err = Spec::from_entry(&Entry {
            overlap: Some(true),
            ..mma()
        })
        .unwrap_err();
        assert!(err.contains("`overlap` is not a flash_mma parameter"), "{err}");
        let err = Spec::from_entry(&Entry {
            warps: Some(8),
            ..ws(128, 64, false, false)
        })
        .unwrap_err();
        assert!(err.contains("`warps`"), "{err}");
        assert!(Spec::from_entry(&Entry {
            block_m: Some(64),
            ..entry(Family::Naive)
        })
        .is_err());
    }

    #[test]
    fn missing_parameters_are_named() {
        let err = Spec::from_entry(&Entry {
            stages: None,
            ..mma()
        })
        .unwrap_err();
        assert!(err.contains("needs `stages`"), "{err}");
        let err = Spec::from_entry(&Entry {
            policy: None,
            ..mma()
        })
        .unwrap_err();
        assert!(err.contains("needs `policy`"), "{err}");
    }

    #[test]
    fn validation_rejects_what_the_bodies_cannot_compile() {
        let sub = |sub_n, policy| Entry {
            sub_n: Some(sub_n),
            policy: Some(policy),
            ..mma()
        };
        assert_eq!(Spec::from_entry(&sub(32, Policy::Light)).unwrap().sub_n, Some(32));
        assert!(Spec::from_entry(&sub(32, Policy::Legacy)).is_err());
        assert!(Spec::from_entry(&sub(24, Policy::Light)).is_err());
        // A sub-tile of the whole tile is no sub-tile: the name and the spec say so.
        assert_eq!(Spec::from_entry(&sub(64, Policy::Light)).unwrap().sub_n, None);
        assert!(Spec::from_entry(&ws(320, 64, false, false)).is_err());
        assert!(Spec::from_entry(&ws(128, 112, false, false)).is_err());
        let one_warpgroup_pingpong = Entry {
            block_m: Some(64),
            block_n: Some(64),
            stages: Some(2),
            policy: Some(Policy::Light),
            pingpong: Some(true),
            ..entry(Family::FlashWgmma)
        };
        assert!(Spec::from_entry(&one_warpgroup_pingpong).is_err());
        assert!(Spec::from_entry(&Entry {
            min_blocks_per_sm: Some(0),
            ..mma()
        })
        .is_err());
    }

    #[test]
    fn device_arguments_follow_the_family() {
        let spec = Spec::from_entry(&Entry {
            sub_n: Some(32),
            q_in_regs: Some(false),
            ..mma()
        })
        .unwrap();
        assert_eq!(
            spec.kernel_args("F16", 64),
            "F16, Light, d = 64, m = 128, n = 64, w = 4, stages = 2, q_in_regs = false, sub_n = 32"
        );
        let spec = Spec::from_entry(&ws(128, 128, true, false)).unwrap();
        assert_eq!(
            spec.kernel_args("Bf16", 128),
            "Bf16, Mbarrier, d = 128, m = 128, n = 128, stages = 2, pingpong = true, overlap = false, persistent = false"
        );
    }
}
