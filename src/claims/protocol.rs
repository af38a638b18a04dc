//! The version of the protocol farms speak on a hub, kept beside the claims
//! (`.protocol`): which claims, notices and lines a farm reads and writes
//! there, and how changes land. A farm that finds a newer one stops before it
//! claims anything, rather than go around what it does not know of — a farm
//! without the merge queue would push its changes past the line.
//!
//! Each farm raises the hub's version to its own when it starts, and never
//! lowers it. (Farms older than this file read no version: those cannot be
//! kept out; they land their changes tested but out of turn.)
//!
//! 1. Claims, notices, rescue branches.
//! 2. The merge queue across machines: a line beside the claims, candidates
//!    and their results under `refs/farm/queue/`. Messages beside the claims
//!    (`.msg.*`, read once by each agent), and tasks that wait for an answer
//!    (`asked` in a task's front matter): a farm that knows neither would
//!    leave the one unread and take the other for an invalid task.
//! 3. A change first in the line elsewhere lands the passed changes behind
//!    it with its own, in one push, and says so in their files (`landed`):
//!    a farm that does not read that would build the work of its landed
//!    change on the branch again.
//! 4. A change built again after the red one it was built on left the line
//!    leaves its tests to the change behind it (`defer` in its file), which
//!    judges its own against what the deferred one was built on; one red on
//!    top of such changes says so (`red`), one whose work conflicts with the
//!    change ahead says it waits (`blocked`). A farm that does not read
//!    those would wait for a deferred change's verdict for ever.

use crate::claims::ClaimStore;
use crate::error::Error;

/// This farm's protocol.
pub const PROTOCOL: u32 = 4;

/// The file's name beside the claims (without `.txt`).
pub const NAME: &str = ".protocol";

/// The file's text: the version, and which farm wrote it.
pub fn text(version: u32, by: &str) -> String {
    format!("version = {version}\nby = {by:?}\n")
}

/// The version a file says, if it says one.
pub fn parse(bytes: &[u8]) -> Option<u32> {
    #[derive(serde::Deserialize)]
    struct File {
        version: u32,
    }
    let text = std::str::from_utf8(bytes).ok()?;
    toml::from_str::<File>(text).ok().map(|f| f.version)
}

/// Who writes the file: this farm's version and host.
pub fn writer() -> String {
    format!(
        "farm {} on {}",
        env!("CARGO_PKG_VERSION"),
        crate::claims::host::Here::current().host
    )
}

/// Raise the hub's version to this farm's, before anything is claimed; a
/// hub whose farms speak a newer one is refused (exit 2: a loop that
/// respawns farm stops there).
pub fn join(store: &dyn ClaimStore) -> Result<(), Error> {
    // A hub this farm cannot write (claims it cannot make either) is said
    // by the claim that fails next, naming what to fix; only a newer
    // version read is refused here.
    let there = match store.raise_protocol(PROTOCOL) {
        Ok(there) => there,
        Err(_) => store.protocol().ok().flatten().unwrap_or(PROTOCOL),
    };
    if there > PROTOCOL {
        return Err(Error::usage(format!(
            "the farms on {} speak protocol {there}, this farm ({}) speaks {PROTOCOL}: \
             it would go around what it does not know of (the merge queue)",
            store.location(),
            env!("CARGO_PKG_VERSION")
        ))
        .hint(
            "install a newer farm on this machine (cargo install --path . in a newer checkout)",
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_version_reads_back_and_junk_reads_as_none() {
        assert_eq!(parse(text(7, "farm 1 on a").as_bytes()), Some(7));
        assert_eq!(parse(b"nonsense"), None);
        assert_eq!(parse(b"version = -1\n"), None);
    }
}
