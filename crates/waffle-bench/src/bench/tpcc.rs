//! `tpcc`: a TPC-C-like mix on the TPC-C schema, reported as New-Order
//! transactions per minute (NOTPM), as DBT2 does.
//!
//! Nine tables as in the specification (composite keys as WITHOUT ROWID tables,
//! clustered like InnoDB's), loaded per clause 4.3 with two scale-down knobs
//! so small sizes load in seconds: items (spec 100000) and customers per
//! district (spec 3000; orders per district follow it, the last 30% undelivered).
//! The mix: New-Order 45%, Payment 43%, Order-Status 4%, Delivery 4%,
//! Stock-Level 4%; no keying or think time (as the seeds' DBT2 runs); each
//! transaction picks its warehouse at random. 1% of New-Orders roll back on an
//! unknown item, as specified. SQLite has one writer: write transactions begin
//! IMMEDIATE and wait in short sleeps (`set_busy_handler`); a transaction that
//! still finds the database busy is retried and counted in `retries`. By
//! default the write transactions of this process first queue on one mutex
//! (the writer gate), so the 15 threads waiting for SQLite's single write lock
//! sleep in the kernel until it is free instead of waking every few hundred
//! microseconds to retry (on 2 cores those wake-ups starve memcached and the
//! writer itself); `--no-writer-gate` leaves the waiting to SQLite.

use indicatif::ProgressBar;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use rusqlite::types::Value;
use rusqlite::{params, params_from_iter, Connection, OptionalExtension};

use super::workload::{set_busy_handler, transaction, Rate, Tally, Workload};

pub const DISTRICTS: i64 = 10;
pub const SPEC_ITEMS: u64 = 100_000;
pub const SPEC_CUSTOMERS: u64 = 3_000;

/// NURand's run-time constants (clause 2.1.6); C_LAST differs from the load's by 66 (clause 2.1.6.1).
const C_LAST_LOAD: u64 = 157;
const C_LAST_RUN: u64 = 223;
const C_ID: u64 = 259;
const C_ITEM: u64 = 7911;

const SYLLABLES: [&str; 10] = ["BAR", "OUGHT", "ABLE", "PRI", "PRES", "ESE", "ANTI", "CALLY", "ATION", "EING"];

#[derive(Debug)]
pub struct Tpcc {
    pub warehouses: u64,
    pub items: u64,
    pub customers: u64,
    a_cid: u64,
    a_item: u64,
    a_last: u64,
    last_names: u64,
    /// Write transactions queue on `gate` before BEGIN IMMEDIATE.
    pub writer_gate: bool,
    gate: std::sync::Mutex<()>,
}

/// NURand's A for a table of `n` rows where the specification has `spec_a` for `spec_n`:
/// scaled in proportion, rounded up to 2^k - 1 (the specification's own values come out unchanged).
fn scaled_a(spec_a: u64, n: u64, spec_n: u64) -> u64 {
    (((spec_a + 1) * n / spec_n).max(2)).next_power_of_two() - 1
}

impl Tpcc {
    pub fn new(warehouses: u64, items: u64, customers: u64) -> Tpcc {
        let warehouses = warehouses.max(1);
        let items = items.max(100);
        let customers = customers.max(30);
        let last_names = customers.min(1000);
        Tpcc {
            warehouses,
            items,
            customers,
            // Spec: A=1023 for 3000 customers, 8191 for 100000 items, 255 for 1000 names.
            a_cid: scaled_a(1023, customers, SPEC_CUSTOMERS),
            a_item: scaled_a(8191, items, SPEC_ITEMS),
            a_last: scaled_a(255, last_names, 1000),
            last_names,
            writer_gate: true,
            gate: std::sync::Mutex::new(()),
        }
    }

    fn nurand(rng: &mut SmallRng, a: u64, x: u64, y: u64, c: u64) -> u64 {
        (((rng.gen_range(0..=a) | rng.gen_range(x..=y)) + c) % (y - x + 1)) + x
    }

    fn random_customer(&self, rng: &mut SmallRng) -> i64 {
        Self::nurand(rng, self.a_cid, 1, self.customers, C_ID) as i64
    }

