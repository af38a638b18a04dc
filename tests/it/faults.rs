//! `farm run` against agents and hubs that misbehave: every path of the
//! loop makes progress or counts: none runs sessions, pushes rescue
//! branches or retries without counting an attempt, pausing or stopping.
//! Each test bounds the run with a timeout: a loop that spins or waits for
//! ever fails it.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use crate::common::{Env, Farm, wait_for};
use crate::run::{
    LIMIT, add_task, assert_hub_sound, board, farm_run, log_lines, logs, rescue_branches, run_args,
    show,
};

/// The session log's lines for `task` (one line per session).
fn sessions_of(env: &Env, task: &str) -> usize {
    log_lines(env, "sessions.log")
        .iter()
        .filter(|l| l.as_str() == task)
        .count()
}

/// Regression: an agent that deletes its own claim file from the hub made
/// farm run 391 sessions in 20 s, push 389 rescue branches and count no
/// attempt. Removing the claim is the session's failure: each session
/// counts an attempt (noted on the board), its work is rescued once, and
/// the task ends in `tasks/failed/` — whether the session went on to
/// succeed (`k1`, the loss is seen at the push) or to fail (`k2`, seen when
/// the failed attempt is recorded).
#[test]
fn an_agent_that_removes_its_own_claim_fails_its_attempts_and_stops() {
    let env = Env::git_hub(&[]);
    let logs = logs(&env);
    for id in ["k1", "k2"] {
        add_task(&env, &[id, "--max-attempts", "2", "-m", "Anything"]);
    }
    let agent = env.agent_script(
        "tamper.sh",
        &format!(
            r#"set -eu
echo "$FARM_TASK" >> '{}/sessions.log'
rm -f "$FARM_CLAIM"
echo "work $FARM_ATTEMPT" > "f-$FARM_TASK"
git add -A
git commit -q -m w
echo "removed my claim"
if [ "$FARM_TASK" = k2 ]; then exit 3; fi
"#,
            logs.display()
        ),
    );
    let out = farm_run(&env, &agent, &[]).code(5);
    for id in ["k1", "k2"] {
        assert_eq!(sessions_of(&env, id), 2, "{id}: {out:#?}");
        let text = show(&env, &format!("main:tasks/failed/{id}.md"))
            .unwrap_or_else(|| panic!("{id} not in tasks/failed/: {out:#?}"));
        assert_eq!(text.matches("## Attempt ").count(), 2, "{id}: {text}");
        assert!(text.contains("\nattempts = 2\n"), "{id}: {text}");
        let branches = rescue_branches(&env, id);
        assert_eq!(branches.len(), 2, "{id}: {branches:?}");
    }
    assert!(board(&env, "tasks").is_empty() && board(&env, "tasks/done").is_empty());
    assert!(show(&env, "main:f-k1").is_none(), "tampered work on main");
    assert!(
        out.stderr
            .contains("4 sessions: 0 done, 4 failed attempts, 4 rescued"),
        "{out:#?}"
    );
    // The journal counts the same: four failed attempts, four rescues.
    let journal = std::fs::read_to_string(env.tmp.path().join("state/journal.jsonl")).unwrap();
    let events: Vec<serde_json::Value> = journal
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let count = |event: &str| events.iter().filter(|e| e["event"] == event).count();
    assert_eq!((count("failed"), count("rescue")), (4, 4), "{journal}");
    let end = events.iter().rfind(|e| e["event"] == "run_end").unwrap();
    assert_eq!((&end["failed"], &end["rescued"]), (&4.into(), &4.into()));
    assert_hub_sound(&env);
}

/// Regression: a claim taken over by another holder counts no attempt (the
/// task is theirs) — but an agent whose claim on one task is taken over
/// again and again would run sessions on it for ever, counting nothing.
/// Here each session replaces its own claim with one of a holder on another
/// host, which is reaped as stale a little later: after the second
/// take-over the agent leaves the task to the others, and the run ends.
#[test]
fn an_agent_whose_claim_is_taken_over_twice_leaves_the_task() {
    let env = Env::git_hub(&[]);
    let logs = logs(&env);
    add_task(&env, &["k1", "--max-attempts", "9", "-m", "Anything"]);
    let other = crate::common::record("k1", "other", "elsewhere", Duration::ZERO, Duration::ZERO);
    let planted = logs.join("other-claim.toml");
    std::fs::write(&planted, other.to_toml()).unwrap();
    let agent = env.agent_script(
        "takeover.sh",
        &format!(
            r#"set -eu
echo "$FARM_TASK" >> '{}/sessions.log'
rm -f "$FARM_CLAIM"
cp '{}' "$FARM_CLAIM"
echo work > "f-$FARM_TASK"
git add -A
git commit -q -m w
"#,
            logs.display(),
            planted.display()
        ),
    );
    let out = env
        .farm_git(run_args(
            &env,
            &agent,
            &["--stale-after", "2s", "--heartbeat", "500ms"],
        ))
        .run_within(Duration::from_secs(60))
        .code(6);
    assert_eq!(sessions_of(&env, "k1"), 2, "{out:#?}");
    assert_eq!(rescue_branches(&env, "k1").len(), 2, "{out:#?}");
    assert!(out.stderr.contains("leaving it to the others"), "{out:#?}");
    assert_eq!(board(&env, "tasks"), BTreeSet::from(["k1".into()]));
    let text = show(&env, "main:tasks/k1.md").unwrap();
    assert!(
        !text.contains("## Attempt"),
        "taken over: no attempt: {text}"
    );
}

