//! Stopping `farm run`: drain on the first signal, kill and rescue on the
//! second, and loop.sh respawning a farm that was SIGKILLed.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::{Env, Farm, read_pid, wait_for};

/// `farm` with a git identity and no user or system git config.
pub(crate) fn farm<I, S>(env: &Env, args: I) -> Farm
where
    I: IntoIterator<Item = S>,
    S: AsRef<std::ffi::OsStr>,
{
    let mut f = env.farm(args);
    for (k, v) in git_env() {
        f = f.env(k, v);
    }
    f
}

fn git_env() -> [(&'static str, &'static str); 6] {
    [
        ("GIT_AUTHOR_NAME", "t"),
        ("GIT_AUTHOR_EMAIL", "t@example.com"),
        ("GIT_COMMITTER_NAME", "t"),
        ("GIT_COMMITTER_EMAIL", "t@example.com"),
        ("GIT_CONFIG_GLOBAL", "/dev/null"),
        ("GIT_CONFIG_NOSYSTEM", "1"),
    ]
}

pub(crate) fn git(dir: &Path, args: &[&str]) -> String {
    let out = crate::common::git_command()
        .arg("-C")
        .arg(dir)
        .args(args)
        .envs(git_env())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// A hub with `farm init` done and these tasks on the board.
pub(crate) fn hub(env: &Env, tasks: &[&str]) {
    git(&env.hub, &["init", "--quiet", "-b", "main"]);
    git(
        &env.hub,
        &["commit", "--quiet", "--allow-empty", "-m", "root"],
    );
    farm(env, ["init"]).run().success();
    for t in tasks {
        farm(env, ["task", "add", t, "-m", "do it"]).run().success();
    }
}

fn agent(env: &Env, script: &str) -> String {
    agent_named(env, "agent.sh", script)
}

fn agent_named(env: &Env, name: &str, script: &str) -> String {
    let path = env.tmp.path().join(name);
    std::fs::write(&path, format!("#!/bin/sh\n{script}\n")).unwrap();
    std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    path.display().to_string()
}

/// The hub has one orphan rescue branch (`farm/rescue/orphan/…`), and a
/// commit with this subject is on it.
fn assert_one_orphan_rescue_with(env: &Env, subject: &str, out: &impl std::fmt::Debug) {
    let rescue = git(
        &env.hub,
        &[
            "for-each-ref",
            "--format=%(refname)",
            "refs/heads/farm/rescue/orphan/",
        ],
    );
    assert_eq!(rescue.lines().count(), 1, "{rescue} {out:?}");
    let log = git(&env.hub, &["log", "--format=%s", rescue.trim()]);
    assert!(log.lines().any(|l| l == subject), "{log}");
}

pub(crate) fn signal(pid: u32, sig: i32) {
    // SAFETY: kill(2) on a child process of this test.
    unsafe { libc::kill(pid as i32, sig) };
}

pub(crate) fn done(env: &Env, task: &str) -> bool {
    git(
        &env.hub,
        &[
            "ls-tree",
            "--name-only",
            "main",
            &format!("tasks/done/{task}.md"),
        ],
    )
    .trim()
        != ""
}

#[test]
fn first_signal_drains_the_running_session_finishes_and_nothing_new_is_claimed() {
    let env = Env::new();
    hub(&env, &["one", "two"]);
    let started = env.tmp.path().join("started");
    let agent = agent(
        &env,
        &format!(
            "touch {}; sleep 1; echo \"$FARM_TASK\" > \"$FARM_TASK.txt\"; git add -A; git commit -qm work",
            started.display()
        ),
    );
    let child = farm(&env, ["run", "--agent", &agent]).spawn();
    wait_for(&started);
    signal(child.id(), libc::SIGINT);
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(6), "{stderr}");
    assert!(stderr.contains("draining"), "{stderr}");
    let finished: Vec<_> = ["one", "two"]
        .into_iter()
        .filter(|t| done(&env, t))
        .collect();
    assert_eq!(
        finished.len(),
        1,
        "the running session was integrated, no new one started: {stderr}"
    );
    let locks = farm(&env, ["locks", "--json"]).run().success().json();
    assert_eq!(locks["claims"], serde_json::json!([]));
}

