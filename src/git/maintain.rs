//! Keeping the repositories farm writes packed: the hub on this machine, the
//! agents' clones and the git store's claims cache. Who calls it, and when,
//! is [`crate::run::upkeep`]'s.
//!
//! # Why
//!
//! Every task writes a handful of objects — the agent's commit, farm's commit
//! moving the task to `tasks/done/`, and new trees of the root, `tasks/` and
//! `tasks/done/` — first in a clone (git2 writes loose objects, never a pack),
//! then in the hub (a push of fewer than `receive.unpackLimit`, 100, objects
//! is stored loose). A tree lists every task of its directory, so on a board
//! of 5,000 tasks each is ~100 KB, written whole for every task, and a loose
//! object is compressed alone: no delta against the tree one task before,
//! and at least a block of the filesystem. Unpacked, the hub and the state
//! dir held 2.3 GB after 5,000 trivial tasks; packed, the same trees are a
//! few hundred bytes each.
//!
//! The clones keep git's own automatic gc off (it would start in the middle
//! of an agent's `git commit`), and the hub's, which git runs after a push
//! (`receive.autogc`), waits for 6,700 loose objects; when it does start, its
//! detached `git gc` inherits the push's open files, the hub's push lock
//! among them, and holds every farm push on this host until it ends. So
//! farm's pushes to a hub on this machine ask for none (see
//! [`Repo::push_refs_holding`]), and farm runs the hub's upkeep itself, after
//! the push, with the lock let go.
//!
//! # How
//!
//! As git's own background maintenance does it, in its two steps made to
//! run while a repository is in use — with neither pruning anything, so
//! that no object another process still needs can go (a claim commit the
//! claims cache made a moment ago and has not pushed yet, a hub object a
//! clone borrows through its alternates), and neither walking the history,
//! so that neither costs more as the night goes on:
//!
//! - **Loose objects into a pack**, as git's `loose-objects` task: the loose
//!   objects, reachable or not, are listed and given to `git pack-objects`
//!   (which finds the deltas between them); once the pack is in place, each
//!   loose copy of them is deleted. Not the task itself: it starts with `git
//!   prune-packed`, which also removes the object directories it emptied,
//!   and a push landing meanwhile moves its objects into a directory it
//!   found there a moment before — seen here as a claims push refused with
//!   "unable to migrate objects to permanent storage". farm deletes files
//!   only.
//! - **Packs rolled up**, as git's `incremental-repack` task: the packs are
//!   put under a multi-pack-index (`git multi-pack-index write`), the packs
//!   whose objects are all read from others since the last roll-up are
//!   deleted (`expire`), and the small packs are rolled into one (`repack`).
//!   Not the task itself: it rolls up only as much as its second largest
//!   pack each time — two packs, where a pack of loose objects comes every
//!   few tasks (80 packs a clone after 2,500 tasks, each holding whole the
//!   trees the others hold as deltas). farm picks the batch so that the
//!   packs keep a geometric progression, as `git repack --geometric=2`
//!   does (see [`batch_size`]): each object is rewritten a few times over a
//!   night, not at every roll-up.
//!
//! What is unreachable stays, packed, until git's own `gc` prunes it after
//! its expiry. In an agent's clone, where nothing else works while it is
//! packed, what git's steps put off for other processes' sake is done at
//! once (see [`pack`]): without it, each clone kept its own packed copy of
//! what the hub holds, and the packs a roll-up replaced until the next one.
//!
//! # When
//!
//! At git's own thresholds for these tasks, as the repository's git config
//! gives them (`maintenance.loose-objects.auto`, 100 loose objects;
//! `maintenance.incremental-repack.auto`, 10 packs outside the
//! multi-pack-index), so the user's settings count. They are counted here,
//! in-process (a `stat` of each object directory and a listing of those
//! that changed: no git process after every task). The hub is the user's
//! repository: where the user turned git's automatic upkeep off there
//! (`gc.auto = 0`, `maintenance.auto = false`, `receive.autogc = false`),
//! farm does none either.

