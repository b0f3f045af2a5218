//! A schedule drawn from a seed: the processes, their connections (waffle or plain), the journal
//! mode, and the steps, run one at a time by the driver. It never depends on outcomes, so the
//! waffle run and its control run the same steps; the generator's idea of which connections are
//! open or in a transaction is a guess that keeps the steps sensible, not a precondition.

use std::fmt;

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

pub use super::moves::{AttachParam, AttachTarget, Move, Moves, OtherSettings, ATTACH_PARAMS, OTHER_SETTINGS};
use super::protocol::WriteOp;
use super::protocol::SLOTS;

pub const INITIAL_ROWS: i64 = 300;
pub const INITIAL_PAD_BYTES: u32 = 500;
pub const CHECKPOINT_MODES: [&str; 4] = ["PASSIVE", "FULL", "RESTART", "TRUNCATE"];
const HOT_LISTS: [&str; 3] = ["on", "off", "grid"];
/// A transaction is ended by the generator after this many steps (others would only get busy).
const TXN_MAX_AGE_STEPS: usize = 6;
pub const BACKUP_FILES: u8 = 2;
pub const NODES: usize = 2;
/// Rows of the scratch directory's other database (an ATTACH's target).
pub const OTHER_ROWS: i64 = 40;
/// Ids of rows inserted into the other database start here (one per step at most).
pub const OTHER_IDS_FROM: i64 = 1_000_000;

#[derive(Clone, Debug)]
pub enum Step {
    Open {
        w: usize,
        k: usize,
        hot_list: &'static str,
    },
    Close {
        w: usize,
        k: usize,
    },
    /// Close then open again in the same process (warm, unless a crash came between).
    Reopen {
        w: usize,
        k: usize,
        hot_list: &'static str,
    },
    Begin {
        w: usize,
        k: usize,
        immediate: bool,
    },
    Write {
        w: usize,
        k: usize,
        ops: Vec<WriteOp>,
    },
    Commit {
        w: usize,
        k: usize,
    },
    Rollback {
        w: usize,
        k: usize,
    },
    Read {
        w: usize,
        k: usize,
    },
    Get {
        w: usize,
        k: usize,
        ids: Vec<i64>,
    },
    Checkpoint {
        w: usize,
        k: usize,
        mode: &'static str,
    },
    Vacuum {
        w: usize,
        k: usize,
    },
    Journal {
        w: usize,
        k: usize,
        mode: &'static str,
    },
    Check {
        w: usize,
        k: usize,
    },
    /// The online backup API from this connection into backup file `file`.
    Backup {
        w: usize,
        k: usize,
        file: u8,
    },
    /// The online backup API from backup file `file` into this connection's database.
    Restore {
        w: usize,
        k: usize,
        file: u8,
    },
    /// kill -9 of the process, then a new one in its place (every slot closed).
    Kill {
        w: usize,
    },
    /// A `sqlite3` shell process writes (in the waffle run with `libwaffle.so` when `waffle`).
    ShellWrite {
        ops: Vec<WriteOp>,
        waffle: bool,
    },
    ShellRead {
        waffle: bool,
    },
    ShellCheckpoint {
        mode: &'static str,
    },
    /// VACUUM INTO a new file, renamed over the database (every connection closed first).
    VacuumIntoRename,
    /// A backup file copied and renamed over the database (a restore from a backup).
    RenameBackup {
        file: u8,
    },
    /// A backup file renamed over the database while slot k of worker w opens it (the open held
    /// in waffle's sidecar lock to widen the window), then a read and a close of that slot: it
    /// must read the file it opened.
    RenameDuringOpen {
        w: usize,
        k: usize,
        file: u8,
    },
    NodeFlush {
        n: usize,
    },
    NodeRestart {
        n: usize,
    },
    /// ATTACH from SQL (settings.rs): on slot k's connection, or on a read-only connection of its
    /// own (`read_only`), then a read through the attached name, a write where the connection
    /// may, and DETACH.
    Attach {
        w: usize,
        k: usize,
        read_only: bool,
        target: AttachTarget,
        param: AttachParam,
        write: Option<WriteOp>,
    },
    /// A connection of its own in worker w opens the database with settings other than the
    /// run's, reads and closes: refused exactly when another waffle connection of w has the
    /// database open and `other` is weaker (settings.rs).
    OpenOther {
        w: usize,
        k: usize,
        other: OtherSettings,
    },
    /// Slot k reopens and reads while another process holds the wal-index's recovery lock; a
    /// shell writes and checkpoints once it lets go; the read must see the shell's rows
    /// (recovery.rs).
    StallRecovery {
        w: usize,
        k: usize,
        hot_list: &'static str,
        ops: Vec<WriteOp>,
        mode: &'static str,
    },
    /// Worker w forks; the child opens the database anew (through waffle if slot k is a waffle
    /// slot), reads every row, runs `write` if any, closes and exits (forks.rs).
    Fork {
        w: usize,
        k: usize,
        write: Option<WriteOp>,
    },
}