#[test]
fn second_signal_kills_the_session_rescues_its_work_and_exits_130() {
    let env = Env::new();
    hub(&env, &["slow"]);
    let pid_file = env.tmp.path().join("agent.pid");
    let agent = agent(
        &env,
        &format!(
            "echo wip > wip.txt; git add -A; git commit -qm wip; echo $$ > {}; sleep 60",
            pid_file.display()
        ),
    );
    let child = farm(&env, ["run", "--agent", &agent]).spawn();
    let agent_pid = read_pid(&pid_file, Duration::from_secs(20));
    std::thread::sleep(Duration::from_millis(100));
    signal(child.id(), libc::SIGTERM);
    std::thread::sleep(Duration::from_millis(200));
    signal(child.id(), libc::SIGTERM);
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(130), "{stderr}");
    assert!(
        farm::claims::host::process_start(agent_pid).is_none(),
        "the agent was killed"
    );
    let rescue = git(
        &env.hub,
        &[
            "for-each-ref",
            "--format=%(refname)",
            "refs/heads/farm/rescue/slow/",
        ],
    );
    assert_eq!(
        rescue.lines().count(),
        1,
        "one rescue branch: {rescue} {stderr}"
    );
    let wip = git(&env.hub, &["log", "--format=%s", rescue.trim()]);
    assert!(
        wip.starts_with("wip\n"),
        "the agent's commit is on it: {wip}"
    );
    assert!(!done(&env, "slow"));
    let locks = farm(&env, ["locks", "--json"]).run().success().json();
    assert_eq!(
        locks["claims"],
        serde_json::json!([]),
        "the claim was released"
    );
}

/// `loop.sh --agent AGENT` on the env's hub, hermetic, its output piped.
fn loop_sh(env: &Env, agent: &str) -> std::process::Child {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("loop.sh");
    Command::new("bash")
        .arg(&script)
        .args(["--agent", agent])
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap())
        .env("HOME", env.tmp.path())
        .env("FARM", crate::common::FARM)
        .env("FARM_SANDBOX", "off")
        .env("FARM_HUB", &env.hub)
        .env("NO_COLOR", "1")
        .envs(git_env())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// loop.sh respawns a farm killed with SIGKILL; the new farm reaps the dead
/// claim at once and the task is finished.
#[test]
fn loop_sh_respawns_a_killed_farm_and_the_task_finishes() {
    let env = Env::new();
    hub(&env, &["job"]);
    let marker = env.tmp.path().join("first-run");
    let agent = agent(
        &env,
        &format!(
            "if [ ! -e {0} ]; then touch {0}; sleep 60; fi; echo ok > job.txt; git add -A; git commit -qm job",
            marker.display()
        ),
    );
    let looper = loop_sh(&env, &agent);
    wait_for(&marker);
    let claim = std::fs::read_to_string(env.claim_path("job")).unwrap();
    let pid: u32 = claim
        .lines()
        .find_map(|l| l.strip_prefix("pid = "))
        .expect("a holder pid")
        .parse()
        .unwrap();
    let killed = Instant::now();
    signal(pid, libc::SIGKILL);
    let out = looper.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(stderr.contains("running it again"), "{stderr}");
    assert!(stderr.contains("reaped `job`: dead"), "{stderr}");
    assert!(done(&env, "job"), "{stderr}");
    eprintln!("task finished {:?} after the SIGKILL", killed.elapsed());
}

/// Regression: after `farm stop`, loop.sh said "the board is settled; done"
/// with tasks still ready. A drained run exits 6, and loop.sh says so and
/// does not respawn it.
#[test]
fn loop_sh_tells_a_drained_run_from_a_settled_board() {
    let env = Env::new();
    hub(&env, &["a", "b", "c", "d"]);
    let marker = env.tmp.path().join("started");
    let agent = agent(
        &env,
        &format!(
            "touch {}; sleep 1; echo \"$FARM_TASK\" > \"$FARM_TASK.txt\"; git add -A; git commit -qm work",
            marker.display()
        ),
    );
    let looper = loop_sh(&env, &agent);
    wait_for(&marker);
    farm(&env, ["stop"]).run().success();
    let out = looper.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(6), "{stderr}");
    assert!(
        stderr.contains("loop.sh: farm drained with work left on the board; not respawning"),
        "{stderr}"
    );
    assert!(!stderr.contains("settled"), "{stderr}");
    assert!(
        stderr.contains("farm run: ended with work left: 3 ready"),
        "{stderr}"
    );
    assert_eq!(stderr.matches("farm run started").count(), 1, "{stderr}");
}

