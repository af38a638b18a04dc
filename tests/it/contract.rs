//! The `ClaimStore` contract: what every claim store must do, run against
//! each store. A new store adds one line at the bottom.

use std::path::Path;
use std::time::{Duration, SystemTime};

use farm::claims::fs::FsStore;
use farm::claims::git::GitStore;
use farm::claims::host::{self, Here};
use farm::claims::liveness::{Judge, State};
use farm::claims::record::{Claim, Holder, Nonce};
use farm::claims::{Attempt, ClaimStore, Held, Reap, Release, Released, StoreError};
use farm::names::TaskId;

use crate::daemon::{Daemon, Transport};

fn id(s: &str) -> TaskId {
    TaskId::parse(s).unwrap()
}

fn me() -> Option<Holder> {
    Some(Holder {
        pid: std::process::id(),
        start: host::own_start().unwrap(),
    })
}

fn claim(task: &str, agent: &str, holder: Option<Holder>) -> Claim {
    Claim::new(id(task), agent, holder, 1, SystemTime::now())
}

fn won(a: Attempt) -> Held {
    match a {
        Attempt::Won(h) => h,
        Attempt::Lost(l) => panic!("lost to {l:?}"),
    }
}

fn judge(stale_after: Option<Duration>, probe: &dyn Fn(u32) -> Option<u64>) -> Judge<'_> {
    Judge {
        here: Here::current(),
        now: SystemTime::now(),
        stale_after,
        probe,
    }
}

pub fn exactly_one_wins_and_the_loser_sees_the_winner(store: &dyn ClaimStore) {
    let first = won(store.try_claim(claim("t", "alice", None), false).unwrap());
    let Attempt::Lost(holder) = store.try_claim(claim("t", "bob", None), false).unwrap() else {
        panic!("a second claim on a held task won");
    };
    let record = holder.record.as_ref().unwrap();
    assert_eq!(record.nonce, first.claim().nonce);
    assert_eq!(record.agent, "alice");
}

pub fn release_frees_the_task(store: &dyn ClaimStore) {
    let held = won(store.try_claim(claim("t", "alice", me()), true).unwrap());
    store.release_held(held).unwrap();
    assert!(store.read(&id("t")).unwrap().is_none());
    assert!(store.list().unwrap().is_empty());
    won(store.try_claim(claim("t", "bob", None), false).unwrap());
}

pub fn list_is_sorted_and_read_finds_one(store: &dyn ClaimStore) {
    for t in ["c", "a", "b"] {
        won(store.try_claim(claim(t, "x", None), false).unwrap());
    }
    let names: Vec<_> = store.list().unwrap().into_iter().map(|l| l.name).collect();
    assert_eq!(names, ["a", "b", "c"]);
    assert_eq!(store.read(&id("b")).unwrap().unwrap().name, "b");
    assert!(store.read(&id("zzz")).unwrap().is_none());
}

pub fn heartbeat_moves_the_heartbeat(store: &dyn ClaimStore) {
    let held = won(store.try_claim(claim("t", "alice", me()), true).unwrap());
    let later = SystemTime::now() + Duration::from_secs(90);
    store.heartbeat(&held, later).unwrap();
    let listed = store.read(&id("t")).unwrap().unwrap();
    assert!(
        listed.heartbeat >= later - Duration::from_millis(1),
        "{listed:?}"
    );
}

pub fn release_own_needs_the_nonce(store: &dyn ClaimStore) {
    let held = won(store.try_claim(claim("t", "alice", None), false).unwrap());
    let wrong = Nonce::random();
    assert!(matches!(
        store.release(&id("t"), Release::Own(&wrong)),
        Err(StoreError::Changed { .. })
    ));
    let nonce = held.claim().nonce.clone();
    assert_eq!(
        store.release(&id("t"), Release::Own(&nonce)).unwrap(),
        Released::Removed
    );
    assert!(matches!(
        store.release(&id("t"), Release::Own(&nonce)),
        Err(StoreError::NotFound { .. })
    ));
}

pub fn a_live_holder_is_not_released_without_force(store: &dyn ClaimStore) {
    let held = won(store.try_claim(claim("t", "alice", me()), true).unwrap());
    let nonce = held.claim().nonce.clone();
    assert!(matches!(
        store.release(&id("t"), Release::Own(&nonce)),
        Err(StoreError::LiveHolder { .. })
    ));
    let Released::Tombstoned(_) = store
        .release(&id("t"), Release::Force { by: "ops" })
        .unwrap()
    else {
        panic!("force keeps a tombstone");
    };
    // The holder learns it lost the claim, at its next heartbeat and at release.
    assert!(matches!(
        store.heartbeat(&held, SystemTime::now()),
        Err(StoreError::Lost { .. })
    ));
    assert!(matches!(
        store.release_held(held),
        Err(StoreError::Lost { .. })
    ));
}

pub fn a_forced_out_holder_cannot_release_the_next_claim(store: &dyn ClaimStore) {
    let old = won(store.try_claim(claim("t", "alice", None), false).unwrap());
    store
        .release(&id("t"), Release::Force { by: "ops" })
        .unwrap();
    let new = won(store.try_claim(claim("t", "bob", None), false).unwrap());
    assert!(matches!(
        store.release_held(old),
        Err(StoreError::Lost { .. })
    ));
    let listed = store
        .read(&id("t"))
        .unwrap()
        .expect("bob's claim is still there");
    assert_eq!(listed.record.unwrap().nonce, new.claim().nonce);
}