/// An agent file that cannot start: `bad` is its text, `mode` its
/// permissions. Written by a `sh` child, so that no thread of this test
/// process holds it open for writing when a farm child execs it (ETXTBSY).
fn unstartable(env: &Env, bad: &str, mode: &str) -> String {
    let path = env.tmp.path().join("agent-bin");
    let status = std::process::Command::new("sh")
        .arg("-c")
        .arg(r#"printf '%s\n' "$1" > "$2" && chmod "$3" "$2""#)
        .arg("sh")
        .arg(bad)
        .arg(&path)
        .arg(mode)
        .status()
        .unwrap();
    assert!(status.success());
    path.display().to_string()
}

/// Regression: an agent that cannot start burned every task into
/// `tasks/failed/` and the run exited 0. Exit 127 (its interpreter is
/// missing) or 126 (not executable, here behind a shell) on two different
/// tasks in a row is a setup error: the run stops with one message, no
/// attempt counted, no task moved. (A file that is not executable at all is
/// refused before anything starts.)
#[test]
fn an_agent_that_cannot_start_stops_the_run_with_no_attempt_counted() {
    /// What is wrong, the file's text and mode, how `--agent` runs its
    /// path, and the exit code the run must end with.
    type Case = (
        &'static str,
        &'static str,
        &'static str,
        fn(&str) -> String,
        i32,
    );
    let cases: [Case; 3] = [
        (
            "127",
            "#!/usr/bin/env nosuch-node-xyz\nconsole.log(1)",
            "755",
            |path| path.to_owned(),
            1,
        ),
        (
            "126",
            "#!/bin/sh\nexit 0",
            "644",
            |path| format!("sh -c 'exec {path}'"),
            1,
        ),
        (
            "not executable",
            "#!/bin/sh\nexit 0",
            "644",
            |path| path.to_owned(),
            2,
        ),
    ];
    for (what, text, mode, words, code) in cases {
        let env = Env::git_hub(&[]);
        for id in ["a", "b", "c"] {
            add_task(&env, &[id, "-m", "Anything"]);
        }
        let agent = words(&unstartable(&env, text, mode));
        let out = farm_run(&env, &agent, &[]).code(code);
        assert_eq!(
            out.stderr.matches("error:").count(),
            1,
            "{what}: one message: {out:#?}"
        );
        assert!(out.stderr.contains("agent-bin"), "{what}: {out:#?}");
        if code == 1 {
            assert!(out.stderr.contains("does not start"), "{what}: {out:#?}");
        }
        assert_eq!(
            board(&env, "tasks"),
            BTreeSet::from(["a", "b", "c"].map(String::from)),
            "{what}: {out:#?}"
        );
        for id in ["a", "b", "c"] {
            let text = show(&env, &format!("main:tasks/{id}.md")).unwrap();
            assert!(!text.contains("## Attempt"), "{what}: {id}: {text}");
            assert!(!text.contains("attempts ="), "{what}: {id}: {text}");
        }
        assert_hub_sound(&env);
    }
}

/// Regression: an agent that reset its clone to the root commit and
/// committed made ~20 rejected pushes per task, then main held both
/// `tasks/k1.md` and `tasks/done/k1.md`. A session whose branch does not
/// descend from the commit it started on is a failed attempt, its work
/// rescued; the board never holds a task in two places.
#[test]
fn an_agent_that_rewrites_history_fails_its_attempt_and_the_board_stays_whole() {
    let env = Env::git_hub(&[("README.txt", "hello\n")]);
    let logs = logs(&env);
    add_task(&env, &["k1", "--max-attempts", "1", "-m", "Anything"]);
    add_task(&env, &["k2", "--max-attempts", "1", "-m", "Anything"]);
    let agent = env.agent_script(
        "rewrite.sh",
        &format!(
            r#"set -eu
echo "$FARM_TASK" >> '{}/sessions.log'
git reset -q --hard "$(git rev-list --max-parents=0 HEAD)"
echo rewritten > "r-$FARM_TASK"
git add -A
git commit -q -m rewritten
"#,
            logs.display()
        ),
    );
    let out = farm_run(&env, &agent, &[]).code(5);
    for id in ["k1", "k2"] {
        assert_eq!(sessions_of(&env, id), 1, "{id}: {out:#?}");
        assert_eq!(rescue_branches(&env, id).len(), 1, "{id}: {out:#?}");
        let text = show(&env, &format!("main:tasks/failed/{id}.md"))
            .unwrap_or_else(|| panic!("{id} not failed: {out:#?}"));
        assert!(text.contains("## Attempt 1 "), "{id}: {text}");
    }
    assert!(board(&env, "tasks").is_empty(), "{out:#?}");
    assert!(board(&env, "tasks/done").is_empty(), "{out:#?}");
    assert!(!out.stderr.contains("push rejected"), "{out:#?}");
    assert!(show(&env, "main:r-k1").is_none() && show(&env, "main:r-k2").is_none());
    assert_hub_sound(&env);
}

/// Regression: a user editing a tracked file in the hub's work tree while
/// sessions ran made the run die ("the hub refused the push … unstaged
/// changes"). The push waits until the work tree is clean again, says so
/// once, and the run finishes.
#[test]
fn a_dirty_hub_work_tree_delays_the_push_and_the_run_finishes() {
    let env = Env::git_hub(&[("tracked.txt", "original\n")]);
    let logs = logs(&env);
    add_task(&env, &["t1", "-m", "Anything"]);
    let marker = logs.join("dirtied");
    let agent = env.agent_script(
        "dirty.sh",
        &format!(
            r#"set -eu
echo "a user's edit" >> '{hub}/tracked.txt'
touch '{marker}'
echo work > w1
git add -A
git commit -q -m w1
"#,
            hub = env.hub.display(),
            marker = marker.display()
        ),
    );
    let farm = env.farm_git(run_args(&env, &agent, &[]));
    let running = std::thread::spawn(move || farm.run_within(LIMIT));
    wait_for(&marker);
    // Long enough for the push to meet the dirty work tree on any machine
    // that is not extremely slow; a slower one merely pushes after the
    // restore, and the test still holds.
    std::thread::sleep(Duration::from_secs(3));
    env.git(["checkout", "--", "tracked.txt"]);
    let out = running.join().unwrap().success();
    assert_eq!(board(&env, "tasks/done"), BTreeSet::from(["t1".into()]));
    assert_eq!(show(&env, "main:w1").as_deref(), Some("work\n"));
    assert!(
        out.stderr.matches("waiting for the hub").count() <= 1,
        "said once: {out:#?}"
    );
    assert_hub_sound(&env);
}

/// Regression: after the last task failed, the run waited out a
/// circuit-breaker pause before exiting. With nothing left to claim it
/// exits at once (the pause is 30 s; the guard 20 s).
#[test]
fn the_last_failure_does_not_wait_out_the_breaker() {
    let env = Env::git_hub(&[]);
    add_task(&env, &["f1", "--max-attempts", "1", "-m", "Anything"]);
    let agent = env.agent_script("fail.sh", "echo failing\nexit 3\n");
    let started = Instant::now();
    let out = env
        .farm_git(run_args(
            &env,
            &agent,
            &["--trip-after", "1", "--trip-pause", "30s"],
        ))
        .run_within(Duration::from_secs(20))
        .code(5);
    assert!(started.elapsed() < Duration::from_secs(20));
    assert_eq!(board(&env, "tasks/failed"), BTreeSet::from(["f1".into()]));
    assert!(!out.stderr.contains("pausing"), "{out:#?}");
}

/// Regression: a task whose front matter says
/// `attempts = 5, max_attempts = 3` ran as "attempt 6 of 3". It is out of
/// attempts already: moved to `tasks/failed/` with a note, no session run.
#[test]
fn a_task_already_out_of_attempts_is_failed_without_a_session() {
    let env = Env::git_hub(&[]);
    let logs = logs(&env);
    let tasks = env.hub.join("tasks");
    std::fs::create_dir_all(&tasks).unwrap();
    std::fs::write(
        tasks.join("spent.md"),
        "+++\ntitle = \"Spent\"\nmax_attempts = 3\nattempts = 5\n+++\nTried enough.\n",
    )
    .unwrap();
    env.git(["add", "-A"]);
    env.git(["commit", "-q", "-m", "a spent task"]);
    add_task(&env, &["fresh", "-m", "Anything"]);
    let agent = env.agent_script(
        "agent.sh",
        &format!(
            "echo \"$FARM_TASK\" >> '{}/sessions.log'\necho done > \"d-$FARM_TASK\"\n",
            logs.display()
        ),
    );
    let out = farm_run(&env, &agent, &[]).code(5);
    assert_eq!(sessions_of(&env, "spent"), 0, "{out:#?}");
    assert_eq!(sessions_of(&env, "fresh"), 1, "{out:#?}");
    assert!(!out.stderr.contains("attempt 6 of 3"), "{out:#?}");
    assert_eq!(
        board(&env, "tasks/failed"),
        BTreeSet::from(["spent".into()])
    );
    assert_eq!(board(&env, "tasks/done"), BTreeSet::from(["fresh".into()]));
    let text = show(&env, "main:tasks/failed/spent.md").unwrap();
    assert!(text.contains("attempts = 5"), "{text}");
    assert!(text.contains("## Out of attempts"), "{text}");
    assert_hub_sound(&env);
}

/// `farm run ARGS...` with a `git` on PATH that SIGKILLs itself, once, when
/// farm runs `git <pattern>...` on its state dir (a clone, the claims cache) — as the OOM killer or a user
/// might kill one of farm's git children. Every other git command (and the
/// agent's own) is the real git.
fn run_with_git_killed_once(env: &Env, agent: &str, pattern: &str) -> crate::common::Output {
    run_with_git_killed_once_args(env, agent, pattern, &[])
}

fn run_with_git_killed_once_args(
    env: &Env,
    agent: &str,
    pattern: &str,
    args: &[&str],
) -> crate::common::Output {
    run_with_git_killed_once_in(env, agent, pattern, "/state/", args)
}

/// As [`run_with_git_killed_once_args`], for a git command whose arguments
/// hold `place` (not only the state dir's).
fn run_with_git_killed_once_in(
    env: &Env,
    agent: &str,
    pattern: &str,
    place: &str,
    args: &[&str],
) -> crate::common::Output {
    run_with_git_killed_once_leaving(env, agent, pattern, place, "", args)
}

/// [`run_with_git_killed_once_in`], the killed git leaving the file
/// `leave` (relative to the directory its `-C` names) as a git killed
/// half-way leaves its lock files.
fn run_with_git_killed_once_leaving(
    env: &Env,
    agent: &str,
    pattern: &str,
    place: &str,
    leave: &str,
    args: &[&str],
) -> crate::common::Output {
    let real = std::process::Command::new("sh")
        .args(["-c", "command -v git"])
        .output()
        .unwrap();
    let real = String::from_utf8(real.stdout).unwrap().trim().to_owned();
    let bin = env.tmp.path().join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let mark = env.tmp.path().join("git-killed");
    let wrapper = bin.join("git");
    std::fs::write(
        &wrapper,
        format!(
            "#!/bin/sh\ncase \" $* \" in *'{place}'*)\n  case \" $* \" in *\" {pattern} \"*)\n    if mkdir '{mark}' 2>/dev/null; then\n      [ '{leave}' = '' ] || [ \"$1\" != -C ] || : > \"$2/{leave}\"\n      kill -KILL $$\n    fi;;\n  esac;;\nesac\nexec '{real}' \"$@\"\n",
            mark = mark.display()
        ),
    )
    .unwrap();
    let mut perms = std::fs::metadata(&wrapper).unwrap().permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut perms, 0o755);
    std::fs::set_permissions(&wrapper, perms).unwrap();
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let out = env
        .farm_git(run_args(env, agent, args))
        .env("PATH", path)
        .run_within(LIMIT);
    assert!(mark.exists(), "farm never ran `git {pattern}`: {out:#?}");
    out
}

