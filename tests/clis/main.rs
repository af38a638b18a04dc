//! farm against the real agent CLIs: each CLI installed from its registry
//! into a cache directory, pointed at a scripted model server on loopback
//! (`model_server.py`), and driven by `farm run`. A task's description
//! carries what the "model" does (see the server's docstring).
//!
//! Its own test binary, behind the `real-clis` feature, so that `cargo
//! test` stays fast: `cargo test --locked --features real-clis --test clis`
//! (CI runs it). Without the registry the tests skip, saying so — unless
//! `FARM_REQUIRE_CLIS=1` (CI), where that is a failure.

mod claude;
mod codex;
#[path = "../it/common.rs"]
#[allow(dead_code)]
mod common;
mod gemini;
mod kit;
mod opencode;
mod qwen;