pub fn dead_claims_are_reaped_live_ones_never(store: &dyn ClaimStore) {
    let held = won(store.try_claim(claim("live", "alice", me()), true).unwrap());
    let mut dead = claim("dead", "ghost", me());
    dead.holder = Some(Holder {
        pid: u32::MAX - 1,
        start: 1,
    });
    won(store.try_claim(dead, false).unwrap());

    let real = judge(Some(Duration::ZERO), &host::process_start);
    for entry in store.list().unwrap() {
        let v = entry.judge(&real);
        match entry.name.as_str() {
            "live" => assert_eq!((v.state, v.reapable), (State::Alive, false)),
            "dead" => {
                assert_eq!(v.state, State::Dead);
                let Reap::Reaped { .. } = store.reap(&entry, &real).unwrap() else {
                    panic!("a dead claim was not reaped");
                };
            }
            other => panic!("unexpected {other}"),
        }
    }
    // Even a judge fooled into calling the live holder dead cannot take it:
    // the store's own proof of life (the fs store: the OS lock) stops it.
    let fooled = judge(None, &|_| None);
    let live = store.read(&id("live")).unwrap().unwrap();
    assert_eq!(live.judge(&fooled).state, State::Dead);
    assert!(matches!(
        store.reap(&live, &fooled).unwrap(),
        Reap::Skipped(_)
    ));
    store.release_held(held).unwrap();
}

pub fn a_claim_replaced_after_listing_is_not_reaped(store: &dyn ClaimStore) {
    let mut old = claim("t", "ghost", None);
    old.heartbeat_at -= Duration::from_secs(7200);
    old.claimed_at = old.heartbeat_at;
    let at = old.heartbeat_at;
    let old = won(store.try_claim(old, false).unwrap());
    store.heartbeat(&old, at).unwrap();
    let listed = store.read(&id("t")).unwrap().unwrap();
    // Released and claimed afresh between the reaper's listing and its reap.
    store.release_held(old).unwrap();
    let fresh = won(store.try_claim(claim("t", "bob", None), false).unwrap());
    let j = judge(Some(Duration::from_secs(3600)), &host::process_start);
    assert!(listed.judge(&j).reapable, "the listed claim was stale");
    assert!(matches!(store.reap(&listed, &j).unwrap(), Reap::Skipped(_)));
    let now = store.read(&id("t")).unwrap().unwrap();
    assert_eq!(now.record.unwrap().nonce, fresh.claim().nonce);
}

/// Where one test's claims live, kept (its directory, its server) as long
/// as the store is used: the fs store's directory, or the git store's bare
/// hub, on a path or served over a [`Transport`].
pub struct Hub {
    tmp: tempfile::TempDir,
    git: bool,
    served: Option<Daemon>,
}

impl Hub {
    fn fs() -> Option<Hub> {
        Some(Hub {
            tmp: tempfile::tempdir().unwrap(),
            git: false,
            served: None,
        })
    }

    /// A git store on a fresh bare repository on a path: it stands in for
    /// the remote, which the store talks to only through `git fetch` and
    /// `git push`, as to any URL.
    fn git() -> Option<Hub> {
        let hub = Hub {
            tmp: tempfile::tempdir().unwrap(),
            git: true,
            served: None,
        };
        let made = crate::common::git_command()
            .args(["init", "--quiet", "--bare", "-b", "main"])
            .arg(hub.dir().join("hub.git"))
            .status()
            .unwrap();
        assert!(made.success());
        Some(hub)
    }

    /// A git store on a fresh bare repository served over `transport`;
    /// None if its server cannot run here (see [`Daemon::over`]).
    fn served(transport: Transport) -> Option<Hub> {
        let mut daemon = Daemon::over(transport)?;
        daemon.init_hub();
        daemon.start();
        Some(Hub {
            tmp: tempfile::tempdir().unwrap(),
            git: true,
            served: Some(daemon),
        })
    }

    /// The directory that holds `hub.git`.
    fn dir(&self) -> &Path {
        self.served
            .as_ref()
            .map_or(self.tmp.path(), |d| d.base.path())
    }

    /// What the git store is given as its remote.
    fn url(&self) -> String {
        match &self.served {
            Some(daemon) => daemon.url(),
            None => self.dir().join("hub.git").display().to_string(),
        }
    }

    /// Let the repository `dir` reach the hub: ssh's key and config, as
    /// `core.sshCommand` (this process cannot set its own environment).
    fn client(&self, dir: &Path) {
        if let Some(ssh) = self.served.as_ref().and_then(Daemon::ssh_command) {
            let set = crate::common::git_command()
                .arg("-C")
                .arg(dir)
                .args(["config", "core.sshCommand", &ssh])
                .status()
                .unwrap();
            assert!(set.success());
        }
    }

    /// A new store on this hub, with a cache of its own.
    fn store(&self) -> Box<dyn ClaimStore> {
        let cache = tempfile::tempdir_in(self.tmp.path()).unwrap().keep();
        self.store_in(&cache.join("claims.git"))
    }

    /// A store on this hub whose cache (the git store's) is `cache`, as a
    /// farm started again on the same state dir has.
    fn store_in(&self, cache: &Path) -> Box<dyn ClaimStore> {
        if !self.git {
            return Box::new(FsStore::new(self.tmp.path()));
        }
        let store = GitStore::open(&self.url(), cache).unwrap();
        self.client(cache);
        Box::new(store)
    }
}

