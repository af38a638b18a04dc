//! Fencing under faults (`docs/claims.md`, "Fencing"): a farm killed with
//! SIGKILL while its push waits on the hub must not let a second agent do
//! the task again, and nothing a session started may outlive the farm that
//! ran it.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::common::{Env, read_pid, running};

const LIMIT: Duration = Duration::from_secs(120);

fn write_hook(env: &Env, name: &str, body: &str) {
    let hook = env.hub.join(".git/hooks").join(name);
    std::fs::write(&hook, format!("#!/bin/sh\n{body}")).unwrap();
    std::fs::set_permissions(&hook, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
}

/// The hub's first push waits in its pre-receive hook (touching
/// `marks/in-hook`) until the test writes `marks/go`; the others pass.
fn hold_first_push(env: &Env, marks: &Path) {
    let m = marks.display();
    write_hook(
        env,
        "pre-receive",
        &format!(
            "cat > /dev/null\n\
             if mkdir '{m}/held' 2>/dev/null; then\n\
               touch '{m}/in-hook'\n\
               i=0; while [ ! -e '{m}/go' ] && [ $i -lt 600 ]; do sleep 0.1; i=$((i+1)); done\n\
             fi\n"
        ),
    );
}

/// Wait (bounded) for a file to appear; false when it did not.
fn appears(path: &Path, within: Duration) -> bool {
    let start = Instant::now();
    while !path.exists() {
        if start.elapsed() > within {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    true
}

/// The pids of `pid`'s `git push` children.
fn pushes_of(pid: u32) -> Vec<u32> {
    children_named(pid, "git")
        .into_iter()
        .filter(|child| {
            std::fs::read(format!("/proc/{child}/cmdline"))
                .is_ok_and(|c| c.split(|b| *b == 0).any(|w| w == b"push"))
        })
        .collect()
}

/// The pids of `pid`'s children whose command name is `comm`.
fn children_named(pid: u32, comm: &str) -> Vec<u32> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(child) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{child}/stat")) else {
            continue;
        };
        let (Some(open), Some(close)) = (stat.find('('), stat.rfind(')')) else {
            continue;
        };
        let name = &stat[open + 1..close];
        let ppid = stat[close + 1..].split_whitespace().nth(1);
        if name == comm && ppid == Some(&pid.to_string()) {
            out.push(child);
        }
    }
    out
}

/// The hub's commits on main whose subject is `subject`.
fn commits_titled(env: &Env, subject: &str) -> usize {
    env.git(["log", "--format=%s", "main"])
        .lines()
        .filter(|l| *l == subject)
        .count()
}

/// What is killed with SIGKILL while farm `a`'s push waits in the hook.
#[derive(PartialEq)]
enum Kill {
    Farm,
    /// Farm and its `git push` child: only the hub's receive-pack is left
    /// to land the push.
    FarmAndPush,
    /// Only the `git push`: farm lives on, and must learn what landed.
    Push,
    /// Farm, restarted at once with the same agent name: its recovery of
    /// the clone must not rescue the commits the push is still landing.
    FarmRestarted,
}