/// Regression (found by the chaos suite): the `git ls-remote` with which farm
/// checks a hub given by URL, killed by a signal, made a restarted farm exit
/// 2 ("cannot reach hub …: git was killed by signal 9"): a killed git is no
/// answer from the hub. It is run again, and the run does its task.
#[test]
fn a_killed_ls_remote_of_a_url_hub_is_run_again() {
    let env = Env::git_hub(&[]);
    add_task(&env, &["u1", "-m", "Anything"]);
    let agent = env.agent_script(
        "work.sh",
        "set -eu\necho w > \"w-$FARM_TASK\"\ngit add -A\ngit commit -q -m \"$FARM_TASK\"\n",
    );
    let url = format!("file://{}", env.hub.display());
    let out = run_with_git_killed_once_in(&env, &agent, "ls-remote", "file://", &["--hub", &url]);
    assert_eq!(out.code, Some(0), "{out:#?}");
    assert_eq!(
        board(&env, "tasks/done"),
        BTreeSet::from(["u1".into()]),
        "{out:#?}"
    );
}

/// Regression (found by the chaos suite in round 5 of seed
/// `1796113524439733115`): the shallow fetch of a URL hub's tip that reads
/// its farm.toml, killed half-way, left `shallow.lock` in the scratch
/// repository, and the fetch run again in it failed on that lock: farm
/// exited 2 and loop.sh gave up. Each try fetches into a new scratch
/// repository.
#[test]
fn a_killed_fetch_of_a_url_hub_s_tip_is_run_again_elsewhere() {
    let env = Env::git_hub(&[]);
    add_task(&env, &["f1", "-m", "Anything"]);
    let agent = env.agent_script(
        "work.sh",
        "set -eu\necho w > \"w-$FARM_TASK\"\ngit add -A\ngit commit -q -m \"$FARM_TASK\"\n",
    );
    let url = format!("file://{}", env.hub.display());
    let out = run_with_git_killed_once_leaving(
        &env,
        &agent,
        "--depth=1",
        "hub-tip-",
        "shallow.lock",
        &["--hub", &url],
    );
    assert_eq!(out.code, Some(0), "{out:#?}");
    assert_eq!(
        board(&env, "tasks/done"),
        BTreeSet::from(["f1".into()]),
        "{out:#?}"
    );
}

