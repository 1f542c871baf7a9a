//! `flash_ws`'s output paths: how a consumer warpgroup's O leaves the block.

/// How a consumer warpgroup's O leaves the block (`Consumer::run`).
#[derive(Clone, Copy)]
pub(super) enum OutputPath {
    /// Straight from the accumulators, 4 bytes per store (a persistent block's Q buffer holds
    /// the next item's Q).
    Registers,
    /// Through Q's buffer and the copy engine's tensor store; the output's map, in boxes of 64
    /// rows.
    TensorStore(*const u8),
    /// As `TensorStore`, through the block's own output tile (`Plan::o`, a persistent block):
    /// the copy engine reads it while the next item runs.
    OwnTile(*const u8),
    /// Through Q's buffer, then 16-byte stores of the rows inside the sequence: a box of a
    /// packed varlen output could reach into the next sequence's rows.
    RowStores,
    /// As `RowStores`, through the block's own output tile: a persistent varlen item whose
    /// warpgroup's 64 rows reach past its sequence's end.
    OwnTileRows,
}

impl OutputPath {
    /// The path of a block's O: through shared memory where Q's buffer is free at the end (one
    /// item per block) or the block has an output tile of its own (persistent, `output_buffer`):
    /// by the copy engine (the output's map `map`), or, where the output map's boxes could spill
    /// into another sequence's rows (varlen), by 16-byte stores of the sequence's rows; otherwise
    /// (a persistent block without room for the tile) straight from registers.
    #[inline(always)]
    pub(super) fn of<const PERSISTENT: bool, const VARLEN: bool>(
        output_buffer: bool,
        map: *const u8,
    ) -> Self {
        match (PERSISTENT, output_buffer, VARLEN) {
            (true, true, _) => OutputPath::OwnTile(map),
            (true, false, _) => OutputPath::Registers,
            (false, _, false) => OutputPath::TensorStore(map),
            (false, _, true) => OutputPath::RowStores,
        }
    }

    /// The path of a warpgroup's 64 rows from `first_row` of a sequence of `seq_q` rows: a
    /// tensor store's box past the end would reach into the next sequence's rows, so an own
    /// tile's rows then leave by row stores.
    #[inline(always)]
    pub(super) fn of_rows(self, first_row: u32, seq_q: u32) -> Self {
        match self {
            OutputPath::OwnTile(_) if first_row + 64 > seq_q => OutputPath::OwnTileRows,
            path => path,
        }
    }

    /// Whether the rows are staged in the block's own output tile.
    #[inline(always)]
    pub(super) fn own_tile(self) -> bool {
        matches!(self, OutputPath::OwnTile(_) | OutputPath::OwnTileRows)
    }
}
