//! `oltp-read-only`: sysbench's table and its read-only transaction.
//!
//! Table `sbtest(id INTEGER PRIMARY KEY, k INTEGER, c CHAR(120), pad CHAR(60))`
//! with an index on k, filled as sysbench's `oltp_common.lua` does (k uniform
//! in 1..rows, c ten and pad five groups of 11 random digits). One transaction
//! (sysbench `oltp_read_only.lua`, defaults): BEGIN; 10 point selects; a
//! simple range of 100 rows; a sum range; an order range; a distinct range;
//! COMMIT. Keys are drawn uniformly, with sysbench's pareto (h = 0.2), or
//! with a zipf of a given exponent.

use indicatif::ProgressBar;
use rand::rngs::SmallRng;
use rand::{Rng, RngCore, SeedableRng};
use rusqlite::{params, Connection};

use super::workload::{transaction, Rate, Tally, Workload};

/// Bytes of database per row, measured (4 KiB pages: ~20 rows per table page, the k index ~8%).
pub const BYTES_PER_ROW: u64 = 225;
pub const RANGE_SIZE: i64 = 100;
pub const POINT_SELECTS: usize = 10;

#[derive(Clone, Debug, PartialEq)]
pub enum Dist {
    Uniform,
    /// sysbench's pareto: id = 1 + n * u^(ln h / ln(1-h)).
    Pareto(f64),
    /// Zipf with exponent theta (YCSB's generator, Gray et al.), hottest ids first.
    Zipf(f64),
}

impl Dist {
    pub fn parse(s: &str) -> Result<Dist, String> {
        let s = s.trim();
        let (name, arg) = match s.split_once(':') {
            Some((n, a)) => (n, Some(a.parse::<f64>().map_err(|_| format!("'{a}' is not a number"))?)),
            None => (s, None),
        };
        match name {
            "uniform" => Ok(Dist::Uniform),
            "pareto" => {
                let h = arg.unwrap_or(0.2);
                if !(h > 0.0 && h < 1.0) {
                    return Err("pareto's h must be between 0 and 1 (sysbench: 0.2)".into());
                }
                Ok(Dist::Pareto(h))
            }
            "zipf" => {
                let theta = arg.unwrap_or(0.99);
                if !(theta > 0.0 && theta < 1.0) {
                    return Err("zipf's exponent must be between 0 and 1 (e.g. zipf:0.99)".into());
                }
                Ok(Dist::Zipf(theta))
            }
            _ => Err(format!("unknown distribution '{s}' (uniform, pareto[:h], zipf[:theta])")),
        }
    }

    pub fn name(&self) -> String {
        match self {
            Dist::Uniform => "uniform".into(),
            Dist::Pareto(h) => format!("pareto:{h}"),
            Dist::Zipf(t) => format!("zipf:{t}"),
        }
    }
}

/// Draws ids in 1..=n.
pub struct KeyGen {
    n: u64,
    kind: KeyKind,
}

enum KeyKind {
    Uniform,
    Pareto { power: f64 },
    Zipf { theta: f64, alpha: f64, zetan: f64, eta: f64 },
}

impl KeyGen {
    pub fn new(dist: &Dist, n: u64) -> KeyGen {
        let n = n.max(1);
        let kind = match *dist {
            Dist::Uniform => KeyKind::Uniform,
            Dist::Pareto(h) => KeyKind::Pareto { power: h.ln() / (1.0 - h).ln() },
            Dist::Zipf(theta) => {
                let zeta = |m: u64| (1..=m).map(|i| 1.0 / (i as f64).powf(theta)).sum::<f64>();
                let zetan = zeta(n);
                let zeta2 = zeta(2);
                let alpha = 1.0 / (1.0 - theta);
                let eta = (1.0 - (2.0 / n as f64).powf(1.0 - theta)) / (1.0 - zeta2 / zetan);
                KeyKind::Zipf { theta, alpha, zetan, eta }
            }
        };
        KeyGen { n, kind }
    }

    pub fn next(&self, rng: &mut SmallRng) -> u64 {
        match self.kind {
            KeyKind::Uniform => rng.gen_range(1..=self.n),
            KeyKind::Pareto { power } => {
                let u: f64 = rng.gen();
                (1 + (self.n as f64 * u.powf(power)) as u64).min(self.n)
            }
            KeyKind::Zipf { theta, alpha, zetan, eta } => {
                let u: f64 = rng.gen();
                let uz = u * zetan;
                if uz < 1.0 {
                    return 1;
                }
                if uz < 1.0 + 0.5f64.powf(theta) {
                    return 2.min(self.n);
                }
                (1 + (self.n as f64 * (eta * u - eta + 1.0).powf(alpha)) as u64).min(self.n)
            }
        }
    }
}

pub struct OltpReadOnly {
    pub rows: u64,
    pub dist: Dist,
    keys: KeyGen,
}

impl OltpReadOnly {
    pub fn new(rows: u64, dist: Dist) -> OltpReadOnly {
        let rows = rows.max(RANGE_SIZE as u64 + 1);
        let keys = KeyGen::new(&dist, rows - RANGE_SIZE as u64 + 1);
        OltpReadOnly { rows, dist, keys }
    }

    /// Rows for about `data_bytes` of database.
    pub fn rows_for(data_bytes: u64, page_bytes: u32) -> u64 {
        // Larger pages waste less per page; the estimate is for 4 KiB and close enough for others.
        let _ = page_bytes;
        (data_bytes / BYTES_PER_ROW).max(RANGE_SIZE as u64 + 1)
    }
}

