//! Recovery of an agent's private clone (the rules are
//! `PrivateClone::recover`'s, in `src/run/clone.rs`): what a farm killed
//! mid-work leaves in a clone — an interrupted rebase, merge, cherry-pick
//! or am, stale git locks, a clone deleted or broken, a second clone left
//! behind the branch — is recognised at the next start, the agent's own
//! commits reach the hub, and nothing else does.
//!
//! Each test builds the situation for real: a first `farm run` makes the
//! clone, then git itself is stopped in it (on a conflict, or with the lock a
//! SIGKILL leaves), and the next `farm run` must finish the board.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::common::{Env, Output, git_in, patch_ids};

const LIMIT: Duration = Duration::from_secs(120);

/// The run journal, in the state dir.
const JOURNAL: &str = "journal.jsonl";

/// An agent that does its task in one commit of its own file.
const WORKER: &str = "set -eu\necho \"$FARM_TASK\" > \"$FARM_TASK.txt\"\ngit add -A\ngit commit -qm \"$FARM_TASK\"\n";

fn state(env: &Env) -> PathBuf {
    env.tmp.path().join("state")
}

fn clone_dir(env: &Env, dir: &str) -> PathBuf {
    state(env).join("clones").join(dir)
}

/// `farm run --name a --agent AGENT --state-dir TMP/state ARGS...`.
fn run(env: &Env, agent: &str, args: &[&str]) -> Output {
    let state = state(env).display().to_string();
    let mut all = vec![
        "run",
        "--name",
        "a",
        "--agent",
        agent,
        "--state-dir",
        &state,
    ];
    all.extend(args);
    env.farm_git(all).run_within(LIMIT)
}

fn add_task(env: &Env, id: &str) {
    env.farm_git(["task", "add", id, "-m", "do it"])
        .run()
        .success();
}

/// `git ARGS...` in `dir`; its stdout, trimmed. Fails the test if git fails.
#[track_caller]
fn git(env: &Env, dir: &Path, args: &[&str]) -> String {
    let (ok, out, err) = git_in(dir, env.tmp.path(), args);
    assert!(ok, "git {args:?} in {}: {err}", dir.display());
    out.trim_end().to_owned()
}

fn done(env: &Env) -> BTreeSet<String> {
    env.git(["ls-tree", "--name-only", "main", "tasks/done/"])
        .lines()
        .filter_map(|p| p.strip_prefix("tasks/done/")?.strip_suffix(".md"))
        .map(str::to_owned)
        .collect()
}

fn rescues(env: &Env) -> Vec<String> {
    env.git([
        "for-each-ref",
        "--format=%(refname)",
        "refs/heads/farm/rescue/",
    ])
    .lines()
    .map(str::to_owned)
    .collect()
}

/// No rescue branch and not main holds a conflict marker.
#[track_caller]
fn assert_no_markers(env: &Env, out: &Output) {
    for r in rescues(env).iter().map(String::as_str).chain(["main"]) {
        let (found, text, _) =
            env.git_output(["grep", "-n", "-e", "^<<<<<<< ", "-e", "^>>>>>>> ", r]);
        assert!(!found, "`{r}` holds conflict markers: {text}\n{out:#?}");
    }
}

/// The patch id of commit `sha` in `dir`.
fn patch_id(env: &Env, dir: &Path, sha: &str) -> String {
    let show = git(env, dir, &["show", "--format=", "-p", sha]);
    let ids = patch_ids(dir, &format!("commit {sha}\n\n{show}"));
    ids.into_iter().next().expect("a commit with a patch")
}

/// Is the patch of commit `sha` (made in `dir`) on some hub ref?
fn on_the_hub(env: &Env, dir: &Path, sha: &str) -> bool {
    let want = patch_id(env, dir, sha);
    crate::common::patch_ids(&env.hub, &env.git(["log", "--all", "--no-merges", "-p"]))
        .contains(&want)
}

/// A hub with `shared.txt`, one task `t0` run to the end by agent `a`, so its
/// clone exists; then, in the clone, an agent commit `mine` on `shared.txt`
/// and on the hub a commit `theirs` on the same line, fetched into the clone.
/// Returns the clone, the agent's commit and the hub's.
fn conflicted(env: &Env) -> (PathBuf, String, String) {
    add_task(env, "t0");
    let agent = env.agent_script("worker.sh", WORKER);
    run(env, &agent, &[]).success();
    let clone = clone_dir(env, "a");
    git(env, &clone, &["fetch", "-q", "origin", "main"]);
    git(env, &clone, &["reset", "-q", "--hard", "origin/main"]);
    std::fs::write(clone.join("shared.txt"), "mine\n").unwrap();
    git(env, &clone, &["commit", "-qam", "mine"]);
    let mine = git(env, &clone, &["rev-parse", "HEAD"]);
    std::fs::write(env.hub.join("shared.txt"), "theirs\n").unwrap();
    env.git(["commit", "-qam", "theirs"]);
    let theirs = env.git(["rev-parse", "HEAD"]);
    git(env, &clone, &["fetch", "-q", "origin", "main"]);
    (clone, mine, theirs)
}