    fn random_item(&self, rng: &mut SmallRng) -> i64 {
        Self::nurand(rng, self.a_item, 1, self.items, C_ITEM) as i64
    }

    fn random_last(&self, rng: &mut SmallRng) -> String {
        last_name(Self::nurand(rng, self.a_last, 0, self.last_names - 1, C_LAST_RUN))
    }

    /// The writer gate, held for one write transaction (None when off).
    fn writer(&self) -> Option<std::sync::MutexGuard<'_, ()>> {
        self.writer_gate.then(|| self.gate.lock().unwrap_or_else(|p| p.into_inner()))
    }

    fn other_warehouse(&self, rng: &mut SmallRng, w: i64) -> i64 {
        if self.warehouses == 1 {
            return w;
        }
        loop {
            let o = rng.gen_range(1..=self.warehouses) as i64;
            if o != w {
                return o;
            }
        }
    }
}

fn last_name(n: u64) -> String {
    let n = n % 1000;
    format!("{}{}{}", SYLLABLES[(n / 100) as usize], SYLLABLES[(n / 10 % 10) as usize], SYLLABLES[(n % 10) as usize])
}

fn astring(rng: &mut SmallRng, min: usize, max: usize) -> String {
    const CHARS: &[u8] = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
    let len = rng.gen_range(min..=max);
    (0..len).map(|_| CHARS[rng.gen_range(0..CHARS.len())] as char).collect()
}

/// A warehouse's or a district's name, address (street 1 and 2, city, state, zip) and tax rate.
fn place(rng: &mut SmallRng) -> [Value; 7] {
    let mut text = |min, max| Value::Text(astring(rng, min, max));
    let (name, street_1, street_2, city, state) = (text(6, 10), text(10, 20), text(10, 20), text(10, 20), text(2, 2));
    let zip = Value::Text(zip(rng));
    [name, street_1, street_2, city, state, zip, Value::Real(rng.gen_range(0..=2000) as f64 / 10_000.0)]
}

fn zip(rng: &mut SmallRng) -> String {
    format!("{}11111", nstring(rng, 4))
}

fn nstring(rng: &mut SmallRng, len: usize) -> String {
    (0..len).map(|_| char::from(b'0' + rng.gen_range(0..10u8))).collect()
}

/// i_data / s_data: 26..50 characters, 10% containing "ORIGINAL".
fn data_string(rng: &mut SmallRng) -> String {
    let mut s = astring(rng, 26, 50);
    if rng.gen_ratio(1, 10) {
        let at = rng.gen_range(0..=s.len() - 8);
        s.replace_range(at..at + 8, "ORIGINAL");
    }
    s
}

fn now_s() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs() as i64).unwrap_or(0)
}

const SCHEMA: &str = "
CREATE TABLE warehouse(w_id INTEGER PRIMARY KEY, w_name TEXT, w_street_1 TEXT, w_street_2 TEXT, w_city TEXT,
  w_state TEXT, w_zip TEXT, w_tax REAL, w_ytd REAL);
CREATE TABLE district(d_w_id INTEGER, d_id INTEGER, d_name TEXT, d_street_1 TEXT, d_street_2 TEXT, d_city TEXT,
  d_state TEXT, d_zip TEXT, d_tax REAL, d_ytd REAL, d_next_o_id INTEGER, PRIMARY KEY(d_w_id, d_id)) WITHOUT ROWID;
CREATE TABLE customer(c_w_id INTEGER, c_d_id INTEGER, c_id INTEGER, c_first TEXT, c_middle TEXT, c_last TEXT,
  c_street_1 TEXT, c_street_2 TEXT, c_city TEXT, c_state TEXT, c_zip TEXT, c_phone TEXT, c_since INTEGER,
  c_credit TEXT, c_credit_lim REAL, c_discount REAL, c_balance REAL, c_ytd_payment REAL, c_payment_cnt INTEGER,
  c_delivery_cnt INTEGER, c_data TEXT, PRIMARY KEY(c_w_id, c_d_id, c_id)) WITHOUT ROWID;
