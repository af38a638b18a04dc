//! The merge queue's line: the gated changes waiting to land, in the order
//! they came, each with the commit it would land as (its candidate) and
//! whether that commit passed the gate. How the line is ridden is
//! [`speculate`](super::speculate)'s; this is only where it is kept.
//!
//! - On a hub of this machine ([`local`]): a file a change in the hub's
//!   `current_tasks/.queue/`, OS-locked by its farm for as long as it
//!   waits. A farm killed in line leaves a file whose lock the kernel
//!   dropped: the next reader removes it at once.
//! - On a hub elsewhere ([`remote`]): a file a change beside the claims on
//!   the git store's branch (`.queue.<place>`, a place never taken twice),
//!   written by compare-and-swap, alive for as long as the claim it names: a farm
//!   killed in line leaves its file until its claim is reaped (at once by
//!   a farm of its own machine, after the stale threshold by one of
//!   another), and then the next reader removes it.
//!
//! A candidate's commits are pushed to the hub under
//! `refs/farm/queue/<place>-<agent>-<build>` so that the changes behind it
//! can build on it. On a hub of this machine each such ref is named in its
//! change's file before it is pushed, so that one a killed farm leaves is
//! known and deleted with the file; in a line elsewhere, where each write
//! of the file is a round trip, it is pushed first and named after, and the
//! refs of a dead place are found by its prefix (`<place>-`). Nothing can be lost by removing one: it holds only the work of
//! a change still in its owner's clone, which lands on the branch, or goes
//! to a rescue branch, from there. In a line elsewhere the results a
//! candidate passed with go to `refs/farm/results/<code key>` (see
//! [`speculate`](super::speculate)): a commit of test results, nothing of
//! anyone's work. Its change names that key in its file with the candidate,
//! before the results are pushed, so that a landing can tell which results
//! refs nobody reads any more and delete them.

pub mod local;
pub mod remote;

use serde::{Deserialize, Serialize};

use crate::claims::line::{Landing, LineStore};
use crate::error::Error;

/// What a change in line says of itself.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Record {
    pub task: String,
    pub agent: String,
    /// The commit it would land as, once built.
    #[serde(default)]
    pub candidate: Option<String>,
    /// The commit its candidate was built on (written with it): the
    /// candidate's own commits are those since, which a change ahead
    /// landing it with its own puts on top of its work (see
    /// [`speculate`](super::speculate)).
    #[serde(default)]
    pub on: Option<String>,
    /// The code key of its candidate (written with it): in a line
    /// elsewhere the results it passes with go to the hub under that key
    /// (see [`speculate`](super::speculate)), named here before they are
    /// pushed. None from an older farm.
    #[serde(default)]
    pub key: Option<String>,
    /// The hub refs it may have pushed (named here before each push, so
    /// that a farm killed mid-push leaves none that nobody knows of).
    #[serde(default)]
    pub refs: Vec<String>,
    /// The candidate passed the gate: its results are known.
    #[serde(default)]
    pub green: bool,
    /// Not tested alone: built again once the change it was built on left
    /// the line red (or dead), it lands with the changes behind it, whose
    /// tests cover its code (see [`speculate`](super::speculate)).
    #[serde(default)]
    pub defer: bool,
    /// Red on top of changes ahead that were not tested alone: which one
    /// broke the suite is not known yet (the one just ahead tests itself).
    #[serde(default)]
    pub red: bool,
    /// Its work conflicts with the candidate ahead: it waits for that one
    /// to land, and builds on nothing before.
    #[serde(default)]
    pub blocked: bool,
    /// When it joined the line (seconds since the epoch).
    #[serde(default)]
    pub since: u64,
    /// The nonce of the claim it lands under: on a hub elsewhere, a change
    /// is in line for as long as that claim is held.
    #[serde(default)]
    pub claim: Option<String>,
    /// Landed by the change ahead with its own, in a line elsewhere: the
    /// commit its work landed as. Written by that change, in the push that
    /// lands it; the change's own farm then releases its claim.
    #[serde(default)]
    pub landed: Option<String>,
}

/// A change in line, as another reads it: its place and what it says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InLine {
    pub place: u64,
    pub record: Record,
    /// Its file's text as read (what a write over it must find there).
    pub text: Vec<u8>,
}

/// The line as one change sees it: the change just ahead of it (if any),
/// how many wait ahead (and each of them), the changes behind it in order, its own file as
/// read, and the hub refs of the dead changes removed from it meanwhile
/// (for the caller to delete). A change landed already by the one ahead of
/// it (see [`Record::landed`]) is in nobody's way: neither ahead nor
/// behind.
#[derive(Debug, Default)]
pub struct View {
    pub ahead: Option<InLine>,
    pub waiting_ahead: usize,
    /// Every change ahead, in order (`ahead` is the last).
    pub before: Vec<InLine>,
    pub behind: Vec<InLine>,
    pub mine: Option<InLine>,
    pub dead_refs: Vec<String>,
}

