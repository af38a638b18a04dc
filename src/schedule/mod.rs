//! Schedules: recurring and one-shot work whose firings become ordinary
//! tasks on the board (`schedules/<id>.toml` on the hub's branch).

pub mod file;
pub mod fire;
pub mod when;

use jiff::Timestamp;

/// The variable that sets [`now`] for tests: an RFC 3339 time. It is a test
/// clock only, for farm's own tests of schedules; nothing else reads it.
pub const TEST_NOW: &str = "FARM_TEST_NOW";

/// The time schedules are judged at: the clock, or [`TEST_NOW`] when set.
pub fn now() -> Result<Timestamp, String> {
    match std::env::var(TEST_NOW) {
        Ok(text) => text
            .parse()
            .map_err(|e| format!("{TEST_NOW} `{text}` is not an RFC 3339 time: {e}")),
        Err(_) => Ok(Timestamp::now()),
    }
}
