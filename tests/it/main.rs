//! Integration tests: the real `farm` binary and the library's stores.

mod cli;
mod common;
mod race;