use std::path::Path;
use std::time::{Duration, SystemTime};

use crate::git::command::{GitError, Repo};

/// Whose a repository is, for its upkeep.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Owner {
    /// The user's: the hub. Kept packed unless the user turned git's
    /// automatic upkeep off there.
    User,
    /// farm's own: an agent's clone, the claims cache. Their config turns
    /// git's automatic gc off on purpose; only the thresholds count.
    Farm,
}

/// When a repository is packed: at so many loose objects, or so many packs
/// outside its multi-pack-index (`None`: that task never runs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Thresholds {
    pub loose: Option<usize>,
    pub packs: Option<usize>,
}

/// The settings [`Thresholds::from_config`] and [`store_pushed_loose`]
/// read, for `git config --get-regexp`.
pub const SETTINGS: &str = r"^(maintenance\.(auto|loose-objects\.auto|incremental-repack\.auto)|gc\.auto|receive\.autogc|core\.(loose)?compression)$";

impl Thresholds {
    /// git's own defaults for the two tasks.
    pub const GIT: Thresholds = Thresholds {
        loose: Some(100),
        packs: Some(10),
    };

    /// The thresholds of a repository of `owner` whose git config holds
    /// `settings` (the [`SETTINGS`] pairs, as git lists them, the last
    /// winning); `None` when there is to be no upkeep at all.
    pub fn from_config(owner: Owner, settings: &[(String, String)]) -> Option<Thresholds> {
        let last = |key: &str| {
            settings
                .iter()
                .rfind(|(k, _)| k.eq_ignore_ascii_case(key))
                .map(|(_, v)| v.trim())
        };
        if owner == Owner::User {
            let off = |key: &str| last(key).is_some_and(is_false);
            if off("maintenance.auto") || off("receive.autogc") || last("gc.auto") == Some("0") {
                return None;
            }
        }
        // git's reading: 0 turns the task off, a negative number runs it
        // every time.
        let threshold = |key: &str, default: Option<usize>| match last(key) {
            None => default,
            Some(v) => match v.parse::<i64>() {
                Ok(0) => None,
                Ok(n) => Some(usize::try_from(n).unwrap_or(1).max(1)),
                Err(_) => default,
            },
        };
        let t = Thresholds {
            loose: threshold("maintenance.loose-objects.auto", Thresholds::GIT.loose),
            packs: threshold("maintenance.incremental-repack.auto", Thresholds::GIT.packs),
        };
        (t.loose.is_some() || t.packs.is_some()).then_some(t)
    }
}

/// Whether a push to a hub on this machine whose git config holds
/// `settings` (the [`SETTINGS`] pairs) may have the hub store the
/// objects it writes loose uncompressed (zlib's stored blocks, git's
/// `core.looseCompression = 0`): when farm packs them soon — its upkeep of
/// loose objects is on there — and the user chose no level of their own.
/// Deflating the trees of a large board was a quarter of a push on 5,000
/// tasks (35 against 27 ms, `git push` alone; 19 against 17 ms on 500),
/// made under the push lock, where every agent waits; the pack they go
/// into is compressed as the user's `pack.compression` says.
pub fn store_pushed_loose(settings: &[(String, String)]) -> bool {
    let packed = Thresholds::from_config(Owner::User, settings).is_some_and(|t| t.loose.is_some());
    let level_chosen = settings.iter().any(|(k, _)| {
        k.eq_ignore_ascii_case("core.looseCompression")
            || k.eq_ignore_ascii_case("core.compression")
    });
    packed && !level_chosen
}

/// git's false, as `git config --type=bool` reads it.
fn is_false(v: &str) -> bool {
    ["false", "no", "off", "0"]
        .iter()
        .any(|f| v.eq_ignore_ascii_case(f))
}

/// What a repository holds, as the thresholds count it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Count {
    /// Loose objects.
    pub loose: usize,
    /// Packs that its multi-pack-index does not cover.
    pub packs: usize,
}