/// Regression (found by the chaos suite): a git of farm's that only reads —
/// found on the `git ls-tree` that read `farm.toml` on the hub's branch as
/// the run started (now read in-process); here the `git rev-parse` that
/// asks whether the hub is bare as it is opened — killed by a signal made
/// farm exit 1 ("git was killed by signal 9"); one reading HEAD's branch
/// answered "main" for any branch. A killed read is run again, wherever farm
/// runs it.
#[test]
fn a_killed_read_of_the_hubs_branch_is_run_again() {
    let env = Env::git_hub(&[]);
    add_task(&env, &["r1", "-m", "Anything"]);
    let agent = env.agent_script(
        "work.sh",
        "set -eu\necho w > \"w-$FARM_TASK\"\ngit add -A\ngit commit -q -m \"$FARM_TASK\"\n",
    );
    let out = run_with_git_killed_once_in(&env, &agent, "rev-parse", "--is-bare-repository", &[]);
    assert_eq!(out.code, Some(0), "{out:#?}");
    assert_eq!(
        board(&env, "tasks/done"),
        BTreeSet::from(["r1".into()]),
        "{out:#?}"
    );
}

/// Regression (found by the chaos suite): a git command of farm's killed by a
/// signal in its clone (there, its commit of a merge session; here, the
/// checkout of the branch as the new clone is first reset to it) made farm
/// exit 1 ("git was killed by signal 9", with a hint that the hub did not
/// answer). It is run again, and the run ends as if nothing happened: each
/// task done once, in one session, no rescue branch.
#[test]
fn a_killed_git_of_farms_in_its_clone_is_run_again() {
    let env = Env::git_hub(&[]);
    let logs = logs(&env);
    for id in ["g1", "g2"] {
        add_task(&env, &[id, "-m", "Anything"]);
    }
    let agent = env.agent_script(
        "work.sh",
        &format!(
            "set -eu\necho \"$FARM_TASK\" >> '{}/sessions.log'\necho w > \"w-$FARM_TASK\"\ngit add -A\ngit commit -q -m \"$FARM_TASK\"\n",
            logs.display()
        ),
    );
    let out = run_with_git_killed_once(&env, &agent, "checkout --quiet --force").success();
    assert_eq!(
        board(&env, "tasks/done"),
        BTreeSet::from(["g1".into(), "g2".into()]),
        "{out:#?}"
    );
    for id in ["g1", "g2"] {
        assert_eq!(sessions_of(&env, id), 1, "{id}: {out:#?}");
        assert!(rescue_branches(&env, id).is_empty(), "{id}: {out:#?}");
    }
    assert_hub_sound(&env);
}

/// Regression (found by the chaos suite): a git command of farm's that is not
/// simply run again — here, the setting of the clone's identity as it is
/// first opened; in the suite, a merge — killed by a signal ended the
/// agent's loop and made farm exit 1. The loop
/// reopens its clone (recovery makes good what the killed command left),
/// says so, and goes on: exit 0, every task done once on main.
#[test]
fn a_killed_git_of_farms_does_not_end_the_run() {
    let env = Env::git_hub(&[]);
    for id in ["h1", "h2"] {
        add_task(&env, &[id, "-m", "Anything"]);
    }
    let agent = env.agent_script(
        "work.sh",
        "set -eu\necho w > \"w-$FARM_TASK\"\ngit add -A\ngit commit -q -m \"$FARM_TASK\"\n",
    );
    let out = run_with_git_killed_once(&env, &agent, "config user.email").success();
    assert_eq!(
        board(&env, "tasks/done"),
        BTreeSet::from(["h1".into(), "h2".into()]),
        "{out:#?}"
    );
    for id in ["h1", "h2"] {
        assert_eq!(
            env.git(["log", "--format=%s", "main", "--", &format!("w-{id}")])
                .lines()
                .count(),
            1,
            "{id} landed once: {out:#?}"
        );
    }
    assert!(
        out.stderr.contains("killed by signal 9") && out.stderr.contains("going on"),
        "{out:#?}"
    );
    assert_hub_sound(&env);
}

