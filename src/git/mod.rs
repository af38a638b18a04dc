//! git: the `git` command (every push and fetch, design note 7), the hub
//! (checked once, read, watched), in-process work on a private clone (git2),
//! patience with a remote that does not answer, a watchdog for one that
//! went silent, and keeping the repositories farm writes packed.

pub mod changes;
pub mod command;
pub mod hub;
pub mod killed;
pub mod loose;
pub mod maintain;
pub mod pack_dirs;
pub mod rescue;
pub mod retry;
pub mod scratch;
#[cfg(test)]
pub(crate) mod testing;
pub mod tree_diff;
pub mod tree_edit;
pub mod tree_merge;
pub mod watchdog;
pub mod workdir;

/// A tree libgit2 may keep parsed in memory: up to 2 MiB (its default is
/// 4 KiB). `tasks/` and `tasks/done/` hold an entry a task, ~190 KB on a
/// board of 5,000, and a task reads the same few versions of them again and
/// again (staging, the done commit, the replay, the landing checks): above
/// 4 KiB each read inflated and parsed the whole tree anew.
const TREE_CACHE_LIMIT: usize = 2 << 20;

/// What libgit2 keeps cached in all, across repositories (its default is
/// 256 MiB): the supervisor of a night's agents stays small. Every process
/// farm starts is forked from it, and a fork copies the page tables of all
/// it holds: on a board of 5,000 tasks a cache of 32 MiB kept 112 MB
/// resident, and the forks (with the page faults after them) were a tenth
/// of a night's CPU time; at 8 MiB, 59 MB and 2–5% less time a task (perf,
/// `cargo bench --bench scale -- disk`), the few versions a task reads
/// still kept.
const CACHE_MAX: isize = 8 << 20;

/// Set libgit2's object cache for farm's work (see [`TREE_CACHE_LIMIT`]).
/// Call it first thing in `main`, before any thread starts.
pub fn cache_trees() {
    // SAFETY: libgit2's global options, set before any thread exists (the
    // only caller is `main`, first thing).
    unsafe {
        let _ = git2::opts::set_cache_object_limit(git2::ObjectType::Tree, TREE_CACHE_LIMIT);
        let _ = git2::opts::set_cache_max_size(CACHE_MAX);
    }
}