/// Count what the object directory `objects` holds: its loose objects
/// (counting stops at `enough`) and its packs outside the multi-pack-index.
/// A directory that cannot be read counts none.
pub fn count(objects: &Path, enough: usize) -> Count {
    count_since(objects, enough, &mut Listed::default())
}

/// What a count found in each directory of loose objects (`00` to `ff`),
/// with the directory's modification time then.
#[derive(Debug, Clone, Default)]
pub struct Listed(Vec<Option<(SystemTime, usize)>>);

/// How long a directory's time must have stood for a count to trust it:
/// an object written in the same tick of the file system's clock as the
/// one before leaves the time as it was.
const SETTLED: Duration = Duration::from_millis(100);

/// [`count`], listing again only the directories whose modification time
/// changed since `listed` was taken (and keeping it up to date): after
/// each task the hub's 256 directories, nearly all as they were, cost a
/// `stat` each rather than an `opendir` and its reads, and a clone's,
/// most of them removed by its last packing, nothing. Adding or deleting
/// an object changes its directory's time; one whose time is too recent
/// (see [`SETTLED`]) is listed again each time.
pub fn count_since(objects: &Path, enough: usize, listed: &mut Listed) -> Count {
    let mut present = [false; 256];
    if let Ok(dir) = std::fs::read_dir(objects) {
        for entry in dir.flatten() {
            let name = entry.file_name();
            if let Some(fan) = name
                .to_str()
                .filter(|n| n.len() == 2 && n.bytes().all(|b| b.is_ascii_hexdigit()))
                && let Ok(fan) = u8::from_str_radix(fan, 16)
            {
                present[usize::from(fan)] = true;
            }
        }
    }
    let fans = &mut listed.0;
    fans.resize(256, None);
    let settled = SystemTime::now().checked_sub(SETTLED);
    let mut dir = objects.join("00");
    let mut loose = 0;
    for (fan, known) in fans.iter_mut().enumerate() {
        if !present[fan] {
            *known = None;
            continue;
        }
        dir.set_file_name(format!("{fan:02x}"));
        // Its time before its listing: an object written meanwhile changes
        // it again, and the next count lists it.
        let Ok(time) = std::fs::metadata(&dir).and_then(|m| m.modified()) else {
            *known = None;
            continue;
        };
        let n = match *known {
            Some((at, n)) if at == time => n,
            _ => {
                let n = std::fs::read_dir(&dir).map_or(0, |d| {
                    d.flatten()
                        // Not `tmp_obj_*`, an object being written.
                        .filter(|e| e.file_name().to_str().is_some_and(is_object_name))
                        .count()
                });
                *known = settled.is_some_and(|s| time < s).then_some((time, n));
                n
            }
        };
        loose += n;
        if loose >= enough {
            loose = enough;
            break;
        }
    }
    let pack_dir = objects.join("pack");
    let packs = std::fs::read_dir(&pack_dir)
        .map(|d| {
            d.flatten()
                .filter(|e| e.file_name().to_string_lossy().ends_with(".pack"))
                .count()
        })
        .unwrap_or(0);
    Count {
        loose,
        packs: packs.saturating_sub(midx_packs(&pack_dir.join("multi-pack-index"))),
    }
}

/// How many packs the multi-pack-index at `path` covers (0 when there is
/// none): a big-endian count at byte 8 of its header, after `MIDX`, the
/// version, the hash, the chunk count and the base count.
fn midx_packs(path: &Path) -> usize {
    use std::io::Read;
    let mut header = [0u8; 12];
    let read = std::fs::File::open(path).and_then(|mut f| f.read_exact(&mut header));
    if read.is_err() || &header[..4] != b"MIDX" {
        return 0;
    }
    u32::from_be_bytes([header[8], header[9], header[10], header[11]]) as usize
}