/// Guards, across a crash, that no commit of an agent's is lost and that a
/// session dies with its supervisor: a farm SIGKILLed mid-session left a
/// commit in its clone and a background process of the agent's still
/// running. The next farm kills that process and pushes the commit to a
/// rescue branch before it resets the clone.
#[test]
fn a_restarted_farm_rescues_commits_and_kills_processes_left_in_its_clone() {
    let env = Env::new();
    hub(&env, &["job"]);
    let marker = env.tmp.path().join("first-run");
    let straggler = env.tmp.path().join("straggler.pid");
    let agent = agent(
        &env,
        &format!(
            "if [ ! -e {m} ]; then touch {m}; echo wip > wip.txt; git add -A; git commit -qm wip-commit; \
             sleep 60 & echo $! > {s}; sleep 60; fi; echo ok > job.txt; git add -A; git commit -qm job",
            m = marker.display(),
            s = straggler.display()
        ),
    );
    let mut first = farm(&env, ["run", "--agent", &agent]).spawn();
    let pid = read_pid(&straggler, Duration::from_secs(20));
    // The session's keeper would kill the straggler the moment farm dies;
    // killed first (as a chaos test may), it leaves the next farm to do so.
    let keepers = keepers_in_group_of(pid);
    assert_eq!(keepers.len(), 1, "one keeper in the session's group");
    for k in keepers {
        // SAFETY: kill(2) on a process of this test's own tree.
        unsafe { libc::kill(k as i32, libc::SIGKILL) };
    }
    first.kill().unwrap();
    first.wait().unwrap();
    std::thread::sleep(Duration::from_millis(300));
    assert!(
        farm::claims::host::process_start(pid).is_some(),
        "the agent's background process outlived farm and its keeper"
    );

    let out = farm(&env, ["run", "--agent", &agent]).run().success();
    let start = Instant::now();
    while farm::claims::host::process_start(pid).is_some() {
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "the straggler {pid} still runs: {out:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_one_orphan_rescue_with(&env, "wip-commit", &out);
    assert!(done(&env, "job"), "{out:?}");
}

/// The pids of the session keepers (see session.rs) in `pid`'s process group.
fn keepers_in_group_of(pid: u32) -> Vec<u32> {
    let pgid = |p: &str| -> Option<String> {
        let stat = std::fs::read_to_string(format!("/proc/{p}/stat")).ok()?;
        Some(
            stat[stat.rfind(')')? + 1..]
                .split_whitespace()
                .nth(2)?
                .to_owned(),
        )
    };
    let group = pgid(&pid.to_string()).expect("the straggler runs");
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|p| {
            pgid(&p.to_string()).as_ref() == Some(&group)
                && std::fs::read(format!("/proc/{p}/cmdline"))
                    .is_ok_and(|c| String::from_utf8_lossy(&c).contains("kill -KILL 0"))
        })
        .collect()
}

/// Two farm runs on one host with the same agent name would share a clone
/// and reset each other's work: the second is refused, as bad usage (exit
/// 2: it exited 1, and `loop.sh` respawned it all night).
#[test]
fn a_second_run_with_the_same_agent_name_is_refused() {
    let env = Env::new();
    hub(&env, &["a", "b"]);
    let started = env.tmp.path().join("started");
    let agent = agent(
        &env,
        &format!(
            "touch {}; sleep 2; echo x > \"$FARM_TASK\"; git add -A; git commit -qm w",
            started.display()
        ),
    );
    let first = farm(&env, ["run", "--agent", &agent, "--name", "box"]).spawn();
    wait_for(&started);
    let second = farm(&env, ["run", "--agent", &agent, "--name", "box"]).run();
    assert!(
        second.stderr.contains("agent `box` is already running"),
        "{second:?}"
    );
    // The holder is named by its pid (from /proc/locks).
    assert!(
        second
            .stderr
            .contains(&format!("on this host (pid {})", first.id())),
        "{second:?}"
    );
    assert_eq!(second.code, Some(2), "{second:?}");
    let out = first.wait_with_output().unwrap();
    assert!(out.status.success(), "{out:?}");
    assert!(done(&env, "a") && done(&env, "b"));
}

