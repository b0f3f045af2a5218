//! What schedules did, summed: printed after each schedule and by `scripts/explore` at the end.

use std::fmt;

#[derive(Clone, Debug, Default)]
pub struct Tally {
    pub schedules: u64,
    pub steps: u64,
    pub processes: u64,
    pub kills: u64,
    pub opens_warm: u64,
    pub opens_cold: u64,
    pub checkpoints: u64,
    pub node_restarts: u64,
    pub node_flushes: u64,
    pub shells: u64,
    pub renames: u64,
    pub backups: u64,
    pub restores: u64,
    pub busy: u64,
    pub verify_checked: u64,
    pub attaches: u64,
    pub other_opens: u64,
    /// Opens and ATTACHes waffle refused by design (weaker settings, a FIFO key file).
    pub refusals: u64,
    /// Reads that waited on another process's wal-index recovery.
    pub recovery_stalls: u64,
    /// Forks whose child opened the database anew.
    pub forks: u64,
}

impl Tally {
    pub fn add(&mut self, o: &Tally) {
        let pairs = [
            (&mut self.schedules, o.schedules),
            (&mut self.steps, o.steps),
            (&mut self.processes, o.processes),
            (&mut self.kills, o.kills),
            (&mut self.opens_warm, o.opens_warm),
            (&mut self.opens_cold, o.opens_cold),
            (&mut self.checkpoints, o.checkpoints),
            (&mut self.node_restarts, o.node_restarts),
            (&mut self.node_flushes, o.node_flushes),
            (&mut self.shells, o.shells),
            (&mut self.renames, o.renames),
            (&mut self.backups, o.backups),
            (&mut self.restores, o.restores),
            (&mut self.busy, o.busy),
            (&mut self.verify_checked, o.verify_checked),
            (&mut self.attaches, o.attaches),
            (&mut self.other_opens, o.other_opens),
            (&mut self.refusals, o.refusals),
            (&mut self.recovery_stalls, o.recovery_stalls),
            (&mut self.forks, o.forks),
        ];
        for (mine, theirs) in pairs {
            *mine += theirs;
        }
    }
}

impl fmt::Display for Tally {
    /// One line of `name=value` pairs (`scripts/explore` sums them).
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        write!(
            f,
            "schedules={} steps={} processes={} kills={} opens_warm={} opens_cold={} checkpoints={} \
             node_restarts={} node_flushes={} shells={} renames={} backups={} restores={} busy={} verify_checked={} \
             attaches={} other_opens={} refusals={} recovery_stalls={} forks={}",
            self.schedules,
            self.steps,
            self.processes,
            self.kills,
            self.opens_warm,
            self.opens_cold,
            self.checkpoints,
            self.node_restarts,
            self.node_flushes,
            self.shells,
            self.renames,
            self.backups,
            self.restores,
            self.busy,
            self.verify_checked,
            self.attaches,
            self.other_opens,
            self.refusals,
            self.recovery_stalls,
            self.forks
        )
    }
}
