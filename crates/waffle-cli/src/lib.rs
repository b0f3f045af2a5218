//! The `waffle` command's pieces, usable from tests.
