//! End-to-end tests live in tests/*.rs at this package root (see Cargo.toml [[test]] entries).
