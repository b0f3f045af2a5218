//! `waffle warm`, an operator command: warm a database ahead of its readers.
//! The warm runs in the product (`PRAGMA waffle_warm`, the preload's control
//! file); this command asks for it, shows its progress and says what it
//! stored, through waffle-warm-client (which the benchmarks' `+warm` use too).
//!
//! - [`database`]: `waffle warm DB [TABLE...]`, a SQLite database opened here.
//! - `waffle warm --mysql DIR [TABLESPACE...]`: a server under the preload,
//!   asked through its control file ([`run`]).
//! - [`bar`]: the progress bar.

mod bar;
mod database;
#[cfg(test)]
mod tests;

use std::path::PathBuf;

use clap::Args;
use waffle_warm_client::{mysql, Seen};

use bar::Bar;
use database::WarmOptions;

#[derive(Args)]
pub struct WarmArgs {
    /// The SQLite database file; with --mysql, the server's datadir (or the directory of, or the path
    /// to, its waffle-stats.json).
    db: PathBuf,
    /// Tables (each with its indexes) or indexes to warm, one after the other; none: the whole database.
    /// With --mysql: tablespaces as the stats file names them (db/table), or patterns (db/*); none: all.
    tables: Vec<String>,
    /// Warm tablespaces of a MariaDB/MySQL server under libwaffle_preload.so (through its control file).
    #[arg(long)]
    mysql: bool,
    /// Grid nodes, host:port,... (default: WAFFLE_GRID).
    #[arg(long)]
    grid: Option<String>,
    /// This process's L1 while it warms, e.g. 64MiB, pushed to the grid at its close (default: one page, so
    /// every page goes to the grid as it is read and the summary counts what the grid stored).
    #[arg(long)]
    local: Option<String>,
    /// Another URI option of the database, name=value (e.g. waffle_key_file=/etc/waffle.key); repeatable.
    #[arg(long = "option", value_name = "NAME=VALUE")]
    options: Vec<String>,
    /// No progress bar (the summary lines only).
    #[arg(long)]
    quiet: bool,
}

/// Runs `waffle warm` as `a` says; the error is the command's (exit status 1).
pub fn run(a: WarmArgs) -> Result<(), String> {
    if a.mysql {
        let bar = Bar::default();
        let show: &dyn Fn(&Seen<'_>) = &|s| bar.seen(s);
        let warmed = mysql::warm(&a.db, &a.tables, (!a.quiet).then_some(show));
        bar.finish();
        println!("{}", warmed?.summary());
        return Ok(());
    }
    database::run(&WarmOptions {
        db: a.db,
        tables: a.tables,
        grid: a.grid,
        local: a.local,
        options: a.options,
        progress: !a.quiet,
    })
    .map(|_| ())
}