/// Regression (found by the chaos suite): the git claim store's fetch of
/// `farm/claims` killed by a signal was an error with nothing said (its
/// failure was not marked as a killed git, so not tried again), and farm
/// exited 1. It is tried again like a fetch the hub did not answer.
#[test]
fn a_killed_fetch_of_the_claims_is_tried_again() {
    let env = Env::git_hub(&[]);
    for id in ["c1", "c2"] {
        add_task(&env, &[id, "-m", "Anything"]);
    }
    let agent = env.agent_script(
        "work.sh",
        "set -eu\necho w > \"w-$FARM_TASK\"\ngit add -A\ngit commit -q -m \"$FARM_TASK\"\n",
    );
    let out = run_with_git_killed_once_args(
        &env,
        &agent,
        "fetch --porcelain --no-tags --no-auto-gc",
        &["--claims", "git"],
    )
    .success();
    assert_eq!(
        board(&env, "tasks/done"),
        BTreeSet::from(["c1".into(), "c2".into()]),
        "{out:#?}"
    );
}

/// The clones under `TMP/state/clones/`.
fn clone_dirs(env: &Env) -> Vec<std::path::PathBuf> {
    let mut dirs: Vec<_> = std::fs::read_dir(env.tmp.path().join("state/clones"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.join(".git").is_dir())
        .collect();
    dirs.sort();
    dirs
}

/// `git status --porcelain` in `dir`, with the environment of a run.
fn status_in(env: &Env, dir: &std::path::Path, extra: &[(&str, &str)]) -> String {
    let out = std::process::Command::new("git")
        .args(["status", "--porcelain"])
        .current_dir(dir)
        .env("HOME", env.tmp.path())
        .envs(crate::common::GIT_ENV)
        .envs(extra.iter().copied())
        .output()
        .unwrap();
    assert!(out.status.success(), "git status in {dir:?}: {out:?}");
    String::from_utf8(out.stdout).unwrap()
}

/// The environment that turns git's split index on, as a user's config would.
const SPLIT_INDEX: [(&str, &str); 3] = [
    ("GIT_CONFIG_COUNT", "1"),
    ("GIT_CONFIG_KEY_0", "core.splitIndex"),
    ("GIT_CONFIG_VALUE_0", "true"),
];

/// Regression: with `core.splitIndex=true`, libgit2 (which cannot read a
/// split index: its `link` extension is "mandatory") re-read the clone's
/// index as empty, farm's in-process `clean` removed every tracked file as
/// untracked, and the loop said "`split` is not ready on the branch;
/// looking again" ~2,100 times in 4 s, never running a session. Both ways
/// in: a clone made while the split index is on (`split`), and a clone an
/// earlier run made without it, opened with it on (`later`).
#[test]
fn a_split_index_leaves_the_clone_whole_and_the_task_is_done() {
    let env = Env::git_hub(&[]);
    add_task(&env, &["first", "-m", "Anything"]);
    let agent = env.agent_script(
        "work.sh",
        "set -eu\necho w > \"w-$FARM_TASK\"\ngit add -A\ngit commit -q -m \"$FARM_TASK\"\n",
    );
    let run = |env: &Env| {
        let mut farm = env.farm_git(run_args(env, &agent, &["-v"]));
        for (k, v) in SPLIT_INDEX {
            farm = farm.env(k, v);
        }
        farm.run_within(Duration::from_secs(60)).success()
    };
    // An earlier run, without the split index, leaves its clone behind.
    farm_run(&env, &agent, &[]).success();
    add_task(&env, &["later", "-m", "Anything"]);
    let out = run(&env);
    assert_eq!(out.stderr.matches("not ready").count(), 0, "{out:#?}");
    // A clone made with the split index on.
    std::fs::remove_dir_all(env.tmp.path().join("state/clones")).unwrap();
    add_task(&env, &["split", "-m", "Anything"]);
    let out = run(&env);
    assert_eq!(out.stderr.matches("not ready").count(), 0, "{out:#?}");
    assert_eq!(
        board(&env, "tasks/done"),
        BTreeSet::from(["first".into(), "later".into(), "split".into()]),
        "{out:#?}"
    );
    for dir in clone_dirs(&env) {
        assert!(
            std::fs::read_dir(dir.join(".git")).unwrap().any(|e| e
                .unwrap()
                .file_name()
                .to_string_lossy()
                .starts_with("sharedindex.")),
            "the index of {dir:?} is not split: the test tests nothing"
        );
        assert_eq!(status_in(&env, &dir, &SPLIT_INDEX), "", "{dir:?}: {out:#?}");
    }
    assert_hub_sound(&env);
}

/// Regression: a task the board calls ready (read from the branch's tree)
/// that the clone calls not ready (read from its work tree), with nothing
/// changed on the branch between two looks, was claimed, released and
/// looked at again without bound ("not ready ... looking again" ~2,100
/// times in 4 s with a split index). Here the clone's sparse checkout keeps
/// `tasks/stuck.md` out of its work tree, for good: the loop re-syncs the
/// clone once, then stops the run with one error naming the task and what
/// disagrees, within a few looks. (On main it spun until killed.)
#[test]
fn a_task_the_clone_never_sees_ready_stops_the_run() {
    let env = Env::git_hub(&[]);
    add_task(&env, &["first", "-m", "Anything"]);
    let agent = env.agent_script(
        "work.sh",
        "set -eu\necho w > \"w-$FARM_TASK\"\ngit add -A\ngit commit -q -m \"$FARM_TASK\"\n",
    );
    farm_run(&env, &agent, &[]).success();
    // Both of the agent's clones (the second did an integration). Sparse
    // checkout is turned on by the user's config (in the environment): a
    // clone's own config is farm's, and put back as farm keeps it.
    for clone in clone_dirs(&env) {
        std::fs::write(
            clone.join(".git/info/sparse-checkout"),
            "/*\n!/tasks/stuck.md\n",
        )
        .unwrap();
    }
    add_task(&env, &["stuck", "-m", "Anything"]);
    let out = env
        .farm_git(run_args(&env, &agent, &[]))
        .env("GIT_CONFIG_COUNT", "1")
        .env("GIT_CONFIG_KEY_0", "core.sparseCheckout")
        .env("GIT_CONFIG_VALUE_0", "true")
        .run_within(Duration::from_secs(60))
        .code(1);
    let looks = out.stderr.matches("is not ready on the branch").count();
    assert!((1..=3).contains(&looks), "{looks} looks: {out:#?}");
    assert!(
        out.stderr.contains("`stuck`") && out.stderr.contains("`tasks/stuck.md`"),
        "{out:#?}"
    );
    assert_eq!(board(&env, "tasks"), BTreeSet::from(["stuck".into()]));
    assert_hub_sound(&env);
}

/// A `farm init` hub whose work tree a push is updating (receive-pack with
/// `updateInstead` writes the files before it moves the ref): a farm that
/// starts then sees tracked files differ from HEAD. Regression (found by
/// the chaos suite, on an Init hub): it exited 2, "hub … has uncommitted
/// changes to tracked files". The pushes in flight hold the hub's push
/// lock; farm judges the work tree once they let go, and runs.
#[test]
fn a_hub_work_tree_mid_push_is_judged_once_the_push_settles() {
    let env = Env::git_hub(&[("README", "x\n")]);
    add_task(&env, &["p1", "-m", "Anything"]);
    let agent = env.agent_script(
        "work.sh",
        "set -eu\necho w > \"w-$FARM_TASK\"\ngit add -A\ngit commit -q -m \"$FARM_TASK\"\n",
    );
    // "A push" holds the lock, the README half-written, for a second.
    let locks = env.hub.join("current_tasks");
    std::fs::create_dir_all(&locks).unwrap();
    let lock = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(locks.join(".push.lock"))
        .unwrap();
    lock.lock().unwrap();
    std::fs::write(env.hub.join("README"), "x, being upd").unwrap();
    let hub = env.hub.clone();
    let push = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(1500));
        // The push done: files and index as the new HEAD has them.
        std::fs::write(hub.join("README"), "x\n").unwrap();
        let refreshed = std::process::Command::new("git")
            .args(["update-index", "-q", "--refresh"])
            .current_dir(&hub)
            .status()
            .unwrap();
        assert!(refreshed.success());
        drop(lock);
    });
    let out = farm_run(&env, &agent, &[]);
    push.join().unwrap();
    assert_eq!(out.code, Some(0), "{out:#?}");
    assert_eq!(
        board(&env, "tasks/done"),
        BTreeSet::from(["p1".into()]),
        "{out:#?}"
    );
}