impl Step {
    /// The worker and slot a step runs on, if it runs on one.
    pub fn conn(&self) -> Option<(usize, usize)> {
        use Step::*;
        match *self {
            Open { w, k, .. } | Close { w, k } | Reopen { w, k, .. } | Begin { w, k, .. } | Write { w, k, .. } => {
                Some((w, k))
            }
            Commit { w, k } | Rollback { w, k } | Read { w, k } | Get { w, k, .. } | Checkpoint { w, k, .. } => {
                Some((w, k))
            }
            Vacuum { w, k } | Journal { w, k, .. } | Check { w, k } | Backup { w, k, .. } | Restore { w, k, .. } => {
                Some((w, k))
            }
            Attach { w, k, .. } | OpenOther { w, k, .. } | StallRecovery { w, k, .. } | Fork { w, k, .. } => {
                Some((w, k))
            }
            _ => None,
        }
    }
}

impl fmt::Display for Step {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        let ops = |ops: &[WriteOp]| ops.iter().map(|o| o.to_string()).collect::<Vec<_>>().join(" ");
        match self {
            Step::Write { w, k, ops: o } => write!(f, "w{w}.{k} write {}", ops(o)),
            Step::ShellWrite { ops: o, waffle } => {
                write!(f, "shell{} write {}", if *waffle { "+waffle" } else { "" }, ops(o))
            }
            other => match other.conn() {
                Some((w, k)) => write!(f, "w{w}.{k} {}", format!("{other:?}").split(" {").next().unwrap_or("?")),
                None => write!(f, "{other:?}"),
            },
        }
        .and_then(|_| match self {
            Step::Open { hot_list, .. } | Step::Reopen { hot_list, .. } => write!(f, " hot_list={hot_list}"),
            Step::Begin { immediate: true, .. } => write!(f, " immediate"),
            Step::Get { ids, .. } => write!(f, " {ids:?}"),
            Step::Checkpoint { mode, .. } | Step::Journal { mode, .. } => write!(f, " {mode}"),
            Step::Backup { file, .. } | Step::Restore { file, .. } => write!(f, " file {file}"),
            Step::Attach { read_only, target, param, write: op, .. } => {
                let op = op.as_ref().map(|o| format!(" write {o}")).unwrap_or_default();
                write!(f, " {}{target:?} {param:?}{op}", if *read_only { "ro " } else { "" })
            }
            Step::OpenOther { other, .. } => write!(f, " {other:?}"),
            Step::Fork { write: Some(op), .. } => write!(f, " then write {op}"),
            Step::StallRecovery { hot_list, ops: o, mode, .. } => {
                write!(f, " hot_list={hot_list} then shell write {} checkpoint {mode}", ops(o))
            }
            _ => Ok(()),
        })
    }
}

#[derive(Clone, Debug)]
pub struct Schedule {
    pub seed: u64,
    pub wal: bool,
    /// Per worker process, per slot: opened through waffle (in the waffle run) or plainly.
    pub waffle: Vec<Vec<bool>>,
    pub steps: Vec<Step>,
    /// The waffle run's verify mode (set by the caller; the control's workers run without it,
    /// yet expect what the waffle run does).
    pub verify: bool,
}

impl Schedule {
    /// The seed's lowest bit picks the journal mode (odd: WAL), the rest is drawn.
    pub fn generate(seed: u64, steps: usize, moves: Moves) -> Schedule {
        let mut g = Generator::new(seed, moves);
        let waffle = g.connection_kinds();
        while g.steps.len() < steps {
            g.next_step();
        }
        Schedule { seed, wal: seed % 2 == 1, waffle, steps: g.steps, verify: false }
    }

