//! Waffle's core, shared by every database adapter.
pub mod grid;
pub mod pool;
