//! `open-config-cases <dir> <closed-port>`: opens every case of `config_cases::cases` (databases
//! and key files in `dir`), each with its URI parameters and environment, and runs the small
//! workload on the opens that work, reporting each case between `=== case <i>` and
//! `=== result <i>: ...` lines on stderr, then `=== done`. `faults_config.rs` runs it with no
//! WAFFLE_* variable in its environment and reads waffle's own stderr lines case by case.

use std::path::Path;

use waffle_testkit::config_cases::{cases, open, work};
use waffle_testkit::db::{n, stats};

fn main() {
    let [dir, port] = waffle_testkit::child_args("open-config-cases", ["dir", "closed-port"]);
    let dir = Path::new(&dir);
    let port: u16 = port.parse().expect("<closed-port> is a port number");
    for (i, case) in cases(dir, port).iter().enumerate() {
        let db = dir.join(format!("case{i}.db"));
        for (k, v) in &case.env {
            std::env::set_var(k, v);
        }
        eprintln!("=== case {i}");
        let result = open(&db, case);
        for (k, _) in &case.env {
            std::env::remove_var(k);
        }
        match result {
            Err(e) => {
                let code = e.sqlite_error_code();
                eprintln!("=== result {i}: refused {code:?}: {e}; file created: {}", db.exists());
            }
            Ok(conn) => match work(&conn) {
                Ok(()) => {
                    let s = stats(&conn);
                    eprintln!(
                        "=== result {i}: opened ok; l2_misses+skipped {}",
                        n(&s, "l2_misses") + n(&s, "l2_skipped") + n(&s, "l2_faults.io") + n(&s, "l2_faults.timeout")
                    );
                }
                Err(e) => eprintln!("=== result {i}: opened but failed: {e}"),
            },
        }
    }
    eprintln!("=== done");
}
