//! `WAFFLE_TABLES`: which tablespaces are cached. A comma-separated list of
//! patterns over tablespace names (`db/table`, `ibdata1`, `undo001`), where
//! `*` matches any run of characters and `?` one character:
//! `WAFFLE_TABLES=sbtest/*,shop/orders`. Unset or empty: every tablespace;
//! `-`: none (benchmarks: a stock server with an EMULATED device).
//!
//! A tablespace not cached is still tracked (its descriptors are known), so
//! that a file open under two names at once is treated one way only.

pub struct Filter {
    patterns: Vec<String>,
}

impl Filter {
    pub fn all() -> Filter {
        Filter { patterns: Vec::new() }
    }

    pub fn parse(spec: &str) -> Filter {
        Filter { patterns: spec.split(',').map(str::trim).filter(|p| !p.is_empty()).map(String::from).collect() }
    }

    pub fn is_all(&self) -> bool {
        self.patterns.is_empty()
    }

    pub fn patterns(&self) -> &[String] {
        &self.patterns
    }

    pub fn matches(&self, name: &str) -> bool {
        self.patterns.is_empty() || self.patterns.iter().any(|p| glob(p.as_bytes(), name.as_bytes()))
    }
}

/// `*` and `?` wildcards; iterative, with one backtrack point (linear in practice).
fn glob(pattern: &[u8], text: &[u8]) -> bool {
    let (mut p, mut t) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while t < text.len() {
        if p < pattern.len() && (pattern[p] == b'?' || pattern[p] == text[t]) {
            p += 1;
            t += 1;
        } else if p < pattern.len() && pattern[p] == b'*' {
            star = Some((p, t));
            p += 1;
        } else if let Some((sp, st)) = star {
            p = sp + 1;
            t = st + 1;
            star = Some((sp, st + 1));
        } else {
            return false;
        }
    }
    pattern[p..].iter().all(|&c| c == b'*')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns() {
        let f = Filter::parse("db1/t1, db2/*,ibdata?");
        assert!(f.matches("db1/t1"));
        assert!(!f.matches("db1/t10"));
        assert!(f.matches("db2/anything"));
        assert!(f.matches("db2/"));
        assert!(!f.matches("db3/x"));
        assert!(f.matches("ibdata1"));
        assert!(!f.matches("undo001"));
        assert!(Filter::parse("").matches("x/y"));
        assert!(Filter::parse(" , ").is_all());
        assert!(Filter::parse("*").matches("undo001"));
        assert!(Filter::parse("s*t*/*1").matches("sbtest/sbtest1"));
        assert!(!Filter::parse("s*t*/*1").matches("sbtest/sbtest2"));
        assert!(!Filter::parse("-").matches("ibdata1") && !Filter::parse("-").matches("db/t"));
    }
}
