//! The verdict on a node (grid::cost's arithmetic): from one window's
//! figures, what a lookup costs and saves, where the node should stand under
//! the hysteresis, and the reason said for it. Pure functions of the figures:
//! cost.rs keeps the state, the windows and the time.

use serde::{Deserialize, Serialize};

/// Hysteresis: on, a node backs off when a lookup costs more than MARGIN ×
/// what it saves; backed off, it comes back when it saves more than MARGIN ×
/// what it costs.
pub const MARGIN: f64 = 1.25;

/// Where a node stands.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CostState {
    /// No window judged yet: the trial's sample goes, or every request once the node is promising.
    #[default]
    Measuring,
    /// The grid saves more than it costs (or not clearly less): every request goes.
    On,
    /// The grid costs more than it saves: the sample's keys go (one in `sample_every`).
    BackedOff,
}

impl CostState {
    pub(super) fn from_u8(v: u8) -> CostState {
        match v {
            1 => CostState::On,
            2 => CostState::BackedOff,
            _ => CostState::Measuring,
        }
    }
}

/// What a decision rests on: one window's sums and the disk's mean read.
#[derive(Clone, Copy, Debug)]
pub(super) struct Figures {
    pub(super) lookups: u64,
    pub(super) lookup_us_sum: u64,
    pub(super) hits: u64,
    pub(super) pushes: u64,
    pub(super) push_us_sum: u64,
    pub(super) disk_us: f64,
}

impl Figures {
    fn per_lookup(&self, v: u64) -> f64 {
        if self.lookups == 0 {
            0.0
        } else {
            v as f64 / self.lookups as f64
        }
    }

    pub(super) fn lookup_us(&self) -> f64 {
        self.per_lookup(self.lookup_us_sum)
    }

    pub(super) fn hit_ratio(&self) -> f64 {
        self.per_lookup(self.hits)
    }

    pub(super) fn pushes_per_lookup(&self) -> f64 {
        self.per_lookup(self.pushes)
    }

    pub(super) fn push_us(&self) -> f64 {
        if self.pushes == 0 {
            0.0
        } else {
            self.push_us_sum as f64 / self.pushes as f64
        }
    }

    pub(super) fn cost_us(&self) -> f64 {
        self.per_lookup(self.lookup_us_sum + self.push_us_sum)
    }

    pub(super) fn saved_us(&self) -> f64 {
        self.hit_ratio() * self.disk_us
    }
}

/// What the window says the state should be, from `old`: hysteresis by MARGIN.
pub(super) fn verdict(old: CostState, f: &Figures) -> CostState {
    let (cost, saved) = (f.cost_us(), f.saved_us());
    match old {
        CostState::BackedOff if saved > cost * MARGIN => CostState::On,
        CostState::BackedOff => CostState::BackedOff,
        _ if cost > saved * MARGIN => CostState::BackedOff,
        _ => CostState::On,
    }
}

pub(super) fn reason(state: CostState, f: &Figures, backoff: bool, sample_every: u64) -> String {
    let costs = format!(
        "a lookup costs {:.0} us ({:.0} us round trip + {:.1} pushes x {:.0} us) and saves {:.2} x {:.0} us = {:.0} us of disk read",
        f.cost_us(),
        f.lookup_us(),
        f.pushes_per_lookup(),
        f.push_us(),
        f.hit_ratio(),
        f.disk_us,
        f.saved_us()
    );
    match state {
        CostState::Measuring => format!("measuring: {costs}"),
        CostState::On => format!("on: {costs}"),
        CostState::BackedOff if !backoff => {
            format!("would back off, but waffle_grid_backoff=off: every request is sent: {costs}")
        }
        CostState::BackedOff => {
            format!("backed off (the lookups and pushes of 1 page in {sample_every} sent): {costs}")
        }
    }
}