/// sysbench's `c`/`pad` values: `groups` groups of 11 random digits joined by '-'.
pub fn digits(rng: &mut impl RngCore, groups: usize, out: &mut String) {
    out.clear();
    for g in 0..groups {
        if g > 0 {
            out.push('-');
        }
        for _ in 0..11 {
            out.push(char::from(b'0' + (rng.next_u32() % 10) as u8));
        }
    }
}

/// Builds `sbtest` with `rows` rows; shared by `scan`.
pub fn build_sbtest(conn: &mut Connection, rows: u64, progress: &ProgressBar) -> rusqlite::Result<()> {
    conn.execute_batch(
        "CREATE TABLE sbtest(id INTEGER PRIMARY KEY, k INTEGER NOT NULL DEFAULT 0, \
         c CHAR(120) NOT NULL DEFAULT '', pad CHAR(60) NOT NULL DEFAULT '')",
    )?;
    let mut rng = SmallRng::seed_from_u64(2008);
    let (mut c, mut pad) = (String::new(), String::new());
    let chunk = 20_000u64;
    let mut done = 0u64;
    // The table is 92% of the work; the index the rest.
    while done < rows {
        let tx = conn.transaction()?;
        {
            let mut ins = tx.prepare_cached("INSERT INTO sbtest(id, k, c, pad) VALUES (?1, ?2, ?3, ?4)")?;
            for id in (done + 1)..=(done + chunk).min(rows) {
                digits(&mut rng, 10, &mut c);
                digits(&mut rng, 5, &mut pad);
                ins.execute(params![id as i64, rng.gen_range(1..=rows) as i64, &c, &pad])?;
            }
        }
        tx.commit()?;
        done = (done + chunk).min(rows);
        progress.set_position(done * 92 / rows.max(1));
    }
    conn.execute_batch("CREATE INDEX k_1 ON sbtest(k)")?;
    progress.set_position(100);
    Ok(())
}

impl Workload for OltpReadOnly {
    fn name(&self) -> &'static str {
        "oltp-read-only"
    }

    fn describe(&self) -> String {
        format!("sysbench oltp_read_only, {} rows, {} keys", self.rows, self.dist.name())
    }

    fn unit(&self) -> (&'static str, Rate) {
        ("tps", Rate::PerSecond)
    }

    fn tag(&self) -> String {
        format!("sbtest rows={}", self.rows)
    }

    fn file_name(&self) -> String {
        format!("sbtest-{}.db", self.rows)
    }

    fn writes(&self) -> bool {
        false
    }

    fn build(&self, conn: &mut Connection, progress: &ProgressBar) -> rusqlite::Result<()> {
        build_sbtest(conn, self.rows, progress)
    }

    fn prewarm(&self) -> Vec<String> {
        vec![
            "SELECT sum(length(c)) FROM sbtest".into(),
            "SELECT count(*) FROM sbtest INDEXED BY k_1 WHERE k > 0".into(),
        ]
    }

    fn kinds(&self) -> Vec<&'static str> {
        vec!["read-only"]
    }

    fn run_one(&self, conn: &Connection, rng: &mut SmallRng, tally: &mut Tally) {
        let keys = &self.keys;
        let done = transaction(conn, "BEGIN", tally, |conn| {
            let mut point = conn.prepare_cached("SELECT c FROM sbtest WHERE id = ?1")?;
            for _ in 0..POINT_SELECTS {
                let id = keys.next(rng) as i64;
                let mut rows = point.query([id])?;
                while let Some(r) = rows.next()? {
                    let _: rusqlite::types::ValueRef<'_> = r.get_ref(0)?;
                }
            }
            let ranges = [
                "SELECT c FROM sbtest WHERE id BETWEEN ?1 AND ?2",
                "SELECT SUM(k) FROM sbtest WHERE id BETWEEN ?1 AND ?2",
                "SELECT c FROM sbtest WHERE id BETWEEN ?1 AND ?2 ORDER BY c",
                "SELECT DISTINCT c FROM sbtest WHERE id BETWEEN ?1 AND ?2 ORDER BY c",
            ];
            for sql in ranges {
                let start = keys.next(rng) as i64;
                let mut stmt = conn.prepare_cached(sql)?;
                let mut rows = stmt.query([start, start + RANGE_SIZE - 1])?;
                while let Some(r) = rows.next()? {
                    let _: rusqlite::types::ValueRef<'_> = r.get_ref(0)?;
                }
            }
            Ok(true)
        });
        if done.is_some() {
            tally.per_kind.resize(1, 0);
            tally.per_kind[0] += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn distributions_stay_in_range_and_skew() {
        let mut rng = SmallRng::seed_from_u64(1);
        for dist in [Dist::Uniform, Dist::Pareto(0.2), Dist::Zipf(0.99)] {
            let g = KeyGen::new(&dist, 1000);
            let mut low = 0;
            for _ in 0..10_000 {
                let k = g.next(&mut rng);
                assert!((1..=1000).contains(&k), "{dist:?} {k}");
                low += (k <= 200) as u32;
            }
            match dist {
                Dist::Uniform => assert!((1500..2500).contains(&low), "{low}"),
                _ => assert!(low > 6000, "{dist:?}: {low} of 10000 in the lowest 20%"),
            }
        }
        assert_eq!(Dist::parse("pareto").unwrap(), Dist::Pareto(0.2));
        assert_eq!(Dist::parse("zipf:0.8").unwrap(), Dist::Zipf(0.8));
        assert!(Dist::parse("gaussian").is_err());
    }

    #[test]
    fn sysbench_strings() {
        let mut rng = SmallRng::seed_from_u64(1);
        let mut s = String::new();
        digits(&mut rng, 10, &mut s);
        assert_eq!(s.len(), 119);
        digits(&mut rng, 5, &mut s);
        assert_eq!(s.len(), 59);
    }
}