/// The contract's tests for one store, made by `$make` (a `fn() ->
/// Option<Hub>`, None to skip); after `;`, tests of that store that take
/// the [`Hub`] itself.
macro_rules! contract {
    ($store:ident, $make:expr $(; $($hub_test:ident),*)?) => {
        mod $store {
            use super::*;
            fn with_hub(check: impl FnOnce(&Hub)) {
                let make: fn() -> Option<Hub> = $make;
                if let Some(hub) = make() {
                    check(&hub);
                }
            }
            fn with_store(check: fn(&dyn ClaimStore)) {
                with_hub(|hub| check(&*hub.store()));
            }
            #[test]
            fn exactly_one_wins_and_the_loser_sees_the_winner() {
                with_store(super::exactly_one_wins_and_the_loser_sees_the_winner);
            }
            #[test]
            fn release_frees_the_task() {
                with_store(super::release_frees_the_task);
            }
            #[test]
            fn list_is_sorted_and_read_finds_one() {
                with_store(super::list_is_sorted_and_read_finds_one);
            }
            #[test]
            fn heartbeat_moves_the_heartbeat() {
                with_store(super::heartbeat_moves_the_heartbeat);
            }
            #[test]
            fn release_own_needs_the_nonce() {
                with_store(super::release_own_needs_the_nonce);
            }
            #[test]
            fn a_live_holder_is_not_released_without_force() {
                with_store(super::a_live_holder_is_not_released_without_force);
            }
            #[test]
            fn a_forced_out_holder_cannot_release_the_next_claim() {
                with_store(super::a_forced_out_holder_cannot_release_the_next_claim);
            }
            #[test]
            fn dead_claims_are_reaped_live_ones_never() {
                with_store(super::dead_claims_are_reaped_live_ones_never);
            }
            #[test]
            fn a_claim_replaced_after_listing_is_not_reaped() {
                with_store(super::a_claim_replaced_after_listing_is_not_reaped);
            }
            #[test]
            fn notices_are_kept_replaced_withdrawn_and_no_claims() {
                with_store(super::notices_are_kept_replaced_withdrawn_and_no_claims);
            }
            #[test]
            fn the_protocol_is_raised_and_never_lowered() {
                with_store(super::the_protocol_is_raised_and_never_lowered);
            }
            #[test]
            fn side_files_are_created_once_and_are_no_claims() {
                with_hub(super::side_files_are_created_once_and_are_no_claims);
            }
            $($(
                #[test]
                fn $hub_test() {
                    with_hub(super::$hub_test);
                }
            )*)?
        }
    };
}

/// The git store's contract, on a hub made by `$make`: a path, or served
/// by `git daemon`, `sshd` or git's smart-HTTP backend.
macro_rules! git_contract {
    ($store:ident, $make:expr) => {
        contract!($store, $make;
            a_heartbeat_that_landed_unseen_is_not_a_lost_claim,
            a_publish_that_landed_unseen_is_pushed_not_lost,
            a_publish_cut_between_its_refs_is_not_pushed,
            a_claim_stamped_by_a_clock_far_behind_is_not_reaped_as_it_appears,
            a_claims_cache_missing_an_old_commit_still_claims,
            the_line_gives_each_place_once_beside_the_claims,
            a_line_file_leaves_with_the_publish_of_its_work,
            a_publish_lands_the_changes_behind_only_while_they_are_held);
    };
}

contract!(fs, Hub::fs);
git_contract!(git, Hub::git);
git_contract!(git_over_daemon, || Hub::served(Transport::Git));
git_contract!(git_over_ssh, || Hub::served(Transport::Ssh));
git_contract!(git_over_http, || Hub::served(Transport::Http));

/// The hub's protocol version: none at first, raised, never lowered, and
/// no claim.
pub fn the_protocol_is_raised_and_never_lowered(store: &dyn ClaimStore) {
    assert_eq!(store.protocol().unwrap(), None);
    assert_eq!(store.raise_protocol(2).unwrap(), 2);
    assert_eq!(store.protocol().unwrap(), Some(2));
    assert_eq!(store.raise_protocol(1).unwrap(), 2);
    assert_eq!(store.raise_protocol(3).unwrap(), 3);
    assert_eq!(store.protocol().unwrap(), Some(3));
    assert_eq!(store.list().unwrap().len(), 0);
    assert_eq!(store.notices(true).unwrap(), []);
}