    pub fn describe(&self) -> String {
        let kinds: Vec<String> =
            self.waffle.iter().map(|ks| ks.iter().map(|w| if *w { "W" } else { "p" }).collect::<String>()).collect();
        format!(
            "seed {} ({}), {} processes [{}] (W waffle, p plain), {} steps",
            self.seed,
            if self.wal { "wal" } else { "delete" },
            self.waffle.len(),
            kinds.join(" "),
            self.steps.len()
        )
    }
}

struct Generator {
    rng: SmallRng,
    steps: Vec<Step>,
    /// Per worker, per slot: open?, and the step its transaction began at.
    open: Vec<Vec<bool>>,
    txn_since: Vec<Vec<Option<usize>>>,
    next_id: i64,
    backups: Vec<u8>,
    moves: Moves,
    wal: bool,
}

impl Generator {
    fn new(seed: u64, moves: Moves) -> Generator {
        let mut rng = SmallRng::seed_from_u64(seed);
        let workers = rng.gen_range(2..=3);
        Generator {
            rng,
            steps: Vec::new(),
            open: vec![vec![false; SLOTS]; workers],
            txn_since: vec![vec![None; SLOTS]; workers],
            next_id: INITIAL_ROWS + 1,
            backups: Vec::new(),
            moves,
            wal: seed % 2 == 1,
        }
    }

    /// 2-3 slots per worker, at least one waffle one each and a plain one somewhere.
    fn connection_kinds(&mut self) -> Vec<Vec<bool>> {
        let workers = self.open.len();
        let mut kinds: Vec<Vec<bool>> = (0..workers)
            .map(|_| {
                let n = self.rng.gen_range(2..=SLOTS);
                let mut ks: Vec<bool> = (0..n).map(|_| self.rng.gen_bool(0.6)).collect();
                ks[0] = true;
                ks
            })
            .collect();
        if kinds.iter().flatten().all(|w| *w) {
            let w = self.rng.gen_range(0..workers);
            *kinds[w].last_mut().unwrap() = false;
        }
        for (w, ks) in kinds.iter().enumerate() {
            self.open[w].truncate(ks.len());
            self.txn_since[w].truncate(ks.len());
        }
        kinds
    }

    fn push(&mut self, step: Step) {
        match &step {
            Step::Open { w, k, .. } | Step::Reopen { w, k, .. } | Step::StallRecovery { w, k, .. } => {
                self.open[*w][*k] = true;
                self.txn_since[*w][*k] = None;
            }
            Step::Close { w, k } => {
                self.open[*w][*k] = false;
                self.txn_since[*w][*k] = None;
            }
            Step::Begin { w, k, .. } => self.txn_since[*w][*k] = Some(self.steps.len()),
            Step::Commit { w, k } | Step::Rollback { w, k } => self.txn_since[*w][*k] = None,
            Step::Kill { w } => {
                self.open[*w].iter_mut().for_each(|o| *o = false);
                self.txn_since[*w].iter_mut().for_each(|t| *t = None);
            }
            Step::Backup { file, .. } if !self.backups.contains(file) => self.backups.push(*file),
            _ => {}
        }
        self.steps.push(step);
    }

