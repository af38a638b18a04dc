//! Integration tests: the real `farm` binary and the library's stores.

mod cli;
mod common;
mod contract;
mod death;
mod hold;
mod race;
mod reap;
mod run;
mod stop;