/// Something of farm `a` is killed while its push of `t1` waits in the
/// hub's pre-receive hook; a second farm `b` starts at once on the same hub.
/// The push lands after `b` has had every chance to take the claim; `t1`
/// must be done exactly once on main, worked once, and nothing rescued.
///
/// Regression: the claim read dead and was reaped, `b` did `t1` again, and
/// main held two `do t1` commits.
fn killed_mid_push(kill: Kill) {
    let env = Env::git_hub(&[("README", "x\n")]);
    let l = env.tmp.path().join("marks");
    std::fs::create_dir(&l).unwrap();
    env.farm_git(["task", "add", "t1", "-m", "One"])
        .run()
        .success();
    let m = l.display();
    hold_first_push(&env, &l);
    // No keepalives while the hook holds the push: one written to a killed
    // `git push` would end the receive-pack, and the push would never land.
    env.git(["config", "receive.keepAlive", "0"]);
    // A session of `b` on t1 (the bug) lets the push go on and waits for it
    // to land before committing: the double is then certain. (Not a
    // post-receive hook: a receive-pack whose `git push` was killed dies
    // reporting to it, after the ref update and before that hook.)
    let agent = env.agent_script(
        "agent.sh",
        &format!(
            "set -eu\n\
             echo \"$FARM_AGENT\" >> \"{m}/sessions-$FARM_TASK\"\n\
             if [ \"$FARM_AGENT\" = b ] || [ -e \"{m}/a-again\" ]; then\n\
               touch '{m}/go'\n\
               i=0; while ! git --git-dir \"$FARM_HUB/.git\" cat-file -e main:tasks/done/t1.md 2>/dev/null && [ $i -lt 300 ]; do sleep 0.1; i=$((i+1)); done\n\
             fi\n\
             echo \"done by $FARM_AGENT\" > \"$FARM_TASK-$FARM_AGENT.txt\"\n\
             git add -A && git commit -q -m \"do $FARM_TASK\"\n"
        ),
    );
    let run = |name: &str| {
        env.farm_git([
            "run",
            "--agent",
            &agent,
            "--name",
            name,
            "--state-dir",
            &env.tmp
                .path()
                .join(format!("state-{name}"))
                .display()
                .to_string(),
        ])
    };
    let mut a = run("a").spawn();
    assert!(
        appears(&l.join("in-hook"), LIMIT),
        "a's push never reached the hook"
    );
    let pushes = pushes_of(a.id());
    if kill != Kill::Push {
        a.kill().unwrap(); // SIGKILL: nothing of farm's clean-up runs
        a.wait().unwrap();
    }
    if kill != Kill::Farm {
        assert!(!pushes.is_empty(), "a's git push is a child of farm");
        for pid in &pushes {
            // SAFETY: kill(2) on a pid of this test's own process tree.
            unsafe { libc::kill(*pid as i32, libc::SIGKILL) };
        }
    }

    if kill == Kill::FarmRestarted {
        // A session of the restarted `a` on t1 (the bug) acts as `b`'s would.
        std::fs::write(l.join("a-again"), "").unwrap();
    }
    let b = run(if kill == Kill::FarmRestarted {
        "a"
    } else {
        "b"
    })
    .spawn();
    // Give `b` every chance to reap and claim t1 (its session would say go
    // itself), then let the push go on.
    appears(&l.join("go"), Duration::from_secs(3));
    std::fs::write(l.join("go"), "").unwrap();
    let out = crate::common::Farm::wait_within(b, LIMIT);
    assert_eq!(out.code, Some(0), "b: {out:#?}");
    let a_out = (kill == Kill::Push).then(|| crate::common::Farm::wait_within(a, LIMIT));
    if let Some(a_out) = &a_out {
        assert_eq!(a_out.code, Some(0), "a: {a_out:#?}");
    }

    let sessions = std::fs::read_to_string(l.join("sessions-t1")).unwrap();
    assert_eq!(
        commits_titled(&env, "do t1"),
        1,
        "t1 done once on main; sessions: {sessions}\nb: {out:#?}\n{}",
        env.git(["log", "--stat", "main"])
    );
    assert_eq!(sessions, "a\n", "only a worked t1");
    assert!(env.git_ok(["cat-file", "-e", "main:tasks/done/t1.md"]));
    assert!(!env.git_ok(["cat-file", "-e", "main:tasks/t1.md"]));
    let rescued = env.git([
        "for-each-ref",
        "--format=%(refname)",
        "refs/heads/farm/rescue/",
    ]);
    assert_eq!(rescued, "", "nothing to rescue; a: {a_out:#?}");
    let locks = env.farm_git(["locks", "--json"]).run().success().json();
    assert_eq!(locks["claims"], serde_json::json!([]), "{locks:#}");
}

#[test]
fn a_push_in_flight_when_farm_dies_lands_before_its_claim_can_be_reaped() {
    killed_mid_push(Kill::Farm);
}

/// Regression (found by the chaos suite): the restarted farm rescued the
/// clone's commits to `farm/rescue/orphan/…` while the push it had left was
/// still landing them on main.
#[test]
fn a_restarted_farm_does_not_rescue_what_its_last_push_is_landing() {
    killed_mid_push(Kill::FarmRestarted);
}

#[test]
fn a_receive_pack_left_by_a_killed_push_still_fences_the_claim() {
    killed_mid_push(Kill::FarmAndPush);
}

/// Farm lives, its `git push` is killed: farm must not release the claim or
/// rescue the work while the hub's receive-pack may still land it, and
/// learns afterwards that it did.
#[test]
fn a_killed_push_is_settled_before_farm_decides_what_landed() {
    killed_mid_push(Kill::Push);
}

