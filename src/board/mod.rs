//! The board: tasks as files on the hub's main branch, and the state of each.
//!
//! A task is `tasks/<id>.md`: TOML front matter between two lines that are
//! exactly `+++`, then a markdown description. A finished task is moved to
//! `tasks/done/`, one that used up its attempts to `tasks/failed/`. The board
//! is these parts, re-exported here:
//!
//! - [`task`]: a task and its file format ([`parse`], [`Task::render`], [`new_task`]);
//! - [`load`](mod@load): reading a checked-out board into a [`Snapshot`] ([`load()`], the only I/O);
//! - [`tree`]: the same from a commit's tree, at the cost of what changed
//!   since the last read ([`Cache`]), for the loop that reads it every turn;
//! - [`paths`]: where a task's file is (`tasks/`, `tasks/done/`, `tasks/failed/`);
//! - [`question`]: a question a task waits to have answered, and its answer;
//! - [`review`]: a change a task waits to have reviewed, approved or rejected;
//! - [`edit`]: every edit of a task file (add, done, an attempt, failed) and
//!   [`edit::transact`], the one shape of an edit that is committed and pushed;
//! - [`graph`]: the dependency graph and every task's state ([`statuses`],
//!   [`next`], [`settled`], [`counts`]), pure: a [`Snapshot`] in, states out.
//!
//! Claims are not the board's business: the caller turns claim files into
//! [`Snapshot::claimed`]. Nor are sessions: nothing here knows the loop.

pub mod edit;
pub mod graph;
pub mod load;
pub mod paths;
pub mod question;
pub mod review;
pub mod task;
#[cfg(test)]
mod testing;
pub mod tree;

pub use graph::{Counts, Status, counts, next, next_spread, settled, statuses};
pub use load::{Invalid, Snapshot, load};
pub use task::{DEFAULT_MAX_ATTEMPTS, MAX_TASK_BYTES, Task, check_title, new_task, parse};
pub use tree::Cache;
