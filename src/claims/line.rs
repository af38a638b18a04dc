//! A line kept beside the claims, for a hub with no filesystem to share:
//! the files of the merge queue on the git store's branch (`.queue.<place>`,
//! see `run::queue`), each written by compare-and-swap like a claim. A dot
//! name is nobody's claim, and no notice's.
//!
//! The store only keeps the files and says who holds each claim on the
//! same tip: what the files mean, and which of them are alive (a file whose
//! claim is gone is a change whose farm is gone), is the queue's to judge.

use std::collections::BTreeMap;

use crate::claims::StoreError;

/// What the line's files start with.
pub const PREFIX: &str = ".queue.";

/// One look at the line: its files (name, text) and the claims on the same
/// tip (task → its record's nonce).
#[derive(Debug, Default)]
pub struct Snapshot {
    pub files: Vec<(String, Vec<u8>)>,
    pub holders: BTreeMap<String, String>,
}

/// A change behind another that lands with it (see
/// [`LineStore::leave_on_publish`]): its file `name`, which must still hold
/// `seen` and name `task`'s claim as held with nonce `claim`, rewritten as
/// `text` (which says it landed).
#[derive(Clone, Debug)]
pub struct Landing {
    pub name: String,
    pub seen: Vec<u8>,
    pub text: Vec<u8>,
    pub task: String,
    pub claim: String,
}

/// A store that keeps a line (see the module's doc).
pub trait LineStore: Send + Sync {
    /// The line now (`fresh`: asked of the hub, not the last tip seen).
    fn read_line(&self, fresh: bool) -> Result<Snapshot, StoreError>;

    /// The line as a look at the hub that found the claims branch at
    /// commit `tip` (`git ls-remote`) has it: read from the last tip this
    /// store fetched or pushed when that is the one, else asked of the hub.
    fn read_line_at(&self, tip: &str) -> Result<Snapshot, StoreError> {
        let _ = tip;
        self.read_line(true)
    }

    /// Add `name` with `text`, unless a file of that name, or of a later
    /// place (see [`place`]), is there: false then (someone else took that
    /// place, or one behind it). The line's order is the order its files
    /// came in: a place chosen before another's file came in, and ahead of
    /// it, is chosen again behind it.
    fn add_to_line(&self, name: &str, text: &[u8]) -> Result<bool, StoreError>;

    /// Write `text` over `name` while it holds `seen` (what this farm last
    /// wrote there): false when it is gone (taken out of the line by
    /// another, its claim taken for gone) or holds another text (a file
    /// that is not this farm's any more, whatever its name).
    fn update_in_line(&self, name: &str, seen: &[u8], text: &[u8]) -> Result<bool, StoreError>;

    /// Take `name` out of the line while it holds `seen` (what this farm
    /// wrote or read there): true once no file `name` holds it (taken out
    /// now or before), false when it holds another text (left as it is:
    /// not the file that was seen).
    fn remove_from_line(&self, name: &str, seen: &[u8]) -> Result<bool, StoreError>;

    /// Take `name` out of the line, while it holds `seen`, in the very
    /// commit that publishes the work of `task` and releases its claim
    /// (the next publish of it, if that lands): one write to the hub, not
    /// two, and no moment when the file names a claim that is gone. The
    /// changes behind it that the publish lands too (`with`) are said
    /// landed in that commit; unless each still holds what was read of it
    /// and names a claim still held, nothing is pushed (the publish is
    /// rejected, as for a branch that moved): the work of a change whose
    /// claim was taken away meanwhile never lands.
    fn leave_on_publish(&self, task: &str, name: &str, seen: &[u8], with: Vec<Landing>);

    /// Whether a publish took `name` out of the line (see
    /// [`LineStore::leave_on_publish`]).
    fn left_on_publish(&self, name: &str) -> bool;
}

/// The place in line of the file `name` (`.queue.<place>`), if it is one.
pub fn place(name: &str) -> Option<u64> {
    name.strip_prefix(PREFIX)?.parse().ok()
}

/// Is `name` (without `.txt`) a file of the line?
pub fn is_line_file(name: &str) -> bool {
    name.starts_with(PREFIX)
}
