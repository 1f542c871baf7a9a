//! The device layer: the only place in the crate with inline PTX.
//!
//! Every wrapper is `#[inline(always)]` and says in one line what it emits, so that reading a
//! kernel never requires reading assembly, and reading the PTX never requires guessing which
//! Rust line produced an instruction.

pub mod grid;
pub mod index;
pub mod math;
pub mod mbarrier;
pub mod memory;
pub mod mma;
pub mod sync;
pub mod tma;
pub mod warp;
pub mod warpgroup;
pub mod wgmma;

pub use grid::*;
pub use index::*;
pub use math::*;
pub use mbarrier::*;
pub use memory::*;
pub use mma::*;
pub use sync::*;
pub use tma::*;
pub use warp::*;
pub use warpgroup::*;
pub use wgmma::*;