CREATE TABLE history(h_c_id INTEGER, h_c_d_id INTEGER, h_c_w_id INTEGER, h_d_id INTEGER, h_w_id INTEGER,
  h_date INTEGER, h_amount REAL, h_data TEXT);
CREATE TABLE orders(o_w_id INTEGER, o_d_id INTEGER, o_id INTEGER, o_c_id INTEGER, o_entry_d INTEGER,
  o_carrier_id INTEGER, o_ol_cnt INTEGER, o_all_local INTEGER, PRIMARY KEY(o_w_id, o_d_id, o_id)) WITHOUT ROWID;
CREATE TABLE new_order(no_w_id INTEGER, no_d_id INTEGER, no_o_id INTEGER,
  PRIMARY KEY(no_w_id, no_d_id, no_o_id)) WITHOUT ROWID;
CREATE TABLE order_line(ol_w_id INTEGER, ol_d_id INTEGER, ol_o_id INTEGER, ol_number INTEGER, ol_i_id INTEGER,
  ol_supply_w_id INTEGER, ol_delivery_d INTEGER, ol_quantity INTEGER, ol_amount REAL, ol_dist_info TEXT,
  PRIMARY KEY(ol_w_id, ol_d_id, ol_o_id, ol_number)) WITHOUT ROWID;
CREATE TABLE item(i_id INTEGER PRIMARY KEY, i_im_id INTEGER, i_name TEXT, i_price REAL, i_data TEXT);
CREATE TABLE stock(s_w_id INTEGER, s_i_id INTEGER, s_quantity INTEGER, s_dist_01 TEXT, s_dist_02 TEXT,
  s_dist_03 TEXT, s_dist_04 TEXT, s_dist_05 TEXT, s_dist_06 TEXT, s_dist_07 TEXT, s_dist_08 TEXT, s_dist_09 TEXT,
  s_dist_10 TEXT, s_ytd INTEGER, s_order_cnt INTEGER, s_remote_cnt INTEGER, s_data TEXT,
  PRIMARY KEY(s_w_id, s_i_id)) WITHOUT ROWID;
";

const INDEXES: &str = "
CREATE INDEX customer_last ON customer(c_w_id, c_d_id, c_last, c_first);
CREATE INDEX orders_customer ON orders(o_w_id, o_d_id, o_c_id, o_id);
";

impl Tpcc {
    fn load_items(&self, conn: &mut Connection, rng: &mut SmallRng) -> rusqlite::Result<()> {
        let tx = conn.transaction()?;
        {
            let mut ins = tx.prepare("INSERT INTO item VALUES (?1, ?2, ?3, ?4, ?5)")?;
            for i in 1..=self.items as i64 {
                let price = rng.gen_range(100..=10_000) as f64 / 100.0;
                ins.execute(params![i, rng.gen_range(1..=10_000), astring(rng, 14, 24), price, data_string(rng)])?;
            }
        }
        tx.commit()
    }