/// Regression: an agent that starts a child in the background (here
/// `sleep`, in its own process group's reach but not the parent-death
/// signal's) left it running after farm was SIGKILLed, until the next farm
/// in that clone. Everything the session started must be gone within
/// moments of farm's death, with no farm started after it.
#[test]
fn a_sessions_children_die_with_a_sigkilled_farm() {
    let env = Env::git_hub(&[("README", "x\n")]);
    let l = env.tmp.path().join("marks");
    std::fs::create_dir(&l).unwrap();
    env.farm_git(["task", "add", "t1", "-m", "One"])
        .run()
        .success();
    let agent = env.agent_script(
        "agent.sh",
        &format!(
            "sleep 300 &\necho $! > '{m}/child.pid'\nexec sleep 300\n",
            m = l.display()
        ),
    );
    let state: PathBuf = env.tmp.path().join("state");
    let mut farm = env
        .farm_git([
            "run",
            "--agent",
            &agent,
            "--state-dir",
            &state.display().to_string(),
        ])
        .spawn();
    let child = read_pid(&l.join("child.pid"), Duration::from_secs(20));
    assert!(running(child));
    farm.kill().unwrap(); // SIGKILL
    farm.wait().unwrap();
    let start = Instant::now();
    while running(child) {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "the session's background child {child} outlived the killed farm"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A `farm init` hub (a work tree that pushes update): farm `a` is killed
/// while its push of `t1` waits in the hub's pre-receive hook, and farm `b`
/// finishes `t2` meanwhile and pushes it. `b`'s push must wait for the one
/// `a` left (the hub's push lock is inherited by it): two pushes through
/// one work tree at once can leave it at the commit whose ref update lost,
/// and every later farm then refuses the hub ("uncommitted changes") — the
/// chaos suite saw that. Both land here, the work tree clean.
///
/// Regression (found by the chaos suite): `b`'s push overtook the one `a`
/// left, which the hub then refused: `t1` was not done.
#[test]
fn a_push_left_by_a_killed_farm_keeps_the_hubs_push_lock() {
    let env = Env::git_hub(&[("README", "x\n")]);
    let l = env.tmp.path().join("marks");
    std::fs::create_dir(&l).unwrap();
    for (id, prio) in [("t1", "2"), ("t2", "1")] {
        env.farm_git(["task", "add", id, "-m", id, "--priority", prio])
            .run()
            .success();
    }
    env.git(["config", "receive.keepAlive", "0"]);
    let m = l.display();
    hold_first_push(&env, &l);
    let agent = env.agent_script(
        "agent.sh",
        &format!(
            "set -eu\n\
             echo \"done by $FARM_AGENT\" > \"$FARM_TASK.txt\"\n\
             git add -A && git commit -q -m \"do $FARM_TASK\"\n\
             touch \"{m}/worked-$FARM_TASK\"\n"
        ),
    );
    let run = |name: &str| {
        let state = env.tmp.path().join(format!("state-{name}"));
        env.farm_git([
            "run",
            "--agent",
            &agent,
            "--name",
            name,
            "--once",
            "--state-dir",
            &state.display().to_string(),
        ])
    };
    let mut a = run("a").spawn();
    assert!(
        appears(&l.join("in-hook"), LIMIT),
        "a's push never reached the hook"
    );
    a.kill().unwrap();
    a.wait().unwrap();
    let b = run("b").spawn();
    assert!(appears(&l.join("worked-t2"), LIMIT), "b never worked t2");
    // Time for b's push to start (and, before the fix, to land).
    std::thread::sleep(Duration::from_secs(2));
    std::fs::write(l.join("go"), "").unwrap();
    let out = crate::common::Farm::wait_within(b, LIMIT);
    assert_eq!(out.code, Some(0), "b: {out:#?}");
    assert_eq!(
        env.git(["status", "--porcelain", "--untracked-files=no"]),
        "",
        "the hub's work tree matches its branch; b: {out:#?}"
    );
    for id in ["t1", "t2"] {
        assert!(
            env.git_ok(["cat-file", "-e", &format!("main:tasks/done/{id}.md")]),
            "{id} done; b: {out:#?}"
        );
    }
    env.farm_git(["status"]).run().success();
}

/// `farm release --force t1` while `a`'s push of `t1` waits in the hub's
/// pre-receive hook, then a second farm `b` on the same hub: the forced
/// release must wait for that push (saying so), so that `b` finds `t1`
/// done instead of doing it again.
///
/// Regression: the release took the claim at once (the fs store's fence
/// is a check before the push, and the push was past it); `b` claimed and
/// did `t1`, `a`'s push landed, `b`'s integration met a conflict on
/// `tasks/done/t1.md`, ran a merge session and pushed: main held two
/// `do t1` commits.
#[test]
fn a_forced_release_waits_for_the_push_in_flight() {
    let env = Env::git_hub(&[("README", "x\n")]);
    let l = env.tmp.path().join("marks");
    std::fs::create_dir(&l).unwrap();
    env.farm_git(["task", "add", "t1", "-m", "One"])
        .run()
        .success();
    let m = l.display();
    hold_first_push(&env, &l);
    env.git(["config", "receive.keepAlive", "0"]);
    // A merge session takes its own side of every conflict (as an agent
    // that keeps its work would); `b`'s session (the bug) lets `a`'s push
    // go on and waits for it to land before committing: the double is
    // then certain.
    let agent = env.agent_script(
        "agent.sh",
        &format!(
            "set -eu\n\
             echo \"$FARM_AGENT\" >> \"{m}/sessions-$FARM_TASK\"\n\
             if [ -e \"$(git rev-parse --git-dir)/MERGE_HEAD\" ]; then\n\
               git checkout --ours -- $(git diff --name-only --diff-filter=U)\n\
               git add -A && git commit -q --no-edit\n\
               exit 0\n\
             fi\n\
             if [ \"$FARM_AGENT\" = b ]; then\n\
               touch '{m}/go'\n\
               i=0; while ! git --git-dir \"$FARM_HUB/.git\" cat-file -e main:tasks/done/t1.md 2>/dev/null && [ $i -lt 300 ]; do sleep 0.1; i=$((i+1)); done\n\
             fi\n\
             echo \"done by $FARM_AGENT\" > \"$FARM_TASK-$FARM_AGENT.txt\"\n\
             git add -A && git commit -q -m \"do $FARM_TASK\"\n"
        ),
    );
    let run = |name: &str| {
        let state = env.tmp.path().join(format!("state-{name}"));
        env.farm_git([
            "run",
            "--agent",
            &agent,
            "--name",
            name,
            "--state-dir",
            &state.display().to_string(),
        ])
    };
    let a = run("a").spawn();
    assert!(
        appears(&l.join("in-hook"), LIMIT),
        "a's push never reached the hook"
    );
    let release = env.farm_git(["release", "t1", "--force"]).spawn();
    // Time for the release to take the claim (before the fix) or to start
    // waiting; then `b`, which gets every chance to claim t1 before the
    // push goes on (its session would say go itself).
    std::thread::sleep(Duration::from_secs(1));
    let b = run("b").spawn();
    appears(&l.join("go"), Duration::from_secs(3));
    std::fs::write(l.join("go"), "").unwrap();
    let released = crate::common::Farm::wait_within(release, LIMIT);
    let b_out = crate::common::Farm::wait_within(b, LIMIT);
    let a_out = crate::common::Farm::wait_within(a, LIMIT);
    let sessions = std::fs::read_to_string(l.join("sessions-t1")).unwrap();
    assert_eq!(
        commits_titled(&env, "do t1"),
        1,
        "t1 done once on main; sessions: {sessions}\nb: {b_out:#?}\n{}",
        env.git(["log", "--stat", "main"])
    );
    assert_eq!(sessions, "a\n", "only a worked t1; b: {b_out:#?}");
    assert_eq!(released.code, Some(0), "release: {released:#?}");
    assert!(
        released.stderr.contains("waiting for the push of `t1`"),
        "the release says what it waits for: {released:#?}"
    );
    assert_eq!(a_out.code, Some(0), "a: {a_out:#?}");
    assert_eq!(b_out.code, Some(0), "b: {b_out:#?}");
    assert!(env.git_ok(["cat-file", "-e", "main:tasks/done/t1.md"]));
    let locks = env.farm_git(["locks", "--json"]).run().success().json();
    assert_eq!(locks["claims"], serde_json::json!([]), "{locks:#}");
}