/// A hub work tree that is dirty with no push in flight is still refused
/// (exit 2), naming the fix, and nothing is claimed.
#[test]
fn a_dirty_hub_work_tree_is_refused_with_no_push_in_flight() {
    let env = Env::git_hub(&[("README", "x\n")]);
    add_task(&env, &["d1", "-m", "Anything"]);
    std::fs::write(env.hub.join("README"), "edited by hand\n").unwrap();
    let out = farm_run(&env, "true", &[]);
    assert_eq!(out.code, Some(2), "{out:#?}");
    assert!(
        out.stderr.contains("uncommitted changes to tracked files"),
        "{out:#?}"
    );
    assert!(out.stderr.contains("git -C"), "{out:#?}");
    assert!(board(&env, "tasks/done").is_empty());
}

/// Hooks (in `dir/hooks`) whose reference-transaction hook SIGKILLs the
/// first `git rebase` it runs in; the file it leaves when it did.
fn kill_a_rebase_once(dir: &std::path::Path) -> (std::path::PathBuf, std::path::PathBuf) {
    use std::os::unix::fs::PermissionsExt;
    let hooks = dir.join("hooks");
    std::fs::create_dir_all(&hooks).unwrap();
    let mark = dir.join("killed");
    let hook = hooks.join("reference-transaction");
    std::fs::write(
        &hook,
        format!(
            "#!/bin/sh\ncat > /dev/null\n[ \"$1\" = prepared ] || exit 0\n\
             case \" $(tr '\\0' ' ' < /proc/$PPID/cmdline)\" in *\" rebase\"*) ;; *) exit 0;; esac\n\
             [ -e '{0}' ] && exit 0\n: > '{0}'\nkill -9 $PPID\n",
            mark.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&hook, std::fs::Permissions::from_mode(0o755)).unwrap();
    (hooks, mark)
}

/// An agent that prepends its task's id to `shared.txt`: every two of its
/// sessions conflict, so integration rebases with `git rebase`.
const PREPEND: &str = "sleep 0.3\n{ echo \"$FARM_TASK\"; cat shared.txt; } > s.tmp && mv s.tmp shared.txt\ngit add -A\ngit commit -qm \"$FARM_TASK\"\n";

/// A `git rebase` of farm's killed mid-run (SIGKILL, once) in an
/// integration beside the loop: the loop starts its turns again, reopening
/// its clones, and the run goes on to the end. (A 12-round chaos campaign
/// once saw that reopening refused: "already running in another farm run".)
#[test]
fn a_rebase_killed_beside_the_loop_restarts_the_turns_and_the_run_goes_on() {
    let env = Env::git_hub(&[("shared.txt", "base\n")]);
    for id in ["t1", "t2", "t3", "t4", "t5", "t6"] {
        add_task(&env, &[id, "-m", "Prepend a line"]);
    }
    let (hooks, mark) = kill_a_rebase_once(env.tmp.path());
    let agent = env.agent_script("prepend.sh", PREPEND);
    let out = env
        .farm_git(run_args(&env, &agent, &["-j", "2", "--name", "r"]))
        .env("GIT_CONFIG_COUNT", "1")
        .env("GIT_CONFIG_KEY_0", "core.hooksPath")
        .env("GIT_CONFIG_VALUE_0", &hooks)
        .run_within(Duration::from_secs(120));
    assert!(mark.exists(), "no rebase was killed: {out:#?}");
    assert!(
        !out.stderr.contains("already running") && !out.stderr.contains("not let go"),
        "{out:#?}"
    );
    assert!(
        out.stderr.contains("reopening its clone and going on"),
        "{out:#?}"
    );
    assert!(matches!(out.code, Some(0) | Some(5)), "{out:#?}");
}

/// The same with a hub that is only a URL (git store), as in the chaos round
/// that saw the reopening refused.
#[test]
fn a_rebase_killed_beside_the_loop_on_a_url_hub_restarts_the_turns() {
    use crate::daemon::{Daemon, Running};
    let mut files = vec![("shared.txt".to_owned(), "base\n".to_owned())];
    for id in ["t1", "t2", "t3", "t4", "t5", "t6"] {
        files.push((
            format!("tasks/{id}.md"),
            format!("+++\ntitle = \"{id}\"\n+++\nPrepend a line.\n"),
        ));
    }
    let files: Vec<(&str, &str)> = files
        .iter()
        .map(|(p, t)| (p.as_str(), t.as_str()))
        .collect();
    let daemon = Daemon::with_hub(&files);
    let base = daemon.base.path();
    let (hooks, mark) = kill_a_rebase_once(base);
    let agent_path = base.join("prepend.sh");
    std::fs::write(&agent_path, PREPEND).unwrap();
    let agent = format!("sh '{}'", agent_path.display());
    let machine = daemon.machine("m1");
    let mut farm = machine.farm(["run", "--agent", &agent, "-j", "2", "--name", "r"]);
    farm.cmd
        .env("GIT_CONFIG_COUNT", "1")
        .env("GIT_CONFIG_KEY_0", "core.hooksPath")
        .env("GIT_CONFIG_VALUE_0", &hooks);
    let out = Running::spawn(farm).finish_by(Instant::now() + Duration::from_secs(150));
    assert!(mark.exists(), "no rebase was killed: {out:#?}");
    assert!(
        !out.stderr.contains("already running") && !out.stderr.contains("not let go"),
        "{out:#?}"
    );
    assert!(matches!(out.code, Some(0) | Some(5)), "{out:#?}");
}

/// A URL-hub run whose last read of the board failed once (a dropped
/// connection) exited 0 — "settled, every task done" — with a failed task
/// on the board, which is exit 5. That read is tried again as the loops'
/// reads are, and a board that cannot be read at the end is no success.
#[test]
fn a_url_hub_run_whose_last_board_read_fails_once_still_says_what_is_left() {
    let env = Env::git_hub(&[]);
    add_task(&env, &["x1", "-m", "Anything", "--max-attempts", "1"]);
    let agent = env.agent_script("fail.sh", "echo 'no luck'\nexit 1\n");
    let url = format!("file://{}", env.hub.display());
    let out = run_with_git_killed_once_in(
        &env,
        &agent,
        "clone --quiet --depth 1",
        "file://",
        &["--hub", &url],
    );
    assert_eq!(out.code, Some(5), "{out:#?}");
    assert!(out.stderr.contains("failed  `x1`"), "{out:#?}");
}

/// A small tmpfs mounted at `dir` (root only: CI runs as root), unmounted
/// when dropped; `None`, said, where mounting is not allowed.
struct SmallDisk(std::path::PathBuf);

impl SmallDisk {
    fn mount(dir: &std::path::Path, size: &str) -> Option<SmallDisk> {
        let ok = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir)
            .status()
            .is_ok_and(|s| s.success());
        if !ok {
            // CI runs as root and sets this: there, a skip would hide a failure.
            assert!(
                std::env::var_os("FARM_REQUIRE_ROOT").is_none(),
                "cannot mount a tmpfs at {dir:?}"
            );
            eprintln!("skipped: cannot mount a tmpfs (needs root)");
            return None;
        }
        Some(SmallDisk(dir.to_owned()))
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .arg("-l")
            .arg(&self.0)
            .status();
    }
}