    fn load_warehouse(&self, conn: &mut Connection, rng: &mut SmallRng, w: i64) -> rusqlite::Result<()> {
        let tx = conn.transaction()?;
        let warehouse = [Value::Integer(w)].into_iter().chain(place(rng));
        tx.execute(
            "INSERT INTO warehouse VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, 300000.0)",
            params_from_iter(warehouse),
        )?;
        {
            let mut ins = tx.prepare(
                "INSERT INTO stock VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, 0, 0, 0, ?14)",
            )?;
            for i in 1..=self.items as i64 {
                let d: Vec<String> = (0..10).map(|_| astring(rng, 24, 24)).collect();
                ins.execute(params![
                    w,
                    i,
                    rng.gen_range(10..=100),
                    d[0],
                    d[1],
                    d[2],
                    d[3],
                    d[4],
                    d[5],
                    d[6],
                    d[7],
                    d[8],
                    d[9],
                    data_string(rng)
                ])?;
            }
        }
        let c = self.customers as i64;
        let delivered_below = c * 7 / 10 + 1; // orders 1..=70% are delivered
        let since = now_s();
        for d in 1..=DISTRICTS {
            let district = [Value::Integer(w), Value::Integer(d)].into_iter().chain(place(rng));
            tx.execute(
                "INSERT INTO district VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, 30000.0, ?10)",
                params_from_iter(district.chain([Value::Integer(c + 1)])),
            )?;
            let mut cust = tx.prepare_cached(
                "INSERT INTO customer VALUES (?1, ?2, ?3, ?4, 'OE', ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, 50000.0, ?14, \
                 -10.0, 10.0, 1, 0, ?15)",
            )?;
            let mut hist = tx.prepare_cached("INSERT INTO history VALUES (?1, ?2, ?3, ?2, ?3, ?4, 10.0, ?5)")?;
            for cid in 1..=c {
                let last = if cid <= self.last_names as i64 {
                    last_name((cid - 1) as u64)
                } else {
                    last_name(Self::nurand(rng, self.a_last, 0, self.last_names - 1, C_LAST_LOAD))
                };
                let credit = if rng.gen_ratio(1, 10) { "BC" } else { "GC" };
                cust.execute(params![
                    w,
                    d,
                    cid,
                    astring(rng, 8, 16),
                    last,
                    astring(rng, 10, 20),
                    astring(rng, 10, 20),
                    astring(rng, 10, 20),
                    astring(rng, 2, 2),
                    zip(rng),
                    nstring(rng, 16),
                    since,
                    credit,
                    rng.gen_range(0..=5000) as f64 / 10_000.0,
                    astring(rng, 300, 500)
                ])?;
                hist.execute(params![cid, d, w, since, astring(rng, 12, 24)])?;
            }
            // Orders: customers in a random permutation.
            let mut perm: Vec<i64> = (1..=c).collect();
            for i in (1..perm.len()).rev() {
                perm.swap(i, rng.gen_range(0..=i));
            }
            let mut ord = tx.prepare_cached("INSERT INTO orders VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, 1)")?;
            let mut line =
                tx.prepare_cached("INSERT INTO order_line VALUES (?1, ?2, ?3, ?4, ?5, ?1, ?6, 5, ?7, ?8)")?;
            let mut new = tx.prepare_cached("INSERT INTO new_order VALUES (?1, ?2, ?3)")?;
            for o in 1..=c {
                let delivered = o < delivered_below;
                let ol_cnt = rng.gen_range(5..=15);
                let carrier = delivered.then(|| rng.gen_range(1..=10));
                ord.execute(params![w, d, o, perm[(o - 1) as usize], since, carrier, ol_cnt])?;
                for n in 1..=ol_cnt {
                    let amount = if delivered { 0.0 } else { rng.gen_range(1..=999_999) as f64 / 100.0 };
                    line.execute(params![
                        w,
                        d,
                        o,
                        n,
                        rng.gen_range(1..=self.items as i64),
                        delivered.then_some(since),
                        amount,
                        astring(rng, 24, 24)
                    ])?;
                }
                if !delivered {
                    new.execute(params![w, d, o])?;
                }
            }
        }
        tx.commit()
    }
}