/// `farm stop`'s and `farm pause`'s notices live beside the claims without
/// being claims: one of each kind for each target, a new one replacing the
/// old, a pause taken away (`farm resume`) saying what it was.
pub fn notices_are_kept_replaced_withdrawn_and_no_claims(store: &dyn ClaimStore) {
    use farm::claims::notice::{Kind, Notice, Target};
    assert_eq!(store.notices(true).unwrap(), []);
    won(store.try_claim(claim("t", "alice", None), false).unwrap());
    let first = Notice::new(Kind::Stop, Target::All, "ops", false);
    store.post_notice(&first).unwrap();
    assert_eq!(store.notices(true).unwrap(), [first]);
    let second = Notice::new(Kind::Stop, Target::All, "ops", true);
    store.post_notice(&second).unwrap();
    let read = store.notices(true).unwrap();
    assert_eq!(read.len(), 1);
    assert_eq!((&read[0].nonce, read[0].now), (&second.nonce, true));
    let pause = Notice::new(Kind::Pause, Target::Role("docs".into()), "ops", false);
    let agent = Notice::new(Kind::Stop, Target::Agent("box-2".into()), "ops", false);
    store.post_notice(&pause).unwrap();
    store.post_notice(&agent).unwrap();
    let mut names: Vec<String> = store
        .notices(true)
        .unwrap()
        .iter()
        .map(Notice::name)
        .collect();
    names.sort();
    assert_eq!(names, [".pause.role.docs", ".stop", ".stop.agent.box-2"]);
    assert_eq!(
        store
            .withdraw_notice(Kind::Pause, &Target::Role("docs".into()))
            .unwrap(),
        Some(pause)
    );
    assert_eq!(
        store
            .withdraw_notice(Kind::Pause, &Target::Role("docs".into()))
            .unwrap(),
        None
    );
    assert_eq!(store.notices(true).unwrap().len(), 2);
    let names: Vec<_> = store.list().unwrap().into_iter().map(|l| l.name).collect();
    assert_eq!(names, ["t"]);
}

/// Messages' files beside the claims (`farm say`): of stores racing to
/// create one receipt (rounds of six, each store its own, as farms on
/// several machines), exactly one does, and its bytes are what is read;
/// what exists is not created again; removing takes them away; none is a
/// claim.
pub fn side_files_are_created_once_and_are_no_claims(hub: &Hub) {
    let store = hub.store();
    won(store.try_claim(claim("t", "alice", None), false).unwrap());
    let message = (".msg.0a1b2c3d".to_owned(), b"to = \"all\"\n".to_vec());
    assert_eq!(
        store
            .create_side(std::slice::from_ref(&message), "test")
            .unwrap(),
        vec![message.0.clone()]
    );
    for round in 1..=3 {
        let name = format!(".msg.0a1b2c3d.read.agent-{round}");
        let stores: Vec<Box<dyn ClaimStore>> = (0..6).map(|_| hub.store()).collect();
        let winners: Vec<usize> = std::thread::scope(|s| {
            let racers: Vec<_> = stores
                .iter()
                .enumerate()
                .map(|(i, st)| {
                    let name = &name;
                    s.spawn(move || {
                        let file = (name.clone(), format!("host = \"h{i}\"\n").into_bytes());
                        st.create_side(&[file], "race").unwrap()
                    })
                })
                .collect();
            racers
                .into_iter()
                .enumerate()
                .filter_map(|(i, r)| (!r.join().unwrap().is_empty()).then_some(i))
                .collect()
        });
        assert_eq!(winners.len(), 1, "round {round}: {winners:?}");
        let files = store.side_files(".msg.", true).unwrap();
        let text = &files.iter().find(|(n, _)| *n == name).unwrap().1;
        assert_eq!(
            String::from_utf8_lossy(text),
            format!("host = \"h{}\"\n", winners[0])
        );
    }
    assert_eq!(
        store
            .create_side(std::slice::from_ref(&message), "again")
            .unwrap(),
        Vec::<String>::new()
    );
    let files = store.side_files(".msg.", true).unwrap();
    assert_eq!(files.len(), 4, "{files:?}");
    assert_eq!(files[0], message);
    let names: Vec<_> = store.list().unwrap().into_iter().map(|l| l.name).collect();
    assert_eq!(names, ["t"]);
    let all: Vec<String> = files.into_iter().map(|(n, _)| n).collect();
    assert_eq!(store.remove_side(&all, "withdrawn").unwrap(), 4);
    assert_eq!(store.side_files(".msg.", true).unwrap(), []);
    assert_eq!(store.remove_side(&all, "again").unwrap(), 0);
}

