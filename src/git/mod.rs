//! git: the `git` command (every push and fetch, design note 7), the hub
//! (checked once, read, watched), in-process work on a private clone (git2),
//! and patience with a remote that does not answer.

pub mod command;
pub mod hub;
pub mod retry;
pub mod scratch;
pub mod tree_merge;
pub mod workdir;