/// The line of a hub: in a directory of this machine, or beside the claims
/// of a hub elsewhere.
pub enum Queue<'s> {
    Local(local::Dir),
    Remote(remote::Line<'s>),
}

/// This farm's own change in line. Dropped, it leaves the line.
pub struct Entry<'s> {
    pub place: u64,
    pub record: Record,
    kept: Kept<'s>,
}

/// Where an entry is kept.
enum Kept<'s> {
    Local(local::File),
    Remote(remote::File<'s>),
}

impl<'s> Queue<'s> {
    /// The line of a hub of this machine, whose claims directory is
    /// `claims_dir`.
    pub fn local(claims_dir: &std::path::Path) -> Queue<'static> {
        Queue::Local(local::Dir::of(claims_dir))
    }

    /// The line kept beside the claims of a hub elsewhere.
    pub fn remote(store: &'s dyn LineStore) -> Queue<'s> {
        Queue::Remote(remote::Line::of(store))
    }

    /// Take the last place in line for `record`; also the candidate refs
    /// of the dead changes removed on the way (for the caller to delete).
    pub fn join(&self, record: Record) -> Result<(Entry<'s>, Vec<String>), Error> {
        let text = text(&record)?;
        let (kept, place, dead) = match self {
            Queue::Local(dir) => {
                let (file, place, dead) = dir.join(&record.agent, &text)?;
                (Kept::Local(file), place, dead)
            }
            Queue::Remote(line) => {
                let (file, place, dead) = line.join(&text)?;
                (Kept::Remote(file), place, dead)
            }
        };
        let entry = Entry {
            place,
            record,
            kept,
        };
        Ok((entry, dead))
    }

    /// Take the last place in line again for `entry`, whose place was
    /// taken away (see [`Entry::update`]), as `record` says; the candidate
    /// refs of the dead changes removed on the way.
    pub fn rejoin(&self, entry: &mut Entry<'s>, record: Record) -> Result<Vec<String>, Error> {
        let (again, dead) = self.join(record)?;
        // (The entry out of line leaves nothing behind as it goes.)
        *entry = again;
        Ok(dead)
    }

    /// The line as `entry` sees it now; dead changes are removed on the
    /// way.
    pub fn view(&self, entry: &Entry<'_>) -> Result<View, Error> {
        self.view_at(entry, None)
    }

    /// [`Queue::view`]; in a line elsewhere, as of claims tip `at` when a
    /// look at the hub just found it there: read again only if this farm
    /// has not read that one yet.
    pub fn view_at(&self, entry: &Entry<'_>, at: Option<&str>) -> Result<View, Error> {
        let (live, dead) = match self {
            Queue::Local(dir) => dir.read(true)?,
            Queue::Remote(line) => line.read(true, at)?,
        };
        let mut mine = None;
        let (mut ahead, mut behind) = (Vec::new(), Vec::new());
        for c in live {
            if c.place == entry.place {
                mine = Some(c);
            } else if c.record.landed.is_some() {
                continue;
            } else if c.place < entry.place {
                ahead.push(c);
            } else {
                behind.push(c);
            }
        }
        Ok(View {
            waiting_ahead: ahead.len(),
            ahead: ahead.last().cloned(),
            before: ahead,
            behind,
            mine,
            dead_refs: dead,
        })
    }

    /// Every live change in line, in order, the dead ones removed on the
    /// way (their refs are the caller's to delete).
    pub fn live(&self) -> Result<Vec<InLine>, Error> {
        Ok(match self {
            Queue::Local(dir) => dir.read(true)?.0,
            Queue::Remote(line) => line.read(true, None)?.0,
        })
    }

    /// Every live change in line, in order (for `farm status`: a reader
    /// that removes nothing).
    pub fn list(&self) -> Result<Vec<InLine>, Error> {
        Ok(match self {
            Queue::Local(dir) => dir.list()?,
            Queue::Remote(line) => line.read(false, None)?.0,
        })
    }

    /// How often a change in line looks at it: a hub elsewhere is asked
    /// over the network each time.
    pub fn look_every(&self) -> std::time::Duration {
        match self {
            Queue::Local(_) => std::time::Duration::from_millis(20),
            Queue::Remote(_) => std::time::Duration::from_millis(200),
        }
    }

    /// Whether the line is kept on a hub elsewhere: what a farm there
    /// cannot read where it is (a candidate's objects, its test results)
    /// travels through the hub, and each look at the line is a round trip.
    pub fn elsewhere(&self) -> bool {
        matches!(self, Queue::Remote(_))
    }
}

