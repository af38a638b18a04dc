//! Where a task's file is on the board: the one spelling of `tasks/`,
//! `tasks/done/` and `tasks/failed/` (paths relative to a work tree).

use std::fmt::Display;
use std::path::Path;

/// The pending tasks: `tasks/<id>.md`.
pub const TASKS: &str = "tasks";
/// The finished tasks: `tasks/done/<id>.md`.
pub const DONE: &str = "tasks/done";
/// The tasks that used up their attempts: `tasks/failed/<id>.md`.
pub const FAILED: &str = "tasks/failed";

/// `tasks/<id>.md`.
pub fn pending(id: impl Display) -> String {
    format!("{TASKS}/{id}.md")
}

/// `tasks/done/<id>.md`.
pub fn done(id: impl Display) -> String {
    format!("{DONE}/{id}.md")
}

/// `tasks/failed/<id>.md`.
pub fn failed(id: impl Display) -> String {
    format!("{FAILED}/{id}.md")
}

/// Where a task's file can be.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Place {
    Pending,
    Done,
    Failed,
}

impl Place {
    pub const ALL: [Place; 3] = [Place::Pending, Place::Done, Place::Failed];

    /// The directory, relative to the work tree.
    pub fn dir(self) -> &'static str {
        match self {
            Place::Pending => TASKS,
            Place::Done => DONE,
            Place::Failed => FAILED,
        }
    }

    /// Task `id`'s file there, relative to the work tree.
    pub fn file(self, id: impl Display) -> String {
        format!("{}/{id}.md", self.dir())
    }

    /// The state a file there says, in words (`task x already exists (done)`).
    pub fn what(self) -> &'static str {
        match self {
            Place::Pending => "on the board",
            Place::Done => "done",
            Place::Failed => "failed",
        }
    }
}

/// Where task `id` has a file in `worktree` (pending first), if anywhere.
pub fn find(worktree: &Path, id: impl Display) -> Option<Place> {
    Place::ALL
        .into_iter()
        .find(|p| worktree.join(p.file(&id)).exists())
}
