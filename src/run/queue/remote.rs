//! The line of a hub elsewhere, kept beside the claims on the git store's
//! branch: a file a change, `.queue.<place>`, added by compare-and-swap
//! behind every file there (so two changes never take the same place, and
//! none takes one ahead of a change already in line), rewritten and taken out
//! only while it holds what its farm last wrote or read there (a farm that
//! lost its place never touches a file another wrote), which names the
//! claim its change lands under. There is no lock a kernel drops
//! when a farm dies, and no clock all machines share: a change is in line
//! for as long as its claim is held, and the claim's own liveness (a dead
//! holder of this machine reaped at once, one elsewhere once its heartbeat
//! is stale) says when its farm is gone.

use super::{InLine, parse};
use crate::claims::line::{Landing, LineStore, PREFIX};
use crate::error::Error;

/// Rounds of taking a place that another took first.
const ROUNDS: usize = 64;

/// The live changes in line by place, and the candidate refs of the dead
/// ones removed.
type Read = (Vec<InLine>, Vec<String>);

/// The line beside the claims of a hub elsewhere.
pub struct Line<'s> {
    store: &'s dyn LineStore,
}

/// A change's file in the line; dropped, it leaves the line.
pub struct File<'s> {
    store: &'s dyn LineStore,
    name: String,
    /// What this farm last wrote there: the file is changed or taken out
    /// only while it holds that (another's file may have the name). None
    /// once its place was taken away.
    text: Option<Vec<u8>>,
}

impl<'s> Line<'s> {
    pub fn of(store: &'s dyn LineStore) -> Line<'s> {
        Line { store }
    }

    /// Take the last place in line for a change written as `text`: its
    /// file, its place, and the candidate refs of the dead changes removed
    /// on the way.
    pub(super) fn join(&self, text: &[u8]) -> Result<(File<'s>, u64, Vec<String>), Error> {
        let mut dead = Vec::new();
        for _ in 0..ROUNDS {
            let (last, gone) = self.read_all(true, None)?;
            dead.extend(gone.1);
            let now = std::time::SystemTime::now();
            let place = place_after(last, now);
            let name = File::name_of(place);
            if self.store.add_to_line(&name, text)? {
                let file = File {
                    store: self.store,
                    name,
                    text: Some(text.to_vec()),
                };
                return Ok((file, place, dead));
            }
        }
        Err(Error::failure(
            "the merge queue's line kept changing: no place could be taken in it",
        ))
    }

    /// The live changes in line, in order, and the candidate refs of the
    /// dead ones (removed when `remove`); as of claims tip `at` when a look
    /// at the hub just found it there (see [`LineStore::read_line_at`]),
    /// else asked of the hub.
    pub(super) fn read(&self, remove: bool, at: Option<&str>) -> Result<Read, Error> {
        Ok(self.read_all(remove, at)?.1)
    }

    /// [`Line::read`], and the last place taken by any file there.
    fn read_all(&self, remove: bool, at: Option<&str>) -> Result<(u64, Read), Error> {
        let snapshot = match at {
            Some(tip) => self.store.read_line_at(tip)?,
            None => self.store.read_line(true)?,
        };
        let mut last = 0;
        let mut live = Vec::new();
        let mut dead = Vec::new();
        for (name, text) in &snapshot.files {
            let Some(place) = crate::claims::line::place(name) else {
                continue;
            };
            last = last.max(place);
            let record = parse(text);
            let held = record
                .claim
                .as_ref()
                .is_some_and(|nonce| snapshot.holders.get(&record.task) == Some(nonce));
            if held {
                live.push(InLine {
                    place,
                    record,
                    text: text.clone(),
                });
            } else if remove
                && self
                    .store
                    .remove_from_line(name, text)
                    .is_ok_and(|gone| gone)
            {
                // Its refs are pushed before they are named in its file (a
                // round trip saved for each): a farm killed in between
                // leaves one that only the place's prefix finds.
                dead.push(format!("refs/farm/queue/{place}-*"));
            }
        }
        live.sort_by_key(|c| c.place);
        Ok((last, (live, dead)))
    }
}

/// The place a change joining the line at `now` takes when `last` is the
/// last one there: behind every file there, live or not yet removed (the
/// order of the line), and never one taken before — the line empties, and
/// a farm that lost its place may still think it holds it; a dead place's
/// refs are found by its number — so no less than the milliseconds since
/// the epoch.
fn place_after(last: u64, now: std::time::SystemTime) -> u64 {
    let ms = now
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
    last.saturating_add(1).max(ms)
}

impl File<'_> {
    /// Write `text` over the change's file: false when its place was
    /// taken away (the file removed by a farm that took its claim for
    /// gone), and the change is out of line.
    pub(super) fn write(&mut self, text: &[u8]) -> Result<bool, Error> {
        let Some(seen) = &self.text else {
            return Ok(false);
        };
        let kept = self.store.update_in_line(&self.name, seen, text)?;
        self.text = kept.then(|| text.to_vec());
        Ok(kept)
    }
}

impl File<'_> {
    /// Leave the line with the publish of `task`'s work, if it lands, the
    /// changes `with` landing with it (see [`LineStore::leave_on_publish`]).
    pub(super) fn leave_on_publish(&self, task: &str, with: Vec<Landing>) {
        if let Some(text) = &self.text {
            self.store.leave_on_publish(task, &self.name, text, with);
        }
    }

    /// Take `text`, read in its file just now, for what this farm last
    /// wrote there — also after a write of its own found the file
    /// changed and took it for gone (the change ahead had rewritten it).
    pub(super) fn adopt(&mut self, text: &[u8]) {
        self.text = Some(text.to_vec());
    }

    /// Its name in the line (`.queue.<place>`).
    pub(super) fn name_of(place: u64) -> String {
        format!("{PREFIX}{place:012}")
    }
}

impl Drop for File<'_> {
    fn drop(&mut self) {
        // Best effort: a file left behind names a claim that is gone once
        // this change landed or failed, and the next reader removes it.
        if let Some(text) = &self.text
            && !self.store.left_on_publish(&self.name)
        {
            let _ = self.store.remove_from_line(&self.name, text);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, UNIX_EPOCH};

    #[test]
    fn a_place_is_behind_the_last_and_never_one_taken_before() {
        let at = |ms| UNIX_EPOCH + Duration::from_millis(ms);
        // An empty line: the clock's place, not the first one again.
        assert_eq!(place_after(0, at(1_700_000_000_000)), 1_700_000_000_000);
        // Behind the last one there, even one taken by a clock ahead.
        assert_eq!(
            place_after(1_700_000_000_500, at(1_700_000_000_000)),
            1_700_000_000_501
        );
        // A line kept by older farms (places from 1): behind it.
        assert_eq!(place_after(3, at(1_700_000_000_000)), 1_700_000_000_000);
        assert_eq!(place_after(u64::MAX, at(0)), u64::MAX);
    }
}