impl Entry<'_> {
    /// Say what this change is now (its candidate, its verdict): false
    /// when its place was taken away meanwhile — in a line elsewhere, its
    /// file removed by a farm that took its claim for gone — and it is out
    /// of line (see [`Queue::rejoin`]). A file of this machine's line is
    /// removed only once its farm is gone.
    pub fn update(&mut self, record: Record) -> Result<bool, Error> {
        self.record = record;
        self.write()
    }

    /// In a line elsewhere, leave it in the very write to the hub that
    /// publishes this change's work, if that lands: the change behind sees
    /// it landed and gone at once, and the claims branch takes one write
    /// fewer a landing (of six: the claim, the place, the candidate, its
    /// verdict, the release and the leaving), each a compare-and-swap that
    /// the pushes of landings race with.
    ///
    /// The changes behind it in `with`, each with the commit its work lands
    /// as (see [`Record::landed`]), are said landed in that write too; the
    /// publish is refused unless each is still in line as read, its claim
    /// held. (In a line of this machine the push itself is fenced for
    /// each of them, by their claims' files: see
    /// [`mates`](crate::run::mates).)
    pub fn leave_on_publish(&self, with: &[(InLine, String)]) -> Result<(), Error> {
        let Kept::Remote(file) = &self.kept else {
            return Ok(());
        };
        let mut landing = Vec::with_capacity(with.len());
        for (change, landed) in with {
            let record = &change.record;
            let Some(claim) = record.claim.clone() else {
                return Err(Error::failure(format!(
                    "the merge queue: `{}` names no claim and cannot land with another",
                    record.task
                )));
            };
            landing.push(Landing {
                name: remote::File::name_of(change.place),
                seen: change.text.clone(),
                text: text(&Record {
                    landed: Some(landed.clone()),
                    ..record.clone()
                })?,
                task: record.task.clone(),
                claim,
            });
        }
        file.leave_on_publish(&self.record.task, landing);
        Ok(())
    }

    /// Take `text`, its file as read, for what this farm last wrote there
    /// (its file said it landed, rewritten by the change that landed it:
    /// it goes when the entry is dropped).
    pub fn adopt(&mut self, text: &[u8]) {
        if let Kept::Remote(file) = &mut self.kept {
            file.adopt(text);
        }
    }

    fn write(&mut self) -> Result<bool, Error> {
        let text = text(&self.record)?;
        match &mut self.kept {
            Kept::Local(file) => file.write(&text).map(|()| true),
            Kept::Remote(file) => file.write(&text),
        }
    }
}

fn text(record: &Record) -> Result<Vec<u8>, Error> {
    toml::to_string(record)
        .map(String::into_bytes)
        .map_err(|e| Error::failure(format!("cannot write a queue entry: {e}")))
}

/// A record as written, or the default one (a file cut short, or written
/// by a newer farm: its owner still holds its place).
fn parse(text: &[u8]) -> Record {
    std::str::from_utf8(text)
        .ok()
        .and_then(|t| toml::from_str(t).ok())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(agent: &str) -> Record {
        Record {
            task: format!("t-{agent}"),
            agent: agent.into(),
            ..Record::default()
        }
    }

    #[test]
    fn changes_line_up_in_the_order_they_came_and_leave_when_dropped() {
        let tmp = tempfile::tempdir().unwrap();
        let q = Queue::local(tmp.path());
        let (a, _) = q.join(record("a")).unwrap();
        let (mut b, _) = q.join(record("b")).unwrap();
        let (c, _) = q.join(record("c")).unwrap();
        assert!(q.view(&a).unwrap().ahead.is_none());
        let seen = q.view(&c).unwrap();
        assert_eq!(seen.ahead.unwrap().record.agent, "b");
        assert_eq!(seen.waiting_ahead, 2);
        assert!(
            b.update(Record {
                candidate: Some("abc".into()),
                green: true,
                ..b.record.clone()
            })
            .unwrap()
        );
        let ahead = q.view(&c).unwrap().ahead.unwrap().record;
        assert_eq!(
            (ahead.candidate.as_deref(), ahead.green),
            (Some("abc"), true)
        );
        drop(b);
        assert_eq!(q.view(&c).unwrap().ahead.unwrap().record.agent, "a");
        drop(a);
        assert!(q.view(&c).unwrap().ahead.is_none());
        // A newcomer goes behind the last one still in line.
        let (d, _) = q.join(record("d")).unwrap();
        assert_eq!(q.view(&d).unwrap().ahead.unwrap().record.agent, "c");
    }

    #[test]
    fn a_change_whose_farm_is_gone_is_removed_with_its_ref_named() {
        let tmp = tempfile::tempdir().unwrap();
        let q = Queue::local(tmp.path());
        let (a, _) = q
            .join(Record {
                refs: vec!["refs/farm/queue/1-a-1".into()],
                ..record("a")
            })
            .unwrap();
        let (b, _) = q.join(record("b")).unwrap();
        // A killed farm: its file stays, its lock is gone.
        let Kept::Local(file) = &a.kept else {
            unreachable!("a local line")
        };
        let path = file.path.clone();
        let kept = std::fs::read(&path).unwrap();
        drop(a);
        std::fs::write(&path, kept).unwrap();
        let seen = q.view(&b).unwrap();
        assert!(seen.ahead.is_none());
        assert_eq!(seen.dead_refs, ["refs/farm/queue/1-a-1"]);
        assert!(!path.exists());
    }
}