/// The merge queue's line beside the claims (a hub elsewhere): of farms
/// racing for one place, exactly one takes it (rounds of eight stores,
/// each with its own cache, pushing at once), and none takes a place
/// before one taken already; a file is rewritten or taken
/// out only while it holds what its writer saw; the claims' holders are read with it, and
/// the line's files are no claims.
pub fn the_line_gives_each_place_once_beside_the_claims(hub: &Hub) {
    let store = hub.store();
    let line = store.line().expect("the git store keeps a line");
    let held = won(store.try_claim(claim("t", "alice", None), false).unwrap());
    for round in 1..=3u64 {
        let name = format!(".queue.{round:012}");
        let stores: Vec<Box<dyn ClaimStore>> = (0..8).map(|_| hub.store()).collect();
        let winners: Vec<usize> = std::thread::scope(|s| {
            let racers: Vec<_> = stores
                .iter()
                .enumerate()
                .map(|(i, st)| {
                    let name = &name;
                    s.spawn(move || {
                        let text = format!("agent = \"a{i}\"\n");
                        st.line()
                            .unwrap()
                            .add_to_line(name, text.as_bytes())
                            .unwrap()
                    })
                })
                .collect();
            racers
                .into_iter()
                .enumerate()
                .filter_map(|(i, r)| r.join().unwrap().then_some(i))
                .collect()
        });
        assert_eq!(winners.len(), 1, "round {round}: {winners:?}");
        let seen = line.read_line(true).unwrap();
        let text = &seen.files.iter().find(|(n, _)| *n == name).unwrap().1;
        assert_eq!(
            String::from_utf8_lossy(text),
            format!("agent = \"a{}\"\n", winners[0])
        );
    }
    // A place before the last one taken is no place: a farm that chose
    // it before another's file came in must choose again, behind it.
    // (Two farms each once took the first place of the line, one before
    // the other's, and both changes were tested on the branch: the one
    // that landed second was built and tested again, with every change
    // behind it.)
    assert!(
        !line
            .add_to_line(".queue.000000000000", b"agent = \"late\"\n")
            .unwrap()
    );
    let seen = line.read_line(true).unwrap();
    assert_eq!(seen.files.len(), 3);
    assert_eq!(seen.holders.get("t"), Some(&held.claim().nonce.to_string()));
    // Changed and taken out only as seen: a farm that no longer holds
    // the place it thinks it holds touches nobody else's file there.
    let first = ".queue.000000000001";
    let was = seen
        .files
        .iter()
        .find(|(n, _)| n == first)
        .unwrap()
        .1
        .clone();
    let (green, other) = (b"green = true\n", b"agent = \"other\"\n");
    assert!(!line.update_in_line(first, other, green).unwrap());
    assert!(!line.remove_from_line(first, other).unwrap());
    assert!(line.update_in_line(first, &was, green).unwrap());
    assert!(!line.remove_from_line(first, &was).unwrap());
    assert!(line.remove_from_line(first, green).unwrap());
    assert!(!line.update_in_line(first, green, &was).unwrap());
    assert!(line.remove_from_line(first, green).unwrap());
    assert_eq!(line.read_line(true).unwrap().files.len(), 2);
    let names: Vec<_> = store.list().unwrap().into_iter().map(|l| l.name).collect();
    assert_eq!(names, ["t"]);
}

/// A hook on `dir/hub.git` (see [`Hub::dir`]) that, once, when an update
/// of the claims branch has committed (in a push that has `also` on the
/// hub, if not empty), puts another commit on top of it, as another farm
/// would, and SIGKILLs receive-pack before it reports: the push landed
/// unseen. The file it leaves when it did.
fn land_unseen_once(dir: &Path, also: &str) -> std::path::PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let mark = dir.join("killed");
    let hook = dir.join("hub.git/hooks/reference-transaction");
    std::fs::create_dir_all(hook.parent().unwrap()).unwrap();
    std::fs::write(
        &hook,
        format!(
            "#!/bin/sh\n[ \"$1\" = committed ] || {{ cat > /dev/null; exit 0; }}\n\
             claims=\n\
             while read old new ref; do [ \"$ref\" = refs/heads/farm/claims ] && claims=$new; done\n\
             [ -n \"$claims\" ] || exit 0\n\
             [ -z '{also}' ] || git rev-parse -q --verify '{also}' >/dev/null || exit 0\n\
             [ -e '{mark}' ] && exit 0\n: > '{mark}'\n\
             unset GIT_OBJECT_DIRECTORY GIT_ALTERNATE_OBJECT_DIRECTORIES GIT_QUARANTINE_PATH\n\
             child=$(git commit-tree \"$claims^{{tree}}\" -p \"$claims\" -m 'another farm')\n\
             git update-ref refs/heads/farm/claims \"$child\" \"$claims\"\n\
             kill -9 $PPID\n",
            mark = mark.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&hook, std::fs::Permissions::from_mode(0o755)).unwrap();
    mark
}

/// A heartbeat whose push landed on the hub, but whose `receive-pack` was
/// killed before it said so, while another farm's update was built on it:
/// the push is tried again and rejected (the branch moved on), and the tip
/// holds our new record, not the one the claim remembers. That is our
/// heartbeat, landed: the claim is still ours, not "released, reaped or
/// taken over" (which stopped the session and left the record to go
/// stale).
pub fn a_heartbeat_that_landed_unseen_is_not_a_lost_claim(hub: &Hub) {
    let store = hub.store();
    let held = won(store.try_claim(claim("t", "alice", me()), false).unwrap());
    let mark = land_unseen_once(hub.dir(), "");
    let beat = store.heartbeat(&held, SystemTime::now());
    assert!(mark.exists(), "the hook did not run");
    beat.expect("the heartbeat landed: the claim is still ours");
    // Still ours to beat and to release.
    store.heartbeat(&held, SystemTime::now()).unwrap();
    store.release_held(held).unwrap();
    assert!(store.list().unwrap().is_empty());
}

/// The same for the git store's publish (the work and the claim's release
/// in one atomic push): it landed, receive-pack was killed before it said
/// so, another farm built on the claims branch, and the push tried again is
/// rejected there. The work is on `main` and the claim released: that is
/// `Pushed`, not `Lost` ("nothing was published"), whose caller would
/// rescue work that landed and count an attempt.
pub fn a_publish_that_landed_unseen_is_pushed_not_lost(hub: &Hub) {
    use farm::claims::Published;
    let store = hub.store();
    let tmp = tempfile::tempdir().unwrap();
    let work = work_repo(tmp.path());
    hub.client(work.dir());
    let held = won(store.try_claim(claim("t", "alice", me()), false).unwrap());
    // Only the publish: it updates main too.
    let mark = land_unseen_once(hub.dir(), "refs/heads/main");
    let published = publish_main(&*store, hub, &held, &work);
    assert!(mark.exists(), "the hook did not run");
    assert!(
        matches!(published, Ok(Published::Pushed)),
        "the work landed and the claim was released: {published:?}"
    );
    assert!(store.list().unwrap().is_empty());
}

