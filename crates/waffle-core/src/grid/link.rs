//! The seam through which a benchmark slows the grid down: after each request
//! the client tells a [`LinkModel`] when it began and how many bytes went out
//! and came back, and the model returns when that request would have completed
//! on the link it models (waffle-emulation's EMULATED links). The product has
//! no model; a grid without one pays a branch per request.

use std::time::Instant;

pub trait LinkModel: Send + Sync {
    /// Returns once a request begun at `start`, with `tx_bytes` out and
    /// `rx_bytes` back, would be complete on the modelled link.
    fn complete(&self, start: Instant, tx_bytes: usize, rx_bytes: usize);
}