/// A task file in the hub's work tree that the branch does not have (an
/// uncommitted draft) is not claimed over and over; the run still ends.
#[test]
fn an_uncommitted_draft_in_the_hub_does_not_spin_the_loop() {
    let env = Env::new();
    hub(&env, &["real"]);
    std::fs::write(
        env.hub.join("tasks/draft.md"),
        "+++\ntitle = \"not committed yet\"\n+++\n",
    )
    .unwrap();
    let agent = agent(
        &env,
        "echo x > \"$FARM_TASK\"; git add -A; git commit -qm w",
    );
    let start = Instant::now();
    // Bounded: the regression this guards is a loop that never ends.
    let out = farm(&env, ["run", "--agent", &agent]).run_within(Duration::from_secs(60));
    let stderr = out.stderr.clone();
    assert_eq!(out.code, Some(0), "{stderr}");
    assert!(done(&env, "real"));
    let retries = stderr.matches("not ready on the branch").count();
    assert!(retries <= 2, "claimed the draft {retries} times: {stderr}");
    eprintln!("ended after {:?}", start.elapsed());
}

/// An agent that cannot even be started for a task (here: its prompt is too
/// long for one argument, E2BIG) fails that attempt; the run goes on and
/// ends, rather than erroring out and being respawned onto the same task.
#[test]
fn an_agent_that_cannot_start_fails_the_attempt_not_the_run() {
    let env = Env::new();
    hub(&env, &[]);
    let huge = "x".repeat(200_000);
    let task = format!("+++\ntitle = \"big\"\nmax_attempts = 1\n+++\n{huge}\n");
    std::fs::write(env.hub.join("tasks/big.md"), task).unwrap();
    git(&env.hub, &["add", "tasks/big.md"]);
    git(
        &env.hub,
        &["commit", "-qm", "a task with a huge description"],
    );
    farm(&env, ["task", "add", "small"]).run().success();
    let agent = agent(
        &env,
        "echo x > \"$FARM_TASK\"; git add -A; git commit -qm w",
    );
    let out = farm(&env, ["run", "--agent", &agent]).run_within(Duration::from_secs(60));
    assert_eq!(out.code, Some(5), "{out:?}");
    assert!(done(&env, "small"), "{out:?}");
    let failed = git(&env.hub, &["show", "main:tasks/failed/big.md"]);
    assert!(
        failed.contains("failed with exit code 127") && failed.contains("cannot start"),
        "{}",
        &failed[failed.len() - 600..]
    );
}

/// `farm stop` drains two `farm run` processes on one hub: each finishes the
/// session it is running, claims nothing new and exits 6 (work left); a run
/// started after the notice is not stopped by it.
#[test]
fn farm_stop_drains_every_run_on_the_hub() {
    let env = Env::new();
    hub(&env, &["a", "b", "c", "d", "e", "f"]);
    let marks = env.tmp.path().join("marks");
    std::fs::create_dir_all(&marks).unwrap();
    let agent = agent(
        &env,
        &format!(
            "touch {}/$FARM_AGENT; sleep 1; echo \"$FARM_TASK\" > \"$FARM_TASK.txt\"; git add -A; git commit -qm work",
            marks.display()
        ),
    );
    let runs: Vec<_> = ["east", "west"]
        .into_iter()
        .map(|name| farm(&env, ["run", "--agent", &agent, "--name", name]).spawn())
        .collect();
    wait_for(&marks.join("east"));
    wait_for(&marks.join("west"));
    farm(&env, ["stop"]).run().success().stdout_has("drain");
    for run in runs {
        let out = run.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(6), "{stderr}");
        assert!(stderr.contains("asked by farm stop"), "{stderr}");
        assert!(
            stderr.contains("farm run: ended with work left: "),
            "{stderr}"
        );
    }
    let finished = ["a", "b", "c", "d", "e", "f"]
        .into_iter()
        .filter(|t| done(&env, t))
        .count();
    assert!(
        (2..=4).contains(&finished),
        "each run finished what it was running and stopped: {finished} done"
    );
    let locks = farm(&env, ["locks", "--json"]).run().success().json();
    assert_eq!(locks["claims"], serde_json::json!([]));
    // A run that starts now finishes the board: the notice is older than it.
    let out = farm(&env, ["run", "--agent", &agent]).run();
    assert_eq!(out.code, Some(0), "{out:#?}");
    assert!(
        ["a", "b", "c", "d", "e", "f"]
            .into_iter()
            .all(|t| done(&env, t))
    );
}

