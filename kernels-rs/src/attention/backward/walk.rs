//! Where a main-kernel block of the backward stands: its keys, the query heads that read them
//! (the group's heads one after another under grouped-query attention) and, for each, the query
//! tiles whose rows the mask lets see those keys. Both main kernels (`kv_block` on `mma.sync`,
//! `warpgroup` on `wgmma`) walk the same positions and copy the same per-row statistics.

use super::Grads;
use crate::arch;
use crate::attention::Problem;
use crate::backward_launch::BLOCK_M;

/// One block's walk over (query head of the group, query tile) positions.
#[derive(Clone, Copy)]
pub struct Walk {
    /// The block's first key.
    pub key0: u32,
    /// The first query head of the block's KV head.
    pub first_head: usize,
    /// The first query tile that sees any of the block's keys.
    pub first_tile: u32,
    /// Positions per query head.
    pub tiles_per_head: u32,
    /// Query tiles of a head.
    pub q_tiles: u32,
}

impl Walk {
    /// The walk of the block `(x, y + z * grid_y)` of a grid of `block_n`-key blocks by KV heads;
    /// `None` past the last KV head (y and z round it up).
    #[inline(always)]
    pub fn of_block(problem: &Problem, block_n: u32) -> Option<Walk> {
        let kv_heads = problem.batch_heads / problem.kv_group;
        let kv_head = arch::block_idx_y() + arch::block_idx_z() * arch::grid_dim_y();
        if kv_head >= kv_heads {
            return None;
        }
        // The query heads of this KV head: `b * H + hk * group + i` for i < group.
        let heads_kv = problem.heads / problem.kv_group;
        let first_head =
            ((kv_head / heads_kv) * problem.heads + (kv_head % heads_kv) * problem.kv_group) as usize;
        let key0 = arch::block_idx_x() * block_n;
        // The query tiles that see any of these keys, so that tiles a causal mask or a sliding
        // window hides from every key are not walked (`mask::walked_tiles`).
        let (first_tile, tiles_per_head) = problem.mask().walked_tiles(key0, block_n);
        let q_tiles = problem.seq_q.div_ceil(BLOCK_M);
        Some(Walk {
            key0,
            first_head,
            first_tile,
            tiles_per_head,
            q_tiles,
        })
    }

    /// Positions of the whole walk.
    #[inline(always)]
    pub fn positions(self, kv_group: u32) -> u32 {
        self.tiles_per_head * kv_group
    }

    /// Walk position `t`: the query head and tile it stands for.
    #[inline(always)]
    pub fn position(self, t: u32) -> (usize, u32) {
        let (i, tile) = (t / self.tiles_per_head, self.first_tile + t % self.tiles_per_head);
        (self.first_head + i as usize, tile)
    }

    /// This block's step in the deterministic order of `tile`'s dQ. The key blocks of
    /// `block_n` keys whose walks include the tile are consecutive, from the one holding the
    /// first key the tile's first row sees (`mask::first_block`; key block 0 without a left
    /// window bound) to the last: step 0 is that first block.
    #[inline(always)]
    pub fn turn(self, problem: &Problem, tile: u32, block_n: u32) -> u32 {
        arch::block_idx_x() - problem.mask().first_block(tile, block_n)
    }

    /// A head's rows in the workspace: whole query tiles.
    #[inline(always)]
    pub fn padded_rows(self) -> u32 {
        self.q_tiles * BLOCK_M
    }

    /// Issues the `cp.async` copies of the base-2 log-sum-exps and deltas of `head`'s tile
    /// `tile` (`BLOCK_M` floats each) to `lse2` and `delta`: 16 bytes a copy, threads 0-31.
    ///
    /// # Safety
    /// `lse2` and `delta` are 16-byte aligned, `BLOCK_M` floats of this block's shared memory
    /// that nobody reads until the copies land; the workspace is the launch's.
    #[inline(always)]
    pub unsafe fn copy_statistics(
        self,
        g: &Grads,
        (head, tile): (usize, u32),
        (lse2, delta): (arch::SharedAddr, arch::SharedAddr),
        thread: u32,
    ) {
        const { assert!(BLOCK_M == 64) };
        let stat = head as u64 * self.padded_rows() as u64 + (tile * BLOCK_M) as u64;
        if thread < 32 {
            let (from, to) = if thread < 16 {
                (g.lse2 as *const f32, lse2)
            } else {
                (g.delta as *const f32, delta)
            };
            let piece = thread % 16;
            // Safety: inside the padded rows of the workspace (the caller's contract).
            unsafe {
                let from = from.add(stat as usize + 4 * piece as usize) as *const u8;
                arch::cp_async_16(to + piece * 16, from, 16);
            }
        }
    }
}
