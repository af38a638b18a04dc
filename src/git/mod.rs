//! git: the `git` command (every push and fetch, design note 7), the hub
//! (checked once, read, watched), in-process work on a private clone (git2),
//! patience with a remote that does not answer, a watchdog for one that
//! went silent, and keeping the repositories farm writes packed.

pub mod command;
pub mod hub;
pub mod killed;
pub mod maintain;
pub mod rescue;
pub mod retry;
pub mod scratch;
pub mod tree_merge;
pub mod watchdog;
pub mod workdir;