/// A hub whose disk is full refused the push with git's "unpacker error"
/// and nothing else: farm said "the hub refused the push: ... (unpacker
/// error)" with a hint to run `git status` there. The cause git gave on
/// stderr ("No space left on device") is said, with what to do.
#[test]
fn a_full_disk_on_the_hub_is_said() {
    let env = Env::git_hub(&[]);
    add_task(&env, &["big", "-m", "Anything"]);
    let kept = env.tmp.path().join("hub.kept");
    std::fs::rename(&env.hub, &kept).unwrap();
    std::fs::create_dir(&env.hub).unwrap();
    let Some(_disk) = SmallDisk::mount(&env.hub, "2m") else {
        return;
    };
    let copied = std::process::Command::new("cp")
        .arg("-a")
        .arg(format!("{}/.", kept.display()))
        .arg(&env.hub)
        .status()
        .unwrap();
    assert!(copied.success());
    // A copied work tree's files have new inodes: refresh the index.
    env.git(["update-index", "-q", "--refresh"]);
    let agent = env.agent_script(
        "big.sh",
        "head -c 4000000 /dev/urandom > big.bin\ngit add big.bin && git commit -q -m big\n",
    );
    let out = farm_run(&env, &agent, &[]);
    assert_ne!(out.code, Some(0), "{out:#?}");
    assert!(out.stderr.contains("No space left on device"), "{out:#?}");
    assert!(
        out.stderr.contains("free some disk space on the hub"),
        "{out:#?}"
    );
}

/// After one loop of a run failed for good (here: the hub refused its
/// push), the run's other loops kept claiming all night, though the run
/// would exit 1 and be respawned (a task was worked three times). The
/// run drains: what runs finishes, nothing new is claimed.
#[test]
fn a_loop_that_fails_drains_the_run() {
    use std::os::unix::fs::PermissionsExt;
    let env = Env::git_hub(&[]);
    env.git(["config", "receive.denyCurrentBranch", "updateInstead"]);
    add_task(&env, &["p1", "-m", "Anything", "--priority", "9"]);
    for i in 1..=6 {
        add_task(&env, &[&format!("q{i}"), "-m", "Anything"]);
    }
    let hook = env.hub.join(".git/hooks/pre-receive");
    std::fs::write(
        &hook,
        "#!/bin/sh\nwhile read old new ref; do\n  [ \"$new\" = 0000000000000000000000000000000000000000 ] && continue\n  if git cat-file -e \"$new:poison\" 2>/dev/null; then echo 'poison refused' >&2; exit 1; fi\ndone\n",
    )
    .unwrap();
    std::fs::set_permissions(&hook, std::fs::Permissions::from_mode(0o755)).unwrap();
    let agent = env.agent_script(
        "work.sh",
        "if [ \"$FARM_TASK\" = p1 ]; then echo p > poison; else sleep 0.3; echo w > \"w-$FARM_TASK\"; fi\n\
         git add -A && git commit -q -m \"$FARM_TASK\"\n",
    );
    let out = farm_run(&env, &agent, &["-j", "2"]);
    assert_eq!(out.code, Some(1), "{out:#?}");
    let log = &out.stderr;
    let at = log
        .find("draining: the other agents claim nothing new")
        .unwrap_or_else(|| panic!("{out:#?}"));
    assert_eq!(log[at..].matches("claimed `").count(), 0, "{out:#?}");
    assert!(board(&env, "tasks/done").len() < 6, "{out:#?}");
}

