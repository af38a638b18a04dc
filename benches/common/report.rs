//! How the benches end and what they print around their figures (each
//! bench is its own crate, so they include this file with `#[path]`).

#![allow(dead_code)]

use std::process::ExitCode;

/// The 1, 5 and 15 minute load averages: other work on the machine skews
/// every figure, so each bench prints them at its start and end.
pub fn load() -> String {
    std::fs::read_to_string("/proc/loadavg").map_or_else(
        |_| "unknown".to_owned(),
        |s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "),
    )
}

pub fn verdict(met: bool) -> &'static str {
    if met { "meets" } else { "MISSES" }
}

/// The bench's exit: a failure (of correctness, never of a timing) is
/// printed so that it cannot be missed at the end of a long log.
pub fn finish(result: Result<(), String>) -> ExitCode {
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!();
            eprintln!("!!!!!!!! BENCH FAILED: {e}");
            ExitCode::FAILURE
        }
    }
}

/// A 64-bit LCG (Knuth's MMIX constants): the same "random" data on every
/// machine.
pub struct Lcg(pub u64);

impl Lcg {
    pub fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        self.0 >> 33
    }

    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}