/// Which of the two tasks are due.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Due {
    pub loose: bool,
    pub packs: bool,
}

impl Due {
    pub fn any(self) -> bool {
        self.loose || self.packs
    }
}

/// What is due in a repository at thresholds `t` that holds `now`, when the
/// last upkeep there left `left`: counted from what it left, so that a
/// repository whose upkeep failed (or left objects behind) is not tried
/// again after every task, only once as much again has come.
pub fn due(t: Thresholds, now: Count, left: Count) -> Due {
    let past = |at: Option<usize>, now: usize, left: usize| {
        at.is_some_and(|at| now >= left.saturating_add(at))
    };
    Due {
        loose: past(t.loose, now.loose, left.loose),
        packs: past(t.packs, now.packs, left.packs),
    }
}

/// What an upkeep that ran the tasks `due` left, counted from, when it
/// found `after` and the one before had left `left`: each task's own
/// count, the others' as they were (a pack made of loose objects does not
/// put off rolling the packs up).
pub fn left_after(due: Due, left: Count, after: Count) -> Count {
    Count {
        loose: if due.loose { after.loose } else { left.loose },
        packs: if due.packs { after.packs } else { left.packs },
    }
}

/// The most loose objects worth counting at thresholds `t`.
pub fn enough(t: Thresholds, left: Count) -> usize {
    t.loose.map_or(0, |at| left.loose.saturating_add(at)).max(1)
}

/// At most so many loose objects go into one pack (git's own batch for
/// its `loose-objects` task): the rest wait for the next upkeep.
const BATCH: usize = 50_000;

/// Run the steps `due` in `repo`, whose object directory is `objects`;
/// what the repository holds after. `alone`: no other process reads or
/// writes the repository meanwhile (an agent's clone between its tasks),
/// so what git's steps leave for later to spare such processes is done
/// now: the loose copies of objects already in a pack — the hub's among
/// them, which a clone borrows — are dropped first (`git prune-packed`),
/// and the packs a roll-up made redundant are deleted at once.
pub fn pack(repo: &Repo, objects: &Path, due: Due, alone: bool) -> Result<Count, GitError> {
    if due.loose {
        if alone {
            repo.run(["prune-packed", "--quiet"])?;
        }
        pack_loose(repo, objects)?;
    }
    if due.packs {
        roll_up(repo, objects, alone)?;
    }
    Ok(count(objects, usize::MAX))
}

/// Roll the packs of `objects` up (see the module's comment); `alone`: the
/// packs it made redundant deleted at once, not at the next roll-up.
fn roll_up(repo: &Repo, objects: &Path, alone: bool) -> Result<(), GitError> {
    let midx = |args: &[&str]| {
        let mut all = vec!["multi-pack-index"];
        all.extend(args);
        repo.run(&all).map(drop)
    };
    midx(&["write"])?;
    midx(&["expire"])?;
    let sizes: Vec<u64> = std::fs::read_dir(objects.join("pack"))
        .map(|dir| {
            dir.flatten()
                .filter(|e| e.file_name().to_string_lossy().ends_with(".pack"))
                .filter_map(|e| e.metadata().ok().map(|m| m.len()))
                .collect()
        })
        .unwrap_or_default();
    if let Some(batch) = batch_size(sizes) {
        midx(&["repack", &format!("--batch-size={batch}")])?;
        if alone {
            midx(&["expire"])?;
        }
    }
    Ok(())
}