impl Workload for Tpcc {
    fn name(&self) -> &'static str {
        "tpcc"
    }

    fn describe(&self) -> String {
        format!(
            "TPC-C-like, {} warehouses, {} items, {} customers per district{}{}",
            self.warehouses,
            self.items,
            self.customers,
            if self.items == SPEC_ITEMS && self.customers == SPEC_CUSTOMERS { "" } else { " (scaled down)" },
            if self.writer_gate { "; writers queue on a mutex" } else { "; writers wait in SQLite's busy handler" }
        )
    }

    fn unit(&self) -> (&'static str, Rate) {
        ("NOTPM", Rate::CountedPerMinute)
    }

    fn tag(&self) -> String {
        format!("tpcc w={} items={} customers={} v1", self.warehouses, self.items, self.customers)
    }

    fn file_name(&self) -> String {
        format!("tpcc-{}w-{}i-{}c.db", self.warehouses, self.items, self.customers)
    }

    fn writes(&self) -> bool {
        true
    }

    fn build(&self, conn: &mut Connection, progress: &ProgressBar) -> rusqlite::Result<()> {
        conn.execute_batch(SCHEMA)?;
        let mut rng = SmallRng::seed_from_u64(2009);
        let steps = self.warehouses + 2;
        self.load_items(conn, &mut rng)?;
        progress.set_position(100 / steps);
        for w in 1..=self.warehouses {
            self.load_warehouse(conn, &mut rng, w as i64)?;
            progress.set_position((w + 1) * 100 / steps);
        }
        conn.execute_batch(INDEXES)?;
        conn.execute_batch("ANALYZE")?;
        progress.set_position(100);
        Ok(())
    }

    fn prewarm(&self) -> Vec<String> {
        [
            "SELECT sum(length(s_data)) FROM stock",
            "SELECT sum(length(c_data)) FROM customer",
            "SELECT count(*) FROM customer INDEXED BY customer_last WHERE c_w_id > 0",
            "SELECT sum(ol_amount) FROM order_line",
            "SELECT sum(o_ol_cnt) FROM orders",
            "SELECT count(*) FROM orders INDEXED BY orders_customer WHERE o_w_id > 0",
            "SELECT count(*) FROM new_order",
            "SELECT sum(i_price) FROM item",
            "SELECT sum(h_amount) FROM history",
            "SELECT sum(d_ytd) FROM district",
            "SELECT sum(w_ytd) FROM warehouse",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect()
    }

    fn kinds(&self) -> Vec<&'static str> {
        vec!["new-order", "payment", "order-status", "delivery", "stock-level"]
    }

    fn prepare(&self, conn: &Connection) -> rusqlite::Result<()> {
        let _: String = conn.query_row("PRAGMA journal_mode=WAL", [], |r| r.get(0))?;
        conn.pragma_update(None, "synchronous", "NORMAL")?;
        conn.set_prepared_statement_cache_capacity(64);
        set_busy_handler(conn)
    }

    fn run_one(&self, conn: &Connection, rng: &mut SmallRng, tally: &mut Tally) {
        let r = rng.gen_range(0..100);
        let w = rng.gen_range(1..=self.warehouses) as i64;
        let (kind, result) = match r {
            0..=44 => (0, self.new_order(conn, rng, tally, w)),
            45..=87 => (1, self.payment(conn, rng, tally, w)),
            88..=91 => (2, self.order_status(conn, rng, tally, w)),
            92..=95 => (3, self.delivery(conn, rng, tally, w)),
            _ => (4, self.stock_level(conn, rng, tally, w)),
        };
        if let Some(committed) = result {
            tally.per_kind.resize(5, 0);
            tally.per_kind[kind] += 1;
            if kind == 0 && committed {
                tally.counted += 1;
            }
        }
    }
}

/// A customer chosen by id (40%) or by last name (60%, the middle one by first name).
fn pick_customer(t: &Tpcc, conn: &Connection, rng: &mut SmallRng, w: i64, d: i64) -> rusqlite::Result<i64> {
    if rng.gen_range(0..100) < 60 {
        let last = t.random_last(rng);
        let mut stmt = conn.prepare_cached(
            "SELECT c_id FROM customer WHERE c_w_id = ?1 AND c_d_id = ?2 AND c_last = ?3 ORDER BY c_first",
        )?;
        let ids: Vec<i64> = stmt.query_map(params![w, d, last], |r| r.get(0))?.collect::<Result<_, _>>()?;
        if !ids.is_empty() {
            return Ok(ids[(ids.len() - 1) / 2]);
        }
    }
    Ok(t.random_customer(rng))
}