    fn next_step(&mut self) {
        if let Some((w, k)) = self.old_txn() {
            let step = if self.rng.gen_bool(0.7) { Step::Commit { w, k } } else { Step::Rollback { w, k } };
            return self.push(step);
        }
        // Classic schedules draw nothing more, so the found_* seeds keep their steps.
        let new_move = match self.moves {
            Moves::Classic => None,
            Moves::All => {
                let r = self.rng.gen_range(0..100);
                let stall = if self.wal { Move::StallRecovery } else { Move::Attach };
                [(0..4, Move::Attach), (4..6, Move::OpenOther), (6..7, stall), (7..9, Move::Fork)]
                    .into_iter()
                    .find(|(range, _)| range.contains(&r))
                    .map(|(_, m)| m)
            }
            Moves::Focus(m) => self.rng.gen_bool(0.25).then_some(m),
        };
        if let Some(m) = new_move {
            return self.new_move(m);
        }
        match self.rng.gen_range(0..100) {
            0..=71 => self.conn_step(),
            72..=78 => {
                let ops = self.ops(4);
                let waffle = self.rng.gen_bool(0.5);
                self.push(Step::ShellWrite { ops, waffle })
            }
            79..=80 => {
                let waffle = self.rng.gen_bool(0.5);
                self.push(Step::ShellRead { waffle })
            }
            81..=83 => {
                let mode = self.pick(&CHECKPOINT_MODES);
                self.push(Step::ShellCheckpoint { mode })
            }
            84..=85 => {
                let w = self.rng.gen_range(0..self.open.len());
                self.push(Step::Kill { w })
            }
            86..=88 => {
                let n = self.rng.gen_range(0..NODES);
                self.push(Step::NodeFlush { n })
            }
            89..=91 => {
                let n = self.rng.gen_range(0..NODES);
                self.push(Step::NodeRestart { n })
            }
            92 => self.quiet_then(Step::VacuumIntoRename),
            93 if !self.backups.is_empty() => {
                let file = self.backups[self.rng.gen_range(0..self.backups.len())];
                self.quiet_then(Step::RenameBackup { file })
            }
            94 => self.journal_alone(),
            95 if !self.backups.is_empty() => {
                let file = self.backups[self.rng.gen_range(0..self.backups.len())];
                let (w, k) = self.any_conn();
                self.quiet_then(Step::RenameDuringOpen { w, k, file })
            }
            _ => self.conn_step(),
        }
    }

    /// A transaction open for too long, to end now.
    fn old_txn(&self) -> Option<(usize, usize)> {
        let now = self.steps.len();
        let all =
            self.txn_since.iter().enumerate().flat_map(|(w, ks)| ks.iter().enumerate().map(move |(k, t)| (w, k, t)));
        all.filter_map(|(w, k, t)| t.filter(|since| now - since > TXN_MAX_AGE_STEPS).map(|_| (w, k))).next()
    }

    fn pick<T: Copy>(&mut self, items: &[T]) -> T {
        items[self.rng.gen_range(0..items.len())]
    }

    fn any_conn(&mut self) -> (usize, usize) {
        let w = self.rng.gen_range(0..self.open.len());
        (w, self.rng.gen_range(0..self.open[w].len()))
    }

    fn open_conns(&self) -> Vec<(usize, usize)> {
        let all = self.open.iter().enumerate().flat_map(|(w, ks)| ks.iter().enumerate().map(move |(k, o)| (w, k, *o)));
        all.filter(|(_, _, o)| *o).map(|(w, k, _)| (w, k)).collect()
    }

    /// Every connection closed, then `step` (a file renamed over the database).
    fn quiet_then(&mut self, step: Step) {
        for (w, k) in self.open_conns() {
            self.push(Step::Close { w, k });
        }
        self.push(step);
    }

    /// One connection left open, alone, switches the journal mode.
    fn journal_alone(&mut self) {
        let (w, k) = self.any_conn();
        for (ow, ok) in self.open_conns() {
            if (ow, ok) != (w, k) {
                self.push(Step::Close { w: ow, k: ok });
            }
        }
        if !self.open[w][k] {
            let hot_list = self.pick(&HOT_LISTS);
            self.push(Step::Open { w, k, hot_list });
        }
        let mode = if self.rng.gen_bool(0.5) { "WAL" } else { "DELETE" };
        self.push(Step::Journal { w, k, mode });
    }

    fn conn_step(&mut self) {
        let (w, k) = self.any_conn();
        let hot_list = self.pick(&HOT_LISTS);
        if !self.open[w][k] {
            return self.push(Step::Open { w, k, hot_list });
        }
        let in_txn = self.txn_since[w][k].is_some();
        let step = match self.rng.gen_range(0..100) {
            0..=27 => Step::Write { w, k, ops: self.ops(if in_txn { 2 } else { 4 }) },
            28..=43 => Step::Read { w, k },
            44..=51 => Step::Get { w, k, ids: self.ids() },
            52..=63 if !in_txn => Step::Begin { w, k, immediate: self.rng.gen_bool(0.4) },
            52..=63 => Step::Commit { w, k },
            64..=67 => Step::Close { w, k },
            68..=73 => Step::Reopen { w, k, hot_list },
            74..=81 => Step::Checkpoint { w, k, mode: self.pick(&CHECKPOINT_MODES) },
            82 => Step::Vacuum { w, k },
            83..=85 => Step::Check { w, k },
            86..=88 => Step::Backup { w, k, file: self.rng.gen_range(0..BACKUP_FILES) },
            89 if !self.backups.is_empty() => Step::Restore { w, k, file: self.pick(&self.backups.clone()) },
            _ => Step::Read { w, k },
        };
        self.push(step)
    }