/// The next run in a clone left as `conflicted` plus `stop` (git stopped in
/// it) finishes a new task, exit 0; the agent's commit reaches the hub and
/// no ref holds conflict markers.
fn next_run_recovers(env: &Env, clone: &Path, mine: &str) -> Output {
    add_task(env, "t1");
    let agent = env.agent_script("worker.sh", WORKER);
    let out = run(env, &agent, &[]).success();
    assert_eq!(
        done(env),
        BTreeSet::from(["t0".into(), "t1".into()]),
        "{out:#?}"
    );
    assert!(
        on_the_hub(env, clone, mine),
        "the agent's commit is on no hub ref: {:?}\n{out:#?}",
        rescues(env)
    );
    assert_no_markers(env, &out);
    // The rescue at start-up counts (it said "0 rescued"), in the journal too.
    assert!(out.stderr.contains(", 1 rescued"), "{out:#?}");
    let journal = std::fs::read_to_string(state(env).join(JOURNAL)).unwrap();
    let logged = journal
        .lines()
        .filter(|l| l.contains("\"rescue\"") && l.contains("farm/rescue/orphan/"))
        .count();
    assert_eq!(logged, 1, "{journal}");
    out
}

/// Regression: a `git rebase` stopped on a conflict (farm killed while git
/// waited) is aborted, and the agent's own commit — not the half-rebased
/// work tree — goes to the rescue branch.
#[test]
fn an_interrupted_rebase_rescues_the_agents_commit() {
    let env = Env::git_hub(&[("shared.txt", "base\n")]);
    let (clone, mine, _) = conflicted(&env);
    let (ok, _, _) = git_in(&clone, env.tmp.path(), ["rebase", "origin/main"]);
    assert!(
        !ok && clone.join(".git/rebase-merge").is_dir(),
        "the rebase stopped"
    );
    next_run_recovers(&env, &clone, &mine);
}

/// Regression: a SIGKILL during `git rebase` leaves the rebase's state
/// *and* git's `index.lock`: `git rebase --abort` then fails, and the next
/// farm committed the conflict markers on top of main and pushed that as
/// the rescue, the agent's commit on no hub ref.
#[test]
fn a_rebase_killed_with_its_index_lock_rescues_the_agents_commit() {
    let env = Env::git_hub(&[("shared.txt", "base\n")]);
    let (clone, mine, _) = conflicted(&env);
    let (ok, _, _) = git_in(&clone, env.tmp.path(), ["rebase", "origin/main"]);
    assert!(
        !ok && clone.join(".git/rebase-merge").is_dir(),
        "the rebase stopped"
    );
    std::fs::write(clone.join(".git/index.lock"), "").unwrap();
    let out = next_run_recovers(&env, &clone, &mine);
    assert!(
        out.stderr.contains("index.lock"),
        "the lock is named: {out:#?}"
    );
}

/// Regression: `git rebase` SIGKILLed half-way (by its own `--exec`, after
/// the first of the agent's two commits was replayed): the rebase is
/// aborted and both commits as made reach the hub.
#[test]
fn a_rebase_killed_half_way_rescues_the_agents_commits() {
    let env = Env::git_hub(&[("shared.txt", "base\n")]);
    add_task(&env, "t0");
    let agent = env.agent_script("worker.sh", WORKER);
    run(&env, &agent, &[]).success();
    let clone = clone_dir(&env, "a");
    git(&env, &clone, &["fetch", "-q", "origin", "main"]);
    git(&env, &clone, &["reset", "-q", "--hard", "origin/main"]);
    let mut mine = Vec::new();
    for f in ["one", "two"] {
        std::fs::write(clone.join(format!("{f}.txt")), "mine\n").unwrap();
        git(&env, &clone, &["add", "-A"]);
        git(&env, &clone, &["commit", "-qm", f]);
        mine.push(git(&env, &clone, &["rev-parse", "HEAD"]));
    }
    std::fs::write(env.hub.join("shared.txt"), "theirs\n").unwrap();
    env.git(["commit", "-qam", "theirs"]);
    git(&env, &clone, &["fetch", "-q", "origin", "main"]);
    let (ok, _, _) = git_in(
        &clone,
        env.tmp.path(),
        ["rebase", "--exec", "kill -9 $PPID", "origin/main"],
    );
    assert!(
        !ok && clone.join(".git/rebase-merge").is_dir(),
        "the rebase was killed"
    );
    next_run_recovers(&env, &clone, &mine[0]);
    assert!(on_the_hub(&env, &clone, &mine[1]));
}