impl Tpcc {
    fn new_order(&self, conn: &Connection, rng: &mut SmallRng, tally: &mut Tally, w: i64) -> Option<bool> {
        let d = rng.gen_range(1..=DISTRICTS);
        let c = self.random_customer(rng);
        let ol_cnt = rng.gen_range(5..=15);
        let rollback = rng.gen_range(0..100) == 0;
        let lines: Vec<(i64, i64, i64)> = (0..ol_cnt)
            .map(|n| {
                let item = if rollback && n == ol_cnt - 1 { self.items as i64 + 1 } else { self.random_item(rng) };
                let supply = if rng.gen_range(0..100) == 0 { self.other_warehouse(rng, w) } else { w };
                (item, supply, rng.gen_range(1..=10))
            })
            .collect();
        let all_local = lines.iter().all(|l| l.1 == w) as i64;
        let _gate = self.writer();
        transaction(conn, "BEGIN IMMEDIATE", tally, |conn| {
            let w_tax: f64 =
                conn.prepare_cached("SELECT w_tax FROM warehouse WHERE w_id = ?1")?.query_row([w], |r| r.get(0))?;
            let (d_tax, o_id): (f64, i64) = conn
                .prepare_cached("SELECT d_tax, d_next_o_id FROM district WHERE d_w_id = ?1 AND d_id = ?2")?
                .query_row([w, d], |r| Ok((r.get(0)?, r.get(1)?)))?;
            conn.prepare_cached("UPDATE district SET d_next_o_id = d_next_o_id + 1 WHERE d_w_id = ?1 AND d_id = ?2")?
                .execute([w, d])?;
            let (discount, _last, _credit): (f64, String, String) = conn
                .prepare_cached(
                    "SELECT c_discount, c_last, c_credit FROM customer WHERE c_w_id = ?1 AND c_d_id = ?2 AND c_id = ?3",
                )?
                .query_row([w, d, c], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?;
            conn.prepare_cached("INSERT INTO orders VALUES (?1, ?2, ?3, ?4, ?5, NULL, ?6, ?7)")?.execute(params![
                w,
                d,
                o_id,
                c,
                now_s(),
                ol_cnt,
                all_local
            ])?;
            conn.prepare_cached("INSERT INTO new_order VALUES (?1, ?2, ?3)")?.execute([w, d, o_id])?;
            let mut total = 0.0;
            for (n, &(item, supply, qty)) in lines.iter().enumerate() {
                let found = conn
                    .prepare_cached("SELECT i_price, i_name, i_data FROM item WHERE i_id = ?1")?
                    .query_row([item], |r| Ok((r.get::<_, f64>(0)?, r.get::<_, String>(1)?, r.get::<_, String>(2)?)))
                    .optional()?;
                let Some((price, _name, _data)) = found else {
                    return Ok(false); // the specified 1%: unknown item, roll back
                };
                let dist_col = format!("s_dist_{:02}", d);
                let (s_qty, dist_info, _s_data): (i64, String, String) = conn
                    .prepare_cached(&format!(
                        "SELECT s_quantity, {dist_col}, s_data FROM stock WHERE s_w_id = ?1 AND s_i_id = ?2"
                    ))?
                    .query_row([supply, item], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?;
                let new_qty = if s_qty >= qty + 10 { s_qty - qty } else { s_qty - qty + 91 };
                conn.prepare_cached(
                    "UPDATE stock SET s_quantity = ?1, s_ytd = s_ytd + ?2, s_order_cnt = s_order_cnt + 1, \
                     s_remote_cnt = s_remote_cnt + ?3 WHERE s_w_id = ?4 AND s_i_id = ?5",
                )?
                .execute(params![new_qty, qty, (supply != w) as i64, supply, item])?;
                let amount = qty as f64 * price;
                total += amount;
                conn.prepare_cached("INSERT INTO order_line VALUES (?1, ?2, ?3, ?4, ?5, ?6, NULL, ?7, ?8, ?9)")?
                    .execute(params![w, d, o_id, n as i64 + 1, item, supply, qty, amount, dist_info])?;
            }
            let _total = total * (1.0 - discount) * (1.0 + w_tax + d_tax);
            Ok(true)
        })
    }

    fn payment(&self, conn: &Connection, rng: &mut SmallRng, tally: &mut Tally, w: i64) -> Option<bool> {
        let d = rng.gen_range(1..=DISTRICTS);
        let (c_w, c_d) = if rng.gen_range(0..100) < 85 {
            (w, d)
        } else {
            (self.other_warehouse(rng, w), rng.gen_range(1..=DISTRICTS))
        };
        let amount = rng.gen_range(100..=500_000) as f64 / 100.0;
        let h_data = astring(rng, 12, 24);
        let _gate = self.writer();
        transaction(conn, "BEGIN IMMEDIATE", tally, |conn| {
            conn.prepare_cached("UPDATE warehouse SET w_ytd = w_ytd + ?1 WHERE w_id = ?2")?
                .execute(params![amount, w])?;
            let w_name: String = conn
                .prepare_cached(
                    "SELECT w_name, w_street_1, w_street_2, w_city, w_state, w_zip FROM warehouse WHERE w_id = ?1",
                )?
                .query_row([w], |r| r.get(0))?;
            conn.prepare_cached("UPDATE district SET d_ytd = d_ytd + ?1 WHERE d_w_id = ?2 AND d_id = ?3")?
                .execute(params![amount, w, d])?;
            let d_name: String = conn
                .prepare_cached(
                    "SELECT d_name, d_street_1, d_street_2, d_city, d_state, d_zip FROM district WHERE d_w_id = ?1 AND d_id = ?2",
                )?
                .query_row([w, d], |r| r.get(0))?;
            let c = pick_customer(self, conn, rng, c_w, c_d)?;
            let credit: String = conn
                .prepare_cached(
                    "SELECT c_first, c_middle, c_last, c_street_1, c_street_2, c_city, c_state, c_zip, c_phone, \
                     c_since, c_credit, c_credit_lim, c_discount, c_balance FROM customer \
                     WHERE c_w_id = ?1 AND c_d_id = ?2 AND c_id = ?3",
                )?
                .query_row([c_w, c_d, c], |r| r.get(10))?;
            conn.prepare_cached(
                "UPDATE customer SET c_balance = c_balance - ?1, c_ytd_payment = c_ytd_payment + ?1, \
                 c_payment_cnt = c_payment_cnt + 1 WHERE c_w_id = ?2 AND c_d_id = ?3 AND c_id = ?4",
            )?
            .execute(params![amount, c_w, c_d, c])?;
            if credit == "BC" {
                let note = format!("{c} {c_d} {c_w} {d} {w} {amount:.2} |");
                conn.prepare_cached(
                    "UPDATE customer SET c_data = substr(?1 || c_data, 1, 500) WHERE c_w_id = ?2 AND c_d_id = ?3 AND c_id = ?4",
                )?
                .execute(params![note, c_w, c_d, c])?;
            }
            conn.prepare_cached("INSERT INTO history VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)")?.execute(params![
                c,
                c_d,
                c_w,
                d,
                w,
                now_s(),
                amount,
                format!("{w_name}    {d_name} {h_data}")
            ])?;
            Ok(true)
        })
    }

    fn order_status(&self, conn: &Connection, rng: &mut SmallRng, tally: &mut Tally, w: i64) -> Option<bool> {
        let d = rng.gen_range(1..=DISTRICTS);
        transaction(conn, "BEGIN", tally, |conn| {
            let c = pick_customer(self, conn, rng, w, d)?;
            let _balance: f64 = conn
                .prepare_cached(
                    "SELECT c_balance, c_first, c_middle, c_last FROM customer WHERE c_w_id = ?1 AND c_d_id = ?2 AND c_id = ?3",
                )?
                .query_row([w, d, c], |r| r.get(0))?;
            let order: Option<i64> = conn
                .prepare_cached(
                    "SELECT o_id, o_entry_d, o_carrier_id FROM orders WHERE o_w_id = ?1 AND o_d_id = ?2 AND o_c_id = ?3 \
                     ORDER BY o_id DESC LIMIT 1",
                )?
                .query_row([w, d, c], |r| r.get(0))
                .optional()?;
            if let Some(o) = order {
                let mut stmt = conn.prepare_cached(
                    "SELECT ol_i_id, ol_supply_w_id, ol_quantity, ol_amount, ol_delivery_d FROM order_line \
                     WHERE ol_w_id = ?1 AND ol_d_id = ?2 AND ol_o_id = ?3",
                )?;
                let mut rows = stmt.query([w, d, o])?;
                while rows.next()?.is_some() {}
            }
            Ok(true)
        })
    }

    fn delivery(&self, conn: &Connection, rng: &mut SmallRng, tally: &mut Tally, w: i64) -> Option<bool> {
        let carrier = rng.gen_range(1..=10);
        let _gate = self.writer();
        transaction(conn, "BEGIN IMMEDIATE", tally, |conn| {
            let now = now_s();
            for d in 1..=DISTRICTS {
                let o: Option<i64> = conn
                    .prepare_cached(
                        "SELECT no_o_id FROM new_order WHERE no_w_id = ?1 AND no_d_id = ?2 ORDER BY no_o_id LIMIT 1",
                    )?
                    .query_row([w, d], |r| r.get(0))
                    .optional()?;
                let Some(o) = o else { continue };
                conn.prepare_cached("DELETE FROM new_order WHERE no_w_id = ?1 AND no_d_id = ?2 AND no_o_id = ?3")?
                    .execute([w, d, o])?;
                let c: i64 = conn
                    .prepare_cached("SELECT o_c_id FROM orders WHERE o_w_id = ?1 AND o_d_id = ?2 AND o_id = ?3")?
                    .query_row([w, d, o], |r| r.get(0))?;
                conn.prepare_cached(
                    "UPDATE orders SET o_carrier_id = ?1 WHERE o_w_id = ?2 AND o_d_id = ?3 AND o_id = ?4",
                )?
                .execute([carrier, w, d, o])?;
                conn.prepare_cached(
                    "UPDATE order_line SET ol_delivery_d = ?1 WHERE ol_w_id = ?2 AND ol_d_id = ?3 AND ol_o_id = ?4",
                )?
                .execute([now, w, d, o])?;
                let total: f64 = conn
                    .prepare_cached(
                        "SELECT coalesce(sum(ol_amount), 0) FROM order_line WHERE ol_w_id = ?1 AND ol_d_id = ?2 AND ol_o_id = ?3",
                    )?
                    .query_row([w, d, o], |r| r.get(0))?;
                conn.prepare_cached(
                    "UPDATE customer SET c_balance = c_balance + ?1, c_delivery_cnt = c_delivery_cnt + 1 \
                     WHERE c_w_id = ?2 AND c_d_id = ?3 AND c_id = ?4",
                )?
                .execute(params![total, w, d, c])?;
            }
            Ok(true)
        })
    }

    fn stock_level(&self, conn: &Connection, rng: &mut SmallRng, tally: &mut Tally, w: i64) -> Option<bool> {
        let d = rng.gen_range(1..=DISTRICTS);
        let threshold = rng.gen_range(10..=20);
        transaction(conn, "BEGIN", tally, |conn| {
            let next: i64 = conn
                .prepare_cached("SELECT d_next_o_id FROM district WHERE d_w_id = ?1 AND d_id = ?2")?
                .query_row([w, d], |r| r.get(0))?;
            let _low: i64 = conn
                .prepare_cached(
                    "SELECT count(DISTINCT s_i_id) FROM order_line, stock WHERE ol_w_id = ?1 AND ol_d_id = ?2 \
                     AND ol_o_id >= ?3 AND ol_o_id < ?4 AND s_w_id = ?1 AND s_i_id = ol_i_id AND s_quantity < ?5",
                )?
                .query_row([w, d, next - 20, next, threshold], |r| r.get(0))?;
            Ok(true)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nurand_in_range_and_names() {
        let t = Tpcc::new(1, 1000, 60);
        let mut rng = SmallRng::seed_from_u64(3);
        for _ in 0..10_000 {
            assert!((1..=60).contains(&t.random_customer(&mut rng)));
            assert!((1..=1000).contains(&t.random_item(&mut rng)));
        }
        assert_eq!(last_name(371), "PRICALLYOUGHT");
        assert_eq!(scaled_a(1023, 300, SPEC_CUSTOMERS), 127);
        assert_eq!(Tpcc::new(1, SPEC_ITEMS, SPEC_CUSTOMERS).a_cid, 1023);
        assert_eq!(Tpcc::new(1, SPEC_ITEMS, SPEC_CUSTOMERS).a_item, 8191);
        assert_eq!(Tpcc::new(1, SPEC_ITEMS, SPEC_CUSTOMERS).a_last, 255);
    }
}