/// Regression: `farm stop` with no run said it asked every run to drain and
/// left `.stop.txt` behind. It now says nothing is running and leaves
/// nothing; `--force` posts the notice anyway, and a live claim is a run.
#[test]
fn farm_stop_with_no_run_says_so_and_leaves_no_notice() {
    let env = Env::new();
    hub(&env, &["a"]);
    let notice = env.hub.join("current_tasks/.stop.txt");
    let out = farm(&env, ["stop"]).run().success();
    assert!(
        out.stdout.contains("no farm run is running on ")
            && out.stdout.contains("nothing to stop, no notice left"),
        "{out:#?}"
    );
    assert!(out.stderr.contains("farm stop --force"), "{out:#?}");
    assert!(!notice.exists());
    farm(&env, ["stop", "--force"])
        .run()
        .success()
        .stdout_has("asked every farm run");
    assert!(notice.exists());
    std::fs::remove_file(&notice).unwrap();
    // A claim held by a live process (farm claim -- sleep) is a run at work.
    let mut holder = farm(&env, ["claim", "a", "--agent", "box", "--", "sleep", "30"]).spawn();
    let claim = env.hub.join("current_tasks/a.txt");
    wait_for(&claim);
    farm(&env, ["stop"]).run().success().stdout_has("drain");
    assert!(notice.exists());
    let _ = holder.kill();
    let _ = holder.wait();
}

/// A farm SIGKILLed while an integration went on beside its loop, in the
/// agent's second clone (`clones/<agent>@2`), left that task's work there
/// unpushed: the next farm opens that clone at once and pushes the work to
/// a rescue branch — even when its own sessions fail and it never needs a
/// second clone itself.
#[test]
fn a_restarted_farm_rescues_work_left_in_the_agents_second_clone() {
    let env = Env::new();
    hub(&env, &["one", "two"]);
    let l = env.tmp.path();
    // The hub holds the second push (task `two`, integrated in clone @2)
    // until the test kills the hook: that push never lands. (Its pid file
    // appears whole, by a rename: the test read one created and not yet
    // written, and failed parsing "".)
    // It execs its sleep: the pid the test kills is the one holding the
    // push (a child left sleeping kept the push, and the test, alive 60 s).
    let hook = env.hub.join(".git/hooks/pre-receive");
    std::fs::write(
        &hook,
        format!(
            "#!/bin/sh\ncat > /dev/null\nn=$(cat '{l}/pushes' 2>/dev/null || echo 0)\n\
             echo $((n + 1)) > '{l}/pushes'\n\
             if [ \"$n\" = 1 ]; then echo $$ > '{l}/hook.pid.tmp'; mv '{l}/hook.pid.tmp' '{l}/hook.pid'; \
             exec sleep 60; fi\n",
            l = l.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&hook, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let agent = agent(
        &env,
        "echo \"$FARM_TASK\" > \"$FARM_TASK.txt\"; git add -A; git commit -qm \"work on $FARM_TASK\"",
    );
    let mut first = farm(&env, ["run", "--agent", &agent, "--name", "box"]).spawn();
    let hook_pid = l.join("hook.pid");
    let pid = read_pid(&hook_pid, Duration::from_secs(20));
    first.kill().unwrap();
    first.wait().unwrap();
    // SAFETY: kill(2) on the hook's shell, a process of this test's tree.
    unsafe { libc::kill(pid as i32, libc::SIGKILL) };
    let second_clone = env.hub.join(".farm/clones/box@2");
    assert!(
        second_clone.is_dir(),
        "the integration ran in the second clone"
    );

    let failing = agent_named(&env, "fail.sh", "exit 1");
    let out = farm(
        &env,
        [
            "run",
            "--agent",
            &failing,
            "--name",
            "box",
            "--max-sessions",
            "1",
        ],
    )
    .run();
    assert_one_orphan_rescue_with(&env, "work on two", &out);
    assert!(done(&env, "one"), "{out:?}");
}
