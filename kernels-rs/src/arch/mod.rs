//! The device layer: the only place in the crate with inline PTX.
//!
//! Every wrapper is `#[inline(always)]` and says in one line what it emits, so that reading a
//! kernel never requires reading assembly, and reading the PTX never requires guessing which
//! Rust line produced an instruction.

pub mod index;
pub mod math;
pub mod memory;
pub mod mma;
pub mod sync;
pub mod warp;
pub mod wgmma;

pub use index::*;
pub use math::*;
pub use memory::*;
pub use mma::*;
pub use sync::*;
pub use warp::*;
pub use wgmma::*;