    /// One of the opener's moves (Attach, OpenOther, StallRecovery) or a fork, on a connection drawn.
    fn new_move(&mut self, m: Move) {
        let (w, k) = self.any_conn();
        let step = match m {
            Move::Attach => {
                let read_only = !self.open[w][k] || self.rng.gen_bool(0.3);
                let target = if self.rng.gen_bool(0.5) { AttachTarget::Same } else { AttachTarget::Other };
                let param = self.pick(&ATTACH_PARAMS);
                let write = (!read_only && self.rng.gen_bool(0.6)).then(|| match target {
                    AttachTarget::Same => self.op(0),
                    AttachTarget::Other => self.other_op(),
                });
                Step::Attach { w, k, read_only, target, param, write }
            }
            Move::OpenOther => Step::OpenOther { w, k, other: self.pick(&OTHER_SETTINGS) },
            Move::Fork => {
                let write = self.rng.gen_bool(0.5).then(|| self.op(0));
                Step::Fork { w, k, write }
            }
            Move::StallRecovery => {
                // A write transaction held across the stall would keep the shell (and the
                // reader's recovery) busy: the open ones end first.
                let open_txns: Vec<(usize, usize)> = (0..self.open.len())
                    .flat_map(|w| (0..self.open[w].len()).map(move |k| (w, k)))
                    .filter(|(w, k)| self.txn_since[*w][*k].is_some())
                    .collect();
                for (w, k) in open_txns {
                    self.push(Step::Commit { w, k });
                }
                let hot_list = self.pick(&HOT_LISTS);
                let ops = self.ops(3);
                let mode = self.pick(&["RESTART", "TRUNCATE"]);
                Step::StallRecovery { w, k, hot_list, ops, mode }
            }
        };
        self.push(step)
    }

    /// A write to the other database (ids 1..=OTHER_ROWS at first; new ones above OTHER_IDS_FROM).
    fn other_op(&mut self) -> WriteOp {
        let v = format!("o{}", self.steps.len());
        let pad_len = self.rng.gen_range(100..700);
        let id = self.rng.gen_range(1..=OTHER_ROWS);
        match self.rng.gen_range(0..3) {
            0 => WriteOp::Insert { id: OTHER_IDS_FROM + self.steps.len() as i64, v, pad_len },
            1 => WriteOp::Update { id, v, pad_len },
            _ => WriteOp::Delete { id },
        }
    }

    fn ids(&mut self) -> Vec<i64> {
        let n = self.rng.gen_range(1..=5);
        (0..n).map(|_| self.rng.gen_range(1..self.next_id)).collect()
    }

    /// 1..=max statements; values name their step, so a stale row shows which write it was.
    fn ops(&mut self, max: usize) -> Vec<WriteOp> {
        let n = self.rng.gen_range(1..=max);
        (0..n).map(|j| self.op(j)).collect()
    }

    fn op(&mut self, j: usize) -> WriteOp {
        let v = format!("s{}n{j}", self.steps.len());
        let pad_len =
            if self.rng.gen_bool(0.05) { self.rng.gen_range(3000..6000) } else { self.rng.gen_range(200..900) };
        let id = self.rng.gen_range(1..self.next_id);
        match self.rng.gen_range(0..100) {
            0..=34 => {
                self.next_id += 1;
                WriteOp::Insert { id: self.next_id - 1, v, pad_len }
            }
            35..=79 => WriteOp::Update { id, v, pad_len },
            80..=94 => WriteOp::Delete { id },
            _ => WriteOp::DeleteRange { lo: id, hi: id + self.rng.gen_range(1..4) },
        }
    }
}