/// Regression: a merge stopped on a conflict.
#[test]
fn an_interrupted_merge_rescues_the_agents_commit() {
    let env = Env::git_hub(&[("shared.txt", "base\n")]);
    let (clone, mine, _) = conflicted(&env);
    let (ok, _, _) = git_in(
        &clone,
        env.tmp.path(),
        ["merge", "--no-edit", "origin/main"],
    );
    assert!(
        !ok && clone.join(".git/MERGE_HEAD").exists(),
        "the merge stopped"
    );
    next_run_recovers(&env, &clone, &mine);
}

/// Regression: a cherry-pick the agent started, stopped on a conflict, with
/// a second commit of the agent's made before it.
#[test]
fn an_interrupted_cherry_pick_rescues_the_agents_commits() {
    let env = Env::git_hub(&[("shared.txt", "base\n")]);
    let (clone, mine, theirs) = conflicted(&env);
    std::fs::write(clone.join("more.txt"), "more\n").unwrap();
    git(&env, &clone, &["add", "more.txt"]);
    git(&env, &clone, &["commit", "-qm", "more"]);
    let more = git(&env, &clone, &["rev-parse", "HEAD"]);
    let (ok, _, _) = git_in(&clone, env.tmp.path(), ["cherry-pick", &theirs]);
    assert!(
        !ok && clone.join(".git/CHERRY_PICK_HEAD").exists(),
        "the pick stopped"
    );
    next_run_recovers(&env, &clone, &mine);
    assert!(on_the_hub(&env, &clone, &more));
}

/// Regression: `git am` stopped on a patch that does not apply
/// (rebase-apply, as an old-style rebase leaves it too).
#[test]
fn an_interrupted_am_rescues_the_agents_commit() {
    let env = Env::git_hub(&[("shared.txt", "base\n")]);
    let (clone, mine, theirs) = conflicted(&env);
    let patch = env.tmp.path().join("theirs.patch");
    let text = git(&env, &clone, &["format-patch", "-1", "--stdout", &theirs]);
    std::fs::write(&patch, format!("{text}\n")).unwrap();
    let (ok, _, _) = git_in(
        &clone,
        env.tmp.path(),
        ["am", "-3", patch.to_str().unwrap()],
    );
    assert!(
        !ok && clone.join(".git/rebase-apply").is_dir(),
        "git am stopped"
    );
    next_run_recovers(&env, &clone, &mine);
}

/// Regression: on a `farm init` hub, a board run to the end and a task
/// added, the next run with the same name found "an earlier run left
/// commits in this clone" and pushed a rescue branch holding a commit that
/// undid finished work (the second clone's work tree lags its HEAD after an
/// in-memory rebase); it did so on every later run.
#[test]
fn a_finished_run_leaves_nothing_to_rescue() {
    let env = Env::git_hub(&[]);
    for t in ["t1", "t2", "t3", "t4"] {
        add_task(&env, t);
    }
    let agent = env.agent_script("worker.sh", WORKER);
    run(&env, &agent, &[]).success();
    assert!(clone_dir(&env, "a@2").is_dir(), "the second clone was used");
    for (round, t) in ["t5", "t6"].into_iter().enumerate() {
        add_task(&env, t);
        let out = run(&env, &agent, &[]).success();
        assert!(
            !out.stderr.contains("earlier run left"),
            "round {round}: a false rescue: {out:#?}"
        );
        assert_eq!(
            rescues(&env),
            Vec::<String>::new(),
            "round {round}: {out:#?}"
        );
    }
    assert_eq!(done(&env).len(), 6);
}

/// A hub with one task `t0` run to the end by agent `a` (so its clone
/// exists), and a task `t1` added after; the clone.
fn primed(env: &Env) -> PathBuf {
    add_task(env, "t0");
    let agent = env.agent_script("worker.sh", WORKER);
    run(env, &agent, &[]).success();
    add_task(env, "t1");
    clone_dir(env, "a")
}

/// The next run finishes the board (`t0`, `t1`), exit 0.
#[track_caller]
fn next_run_finishes(env: &Env) -> Output {
    let agent = env.agent_script("worker.sh", WORKER);
    let out = run(env, &agent, &[]);
    assert_eq!(out.code, Some(0), "{out:#?}");
    assert_eq!(
        done(env),
        BTreeSet::from(["t0".into(), "t1".into()]),
        "{out:#?}"
    );
    out
}

