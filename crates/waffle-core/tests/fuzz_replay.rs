//! The fuzz targets' bodies on stable Rust, so CI exercises them without
//! nightly or libFuzzer: each target runs over its saved inputs
//! (`fuzz/regressions/<target>/`, named, and `fuzz/corpus/<target>/`,
//! minimized by `scripts/fuzz`), then over a few thousand seeded random
//! inputs and mutations of them.
//!
//! The bodies are `fuzz/src/lib.rs` itself (included by path), so a property
//! checked under the fuzzer is checked here too. A fuzz crash found later is
//! fixed, and its input goes to `fuzz/regressions/<target>/` under a name that
//! says what it was: this test replays it forever.

#[path = "../../../fuzz/src/lib.rs"]
#[allow(dead_code)]
mod bodies;

use std::path::PathBuf;

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

/// Random inputs per target (on top of the corpus).
const RANDOM_INPUTS: usize = 3000;

/// The inputs saved for `target`: `fuzz/regressions/<target>/` (named: hand
/// written seeds and every input that once failed; `cargo fuzz cmin` never
/// touches them) and `fuzz/corpus/<target>/` (what libFuzzer kept, minimized).
fn corpus(target: &str) -> Vec<(PathBuf, Vec<u8>)> {
    let fuzz = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fuzz");
    let mut all = Vec::new();
    for dir in [fuzz.join("regressions").join(target), fuzz.join("corpus").join(target)] {
        let entries = std::fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("{} is missing ({e}); it is part of the repository", dir.display()));
        let mut files: Vec<PathBuf> = entries.map(|e| e.unwrap().path()).filter(|p| p.is_file()).collect();
        files.sort();
        assert!(!files.is_empty(), "{} is empty", dir.display());
        all.extend(files.into_iter().map(|p| (p.clone(), std::fs::read(&p).unwrap())));
    }
    all
}

/// Random bytes, biased toward the alphabet of the inputs (digits, reply
/// codes, CR LF, the envelope magic) so that they get past the first checks.
fn random_input(rng: &mut SmallRng, corpus: &[(PathBuf, Vec<u8>)]) -> Vec<u8> {
    const ALPHABET: &[u8] = b"VAENHDMNSFEXO0123456789 \r\n\r\nkqvT-_WAFL:,.[]";
    match rng.gen_range(0..4) {
        0 => {
            let len = rng.gen_range(0..300);
            (0..len).map(|_| rng.gen()).collect()
        }
        1 => {
            let len = rng.gen_range(0..200);
            (0..len).map(|_| ALPHABET[rng.gen_range(0..ALPHABET.len())]).collect()
        }
        _ => {
            // A corpus input, mutated: byte flips, an insertion, a cut, a splice.
            let mut v = corpus[rng.gen_range(0..corpus.len())].1.clone();
            for _ in 0..rng.gen_range(1..4) {
                match rng.gen_range(0..4) {
                    0 if !v.is_empty() => {
                        let i = rng.gen_range(0..v.len());
                        v[i] ^= 1 << rng.gen_range(0..8);
                    }
                    1 => {
                        let i = rng.gen_range(0..=v.len());
                        v.insert(i, ALPHABET[rng.gen_range(0..ALPHABET.len())]);
                    }
                    2 if !v.is_empty() => {
                        let cut = rng.gen_range(0..v.len());
                        v.truncate(cut);
                    }
                    _ => {
                        let other = &corpus[rng.gen_range(0..corpus.len())].1;
                        let from = rng.gen_range(0..=other.len());
                        v.extend_from_slice(&other[from..]);
                    }
                }
            }
            v
        }
    }
}

fn replay(target: &str) {
    let (_, body) = bodies::TARGETS.iter().find(|(name, _)| *name == target).expect("a known target");
    let corpus = corpus(target);
    for (path, input) in &corpus {
        let run = std::panic::catch_unwind(|| body(input));
        assert!(run.is_ok(), "{target}: the corpus input {} fails (bytes: {input:?})", path.display());
    }
    let mut rng = SmallRng::seed_from_u64(0xF022_0000 ^ target.len() as u64);
    for i in 0..RANDOM_INPUTS {
        let input = random_input(&mut rng, &corpus);
        let run = std::panic::catch_unwind(|| body(&input));
        assert!(run.is_ok(), "{target}: random input {i} fails (bytes: {input:?})");
    }
    eprintln!("{target}: {} corpus inputs and {RANDOM_INPUTS} random inputs passed", corpus.len());
}

#[test]
fn parse_reply() {
    replay("parse_reply");
}

#[test]
fn envelope_open() {
    replay("envelope_open");
}

#[test]
fn envelope_roundtrip() {
    replay("envelope_roundtrip");
}

#[test]
fn envelope_sealed() {
    replay("envelope_sealed");
}

#[test]
fn config() {
    replay("config");
}

#[test]
fn every_fuzz_target_has_a_replay_test() {
    let names: Vec<&str> = bodies::TARGETS.iter().map(|(name, _)| *name).collect();
    assert_eq!(names, ["parse_reply", "envelope_open", "envelope_roundtrip", "envelope_sealed", "config"]);
    let manifest =
        std::fs::read_to_string(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/Cargo.toml")).unwrap();
    for name in names {
        assert!(manifest.contains(&format!("name = \"{name}\"")), "fuzz/Cargo.toml has no target {name}");
    }
}