/// A state dir on a full disk made `farm run` exit 1 at every start
/// (`loop.sh` would respawn it into the same failure all night): it waits
/// for space, saying so once, and goes on when there is room.
#[test]
fn a_run_waits_for_space_in_a_full_state_dir() {
    let env = Env::git_hub(&[]);
    add_task(&env, &["s1", "-m", "Anything"]);
    let state = env.tmp.path().join("state");
    std::fs::create_dir(&state).unwrap();
    let Some(_disk) = SmallDisk::mount(&state, "40m") else {
        return;
    };
    let fill = state.join("fill");
    let filled = std::process::Command::new("fallocate")
        .args(["-l", "30m"])
        .arg(&fill)
        .status()
        .unwrap();
    assert!(filled.success());
    let agent = env.agent_script(
        "work.sh",
        "echo w > w.txt\ngit add w.txt && git commit -q -m work\n",
    );
    let mut child = env.farm_git(run_args(&env, &agent, &[])).spawn();
    std::thread::sleep(Duration::from_secs(2));
    assert!(
        child.try_wait().unwrap().is_none(),
        "farm ended on a full state dir"
    );
    std::fs::remove_file(&fill).unwrap();
    let out = Farm::wait_within(child, Duration::from_secs(60));
    assert_eq!(out.code, Some(0), "{out:#?}");
    assert!(out.stderr.contains("waiting for space"), "{out:#?}");
    assert_eq!(
        out.stderr.matches("waiting for space").count(),
        1,
        "{out:#?}"
    );
    assert_eq!(board(&env, "tasks/done"), BTreeSet::from(["s1".to_owned()]));
}

/// The cut of an atomic publish between its refs, through a whole run on a
/// bare hub (see `contract::cut_between_refs_once` for the store alone): the
/// hub has the claim released and `main` unmoved, with `main.lock` left
/// behind. farm said "`c1` done: integrated into `main`", reset the clone
/// and lost the work; every later push failed on the lock as "too busy".
/// Now the work goes to a rescue branch, the lock is named with the
/// command that removes it, and once it is gone the next run does the task.
#[test]
fn a_publish_cut_between_its_refs_loses_nothing_and_names_the_lock() {
    let env = Env::git_hub(&[]);
    add_task(&env, &["c1", "-m", "Anything"]);
    let bare = env.tmp.path().join("hub.git");
    env.git(["clone", "--quiet", "--bare", ".", bare.to_str().unwrap()]);
    let git = |args: &[&str]| {
        let out = crate::common::git_command()
            .arg("-C")
            .arg(&bare)
            .args(args)
            .output()
            .unwrap();
        String::from_utf8(out.stdout).unwrap()
    };
    // The bare hub is `TMP/hub.git`, as the contract suite's hook wants.
    let mark = crate::contract::cut_between_refs_once(env.tmp.path(), crate::contract::LEAVE_LOCK);
    let agent = env.agent_script(
        "work.sh",
        "echo w > \"w-$FARM_TASK\"\ngit add -A && git commit -q -m \"work on $FARM_TASK\"\n",
    );
    let hub = ["--hub", bare.to_str().unwrap(), "--claims", "git"];
    let out = farm_run(&env, &agent, &hub);
    assert!(mark.exists(), "the hook did not cut: {out:#?}");
    assert!(!out.stderr.contains("done: integrated"), "{out:#?}");
    assert!(
        out.stderr.contains("main.lock"),
        "the lock is named: {out:#?}"
    );
    let rescued = git(&[
        "for-each-ref",
        "--format=%(refname:short)",
        "refs/heads/farm/rescue/c1/",
    ]);
    let rescued: Vec<&str> = rescued.lines().collect();
    assert_eq!(rescued.len(), 1, "the work is kept: {rescued:?} {out:#?}");
    assert_eq!(git(&["show", &format!("{}:w-c1", rescued[0])]), "w\n");
    std::fs::remove_file(bare.join("refs/heads/main.lock")).unwrap();
    let again = farm_run(&env, &agent, &hub);
    assert_eq!(again.code, Some(0), "{again:#?}");
    assert_eq!(
        git(&["ls-tree", "--name-only", "main", "tasks/done/"]),
        "tasks/done/c1.md\n"
    );
}

/// A rescue branch the hub refused was said as a Rust debug list
/// (`[("refs/heads/farm/rescue/…", "[remote rejected] …")]`); it is said
/// ref by ref, in words.
#[test]
fn a_refused_rescue_branch_is_said_in_words() {
    use std::os::unix::fs::PermissionsExt;
    let env = Env::git_hub(&[]);
    add_task(&env, &["r1", "-m", "Anything", "--max-attempts", "1"]);
    let hook = env.hub.join(".git/hooks/pre-receive");
    std::fs::write(
        &hook,
        "#!/bin/sh\nwhile read old new ref; do\n  case \"$ref\" in refs/heads/farm/rescue/*) echo 'no rescue here' >&2; exit 1;; esac\ndone\n",
    )
    .unwrap();
    std::fs::set_permissions(&hook, std::fs::Permissions::from_mode(0o755)).unwrap();
    let agent = env.agent_script(
        "fail.sh",
        "echo w > w.txt\ngit add w.txt && git commit -q -m half\necho 'gave up'\nexit 1\n",
    );
    let out = farm_run(&env, &agent, &[]);
    assert!(out.stderr.contains("refused `farm/rescue/r1/"), "{out:#?}");
    assert!(!out.stderr.contains("[(\""), "a debug list: {out:#?}");
    assert!(out.stderr.contains(": [remote rejected]"), "{out:#?}");
}