/// Regression: git locks a SIGKILL left in the clone (`index.lock`, a ref
/// lock) wedged the agent for the whole run, every later run exited 1, and
/// the message did not name the file. They are stale — farm holds the
/// clone's flock, the session's group is gone — so they are removed, each
/// named.
#[test]
fn stale_git_locks_in_a_clone_are_removed_and_named() {
    let env = Env::git_hub(&[]);
    let clone = primed(&env);
    let git_dir = clone.join(".git");
    std::fs::create_dir_all(git_dir.join("refs/remotes/origin")).unwrap();
    let locks = [
        "index.lock",
        "HEAD.lock",
        "config.lock",
        "refs/remotes/origin/main.lock",
    ];
    // A setting farm must put back makes it write the clone's config,
    // taking `config.lock`.
    git(&env, &clone, &["config", "gc.auto", "1"]);
    for lock in locks {
        std::fs::write(git_dir.join(lock), "").unwrap();
    }
    let out = next_run_finishes(&env);
    for lock in ["index.lock", "HEAD.lock", "config.lock", "origin/main.lock"] {
        let said = out.stderr.lines().filter(|l| l.contains(lock)).count();
        assert_eq!(said, 1, "`{lock}` named once: {out:#?}");
    }
    assert_eq!(rescues(&env), Vec::<String>::new(), "{out:#?}");
}

/// Regression: a session killed at its `--timeout` while git held
/// `index.lock` left the lock behind, and committing what the session left
/// failed on it. The run goes on: the task is tried again and done, and the
/// lock is named.
#[test]
fn a_session_killed_holding_index_lock_does_not_wedge_the_clone() {
    let env = Env::git_hub(&[]);
    add_task(&env, "t0");
    add_task(&env, "t1");
    let once = env.tmp.path().join("hung-once");
    let agent = env.agent_script(
        "hang-once.sh",
        &format!(
            "set -eu\nif [ \"$FARM_TASK\" = t0 ] && [ ! -e '{once}' ]; then\n  touch '{once}'\n  echo half > half.txt\n  touch .git/index.lock\n  sleep 60\nfi\n{WORKER}",
            once = once.display()
        ),
    );
    let out = run(&env, &agent, &["--timeout", "2s"]);
    assert_eq!(out.code, Some(0), "{out:#?}");
    assert!(once.exists(), "the session hung once");
    assert_eq!(
        done(&env),
        BTreeSet::from(["t0".into(), "t1".into()]),
        "{out:#?}"
    );
    assert!(
        out.stderr.contains("index.lock"),
        "the lock is named: {out:#?}"
    );
    // What the hung session wrote was rescued with its failed attempt.
    let rescued = rescues(&env);
    assert_eq!(rescued.len(), 1, "{out:#?}");
    assert_eq!(
        env.git(["show", &format!("{}:half.txt", rescued[0])]),
        "half"
    );
}

/// Regression: a clone whose `.git` the agent deleted ("exists but is not a
/// clone": every later run exited 1) is set aside and made again.
#[test]
fn a_clone_without_its_git_dir_is_made_again() {
    let env = Env::git_hub(&[]);
    let clone = primed(&env);
    std::fs::remove_dir_all(clone.join(".git")).unwrap();
    let out = next_run_finishes(&env);
    assert!(out.stderr.contains("no usable clone"), "{out:#?}");
    assert!(clone.join(".git").is_dir());
    next_run_finishes(&env);
}

/// Regression: a clone whose `.git` is broken (HEAD garbage) has its
/// commits rescued from it, and is made again.
#[test]
fn a_broken_clone_is_rescued_and_made_again() {
    let env = Env::git_hub(&[]);
    let clone = primed(&env);
    std::fs::write(clone.join("mine.txt"), "mine\n").unwrap();
    git(&env, &clone, &["add", "mine.txt"]);
    git(&env, &clone, &["commit", "-qm", "mine"]);
    let mine = git(&env, &clone, &["rev-parse", "HEAD"]);
    std::fs::write(clone.join(".git/HEAD"), "garbage\n").unwrap();
    let out = next_run_finishes(&env);
    assert!(out.stderr.contains("no usable clone"), "{out:#?}");
    let rescued = rescues(&env);
    assert_eq!(rescued.len(), 1, "{out:#?}");
    assert!(
        env.git_ok(["merge-base", "--is-ancestor", &mine, &rescued[0]]),
        "the agent's commit is rescued: {out:#?}"
    );
    assert!(out.stderr.contains(", 1 rescued"), "{out:#?}");
}

/// Regression: a `.git` without HEAD and objects: nothing can be read from
/// it, the next runs go on all the same.
#[test]
fn a_clone_without_head_and_objects_is_made_again() {
    let env = Env::git_hub(&[]);
    let clone = primed(&env);
    std::fs::remove_dir_all(clone.join(".git/objects")).unwrap();
    std::fs::remove_file(clone.join(".git/HEAD")).unwrap();
    let out = next_run_finishes(&env);
    assert!(out.stderr.contains("no usable clone"), "{out:#?}");
}