/// A change in the line elsewhere leaves it in the very commit that
/// publishes its work and releases its claim (one write, and no moment when
/// its file names a claim that is gone); a publish that does not land
/// leaves it in line, and a file rewritten since is not taken out.
pub fn a_line_file_leaves_with_the_publish_of_its_work(hub: &Hub) {
    use farm::claims::Published;
    let store = hub.store();
    let line = store.line().expect("the git store keeps a line");
    let tmp = tempfile::tempdir().unwrap();
    let work = work_repo(tmp.path());
    hub.client(work.dir());
    let held = won(store.try_claim(claim("t", "alice", me()), false).unwrap());
    let (name, text) = (".queue.000000000001", b"task = \"t\"\n");
    assert!(line.add_to_line(name, text).unwrap());
    let other = (".queue.000000000002", b"task = \"u\"\n");
    assert!(line.add_to_line(other.0, other.1).unwrap());
    // Rewritten after it was named to leave: not the file seen, left.
    line.leave_on_publish("t", other.0, b"task = \"old\"\n", Vec::new());
    line.leave_on_publish("t", name, text, Vec::new());
    let before = hub_git(hub, &["rev-parse", "farm/claims"]);
    let published = publish_main(&*store, hub, &held, &work);
    assert!(matches!(published, Ok(Published::Pushed)), "{published:?}");
    assert!(line.left_on_publish(name));
    assert!(!line.left_on_publish(name), "said once");
    let files: Vec<String> = line
        .read_line(true)
        .unwrap()
        .files
        .into_iter()
        .map(|(n, _)| n)
        .collect();
    assert_eq!(files, [other.0]);
    assert!(store.list().unwrap().is_empty());
    let commits = hub_git(
        hub,
        &["rev-list", &format!("{}..farm/claims", before.trim())],
    );
    assert_eq!(commits.lines().count(), 1, "one write: {commits}");
}

/// A change first in the line elsewhere lands the changes behind it with
/// its own (their work is in its push) only while each is in line as it
/// was read and its claim is held, on the very claims tip the push lands
/// on: a change whose claim was taken away meanwhile, or whose file moved,
/// refuses the whole publish and nothing is pushed (fencing for every work
/// in the push, not only the publisher's). Landed, each one's file says
/// so, and its claim stays for its own farm to release.
pub fn a_publish_lands_the_changes_behind_only_while_they_are_held(hub: &Hub) {
    use farm::claims::Published;
    use farm::claims::line::Landing;
    let store = hub.store();
    let line = store.line().expect("the git store keeps a line");
    let tmp = tempfile::tempdir().unwrap();
    let work = work_repo(tmp.path());
    hub.client(work.dir());
    let held = won(store.try_claim(claim("t", "alice", me()), false).unwrap());
    let behind = won(store.try_claim(claim("u", "bob", me()), false).unwrap());
    let (name, text) = (".queue.000000000001", b"task = \"t\"\n");
    let (other, seen) = (".queue.000000000002", b"task = \"u\"\n");
    assert!(line.add_to_line(name, text).unwrap());
    assert!(line.add_to_line(other, seen).unwrap());
    let landing = |claim: &str, seen: &[u8]| Landing {
        name: other.into(),
        seen: seen.to_vec(),
        text: b"task = \"u\"\nlanded = \"abc\"\n".to_vec(),
        task: "u".into(),
        claim: claim.into(),
    };
    let nonce = behind.claim().nonce.to_string();
    let main_before = hub_git(hub, &["for-each-ref", "refs/heads/main"]);
    // Its claim is not the one read (taken away and claimed again, say).
    line.leave_on_publish("t", name, text, vec![landing("another-nonce", seen)]);
    let published = publish_main(&*store, hub, &held, &work);
    assert!(
        matches!(&published, Ok(Published::Rejected(moved)) if moved.is_empty()),
        "{published:?}"
    );
    assert_eq!(
        hub_git(hub, &["for-each-ref", "refs/heads/main"]),
        main_before,
        "nothing pushed"
    );
    // Its file is not as read.
    line.leave_on_publish("t", name, text, vec![landing(&nonce, b"task = \"old\"\n")]);
    let published = publish_main(&*store, hub, &held, &work);
    assert!(
        matches!(&published, Ok(Published::Rejected(_))),
        "{published:?}"
    );
    assert_eq!(
        hub_git(hub, &["for-each-ref", "refs/heads/main"]),
        main_before,
        "nothing pushed"
    );
    assert!(line.read_line(true).unwrap().files.len() == 2);
    assert_eq!(store.list().unwrap().len(), 2, "both claims still held");
    // As read, its claim held: both land in one write.
    let before = hub_git(hub, &["rev-parse", "farm/claims"]);
    line.leave_on_publish("t", name, text, vec![landing(&nonce, seen)]);
    let published = publish_main(&*store, hub, &held, &work);
    assert!(matches!(published, Ok(Published::Pushed)), "{published:?}");
    assert_ne!(
        hub_git(hub, &["for-each-ref", "refs/heads/main"]),
        main_before
    );
    let files = line.read_line(true).unwrap().files;
    assert_eq!(
        files,
        [(
            other.to_owned(),
            b"task = \"u\"\nlanded = \"abc\"\n".to_vec()
        )]
    );
    let left: Vec<String> = store
        .list()
        .unwrap()
        .into_iter()
        .map(|l| l.name.to_string())
        .collect();
    assert_eq!(left, ["u"], "the change behind releases its own claim");
    let commits = hub_git(
        hub,
        &["rev-list", &format!("{}..farm/claims", before.trim())],
    );
    assert_eq!(commits.lines().count(), 1, "one write: {commits}");
}

