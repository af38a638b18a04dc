//! Integration tests: the real `farm` binary and the library's stores.

mod cli;
mod common;
mod race;
mod death;
mod hold;
mod reap;
mod contract;