/// The `--batch-size` of `git multi-pack-index repack` that rolls packs of
/// `sizes` (bytes) up into a geometric progression — each pack left at
/// least twice all the smaller ones together, the smaller ones rolled into
/// one — as `git repack --geometric=2` picks them: the size of the smallest
/// pack kept (git rolls the packs below it; together they are less than
/// half of it, so it takes them all), or 0 for every pack. `None`: fewer
/// than two packs to roll.
pub fn batch_size(mut sizes: Vec<u64>) -> Option<u64> {
    sizes.sort_unstable();
    let below: Vec<u64> = sizes
        .iter()
        .scan(0u64, |sum, &size| {
            let before = *sum;
            *sum = sum.saturating_add(size);
            Some(before)
        })
        .collect();
    // The packs from `split` up each hold twice the ones below them.
    let split = (0..sizes.len())
        .rev()
        .take_while(|&i| sizes[i] >= below[i].saturating_mul(2))
        .last()
        .unwrap_or(sizes.len());
    match split {
        // (1 cannot be: the smallest pack has none below it.)
        0 | 1 => None,
        n if n == sizes.len() => Some(0),
        n => Some(sizes[n]),
    }
}

/// Put the loose objects of `objects` into a new pack there, then delete
/// their loose copies (and no directory: see the module's comment).
fn pack_loose(repo: &Repo, objects: &Path) -> Result<(), GitError> {
    let loose = loose_objects(objects, BATCH);
    if loose.is_empty() {
        return Ok(());
    }
    let ids: String = loose.iter().map(|(id, _)| format!("{id}\n")).collect();
    let base = objects.join("pack").join("loose");
    repo.run_input(
        [
            std::ffi::OsStr::new("pack-objects"),
            std::ffi::OsStr::new("--quiet"),
            base.as_os_str(),
        ],
        &[],
        ids.as_bytes(),
    )?;
    for (_, path) in &loose {
        // Gone already: another process's gc took it (into a pack).
        let _ = std::fs::remove_file(path);
    }
    Ok(())
}

/// Up to `most` loose objects of `objects`: their ids and files.
fn loose_objects(objects: &Path, most: usize) -> Vec<(String, std::path::PathBuf)> {
    let mut found = Vec::new();
    for fan in 0..=255u8 {
        let fan = format!("{fan:02x}");
        let Ok(dir) = std::fs::read_dir(objects.join(&fan)) else {
            continue;
        };
        for entry in dir.flatten() {
            let name = entry.file_name();
            let Some(rest) = name.to_str().filter(|n| is_object_name(n)) else {
                continue;
            };
            found.push((format!("{fan}{rest}"), entry.path()));
            if found.len() >= most {
                return found;
            }
        }
    }
    found
}