/// git's output in the hub's repository.
fn hub_git(hub: &Hub, args: &[&str]) -> String {
    let out = crate::common::git_command()
        .arg("-C")
        .arg(hub.dir().join("hub.git"))
        .args(args)
        .envs(crate::common::GIT_ENV)
        .output()
        .unwrap();
    assert!(out.status.success(), "git {args:?}: {out:?}");
    String::from_utf8(out.stdout).unwrap()
}

/// A work repository with one commit on `main` (`t.txt`), for publishing.
/// `store`'s publish, under `held`, of `work`'s HEAD to the hub's `main`.
fn publish_main(
    store: &dyn ClaimStore,
    hub: &Hub,
    held: &Held,
    work: &farm::git::command::Repo,
) -> Result<farm::claims::Published, StoreError> {
    store.publish(
        held,
        work,
        &hub.url(),
        &["HEAD:refs/heads/main".to_owned()],
        &[],
    )
}

fn work_repo(dir: &Path) -> farm::git::command::Repo {
    let work = farm::git::command::Repo::new(dir.join("work"));
    std::fs::create_dir_all(work.dir()).unwrap();
    for args in [
        &["init", "--quiet", "-b", "main"][..],
        &["config", "user.email", "t@example.com"],
        &["config", "user.name", "t"],
    ] {
        work.run(args).unwrap();
    }
    std::fs::write(work.dir().join("t.txt"), "done\n").unwrap();
    assert!(work.commit_all("t: the work").unwrap());
    work
}

/// The lock of `main` a receive-pack killed between the refs of an
/// atomic push leaves behind (see [`cut_between_refs_once`]).
pub(crate) const LEAVE_LOCK: &str = ": > refs/heads/main.lock";

/// git's files backend commits the refs of an atomic push one after
/// another (the claims branch before `main`). A `receive-pack` killed
/// between the two left the claim released ("work published") and `main`
/// unmoved, with `refs/heads/main.lock` behind: farm read the landed release
/// as proof that the work had landed too, said the task was done and reset
/// the clone, so the work was on no hub ref. This hook plays that cut: once
/// both refs are committed it puts `main` back, leaves its lock, and kills
/// receive-pack before it reports. `then`, a shell line, runs before the
/// kill (in the hub): [`LEAVE_LOCK`] plays the cut as git leaves it.
pub(crate) fn cut_between_refs_once(dir: &Path, then: &str) -> std::path::PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let mark = dir.join("cut");
    let hook = dir.join("hub.git/hooks/reference-transaction");
    std::fs::create_dir_all(hook.parent().unwrap()).unwrap();
    std::fs::write(
        &hook,
        format!(
            "#!/bin/sh\n[ \"$1\" = committed ] || {{ cat > /dev/null; exit 0; }}\n\
             claims= main= old=\n\
             while read o n ref; do\n\
               [ \"$ref\" = refs/heads/farm/claims ] && claims=$n\n\
               [ \"$ref\" = refs/heads/main ] && {{ main=$n; old=$o; }}\n\
             done\n\
             [ -n \"$claims\" ] && [ -n \"$main\" ] || exit 0\n\
             [ -e '{mark}' ] && exit 0\n: > '{mark}'\n\
             unset GIT_OBJECT_DIRECTORY GIT_ALTERNATE_OBJECT_DIRECTORIES GIT_QUARANTINE_PATH\n\
             if [ \"$old\" = 0000000000000000000000000000000000000000 ]; then\n\
               git update-ref -d refs/heads/main \"$main\"\n\
             else\n\
               git update-ref refs/heads/main \"$old\" \"$main\"\n\
             fi\n\
             {then}\n\
             kill -9 $PPID\n",
            mark = mark.display(),
        ),
    )
    .unwrap();
    std::fs::set_permissions(&hook, std::fs::Permissions::from_mode(0o755)).unwrap();
    mark
}

/// The release of an atomic publish landed and the work did not (see
/// [`cut_between_refs_once`]): that is not `Pushed` — the caller would call
/// the task done and drop the work — and the lock left on the hub is named,
/// with what to do, by the next push it blocks.
pub fn a_publish_cut_between_its_refs_is_not_pushed(hub: &Hub) {
    use farm::claims::Published;
    let store = hub.store();
    let tmp = tempfile::tempdir().unwrap();
    let work = work_repo(tmp.path());
    hub.client(work.dir());
    let held = won(store.try_claim(claim("t", "alice", me()), false).unwrap());
    let mark = cut_between_refs_once(hub.dir(), LEAVE_LOCK);
    let published = publish_main(&*store, hub, &held, &work);
    assert!(mark.exists(), "the hook did not run");
    assert!(
        hub.dir().join("hub.git/refs/heads/main.lock").exists(),
        "the hook left no lock"
    );
    match &published {
        Ok(Published::Lost(why)) => assert!(why.contains("refs/heads/main"), "{why}"),
        other => panic!("the work is on no hub ref, yet the publish said {other:?}"),
    }
    // The next publish is blocked by the lock: said, naming it.
    let held = won(store.try_claim(claim("u", "alice", me()), false).unwrap());
    let blocked = publish_main(&*store, hub, &held, &work);
    let said = match blocked {
        Err(e) => e.to_string(),
        Ok(p) => panic!("a push through a stale ref lock: {p:?}"),
    };
    assert!(said.contains("main.lock"), "{said}");
}

