//! A holder killed with SIGKILL is dead at once; a live one is never reaped.
//! Nothing farm starts for others — a session, the test command — outlives
//! it, not even what left the process group (`setsid`, a double fork).

use std::path::Path;
use std::time::{Duration, Instant};

use crate::common::{Env, race, read_pid, running, wait_for};
use crate::run::{add_task, farm_run, logs, run_args, show};

/// SIGKILL the holder: its command dies with it, `farm locks` says dead on the
/// very first look, `farm reap` (no age) takes the claim, the task is free.
#[test]
fn sigkilled_holder_is_dead_at_once_and_reaped_without_an_age() {
    let env = Env::new();
    let pid_file = env.tmp.path().join("command.pid");
    let script = format!("echo $$ > {}; exec sleep 60", pid_file.display());
    let mut holder = env
        .farm([
            "claim", "job", "--agent", "carol", "--", "sh", "-c", &script,
        ])
        .spawn();
    let command = read_pid(&pid_file, Duration::from_secs(20));
    wait_for(&env.claim_path("job"));
    let before = env.farm(["locks", "--json"]).run().success().json();
    assert_eq!(before["claims"][0]["state"], "alive");
    assert_eq!(before["claims"][0]["pid"], holder.id());

    holder.kill().unwrap(); // SIGKILL: no clean-up code runs
    holder.wait().unwrap();
    let killed_at = Instant::now();
    let after = env.farm(["locks", "--json"]).run().success().json();
    assert_eq!(after["claims"][0]["state"], "dead", "{after:#}");
    assert_eq!(
        after["claims"][0]["reason"],
        format!("process {} is gone", holder.id())
    );
    eprintln!("seen dead {:?} after SIGKILL", killed_at.elapsed());

    // The command got the parent-death signal rather than running on unclaimed.
    let start = Instant::now();
    while running(command) {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "command {command} outlived its holder"
        );
        std::thread::sleep(Duration::from_millis(10));
    }

    let reaped = env.farm(["reap", "--json"]).run().success().json();
    assert_eq!(reaped["reaped"][0]["task"], "job");
    assert_eq!(reaped["reaped"][0]["state"], "dead");
    assert!(!env.claim_path("job").exists());
    let tombs = env.tombstones();
    assert_eq!(tombs.len(), 1);
    assert!(
        tombs[0].contains("agent = \"carol\"") && tombs[0].contains("reason = \"process"),
        "{tombs:?}"
    );
    env.farm(["claim", "job", "--agent", "dave"])
        .run()
        .success();
}

/// A live holder is never reaped — not without an age, not with any age,
/// not when reapers race each other.
#[test]
fn live_holder_survives_racing_reapers() {
    let env = Env::new();
    let mut holder = env.farm(["claim", "busy", "--", "sleep", "60"]).spawn();
    wait_for(&env.claim_path("busy"));
    let text = std::fs::read_to_string(env.claim_path("busy")).unwrap();
    for round in 0..10 {
        let reapers = race(vec![
            env.farm(["reap"]),
            env.farm(["reap"]),
            env.farm(["reap", "--older-than", "1ms"]),
            env.farm(["reap", "--older-than", "0s"]),
        ]);
        for r in reapers {
            let out = r.wait_with_output().unwrap();
            assert!(out.status.success(), "round {round}: {out:?}");
            assert!(
                out.stdout.is_empty(),
                "round {round}: reaped something: {out:?}"
            );
        }
        assert_eq!(
            std::fs::read_to_string(env.claim_path("busy")).unwrap(),
            text,
            "round {round}"
        );
    }
    assert!(env.tombstones().is_empty());
    assert!(
        holder.try_wait().unwrap().is_none(),
        "the holder is still running"
    );
    holder.kill().unwrap();
    holder.wait().unwrap();
}

