//! The opener's moves of a schedule (issue 31 item 4): what an ATTACH names and carries in its
//! URI, the other settings of an open, and which moves a schedule draws.

/// What an ATTACH names: the database under another name, or the scratch directory's other
/// database.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum AttachTarget {
    Same,
    Other,
}

/// The `waffle_*` parameter an ATTACH's URI carries (SQL's, so ignored, or refused when the
/// value cannot be read safely).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum AttachParam {
    None,
    /// `waffle_grid=` node n of the run alone.
    Grid(usize),
    /// `waffle_stats_file=` the main database itself.
    StatsOverDb,
    /// `waffle_stats_file=` a JSON file of the scratch directory that is not Waffle's.
    StatsOverVictim,
    /// `waffle_stats_file=` a new file, which must not appear.
    StatsNew,
    /// `waffle_key_file=` a FIFO of the scratch directory: refused, promptly.
    KeyFifo,
    /// `waffle_key_file=` a regular key file: ignored.
    KeyRegular,
}

pub const ATTACH_PARAMS: [AttachParam; 8] = [
    AttachParam::None,
    AttachParam::Grid(0),
    AttachParam::Grid(1),
    AttachParam::StatsOverDb,
    AttachParam::StatsOverVictim,
    AttachParam::StatsNew,
    AttachParam::KeyFifo,
    AttachParam::KeyRegular,
];

/// Settings of an open other than the run's (grid of both nodes, no key, verify as the build has it).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum OtherSettings {
    /// Node n alone: another grid (weaker).
    GridOne(usize),
    /// No grid (another grid: weaker).
    NoGrid,
    /// A seal key where the open one has none (weaker).
    Key,
    /// Verify mode the other way (weaker only when it asks for on over off).
    VerifyFlipped,
    /// Another L1 size and hot list (harmless: joins).
    Harmless,
}

pub const OTHER_SETTINGS: [OtherSettings; 6] = [
    OtherSettings::GridOne(0),
    OtherSettings::GridOne(1),
    OtherSettings::NoGrid,
    OtherSettings::Key,
    OtherSettings::VerifyFlipped,
    OtherSettings::Harmless,
];

/// Which moves a schedule draws: `Classic` is the generator the `found_*` seeds were found
/// with (their schedules stay the same); `All` adds the opener's moves; `Focus` draws one of
/// them often (their fixed-seed tests).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Moves {
    Classic,
    All,
    Focus(Move),
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Move {
    Attach,
    OpenOther,
    StallRecovery,
    Fork,
}