/// A loose object's file name in its directory: the rest of its id (SHA-1:
/// 38 hex digits; SHA-256: 62).
fn is_object_name(name: &str) -> bool {
    matches!(name.len(), 38 | 62) && name.bytes().all(|b| b.is_ascii_hexdigit())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pairs(list: &[(&str, &str)]) -> Vec<(String, String)> {
        list.iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn thresholds_are_gits_defaults_unless_set() {
        assert_eq!(
            Thresholds::from_config(Owner::Farm, &[]),
            Some(Thresholds::GIT)
        );
        assert_eq!(
            Thresholds::from_config(Owner::User, &[]),
            Some(Thresholds::GIT)
        );
        let set = pairs(&[
            ("maintenance.loose-objects.auto", "20"),
            ("maintenance.incremental-repack.auto", "-1"),
            ("maintenance.loose-objects.auto", "30"),
        ]);
        assert_eq!(
            Thresholds::from_config(Owner::Farm, &set),
            Some(Thresholds {
                loose: Some(30),
                packs: Some(1)
            })
        );
        let one_off = pairs(&[("maintenance.incremental-repack.auto", "0")]);
        assert_eq!(
            Thresholds::from_config(Owner::Farm, &one_off),
            Some(Thresholds {
                loose: Some(100),
                packs: None
            })
        );
        let both_off = pairs(&[
            ("maintenance.incremental-repack.auto", "0"),
            ("maintenance.loose-objects.auto", "0"),
        ]);
        assert_eq!(Thresholds::from_config(Owner::Farm, &both_off), None);
    }

    #[test]
    fn pushed_objects_are_stored_only_where_farm_packs_them_and_no_level_is_chosen() {
        assert!(store_pushed_loose(&[]));
        assert!(store_pushed_loose(&pairs(&[(
            "maintenance.incremental-repack.auto",
            "0"
        )])));
        for kept in [
            ("gc.auto", "0"),
            ("receive.autogc", "false"),
            ("maintenance.loose-objects.auto", "0"),
            // As git lists them: lower case.
            ("core.loosecompression", "1"),
            ("core.compression", "9"),
        ] {
            assert!(!store_pushed_loose(&pairs(&[kept])), "{kept:?}");
        }
        // The query asks for every one of those settings.
        let query = gits_regexp_matches(SETTINGS);
        for key in [
            "gc.auto",
            "receive.autogc",
            "maintenance.auto",
            "maintenance.loose-objects.auto",
            "core.loosecompression",
            "core.compression",
        ] {
            assert!(query(key), "{key}");
        }
    }

    /// Whether git's own `config --get-regexp` matches `key` with `regex`,
    /// asked of git itself.
    fn gits_regexp_matches(regex: &'static str) -> impl Fn(&str) -> bool {
        move |key| {
            let tmp = tempfile::tempdir().unwrap();
            let file = tmp.path().join("config");
            let set = std::process::Command::new("git")
                .args(["config", "--file"])
                .arg(&file)
                .args([key, "1"])
                .status()
                .unwrap();
            assert!(set.success());
            let out = std::process::Command::new("git")
                .args(["config", "--file"])
                .arg(&file)
                .args(["--get-regexp", regex])
                .output()
                .unwrap();
            out.status.success()
        }
    }

    #[test]
    fn the_users_hub_is_left_alone_where_git_upkeep_is_turned_off() {
        for off in [
            ("gc.auto", "0"),
            ("maintenance.auto", "false"),
            ("maintenance.auto", "no"),
            ("receive.autogc", "false"),
            ("receive.autoGC", "off"),
        ] {
            let settings = pairs(&[off]);
            assert_eq!(
                Thresholds::from_config(Owner::User, &settings),
                None,
                "{off:?}"
            );
            // farm's own repositories turn git's automatic gc off on
            // purpose: their upkeep is farm's.
            assert!(Thresholds::from_config(Owner::Farm, &settings).is_some());
        }
        let on = pairs(&[("gc.auto", "0"), ("gc.auto", "6700")]);
        assert!(Thresholds::from_config(Owner::User, &on).is_some());
    }

    #[test]
    fn due_counts_from_what_the_last_upkeep_left() {
        let t = Thresholds {
            loose: Some(100),
            packs: Some(10),
        };
        let none = Count::default();
        let c = |loose, packs| Count { loose, packs };
        assert_eq!(due(t, c(99, 9), none), Due::default());
        assert_eq!(
            due(t, c(100, 9), none),
            Due {
                loose: true,
                packs: false
            }
        );
        assert!(due(t, c(0, 10), none).packs);
        // 150 were left behind: due again only at 250.
        assert!(!due(t, c(249, 0), c(150, 0)).loose);
        assert!(due(t, c(250, 0), c(150, 0)).loose);
        let off = Thresholds {
            loose: None,
            packs: None,
        };
        assert!(!due(off, c(1_000_000, 1_000), none).any());
        assert_eq!(enough(t, c(150, 0)), 250);
    }

    #[test]
    fn the_batch_keeps_the_packs_in_a_geometric_progression() {
        // A progression already: nothing to roll.
        assert_eq!(batch_size(vec![200, 40, 10, 4, 1]), None);
        assert_eq!(batch_size(vec![]), None);
        assert_eq!(batch_size(vec![7]), None);
        // Ten equal packs of loose objects: all of them.
        assert_eq!(batch_size(vec![5; 10]), Some(0));
        // The biggest less than twice the rest: all of them.
        assert_eq!(batch_size(vec![100, 40, 10, 4, 1]), Some(0));
        // A big pack (the board) and small ones: the small ones, below it.
        assert_eq!(batch_size(vec![1_000, 5, 5, 5, 6]), Some(1_000));
        // 40 is less than twice what is below it (10 + 6 + 5 + 5 = 26):
        // rolled with them; 200 is kept.
        assert_eq!(batch_size(vec![200, 40, 10, 6, 5, 5]), Some(200));
        // 10 is less than twice 4 + 1 + 1: rolled with them; 40 and 200 kept.
        assert_eq!(batch_size(vec![200, 40, 10, 4, 1, 1]), Some(40));
    }

    #[test]
    fn packing_loose_objects_does_not_put_off_rolling_the_packs_up() {
        let t = Thresholds {
            loose: Some(100),
            packs: Some(3),
        };
        let mut left = Count::default();
        let mut packs = 0;
        let mut rolled = false;
        for _ in 0..5 {
            let now = Count {
                loose: left.loose + 100,
                packs,
            };
            let d = due(t, now, left);
            rolled |= d.packs;
            // Loose objects become one more pack; a roll-up leaves none
            // outside the index.
            packs = if d.packs { 0 } else { packs + 1 };
            left = left_after(d, left, Count { loose: 0, packs });
        }
        assert!(rolled, "three packs made of loose objects are rolled up");
    }

    fn git(dir: &Path, args: &[&str]) -> String {
        let out = std::process::Command::new("git")
            .arg("-C")
            .arg(dir)
            .args(args)
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_AUTHOR_NAME", "t")
            .env("GIT_AUTHOR_EMAIL", "t@t")
            .env("GIT_COMMITTER_NAME", "t")
            .env("GIT_COMMITTER_EMAIL", "t@t")
            .output()
            .unwrap();
        assert!(out.status.success(), "git {args:?}: {out:?}");
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    }

    /// A new loose object no ref names (as the claims cache holds them
    /// all): its id.
    fn object(dir: &Path, text: &str) -> String {
        let path = dir.join("new-object");
        std::fs::write(&path, text).unwrap();
        git(dir, &["hash-object", "-w", path.to_str().unwrap()])
    }

    #[test]
    fn packing_keeps_every_object_unreachable_ones_too() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        git(dir, &["init", "-q", "--bare"]);
        let mut made: Vec<String> = (0..30).map(|i| object(dir, &format!("{i}\n"))).collect();
        let objects = dir.join("objects");
        let before = count(&objects, usize::MAX);
        assert_eq!(
            before,
            Count {
                loose: 30,
                packs: 0
            }
        );
        assert_eq!(count(&objects, 10).loose, 10, "counting stops at enough");
        let t = Thresholds {
            loose: Some(20),
            packs: Some(3),
        };
        let repo = Repo::new(dir);
        let fans: Vec<_> = loose_objects(&objects, usize::MAX)
            .into_iter()
            .map(|(_, path)| path.parent().unwrap().to_owned())
            .collect();
        let after = pack(&repo, &objects, due(t, before, Count::default()), false).unwrap();
        assert_eq!(after, Count { loose: 0, packs: 1 });
        // A push moving its objects in from its quarantine may have found a
        // directory a moment before: none is removed.
        assert!(fans.iter().all(|d| d.is_dir()), "an object directory went");
        // Two more packs of one object each: three, rolled up under a
        // multi-pack-index.
        let mut now = after;
        for round in 0..2 {
            made.push(object(dir, &format!("more {round}\n")));
            let only_loose = Due {
                loose: true,
                packs: false,
            };
            now = pack(&repo, &objects, only_loose, false).unwrap();
        }
        assert_eq!(now, Count { loose: 0, packs: 3 });
        let rolled = pack(&repo, &objects, due(t, now, Count::default()), false).unwrap();
        assert_eq!(rolled.packs, 0, "every pack under the index: {rolled:?}");
        assert!(objects.join("pack/multi-pack-index").is_file());
        // The packs rolled up are left for the next roll-up to delete: a
        // process may have picked one a moment before.
        assert_eq!(pack_files(&objects), 4);
        for oid in &made {
            git(dir, &["cat-file", "-e", oid]);
        }
    }

    #[test]
    fn a_count_lists_again_only_the_directories_whose_time_changed() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        git(dir, &["init", "-q", "--bare"]);
        let made: Vec<String> = (0..30).map(|i| object(dir, &format!("{i}\n"))).collect();
        let objects = dir.join("objects");
        let fan = |id: &str| objects.join(&id[..2]);
        let an_hour_ago = SystemTime::now() - Duration::from_secs(3600);
        let age = |d: &Path| {
            std::fs::File::open(d)
                .unwrap()
                .set_modified(an_hour_ago)
                .unwrap();
        };
        let mut listed = Listed::default();
        // Times of a moment ago are not trusted: listed again.
        assert_eq!(count_since(&objects, usize::MAX, &mut listed).loose, 30);
        made.iter().for_each(|id| age(&fan(id)));
        assert_eq!(count_since(&objects, usize::MAX, &mut listed).loose, 30);
        // An object slipped into a directory whose time is put back is not
        // seen: the count went by the time.
        let first = fan(&made[0]);
        std::fs::write(first.join("0".repeat(38)), "").unwrap();
        age(&first);
        assert_eq!(count_since(&objects, usize::MAX, &mut listed).loose, 30);
        assert_eq!(count(&objects, usize::MAX).loose, 31);
        // Writing or deleting an object changes its directory's time.
        std::fs::remove_file(first.join("0".repeat(38))).unwrap();
        object(dir, "one more\n");
        assert_eq!(count_since(&objects, usize::MAX, &mut listed).loose, 31);
        assert_eq!(count_since(&objects, 10, &mut listed).loose, 10);
    }

    fn pack_files(objects: &Path) -> usize {
        std::fs::read_dir(objects.join("pack"))
            .unwrap()
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().ends_with(".pack"))
            .count()
    }

    #[test]
    fn a_clone_alone_drops_what_its_hub_has_packed_and_keeps_one_pack() {
        let tmp = tempfile::tempdir().unwrap();
        let (hub, clone) = (tmp.path().join("hub"), tmp.path().join("clone"));
        for dir in [&hub, &clone] {
            std::fs::create_dir(dir).unwrap();
            git(dir, &["init", "-q", "--bare"]);
        }
        std::fs::write(
            clone.join("objects/info/alternates"),
            format!("{}\n", hub.join("objects").display()),
        )
        .unwrap();
        // What the clone made and pushed: in both (git writes no copy of
        // what it finds among the hub's objects, so the clone's come first).
        let mut own = Vec::new();
        let mut shared = Vec::new();
        for i in 0..20 {
            shared.push(object(&clone, &format!("{i}\n")));
            own.push(object(&clone, &format!("own {i}\n")));
        }
        for i in 0..20 {
            object(&hub, &format!("{i}\n"));
        }
        let all = Due {
            loose: true,
            packs: true,
        };
        pack(&Repo::new(&hub), &hub.join("objects"), all, false).unwrap();
        let objects = clone.join("objects");
        let repo = Repo::new(&clone);
        let loose_only = Due {
            loose: true,
            packs: false,
        };
        pack(&repo, &objects, loose_only, true).unwrap();
        let listed = git(&clone, &["count-objects", "-v"]);
        assert!(listed.contains("in-pack: 20\n"), "{listed}");
        for round in 0..2 {
            own.push(object(&clone, &format!("more {round}\n")));
            pack(&repo, &objects, loose_only, true).unwrap();
        }
        assert_eq!(pack_files(&objects), 3);
        pack(&repo, &objects, all, true).unwrap();
        // The first pack holds more than twice the two small ones: they are
        // rolled into one, and deleted at once.
        assert_eq!(pack_files(&objects), 2, "the rolled packs are left");
        for oid in own.iter().chain(&shared) {
            git(&clone, &["cat-file", "-e", oid]);
        }
    }
}