/// The fs store's publish (a push of the work alone, under the claim's OS
/// lock) through a ref lock that a cut push left on the hub: every push of
/// `main` is refused until a person removes it, so it is said, naming the
/// lock, instead of being retried as a branch that moved (twenty rounds,
/// then "too busy").
#[test]
fn a_stale_ref_lock_blocks_the_fs_store_with_its_name() {
    use farm::git::command::Repo;
    let tmp = tempfile::tempdir().unwrap();
    let hub = tmp.path().join("hub.git");
    Repo::new(tmp.path())
        .run([
            "init",
            "--quiet",
            "--bare",
            "-b",
            "main",
            hub.to_str().unwrap(),
        ])
        .unwrap();
    let store = FsStore::new(&hub);
    let work = work_repo(tmp.path());
    std::fs::write(hub.join("refs/heads/main.lock"), "").unwrap();
    let held = won(store.try_claim(claim("t", "alice", me()), true).unwrap());
    let said = match store.publish(
        &held,
        &work,
        hub.to_str().unwrap(),
        &["HEAD:refs/heads/main".to_owned()],
        &[],
    ) {
        Err(e) => e.to_string(),
        Ok(p) => panic!("a push through a stale ref lock: {p:?}"),
    };
    assert!(said.contains("main.lock"), "{said}");
    assert!(said.contains("rm '"), "says what to do: {said}");
}

/// A holder whose clock ran 7 minutes behind, against a 2-minute threshold:
/// its claim, stamped "7 minutes ago" the moment it was made, was judged
/// stale ("heartbeat (less the clock skew allowance) 2m03s ago") and reaped
/// at once by a farm that had just seen it appear; with ±10 minutes between
/// machines, the slow one did 11 sessions and finished none. A record seen
/// appear is judged on the judge's own clock, and the skew is named.
pub fn a_claim_stamped_by_a_clock_far_behind_is_not_reaped_as_it_appears(hub: &Hub) {
    let tmp = tempfile::tempdir().unwrap();
    let here = hub.store_in(&tmp.path().join("cache-here"));
    let there = hub.store_in(&tmp.path().join("cache-there"));
    assert!(here.list().unwrap().is_empty(), "a first look");
    let behind = SystemTime::now() - Duration::from_secs(420);
    let mut slow = Claim::new(id("t"), "bob", None, 1, behind);
    slow.host = "box2".into();
    won(there.try_claim(slow, false).unwrap());
    let listed = here.list().unwrap();
    let two_minutes = judge(Some(Duration::from_secs(120)), &|_| None);
    let verdict = listed[0].judge(&two_minutes);
    assert!(
        !verdict.reapable,
        "reaped as it appeared: {}",
        verdict.reason
    );
    assert!(
        matches!(
            here.reap(&listed[0], &two_minutes).unwrap(),
            Reap::Skipped(_)
        ),
        "the fresh claim was taken"
    );
    let off = farm::claims::clocks_off(&listed);
    let secs = off.get("box2").copied().unwrap_or_default();
    assert!((-440..=-410).contains(&secs), "box2's clock: {off:?}");
    // A farm started later, on the same state dir, still knows it appeared.
    drop(here);
    let again = hub.store_in(&tmp.path().join("cache-here"));
    let listed = again.list().unwrap();
    assert!(!listed[0].judge(&two_minutes).reapable);
}

/// A claims cache that lacks a commit of the claims' history when a push
/// walks it ("Could not read <oid>; could not parse commit <oid>", seen in
/// CI's sixty-task run, which ended a loop and the run with exit 1): the
/// claim is built again on the tip fetched whole, not given up.
pub fn a_claims_cache_missing_an_old_commit_still_claims(hub: &Hub) {
    let tmp = tempfile::tempdir().unwrap();
    let cache = tmp.path().join("cache-here");
    let here = hub.store_in(&cache);
    let there = hub.store_in(&tmp.path().join("cache-there"));
    won(here.try_claim(claim("a", "alice", None), false).unwrap());
    let listed = farm::git::command::Repo::new(&cache)
        .run(["ls-remote", &hub.url(), "refs/heads/farm/claims"])
        .unwrap();
    let first = listed.split_whitespace().next().unwrap().to_owned();
    won(there.try_claim(claim("b", "bob", None), false).unwrap());
    assert_eq!(here.list().unwrap().len(), 2, "here has seen b's claim");
    // Lose the first claims commit from this cache.
    let loose = cache.join("objects").join(&first[..2]).join(&first[2..]);
    std::fs::remove_file(&loose).expect("the first commit is a loose object here");
    // The branch moves on elsewhere; this cache builds on what it saw.
    won(there.try_claim(claim("c", "bob", None), false).unwrap());
    won(here.try_claim(claim("d", "alice", None), false).unwrap());
    let names: Vec<String> = there.list().unwrap().into_iter().map(|l| l.name).collect();
    assert_eq!(names, ["a", "b", "c", "d"]);
}