/// Several reapers race for the same dead claims: each claim is taken exactly
/// once, and exactly one tombstone is kept for it.
#[test]
fn racing_reapers_take_each_dead_claim_once() {
    let env = Env::new();
    for round in 0..20 {
        let tasks: Vec<String> = (0..5).map(|i| format!("dead-{round}-{i}")).collect();
        for t in &tasks {
            env.plant(
                &crate::common::dead_local_record(t),
                std::time::SystemTime::now(),
            );
        }
        let reapers = race((0..4).map(|_| env.farm(["reap", "--json"])).collect());
        let mut taken = Vec::new();
        for r in reapers {
            let out = r.wait_with_output().unwrap();
            assert!(out.status.success(), "{out:?}");
            let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
            for r in doc["reaped"].as_array().unwrap() {
                taken.push(r["task"].as_str().unwrap().to_owned());
            }
        }
        taken.sort();
        assert_eq!(
            taken, tasks,
            "round {round}: each dead claim reaped exactly once"
        );
    }
    assert_eq!(env.tombstones().len(), 100);
}

/// How long something farm started may take to go once its end has come.
const GONE_WITHIN: Duration = Duration::from_secs(2);

/// The pid written in `path` (waited for).
/// Process `pid` must be gone within [`GONE_WITHIN`].
#[track_caller]
fn assert_gone_soon(pid: u32, what: &str) {
    let start = Instant::now();
    while running(pid) {
        if start.elapsed() > GONE_WITHIN {
            // Not left running for the rest of the test suite.
            // SAFETY: kill(2) on a process this test's agent started.
            unsafe { libc::kill(pid as i32, libc::SIGKILL) };
            panic!("{what} (pid {pid}) still runs {GONE_WITHIN:?} after its end");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// An agent's line that starts a process which leaves the session's process
/// group with `setsid` and appends to `file` in the clone every 50 ms; its
/// pid goes to `pid_file`. `double` forks once more first (its parent, a
/// subshell, exits at once: the loop is an orphan from the start).
fn escapee(file: &str, pid_file: &Path, double: bool) -> String {
    let inner = format!(
        "setsid sh -c 'echo $$ > \"{}\"; while :; do echo x >> {file}; sleep 0.05; done' &",
        pid_file.display()
    );
    if double {
        format!("( {inner} )")
    } else {
        inner
    }
}

/// A session whose agent starts two escapees — one `setsid` in the
/// background, one double-forked and `setsid` — and exits 0. They used to
/// outlive the session, farm and the restart, writing into the clone the
/// next session reused, and farm committed their lines into the next
/// task's commit (e3's commit carried e1's lines). Now they die as the
/// session ends: the next session starts in a clean clone, and nothing
/// after the first task's commit touches their files.
#[test]
fn a_sessions_setsid_escapees_die_with_it_and_are_never_committed_later() {
    let env = Env::git_hub(&[]);
    let logs = logs(&env);
    add_task(&env, &["e1", "-m", "First"]);
    add_task(&env, &["e2", "--after", "e1", "-m", "Second"]);
    let agent = env.agent_script(
        "escaping.sh",
        &format!(
            r#"set -eu
L='{l}'
git status --porcelain > "$L/status-$FARM_TASK"
if [ "$FARM_TASK" = e1 ]; then
  {one}
  {two}
  while [ ! -s "$L/setsid.pid" ] || [ ! -s "$L/double.pid" ]; do sleep 0.01; done
  sleep 0.2
fi
echo "$FARM_TASK" > "$FARM_TASK.txt"
git add -A
git commit -q -m "$FARM_TASK"
sleep 0.2
"#,
            l = logs.display(),
            one = escapee("escaped.txt", &logs.join("setsid.pid"), false),
            two = escapee("doubled.txt", &logs.join("double.pid"), true),
        ),
    );
    let out = farm_run(&env, &agent, &[]).success();
    let setsid = read_pid(&logs.join("setsid.pid"), Duration::from_secs(20));
    let double = read_pid(&logs.join("double.pid"), Duration::from_secs(20));
    assert_gone_soon(setsid, "the setsid escapee");
    assert_gone_soon(double, "the double-forked escapee");
    assert_eq!(
        std::fs::read_to_string(logs.join("status-e2")).unwrap(),
        "",
        "the clone e2 started in was written meanwhile: {out:#?}"
    );
    assert_eq!(show(&env, "main:e2.txt").as_deref(), Some("e2\n"));
    // The escapees' files are e1's work as e1's session left it.
    let e1_done = env.git(["log", "-1", "--format=%H", "main", "--", "tasks/done/e1.md"]);
    let later = env.git([
        "log",
        "--format=%h %s",
        &format!("{e1_done}..main"),
        "--",
        "escaped.txt",
        "doubled.txt",
    ]);
    assert_eq!(later, "", "commits after e1's carry its escapees' writes");
}

/// farm SIGKILLed while its session's `setsid` escapee writes into the
/// clone: the escapee is gone within a second or two (it used to write on
/// for ever), and the next farm's session starts in a clean clone and
/// commits none of it.
#[test]
fn a_setsid_escapee_dies_with_a_sigkilled_farm() {
    let env = Env::git_hub(&[]);
    let logs = logs(&env);
    add_task(&env, &["k1", "-m", "Slow"]);
    let slow = env.agent_script(
        "slow.sh",
        &format!(
            "{}\nexec sleep 60\n",
            escapee("escaped.txt", &logs.join("setsid.pid"), false)
        ),
    );
    let mut first = env
        .farm_git(run_args(&env, &slow, &["--timeout", "60s"]))
        .spawn();
    let setsid = read_pid(&logs.join("setsid.pid"), Duration::from_secs(20));
    first.kill().unwrap(); // SIGKILL: none of farm's own clean-up runs
    first.wait().unwrap();
    assert_gone_soon(setsid, "the setsid escapee of a SIGKILLed farm");

    let quick = env.agent_script(
        "quick.sh",
        &format!(
            "set -eu\ngit status --porcelain > '{}/status'\necho ok > k1.txt\ngit add -A\ngit commit -q -m k1\n",
            logs.display()
        ),
    );
    farm_run(&env, &quick, &[]).success();
    assert_eq!(std::fs::read_to_string(logs.join("status")).unwrap(), "");
    assert_eq!(show(&env, "main:k1.txt").as_deref(), Some("ok\n"));
    assert_eq!(show(&env, "main:escaped.txt"), None);
}

/// farm SIGKILLed while the gate runs a test command that takes long: the
/// command, its child and a child that left its group with `setsid` are
/// gone within a second or two. The command ran in its own process group
/// with no parent-death signal and no keeper, so it ran on after farm,
/// burning CPU and writing in the gate's directory.
#[test]
fn the_gates_test_command_dies_with_a_sigkilled_farm() {
    let env = Env::git_hub(&[]);
    let logs = logs(&env);
    let l = logs.display();
    std::fs::write(
        env.hub.join("gate.sh"),
        format!(
            "sleep 60 &\necho $! > '{l}/child.pid'\nsetsid sleep 60 &\necho $! > '{l}/setsid.pid'\necho $$ > '{l}/gate.pid'\nwait\n"
        ),
    )
    .unwrap();
    let toml = env.hub.join("farm.toml");
    let text = std::fs::read_to_string(&toml).unwrap();
    std::fs::write(
        &toml,
        format!(
            "{text}\n[tests]\ncommand = \"sh gate.sh\"\nformat = \"lines\"\ntimeout = \"5m\"\n"
        ),
    )
    .unwrap();
    env.git(["add", "-A"]);
    env.git(["commit", "-qm", "a slow gate"]);
    add_task(&env, &["g1", "-m", "Gated"]);
    let agent = env.agent_script(
        "work.sh",
        "set -eu\necho ok > g1.txt\ngit add -A\ngit commit -q -m g1\n",
    );
    let mut farm = env.farm_git(run_args(&env, &agent, &[])).spawn();
    let gate = read_pid(&logs.join("gate.pid"), Duration::from_secs(20));
    let child = read_pid(&logs.join("child.pid"), Duration::from_secs(20));
    let setsid = read_pid(&logs.join("setsid.pid"), Duration::from_secs(20));
    farm.kill().unwrap();
    farm.wait().unwrap();
    assert_gone_soon(gate, "the test command");
    assert_gone_soon(child, "the test command's child");
    assert_gone_soon(setsid, "the test command's setsid child");
}
