//! The cache's check of grid copies under the preload: a copy is taken only
//! if it is a consistent InnoDB page (page number, space id, checksum, LSN),
//! checked inside the cache before it reaches L1, so a concurrent reader
//! never hits an unchecked copy. The second line of defence: the envelope
//! matched, the InnoDB page must too.
//!
//! The check holds what it reads (the segments' space ids and counters, its
//! own reject counts), shared with the runtime: no global.

use std::sync::Arc;

use waffle_core::stats::Counter;
use waffle_core::versions::split;

use crate::innodb::{self, Mismatch};
use crate::log;
use crate::segments::{SegInfos, NO_SPACE};

/// Grid copies refused, by reason (`innodb::Mismatch`).
#[derive(Default)]
pub struct Rejects([Counter; 4]);

impl Rejects {
    pub fn get(&self, why: Mismatch) -> &Counter {
        &self.0[why.index()]
    }
}

pub struct InnodbCheck {
    segs: Arc<SegInfos>,
    rejects: Arc<Rejects>,
}

impl InnodbCheck {
    pub fn new(segs: Arc<SegInfos>, rejects: Arc<Rejects>) -> InnodbCheck {
        InnodbCheck { segs, rejects }
    }
}

impl waffle_core::PageCheck for InnodbCheck {
    fn accepts(&self, page: u64, bytes: &[u8]) -> bool {
        let (segment, index) = split(page);
        let Some(info) = self.segs.get(segment) else {
            return false; // no such tablespace open: nothing to vouch for it
        };
        let space = info.space_id.load(std::sync::atomic::Ordering::Acquire);
        let space = (space != NO_SPACE).then_some(space as u32);
        match innodb::check_page(bytes, index as u32, space) {
            Ok(()) => true,
            Err(why) => {
                self.rejects.get(why).incr();
                info.stats().innodb_rejects.incr();
                log::rate_limited_error(&format!(
                    "a grid copy of page {index} of segment {segment} is not a consistent InnoDB page ({}); read from disk instead",
                    why.name()
                ));
                false
            }
        }
    }
}
