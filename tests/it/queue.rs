//! The merge queue on a local hub: gated changes tested side by side, each
//! on top of those ahead of it, with every guarantee of the gate kept — a
//! red change evicted alone, every tip of main a tested tree, a farm killed
//! in line losing nothing and wedging nothing.

use std::time::{Duration, Instant};

use crate::common::Env;
use crate::run::{add_task, assert_hub_sound, board, rescue_branches, run_args, show};
use crate::steer::{journal_events, test_runs};

/// Tests `a` and `b` pass when `src/X` holds what `tests/X.t` does; the
/// suite takes a second (or `FARM_QUEUE_TEST_SLEEP`) and notes how many
/// runs of it overlap.
const GATE: &str = r#"C="$FARM_QUEUE_TEST_DIR"
# The claim of `reaped` taken away (by a person) while its change is in
# line, its work noted; once.
if [ "$FARM_TASK" = reaped ] && mkdir "$C/reaped" 2>/dev/null; then
  cp src/note-reaped "$C/reaped/note"
  "$FARM_QUEUE_TEST_FARM" --hub "$FARM_QUEUE_TEST_HUB" release --force reaped >/dev/null 2>&1
fi
mkdir -p "$C/running"
touch "$C/running/$$"
echo "$(ls "$C/running" | wc -l)" >> "$C/overlap"
sleep "${FARM_QUEUE_TEST_SLEEP:-1}"
for t in tests/*.t; do
  n=${t#tests/}; n=${n%.t}
  read want < "$t"
  got=; [ -f "src/$n" ] && read got < "src/$n"
  if [ "$got" = "$want" ]; then echo "PASS: $n"; else echo "FAIL: $n: want $want got $got"; fi
done
rm -f "$C/running/$$"
"#;

/// A hub whose pushes are gated by [`GATE`].
fn gated() -> Env {
    let env = Env::git_hub(&[
        ("gate.sh", GATE),
        ("tests/a.t", "1\n"),
        ("tests/b.t", "2\n"),
        ("src/a", "1\n"),
        ("src/b", "2\n"),
    ]);
    let toml = env.hub.join("farm.toml");
    let mut text = std::fs::read_to_string(&toml).unwrap();
    text.push_str(
        "\n[tests]\ncommand = \"sh gate.sh\"\nformat = \"lines\"\nfailed = '^FAIL: (?P<name>\\S+): (?P<why>.*)$'\ntimeout = \"60s\"\n",
    );
    std::fs::write(&toml, text).unwrap();
    env.git(["commit", "-qam", "the gate"]);
    env
}

/// An agent whose task `break-a` breaks test `a`; any other task writes a
/// file of its own (code the tests do not read), `reaped` with its
/// session's pid in it.
fn agent(env: &Env) -> String {
    env.agent_script(
        "agent.sh",
        r#"set -eu
case "$FARM_TASK" in
  break-*) echo 0 > src/a;;
  reaped) echo "$FARM_TASK $$" > "src/note-$FARM_TASK";;
  *) echo "$FARM_TASK" > "src/note-$FARM_TASK";;
esac
git add -A
git commit -qm "$FARM_TASK"
"#,
    )
}

fn queue_dir(env: &Env) -> std::path::PathBuf {
    env.tmp.path().join("queue-test")
}

fn run(env: &Env, args: &[&str]) -> crate::common::Output {
    env.farm_git(run_args(env, &agent(env), args))
        .env("FARM_QUEUE_TEST_DIR", queue_dir(env))
        .env("FARM_QUEUE_TEST_FARM", env!("CARGO_BIN_EXE_farm"))
        .env("FARM_QUEUE_TEST_HUB", &env.hub)
        .run_within(crate::run::LIMIT)
}

/// Every first-parent commit of main passes both tests (the tip farm
/// pushed is a tree the gate let through).
#[track_caller]
fn every_tip_green(env: &Env) {
    for commit in env.git(["rev-list", "--first-parent", "main"]).lines() {
        let a = show(env, &format!("{commit}:src/a"));
        if a.is_none() {
            continue; // before the project's files
        }
        assert_eq!(a.as_deref(), Some("1\n"), "main at {commit} is red");
        assert_eq!(
            show(env, &format!("{commit}:src/b")).as_deref(),
            Some("2\n")
        );
    }
}

/// Nothing of the queue is left on the hub: no place in line, no
/// candidate ref.
#[track_caller]
fn queue_empty(env: &Env) {
    let line = env.hub.join("current_tasks/.queue");
    let left: Vec<String> = std::fs::read_dir(&line)
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| !n.starts_with('.'))
                .collect()
        })
        .unwrap_or_default();
    assert!(left.is_empty(), "left in line: {left:?}");
    assert_eq!(
        env.git(["for-each-ref", "refs/farm/queue/"]),
        "",
        "candidate refs left"
    );
}

#[test]
fn queued_changes_are_tested_side_by_side_and_every_tip_of_main_passes() {
    let env = gated();
    let tasks: Vec<String> = (1..=8).map(|i| format!("n{i}")).collect();
    for t in &tasks {
        add_task(&env, &[t, "-m", "Write your note"]);
    }
    let farm = env
        .farm_git(run_args(&env, &agent(&env), &["-j", "4"]))
        .env("FARM_QUEUE_TEST_DIR", queue_dir(&env))
        .spawn();
    // `farm status` shows the line while changes wait in it.
    let start = Instant::now();
    let shown = loop {
        let status = crate::run::status_json(&env);
        let line = status["queue"].as_array().cloned().unwrap_or_default();
        if line.len() >= 2 {
            break line;
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "no queue shown in a minute: {status:#}"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    for c in &shown {
        assert!(
            tasks.contains(&c["task"].as_str().unwrap().to_owned()),
            "{c}"
        );
        assert!(c["agent"].as_str().unwrap().starts_with("vm-"), "{c}");
        let state = c["state"].as_str().unwrap();
        assert!(
            ["building", "testing", "passed, landing in turn"].contains(&state),
            "{c}"
        );
    }
    crate::common::Farm::wait_within(farm, crate::run::LIMIT).success();

    assert_eq!(board(&env, "tasks/done"), tasks.iter().cloned().collect());
    every_tip_green(&env);
    // Runs of the gate overlapped: changes waiting to land were tested
    // side by side, not one at a time under the push lock.
    let overlap = std::fs::read_to_string(queue_dir(&env).join("overlap")).unwrap();
    let most = overlap
        .lines()
        .filter_map(|l| l.trim().parse::<usize>().ok())
        .max();
    assert!(
        most >= Some(2),
        "the gate never ran beside itself: {overlap}"
    );
    // Each change tested once (no change red, none built again on other
    // code), and the branch once before them.
    let journal =
        std::fs::read_to_string(env.tmp.path().join("state/journal.jsonl")).unwrap_or_default();
    let said: Vec<&str> = journal
        .lines()
        .filter(|l| !l.contains("\"event\":\"session\""))
        .collect();
    assert_eq!(
        test_runs(&env),
        [("baseline".into(), 1), ("gate".into(), 8)].into(),
        "{said:#?}"
    );
    // The journal has each change's place in line and its leaving.
    let of = |kind: &str| journal_events(&env, kind);
    assert_eq!(of("queued").len(), 8);
    let left = of("unqueued");
    assert_eq!(left.len(), 8);
    let tested: u64 = left.iter().map(|e| e["tested"].as_u64().unwrap()).sum();
    assert_eq!(tested, 8, "{left:?}");
    queue_empty(&env);
    assert_hub_sound(&env);
}

/// With nothing kept for the branch, the first change's tests and the
/// branch's run side by side: the first landing of a run waited for the
/// two in turn, a suite's time more, and every change in line with it.
#[test]
fn the_branch_is_tested_beside_the_first_change() {
    let env = gated();
    add_task(&env, &["solo", "-m", "Write your note"]);
    env.farm_git(run_args(&env, &agent(&env), &["-j", "1"]))
        .env("FARM_QUEUE_TEST_DIR", queue_dir(&env))
        .env("FARM_QUEUE_TEST_SLEEP", "3")
        .run_within(crate::run::LIMIT)
        .success();
    assert_eq!(board(&env, "tasks/done"), ["solo".to_owned()].into());
    every_tip_green(&env);
    assert_eq!(
        test_runs(&env),
        [("baseline".into(), 1), ("gate".into(), 1)].into()
    );
    let overlap = std::fs::read_to_string(queue_dir(&env).join("overlap")).unwrap();
    let runs: Vec<usize> = overlap
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect();
    assert_eq!(
        runs.iter().max(),
        Some(&2),
        "one after the other: {overlap}"
    );
}

#[test]
fn a_red_change_in_line_is_evicted_alone_and_the_others_land() {
    let env = gated();
    let mut tasks: Vec<String> = (1..=5).map(|i| format!("n{i}")).collect();
    for t in &tasks[..2] {
        add_task(&env, &[t, "-m", "Write your note"]);
    }
    add_task(&env, &["break-a", "--max-attempts", "1", "-m", "Break a"]);
    for t in &tasks[2..] {
        add_task(&env, &[t, "-m", "Write your note"]);
    }
    run(&env, &["-j", "3"]).code(5);

    tasks.sort();
    assert_eq!(board(&env, "tasks/done"), tasks.iter().cloned().collect());
    assert_eq!(board(&env, "tasks/failed"), ["break-a".to_owned()].into());
    every_tip_green(&env);
    // The red change's work is on its rescue branch, its note names the
    // test it broke.
    let rescued = rescue_branches(&env, "break-a");
    assert_eq!(rescued.len(), 1, "{rescued:?}");
    assert_eq!(
        show(&env, &format!("{}:src/a", rescued[0])).as_deref(),
        Some("0\n")
    );
    let note = show(&env, "main:tasks/failed/break-a.md").unwrap();
    assert!(note.contains("ERROR: a: want 1 got 0"), "{note}");
    queue_empty(&env);
    assert_hub_sound(&env);
}

/// On the board: `break-a` (one attempt, claimed first, so that it is
/// first in line and the other changes are tested on top of it), then
/// `tasks`.
fn red_first(env: &Env, tasks: &[String]) {
    let red = ["break-a", "--max-attempts", "1", "--priority", "1"];
    add_task(env, &[&red[..], &["-m", "Break a"]].concat());
    for t in tasks {
        add_task(env, &[t, "-m", "Write your note"]);
    }
}

/// The changes behind a red one, tested on top of it, are tested again
/// without it as one batch: the last of them tests the code of all, and
/// the first lands them all in one push — a red change costs two suite
/// runs more than a green one (its own again, to tell a flaky test, and
/// the batch's), not one more for each change behind it. Every tip of
/// main is still a tested tree, and only the red change fails.
#[test]
fn the_changes_behind_a_red_one_are_tested_again_as_one_batch() {
    let env = gated();
    let mut tasks: Vec<String> = (1..=6).map(|i| format!("n{i}")).collect();
    red_first(&env, &tasks);
    let out = env
        .farm_git(run_args(&env, &agent(&env), &["-j", "3", "-v"]))
        .env("FARM_QUEUE_TEST_DIR", queue_dir(&env))
        .env("FARM_QUEUE_TEST_SLEEP", "2")
        .run_within(crate::run::LIMIT)
        .code(5);
    let said = format!("{}{}", out.stdout, out.stderr);
    tasks.sort();
    assert_eq!(board(&env, "tasks/done"), tasks.iter().cloned().collect());
    assert_eq!(board(&env, "tasks/failed"), ["break-a".to_owned()].into());
    every_tip_green(&env);
    let runs = test_runs(&env);
    let gate = runs.get("gate").copied().unwrap_or_default();
    assert_eq!(runs.get("rerun"), Some(&1), "{runs:?}");
    assert!(
        gate <= tasks.len() + 2,
        "{gate} gate runs for {} changes: {runs:?}\n{said}",
        tasks.len() + 1
    );
    assert!(
        !journal_events(&env, "batch").is_empty(),
        "no batch landed\n{said}"
    );
    queue_empty(&env);
    assert_hub_sound(&env);
}

/// Two red changes, the second among those behind the first: the batch
/// formed behind the first is red again, and is searched from its end —
/// each change that did not test alone does so once the one behind it is
/// red — until the second red change is found by its own verdict. Only the
/// two fail; every other change lands, every tip of main green.
#[test]
fn a_second_red_change_in_a_batch_is_found_and_fails_alone() {
    let env = gated();
    let mut tasks: Vec<String> = (1..=4).map(|i| format!("n{i}")).collect();
    let order = [
        ("break-a", "5"),
        ("n1", "4"),
        ("break-b", "3"),
        ("n2", "2"),
        ("n3", "1"),
        ("n4", "0"),
    ];
    for (t, priority) in order {
        let mut args = vec![t, "--priority", priority];
        if t.starts_with("break") {
            args.extend(["--max-attempts", "1"]);
        }
        args.extend(["-m", "Do it"]);
        add_task(&env, &args);
    }
    let out = env
        .farm_git(run_args(&env, &agent(&env), &["-j", "3", "-v"]))
        .env("FARM_QUEUE_TEST_DIR", queue_dir(&env))
        .env("FARM_QUEUE_TEST_SLEEP", "2")
        .run_within(crate::run::LIMIT)
        .code(5);
    let said = format!("{}{}", out.stdout, out.stderr);
    eprintln!(
        "searched a red batch: {}; runs: {:?}",
        said.contains("red on top of changes not tested alone"),
        test_runs(&env)
    );
    tasks.sort();
    assert_eq!(
        board(&env, "tasks/done"),
        tasks.iter().cloned().collect(),
        "{said}"
    );
    assert_eq!(
        board(&env, "tasks/failed"),
        ["break-a".to_owned(), "break-b".to_owned()].into(),
        "{said}"
    );
    every_tip_green(&env);
    queue_empty(&env);
    assert_hub_sound(&env);
}

#[test]
fn a_farm_killed_while_changes_wait_in_line_loses_nothing_and_wedges_nothing() {
    let env = gated();
    let tasks: Vec<String> = (1..=6).map(|i| format!("n{i}")).collect();
    for t in &tasks {
        add_task(&env, &[t, "-m", "Write your note"]);
    }
    let mut farm = env
        .farm_git(run_args(&env, &agent(&env), &["-j", "3"]))
        .env("FARM_QUEUE_TEST_DIR", queue_dir(&env))
        .spawn();
    // Killed once at least two changes wait in line (their tests running).
    let line = env.hub.join("current_tasks/.queue");
    let start = Instant::now();
    loop {
        let waiting = std::fs::read_dir(&line)
            .map(|d| {
                d.flatten()
                    .filter(|e| e.file_name().to_string_lossy().ends_with(".toml"))
                    .count()
            })
            .unwrap_or(0);
        if waiting >= 2 {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "nothing queued in a minute"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    unsafe {
        libc::kill(farm.id() as i32, libc::SIGKILL);
    }
    farm.wait().unwrap();

    // Run again: everything lands, once.
    run(&env, &["-j", "3"]).success();
    assert_eq!(board(&env, "tasks/done"), tasks.iter().cloned().collect());
    for t in &tasks {
        assert_eq!(
            show(&env, &format!("main:src/note-{t}")).as_deref(),
            Some(format!("{t}\n").as_str())
        );
        let landed = env.git(["log", "--format=%s", "main", "--", &format!("src/note-{t}")]);
        assert_eq!(
            landed.lines().count(),
            1,
            "{t} landed more than once: {landed}"
        );
    }
    every_tip_green(&env);
    queue_empty(&env);
    assert_hub_sound(&env);
}

/// A farm SIGKILLed while its push that lands a batch (the changes behind
/// a red one, tested again as one: its own farm's) is held at the hub:
/// that push's processes keep every claim of the batch locked, so none is
/// taken back while it may still land. It lands after the kill; run again,
/// every task has landed once, every tip is green and nothing is left in
/// line or claimed.
#[test]
fn a_farm_killed_mid_batch_push_on_a_local_hub_lands_nothing_twice() {
    use std::os::unix::fs::PermissionsExt;
    let env = gated();
    let tasks: Vec<String> = (1..=5).map(|i| format!("n{i}")).collect();
    red_first(&env, &tasks);
    let base = env.tmp.path();
    let (batch, go) = (base.join("batch-held"), base.join("go-on"));
    // A landing of two tasks or more held until the test killed its farm.
    let hook = format!(
        r#"#!/bin/sh
while read old new ref; do
  [ "$ref" = refs/heads/main ] || continue
  n=$(git diff --name-only --diff-filter=A "$old" "$new" -- tasks/done | wc -l)
  if [ "$n" -ge 2 ] && mkdir '{batch}' 2>/dev/null; then
    i=0
    while [ ! -e '{go}' ] && [ $i -lt 600 ]; do sleep 0.1; i=$((i+1)); done
  fi
done
exit 0
"#,
        batch = batch.display(),
        go = go.display()
    );
    let path = env.hub.join(".git/hooks/pre-receive");
    std::fs::write(&path, hook).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    let mut farm = env
        .farm_git(run_args(&env, &agent(&env), &["-j", "3", "-v"]))
        .env("FARM_QUEUE_TEST_DIR", queue_dir(&env))
        .env("FARM_QUEUE_TEST_SLEEP", "2")
        .spawn();
    let start = Instant::now();
    while !batch.is_dir() {
        assert!(
            start.elapsed() < Duration::from_secs(90),
            "no push landing changes together in 90 s"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    // The farm alone: its push goes on at the hub with nobody to tell.
    unsafe {
        libc::kill(farm.id() as i32, libc::SIGKILL);
    }
    farm.wait().unwrap();
    std::fs::write(&go, "").unwrap();

    run(&env, &["-j", "3"]);
    assert_eq!(board(&env, "tasks/done"), tasks.iter().cloned().collect());
    assert_eq!(board(&env, "tasks/failed"), ["break-a".to_owned()].into());
    for t in &tasks {
        let landed = env.git(["log", "--format=%s", "main", "--", &format!("src/note-{t}")]);
        assert_eq!(
            landed.lines().count(),
            1,
            "{t} landed other than once: {landed}"
        );
    }
    every_tip_green(&env);
    queue_empty(&env);
    assert_hub_sound(&env);
    assert_eq!(
        env.farm(["locks", "--json"]).run().success().json()["claims"]
            .as_array()
            .map(Vec::len),
        Some(0),
        "claims left"
    );
}

#[test]
fn a_change_whose_claim_is_taken_away_in_line_never_lands() {
    let env = gated();
    let tasks = ["n1", "n2", "reaped", "n3"];
    for t in tasks {
        add_task(&env, &[t, "-m", "Write your note"]);
    }
    run(&env, &["-j", "2"]);

    // The work made under the claim taken away is not on main (a later
    // attempt's may be), and is not lost: a rescue branch holds it.
    let first = std::fs::read_to_string(queue_dir(&env).join("reaped/note")).unwrap();
    for commit in env.git(["rev-list", "main"]).lines() {
        assert_ne!(
            show(&env, &format!("{commit}:src/note-reaped")).as_deref(),
            Some(first.as_str()),
            "the work of a claim taken away landed at {commit}"
        );
    }
    let rescued = rescue_branches(&env, "reaped");
    assert!(
        rescued
            .iter()
            .any(|b| show(&env, &format!("{b}:src/note-reaped")).as_deref() == Some(first.as_str())),
        "not rescued: {rescued:?}"
    );
    for t in ["n1", "n2", "n3"] {
        assert!(board(&env, "tasks/done").contains(t), "{t} not done");
    }
    every_tip_green(&env);
    queue_empty(&env);
}

/// A `git daemon` hub gated by [`GATE`], with `tasks` on its board (each
/// asks for a note), and an agent script that writes the note; the
/// daemon, the agent's command and the gate's directory.
fn served(tasks: &[String]) -> (crate::daemon::Daemon, String, std::path::PathBuf) {
    served_with(tasks, &[])
}

/// [`served`], with `more` files (path, text) on the hub's board besides,
/// written over any of the same path.
fn served_with(
    tasks: &[String],
    more: &[(&str, &str)],
) -> (crate::daemon::Daemon, String, std::path::PathBuf) {
    let mut files: Vec<(String, String)> = vec![
        ("gate.sh".into(), GATE.into()),
        ("tests/a.t".into(), "1\n".into()),
        ("tests/b.t".into(), "2\n".into()),
        ("src/a".into(), "1\n".into()),
        ("src/b".into(), "2\n".into()),
        (
            "farm.toml".into(),
            "[tests]\ncommand = \"sh gate.sh\"\nformat = \"lines\"\nfailed = '^FAIL: (?P<name>\\S+): (?P<why>.*)$'\ntimeout = \"60s\"\n".into(),
        ),
    ];
    for t in tasks {
        files.push((
            format!("tasks/{t}.md"),
            format!("+++\ntitle = \"Task {t}\"\n+++\nWrite your note\n"),
        ));
    }
    let mut files: Vec<(&str, &str)> = files
        .iter()
        .map(|(p, t)| (p.as_str(), t.as_str()))
        .collect();
    files.extend_from_slice(more);
    let daemon = crate::daemon::Daemon::with_hub(&files);
    let dir = daemon.base.path().join("queue-test");
    let agent_path = daemon.base.path().join("agent.sh");
    std::fs::write(
        &agent_path,
        "set -eu\necho \"$FARM_TASK\" > \"src/note-$FARM_TASK\"\ngit add -A\ngit commit -qm \"$FARM_TASK\"\n",
    )
    .unwrap();
    let agent = format!("sh '{}'", agent_path.display());
    (daemon, agent, dir)
}

/// `farm run` on `machine` with the gate's environment, its suite taking
/// four seconds: long enough for the next change to be built on the one
/// ahead while that is tested, on a busy machine.
fn run_on(
    machine: &crate::daemon::Machine,
    agent: &str,
    dir: &std::path::Path,
    jobs: &str,
) -> crate::common::Farm {
    let mut farm = machine.farm([
        "-v",
        "run",
        "--agent",
        agent,
        "-j",
        jobs,
        "--name",
        &machine.host,
    ]);
    farm.cmd.env("FARM_QUEUE_TEST_DIR", dir).env(
        "FARM_QUEUE_TEST_SLEEP",
        std::env::var("FARM_QUEUE_TEST_SLEEP").unwrap_or("4".into()),
    );
    farm
}

/// Each task landed once on the served hub, every tip green, and nothing
/// of the queue left there (no place in line, no candidate ref).
#[track_caller]
fn landed_once_and_queue_gone(daemon: &crate::daemon::Daemon, tasks: &[String], said: &str) {
    let hub = daemon.hub();
    assert_eq!(
        hub.board("main", "tasks/done"),
        tasks.iter().cloned().collect(),
        "{said}"
    );
    for t in tasks {
        let landed = hub.git(["log", "--format=%s", "main", "--", &format!("src/note-{t}")]);
        assert_eq!(landed.lines().count(), 1, "{t} landed {landed:?}");
    }
    for commit in hub.git(["rev-list", "--first-parent", "main"]).lines() {
        if let Some(a) = hub.show(&format!("{commit}:src/a")) {
            assert_eq!(a, "1\n", "main at {commit} is red");
        }
    }
    assert_eq!(
        hub.git(["for-each-ref", "refs/farm/queue/"]),
        "",
        "candidate refs left"
    );
    let claims = hub.git(["ls-tree", "--name-only", "farm/claims", "current_tasks/"]);
    assert!(!claims.contains(".queue."), "left in line: {claims}");
}

/// Across machines, through a `git daemon` hub (no shared filesystem, no
/// push lock): two farms of two agents each. The line is kept beside the
/// claims; each change is tested once, beside the others (a change behind
/// one of the other machine's builds on its candidate and reads its
/// results through the hub), not again because another landed first; every
/// tip of main is green, every task done once, and nothing of the queue is
/// left on the hub.
#[test]
fn queued_changes_across_two_machines_are_tested_side_by_side() {
    use crate::daemon::Running;
    let tasks: Vec<String> = (1..=8).map(|i| format!("n{i}")).collect();
    let (daemon, agent, dir) = served(&tasks);
    let machines = [daemon.machine("east"), daemon.machine("west")];
    let runs: Vec<Running> = machines
        .iter()
        .map(|m| Running::spawn(run_on(m, &agent, &dir, "2")))
        .collect();
    let deadline = Instant::now() + Duration::from_secs(180);
    let outs: Vec<_> = runs.into_iter().map(|r| r.finish_by(deadline)).collect();
    for out in &outs {
        assert_eq!(out.code, Some(0), "{out:#?}");
    }
    let said: String = outs.iter().map(|o| o.stderr.as_str()).collect();
    landed_once_and_queue_gone(&daemon, &tasks, &said);
    let overlap = std::fs::read_to_string(dir.join("overlap")).unwrap();
    let runs: Vec<usize> = overlap
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect();
    assert!(
        runs.iter().max() >= Some(&2),
        "the gate never ran beside itself: {overlap}"
    );
    // One run a change, and the branch's once. 57 before the queue
    // crossed machines, each machine testing again when the other landed
    // first; 9 or 10 before the results a change passed with outlived its
    // place in line (a change whose tests ended after the one ahead had
    // landed tested the branch), and before two changes could each take
    // the first place.
    eprintln!("{} suite runs for {} changes", runs.len(), tasks.len());
    assert!(
        runs.len() <= tasks.len() + 1,
        "{} suite runs for {} changes:\n{said}",
        runs.len(),
        tasks.len()
    );
    assert!(said.contains("ahead in line"), "{said}");
    // Of the results shared through the hub, only the branch's are left:
    // each landing deleted those of the code before it.
    let results = daemon.hub().git(["for-each-ref", "refs/farm/results/"]);
    assert!(results.lines().count() <= 1, "results left: {results}");
}

/// Across machines too, the changes behind a red one are tested again
/// without it as one batch, landed in one push through the claims branch:
/// the red change fails alone, every other lands once, every tip is green,
/// and the suite runs at most twice more than it would with no red change
/// (the red one's rerun, the batch's).
#[test]
fn across_machines_the_changes_behind_a_red_one_are_tested_again_as_one_batch() {
    use crate::daemon::Running;
    let tasks: Vec<String> = (1..=5).map(|i| format!("n{i}")).collect();
    let red = "+++\ntitle = \"Break a\"\npriority = 5\nmax_attempts = 1\n+++\nBreak test a\n";
    let (daemon, _, dir) = served_with(&tasks, &[("tasks/break-a.md", red)]);
    let agent_path = daemon.base.path().join("agent-red.sh");
    std::fs::write(
        &agent_path,
        "set -eu\ncase \"$FARM_TASK\" in\n  break-*) echo 0 > src/a;;\n  *) echo \"$FARM_TASK\" > \"src/note-$FARM_TASK\";;\nesac\ngit add -A\ngit commit -qm \"$FARM_TASK\"\n",
    )
    .unwrap();
    let agent = format!("sh '{}'", agent_path.display());
    let machines = [daemon.machine("east"), daemon.machine("west")];
    let runs: Vec<Running> = machines
        .iter()
        .map(|m| Running::spawn(run_on(m, &agent, &dir, "2")))
        .collect();
    let deadline = Instant::now() + Duration::from_secs(240);
    let outs: Vec<_> = runs.into_iter().map(|r| r.finish_by(deadline)).collect();
    for out in &outs {
        assert!(matches!(out.code, Some(0 | 5)), "{out:#?}");
    }
    let said: String = outs.iter().map(|o| o.stderr.as_str()).collect();
    landed_once_and_queue_gone(&daemon, &tasks, &said);
    assert_eq!(
        daemon.hub().board("main", "tasks/failed"),
        ["break-a".to_owned()].into(),
        "{said}"
    );
    let runs = std::fs::read_to_string(dir.join("overlap"))
        .unwrap()
        .lines()
        .count();
    eprintln!(
        "{runs} suite runs for {} changes; a batch deferred: {}",
        tasks.len() + 1,
        said.contains("tested with the change(s) behind it")
    );
    assert!(
        runs <= tasks.len() + 1 + 1 + 2,
        "{runs} suite runs for {} changes:\n{said}",
        tasks.len() + 1
    );
}

/// A change first in line when its suite passes lands next, and nothing
/// behind it can use its verdict before it has: it is not said in line
/// first, and its results are shared once it landed, for the branch. Each
/// was a round trip to the hub between its suite and its landing, which
/// every change behind waits on. A change writes the claims branch four
/// times (its claim, its place, its candidate, its release with its
/// landing), not five; the branch's results are on the hub all the same.
#[test]
fn a_change_first_in_line_lands_without_saying_it_passed_first() {
    use crate::daemon::Running;
    // (One: a second one's change might pass with the first still in line.)
    let tasks = vec!["n1".to_owned()];
    let (daemon, agent, dir) = served(&tasks);
    let machine = daemon.machine("east");
    let out = Running::spawn(run_on(&machine, &agent, &dir, "1"))
        .finish_by(Instant::now() + Duration::from_secs(120));
    assert_eq!(out.code, Some(0), "{out:#?}");
    landed_once_and_queue_gone(&daemon, &tasks, &format!("{out:#?}"));
    let writes = daemon.hub().git(["log", "--format=%s", "farm/claims"]);
    let updates = writes
        .lines()
        .filter(|w| w.starts_with("farm: update"))
        .count();
    assert_eq!(
        updates,
        tasks.len(),
        "one update in line a change (its candidate named):\n{writes}"
    );
    let key = farm::suite::results::code_key(&daemon.hub_dir(), "main", None).unwrap();
    assert!(
        results_refs(&daemon).contains(&format!("refs/farm/results/{key}")),
        "the branch's results are not on the hub: {:?}",
        results_refs(&daemon)
    );
}

/// A change that is ready to land in a line elsewhere lands the passed
/// changes just behind it in the same push. Machine `east` queues `n1`
/// (its suite slow), then `west` queues `n2` and `n3` behind it; `n1`'s
/// landing is held up at the hub (a hook that sleeps on the first push to
/// `main`) while the two behind pass, and `n2`, next to land, takes `n3`
/// with it. Each task lands once, every tip of `main` is green, the
/// journal records the batch, and `n3`, landed by another's push, releases
/// its own claim: nothing is left in line. Before, each change pushed on
/// its own: three landings for three changes.
#[test]
fn a_change_ready_to_land_takes_the_passed_ones_behind_it() {
    let tasks: Vec<String> = (1..=3).map(|i| format!("n{i}")).collect();
    let (daemon, agent, dir) = served(&tasks);
    let held = daemon.base.path().join("held-once");
    pre_receive(
        &daemon,
        &format!(
            "#!/bin/sh\nif grep -q ' refs/heads/main$' && mkdir '{}' 2>/dev/null; then sleep 8; fi\nexit 0\n",
            held.display()
        ),
    );
    let [east, west] = [daemon.machine("east"), daemon.machine("west")];
    let first = first_in_line(&daemon, &east, &agent, &dir);
    let hub = daemon.hub();
    let behind = two_behind(&west, &agent, &dir);
    let deadline = Instant::now() + Duration::from_secs(180);
    let outs = [first.finish_by(deadline), behind.finish_by(deadline)];
    // (`east` stops after its one session, the others' tasks still in
    // flight: exit 6, work left.)
    assert!(matches!(outs[0].code, Some(0 | 6)), "{:#?}", outs[0]);
    assert_eq!(outs[1].code, Some(0), "{:#?}", outs[1]);
    let said = format!("{outs:#?}");
    assert!(held.is_dir(), "the hook never held a push");
    landed_once_and_queue_gone(&daemon, &tasks, &said);
    let subjects = hub.git(["log", "--format=%s", "main"]);
    let landings = subjects
        .lines()
        .filter(|s| s.starts_with(farm::run::progress::SUBJECT))
        .count();
    assert_eq!(
        landings, 2,
        "two pushes for three changes:\n{subjects}\n{said}"
    );
    assert!(
        said.contains("landed with the change(s) behind it in line"),
        "{said}"
    );
    let journal = std::fs::read_to_string(west.state_dir().join("journal.jsonl")).unwrap();
    assert_eq!(
        journal.matches("\"event\":\"batch\"").count(),
        1,
        "{journal}"
    );
    let claims = hub.git(["ls-tree", "--name-only", "farm/claims", "current_tasks/"]);
    for t in &tasks {
        assert!(
            !claims.contains(&format!("{t}.txt")),
            "{t} still claimed: {claims}"
        );
    }
}

/// A farm SIGKILLed while its push that lands the changes behind its own
/// (their files said landed in its claims commit) is held at the hub
/// (`pre-receive`): whether the push lands after all or not, run again,
/// every task lands once, every tip is green and nothing is left in line or
/// claimed — the changes whose claims were left by the dead farm are taken
/// back, their work already on `main` or done again, never twice.
#[test]
fn a_farm_killed_mid_batch_landing_loses_nothing_and_lands_nothing_twice() {
    let tasks: Vec<String> = (1..=3).map(|i| format!("n{i}")).collect();
    let (daemon, agent, dir) = served(&tasks);
    let base = daemon.base.path();
    let (held, batch) = (base.join("held-once"), base.join("batch-held"));
    // The first push to main held 8 s; a push whose claims commit says a
    // change landed held until the test has killed its farm (60 s at
    // most), then let go on.
    let hook = format!(
        r#"#!/bin/sh
main=; claims=
while read old new ref; do
  case "$ref" in refs/heads/main) main=$new ;; refs/heads/farm/claims) claims=$new ;; esac
done
[ -n "$main" ] || exit 0
if mkdir '{held}' 2>/dev/null; then sleep 8; exit 0; fi
if [ -n "$claims" ] && git grep -q '^landed' "$claims" -- current_tasks/ && mkdir '{batch}' 2>/dev/null; then
  i=0
  while [ ! -e '{go}' ] && [ $i -lt 600 ]; do sleep 0.1; i=$((i+1)); done
fi
exit 0
"#,
        held = held.display(),
        batch = batch.display(),
        go = base.join("go-on").display()
    );
    pre_receive(&daemon, &hook);
    let [east, west] = [daemon.machine("east"), daemon.machine("west")];
    let first = first_in_line(&daemon, &east, &agent, &dir);
    let hub = daemon.hub();
    let start = Instant::now();
    let behind = |west: &crate::daemon::Machine| two_behind(west, &agent, &dir);
    let killed = behind(&west);
    while !batch.is_dir() {
        assert!(
            start.elapsed() < Duration::from_secs(120),
            "no push landing changes together in 120 s"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    crate::daemon::signal_group(killed.pid() as i32, libc::SIGKILL);
    let killed = killed.finish_by(Instant::now() + Duration::from_secs(10));
    // The push goes on at the hub with nobody to tell.
    std::fs::write(base.join("go-on"), "").unwrap();
    eprintln!(
        "after the kill, main has: {}",
        hub.git(["log", "--format=%s", "main"]).replace('\n', " | ")
    );
    let again = behind(&west);
    let deadline = Instant::now() + Duration::from_secs(180);
    let outs = [first.finish_by(deadline), again.finish_by(deadline)];
    assert!(matches!(outs[0].code, Some(0 | 6)), "{:#?}", outs[0]);
    assert_eq!(outs[1].code, Some(0), "{killed:#?}\n{:#?}", outs[1]);
    let said = format!("{killed:#?}\n{outs:#?}");
    landed_once_and_queue_gone(&daemon, &tasks, &said);
    let claims = hub.git(["ls-tree", "--name-only", "farm/claims", "current_tasks/"]);
    for t in &tasks {
        assert!(
            !claims.contains(&format!("{t}.txt")),
            "{t} still claimed: {claims}"
        );
    }
}

/// `text` as the served hub's `pre-receive` hook.
fn pre_receive(daemon: &crate::daemon::Daemon, text: &str) {
    use std::os::unix::fs::PermissionsExt;
    let path = daemon.hub_dir().join("hooks/pre-receive");
    std::fs::write(&path, text).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// `farm run` on `machine` for one session (`-j 1`, a 6 s suite), once
/// its change is in line.
fn first_in_line(
    daemon: &crate::daemon::Daemon,
    machine: &crate::daemon::Machine,
    agent: &str,
    dir: &std::path::Path,
) -> crate::daemon::Running {
    let mut farm = run_on(machine, agent, dir, "1");
    farm.cmd.arg("--max-sessions").arg("1");
    farm.cmd.env("FARM_QUEUE_TEST_SLEEP", "6");
    let running = crate::daemon::Running::spawn(farm);
    let hub = daemon.hub();
    let start = Instant::now();
    while !hub
        .git_output(["ls-tree", "--name-only", "farm/claims", "current_tasks/"])
        .1
        .contains(".queue.")
    {
        assert!(
            start.elapsed() < Duration::from_secs(90),
            "nothing queued in 90 s"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    running
}

/// `farm run -j 2` on `machine`, a 2 s suite: its changes queue behind.
fn two_behind(
    machine: &crate::daemon::Machine,
    agent: &str,
    dir: &std::path::Path,
) -> crate::daemon::Running {
    let mut farm = run_on(machine, agent, dir, "2");
    farm.cmd.env("FARM_QUEUE_TEST_SLEEP", "2");
    crate::daemon::Running::spawn(farm)
}

/// A farm SIGKILLed while two changes or more of its wait in a line
/// elsewhere (its places beside the claims, its candidates on the hub):
/// run again on the same machine, it takes back its dead claims, the dead
/// places go with them, and every task lands once; nothing is left.
#[test]
fn a_farm_killed_in_a_line_elsewhere_loses_nothing_and_wedges_nothing() {
    use crate::daemon::Running;
    let tasks: Vec<String> = (1..=6).map(|i| format!("n{i}")).collect();
    let (daemon, agent, dir) = served(&tasks);
    let machine = daemon.machine("east");
    let first = Running::spawn(run_on(&machine, &agent, &dir, "3"));
    let hub = daemon.hub();
    let start = Instant::now();
    loop {
        let (_, claims, _) =
            hub.git_output(["ls-tree", "--name-only", "farm/claims", "current_tasks/"]);
        if claims.matches(".queue.").count() >= 2 {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(90),
            "nothing queued in 90 s"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    crate::daemon::signal_group(first.pid() as i32, libc::SIGKILL);
    let killed = first.finish_by(Instant::now() + Duration::from_secs(10));
    let again = Running::spawn(run_on(&machine, &agent, &dir, "3"));
    let out = again.finish_by(Instant::now() + Duration::from_secs(180));
    assert_eq!(out.code, Some(0), "{out:#?}");
    landed_once_and_queue_gone(&daemon, &tasks, &format!("{killed:#?}\n{out:#?}"));
}

/// Two stores (two machines), `alpha` and `beta`, on one bare hub.
fn two_machines(tmp: &std::path::Path) -> [farm::claims::git::GitStore; 2] {
    use farm::claims::git::GitStore;
    let out = crate::common::git_command()
        .args(["init", "--quiet", "--bare", "-b", "main"])
        .arg(tmp.join("hub.git"))
        .envs(crate::common::GIT_ENV)
        .output()
        .unwrap();
    assert!(out.status.success(), "git init: {out:?}");
    let url = tmp.join("hub.git");
    let url = url.to_str().unwrap();
    ["alpha", "beta"].map(|m| GitStore::open(url, &tmp.join(format!("{m}/claims.git"))).unwrap())
}

/// The claim of `task` for `agent`, through `store`.
fn claimed(store: &farm::claims::git::GitStore, agent: &str, task: &str) -> farm::claims::Held {
    use farm::claims::{Attempt, ClaimStore};
    let task = farm::names::TaskId::parse(task).unwrap();
    let claim =
        farm::claims::record::Claim::new(task, agent, None, 1, std::time::SystemTime::now());
    let Attempt::Won(held) = store.try_claim(claim, false).unwrap() else {
        panic!("{agent} did not win an unclaimed task");
    };
    held
}

/// What a change of `held`'s task says of itself as it joins the line.
fn joining(held: &farm::claims::Held) -> farm::run::queue::Record {
    let claim = held.claim();
    farm::run::queue::Record {
        task: claim.task.to_string(),
        agent: claim.agent.clone(),
        claim: Some(claim.nonce.to_string()),
        ..farm::run::queue::Record::default()
    }
}

/// Regression: a place in a line elsewhere was the last place there plus
/// one — named again once the line emptied — and a change's file was
/// taken out of the line by its name alone. A change that landed (its
/// publish gave its claim back) kept its file until its farm left the
/// line; the change behind it read the file as dead, removed it, landed
/// and left; a newcomer took the emptied line's first place again; and the
/// first farm, leaving at last, removed the newcomer's file. The
/// newcomer's farm then ended with exit 1 on its next write: "this
/// change's place in the merge queue (`.queue.000000000001`) was taken
/// away: its claim is gone" (a chaos run on an http hub, seed
/// 1796415928881216843).
#[test]
fn a_place_in_a_line_elsewhere_is_never_named_again() {
    use farm::claims::ClaimStore;
    use farm::run::queue::{Queue, Record};

    let tmp = tempfile::tempdir().unwrap();
    let [alpha, beta] = two_machines(tmp.path());
    let (x, y) = (claimed(&alpha, "alpha", "x"), claimed(&beta, "beta", "y"));
    let (here, there) = (Queue::remote(&alpha), Queue::remote(&beta));
    let (first, _) = here.join(joining(&x)).unwrap();
    let (second, _) = there.join(joining(&y)).unwrap();
    // The first change landed: its publish gave the claim back; its file
    // stays until its farm leaves the line.
    alpha.release_held(x).unwrap();
    let seen = there.view(&second).unwrap();
    assert!(
        seen.ahead.is_none(),
        "a landed change still ahead: {seen:?}"
    );
    beta.release_held(y).unwrap();
    let left = second.place;
    drop(second);
    let z = claimed(&beta, "beta", "z");
    let (mut newcomer, _) = there.join(joining(&z)).unwrap();
    let place = newcomer.place;
    assert!(place > left, "place {place} taken again");
    drop(first);
    let kept = newcomer
        .update(Record {
            candidate: Some("c0ffee".into()),
            ..newcomer.record.clone()
        })
        .unwrap();
    assert!(kept, "a change in line, its claim held, lost its place");
    let line = there.list().unwrap();
    assert_eq!(line.len(), 1, "{line:?}");
    assert_eq!(line[0].record.candidate.as_deref(), Some("c0ffee"));
    assert_eq!(line[0].place, place);
    drop(z);
}

/// A look at a line elsewhere as of a claims tip that this farm has read
/// already asks nothing of the hub: every change in line of every farm
/// reads the line again each time a claim or a place moves (found by a
/// `git ls-remote`), and the changes of one farm read the same claims — a
/// fetch each before, 583 in a round of the `daemon` bench under strace.
/// A tip it has not read is fetched.
#[test]
fn a_line_read_at_a_tip_read_already_asks_nothing_of_the_hub() {
    use farm::run::queue::{Queue, Record};

    let tmp = tempfile::tempdir().unwrap();
    let [alpha, beta] = two_machines(tmp.path());
    let (x, y) = (claimed(&alpha, "alpha", "x"), claimed(&beta, "beta", "y"));
    let (here, there) = (Queue::remote(&alpha), Queue::remote(&beta));
    let (mut first, _) = here.join(joining(&x)).unwrap();
    let (second, _) = there.join(joining(&y)).unwrap();
    let tip = || {
        let out = crate::common::git_command()
            .arg("--git-dir")
            .arg(tmp.path().join("hub.git"))
            .args(["rev-parse", "refs/heads/farm/claims"])
            .output()
            .unwrap();
        String::from_utf8(out.stdout).unwrap().trim().to_owned()
    };
    // The tip beta's own join made, then a write of alpha's on top.
    let joined = tip();
    let candidate = |c: Option<&str>| Record {
        candidate: c.map(str::to_owned),
        ..first.record.clone()
    };
    assert!(first.update(candidate(Some("c0ffee"))).unwrap());
    // As of the tip beta made: read where it is, not fetched (a fetch
    // would bring alpha's write).
    let seen = there.view_at(&second, Some(&joined)).unwrap();
    let ahead = seen.ahead.unwrap().record;
    assert_eq!((ahead.task.as_str(), ahead.candidate), ("x", None));
    // As of one it has not read: fetched.
    let seen = there.view_at(&second, Some(&tip())).unwrap();
    let ahead = seen.ahead.unwrap().record;
    assert_eq!(ahead.candidate.as_deref(), Some("c0ffee"));
    drop((first, second, x, y));
}

/// A change whose place in a line elsewhere was taken away while its claim
/// is held (its file removed by a farm that took it for dead) is told so
/// when it next writes, not ended, and takes the last place again: behind
/// the change that came meanwhile, never over its file.
#[test]
fn a_change_whose_place_was_taken_away_takes_the_last_one_again() {
    use farm::claims::ClaimStore;
    use farm::run::queue::{Queue, Record};

    let tmp = tempfile::tempdir().unwrap();
    let [alpha, beta] = two_machines(tmp.path());
    let (x, y) = (claimed(&alpha, "alpha", "x"), claimed(&beta, "beta", "y"));
    let (here, there) = (Queue::remote(&alpha), Queue::remote(&beta));
    let (mut lost, _) = here.join(joining(&x)).unwrap();
    let line = beta.line().unwrap();
    let seen = line.read_line(true).unwrap();
    let (name, text) = &seen.files[0];
    assert!(line.remove_from_line(name, text).unwrap());
    let (behind, _) = there.join(joining(&y)).unwrap();
    let was = lost.place;
    let said = Record {
        candidate: Some("c0ffee".into()),
        ..lost.record.clone()
    };
    assert!(!lost.update(said.clone()).unwrap(), "written out of line");
    here.rejoin(&mut lost, joining(&x)).unwrap();
    assert!(was < behind.place && behind.place < lost.place);
    assert!(lost.update(said).unwrap());
    let line: Vec<_> = here
        .list()
        .unwrap()
        .into_iter()
        .map(|c| (c.record.task, c.record.candidate))
        .collect();
    assert_eq!(
        line,
        [("y".into(), None), ("x".into(), Some("c0ffee".into()))]
    );
    drop((lost, behind));
    assert_eq!(here.list().unwrap(), []);
    drop((x, y));
}

/// A change whose file the change ahead rewrote to say it landed (its own
/// write then found the file changed and gave it up) takes the text read
/// there back, and its file goes when it leaves. Before, taking it back did
/// nothing once the write had failed: the file stayed in line until a
/// reader found its claim gone.
#[test]
fn a_change_said_landed_by_another_takes_its_file_back_and_leaves() {
    use farm::claims::ClaimStore;
    use farm::run::queue::{Queue, Record};

    let tmp = tempfile::tempdir().unwrap();
    let [alpha, beta] = two_machines(tmp.path());
    let x = claimed(&alpha, "alpha", "x");
    let here = Queue::remote(&alpha);
    let (mut entry, _) = here.join(joining(&x)).unwrap();
    // The change ahead (another machine) says it landed, in its file.
    let line = beta.line().unwrap();
    let seen = line.read_line(true).unwrap();
    let (name, text) = seen.files[0].clone();
    let marked = [text.as_slice(), b"landed = \"abc\"\n"].concat();
    assert!(line.update_in_line(&name, &text, &marked).unwrap());
    let said = Record {
        candidate: Some("c0ffee".into()),
        ..entry.record.clone()
    };
    assert!(!entry.update(said).unwrap(), "its file was rewritten");
    entry.adopt(&marked);
    drop(entry);
    assert_eq!(
        line.read_line(true).unwrap().files,
        [],
        "its file left with it"
    );
    drop(x);
}

/// A scratch clone of the served hub's repository, named `name` beside it
/// (what a test makes by hand, as a farm elsewhere would).
fn scratch(daemon: &crate::daemon::Daemon, name: &str) -> crate::daemon::Repo {
    use crate::daemon::Repo;
    let home = daemon.base.path().to_owned();
    let dir = home.join(name);
    let base = Repo {
        dir: home.clone(),
        home: home.clone(),
    };
    base.git([
        "clone",
        "-q",
        &daemon.hub_dir().display().to_string(),
        &dir.display().to_string(),
    ]);
    Repo { dir, home }
}

/// A commit of test results (no parent, one `results.json`) pushed to
/// the served hub as `refs/farm/results/<key>`, as a farm shares the
/// results a candidate passed with; its name.
fn results_ref(daemon: &crate::daemon::Daemon, key: &str) -> String {
    let repo = scratch(daemon, &format!("results-{key}"));
    repo.git(["checkout", "-q", "--orphan", "results"]);
    repo.git(["rm", "-rfq", "."]);
    std::fs::write(repo.dir.join("results.json"), "{}\n").unwrap();
    repo.git(["add", "results.json"]);
    repo.git([
        "commit",
        "-qm",
        "farm: test results of a merge queue candidate",
    ]);
    let name = format!("refs/farm/results/{key}");
    repo.git([
        "push",
        "-q",
        &daemon.hub_dir().display().to_string(),
        &format!("HEAD:{name}"),
    ]);
    name
}

/// The results refs the served hub has.
fn results_refs(daemon: &crate::daemon::Daemon) -> std::collections::BTreeSet<String> {
    daemon
        .hub()
        .git(["for-each-ref", "--format=%(refname)", "refs/farm/results/"])
        .lines()
        .map(str::to_owned)
        .collect()
}

/// Wait (90 s at most) until the served hub's line holds a change of
/// `task`.
#[track_caller]
fn in_line(daemon: &crate::daemon::Daemon, task: &str) {
    let hub = daemon.hub();
    let start = Instant::now();
    loop {
        // (No claims branch before the first claim.)
        let (_, files, _) =
            hub.git_output(["ls-tree", "--name-only", "farm/claims", "current_tasks/"]);
        let queued = files.lines().filter(|f| f.contains(".queue.")).any(|f| {
            hub.show(&format!("farm/claims:{f}"))
                .is_some_and(|t| t.contains(&format!("task = \"{task}\"")))
        });
        if queued {
            return;
        }
        assert!(
            start.elapsed() < Duration::from_secs(90),
            "`{task}` not queued in 90 s"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A claim store of "another machine" on the served hub, kept in `dir`.
fn store_on(daemon: &crate::daemon::Daemon, dir: &std::path::Path) -> farm::claims::git::GitStore {
    farm::claims::git::GitStore::open(&daemon.url(), &dir.join("claims.git")).unwrap()
}

/// Regression: the results a candidate passed with (shared on the hub as
/// `refs/farm/results/<key>`) were deleted only by the change that pushed
/// them when it left the line, and the branch's by the next landing: a
/// farm killed after its change passed, or after its landing and before it
/// left the line, left them on the hub for good, each advertised to every
/// fetch and `ls-remote` from then on. A landing now deletes every results
/// ref that nobody can read any more (each by a compare-and-swap on the
/// commit it saw), never one in use: the branch's, or one a change still
/// in line names (in its refs, or by its code).
#[test]
fn a_landing_deletes_the_results_nobody_reads_and_never_those_in_use() {
    use crate::daemon::Running;
    use farm::run::queue::{Queue, Record};

    let tasks = vec!["n1".to_owned()];
    let (daemon, agent, dir) = served(&tasks);
    // Left by killed farms: the results of a change that passed then died,
    // and those of the branch as it is (a farm killed after it landed:
    // they were the branch's until this run lands).
    let branch_key = farm::suite::results::code_key(&daemon.hub_dir(), "main", None).unwrap();
    let dead = results_ref(&daemon, &"d".repeat(40));
    let branch = results_ref(&daemon, &branch_key);
    let machine = daemon.machine("east");
    let running = Running::spawn(run_on(&machine, &agent, &dir, "1"));
    // A change of another machine joins the line behind this run's (whose
    // suite takes seconds), its code named with its candidate, and pushes
    // the results it passed with, then names them in its place (as a farm
    // does): in use until it leaves, each way.
    in_line(&daemon, "n1");
    let tmp = tempfile::tempdir().unwrap();
    let store = store_on(&daemon, tmp.path());
    let held = claimed(&store, "west", "behind");
    let (named, keyed) = ("a".repeat(40), "b".repeat(40));
    let (behind, _) = Queue::remote(&store)
        .join(Record {
            candidate: Some(daemon.hub().git(["rev-parse", "main"])),
            key: Some(keyed.clone()),
            refs: vec![format!("refs/farm/results/{named}")],
            ..joining(&held)
        })
        .unwrap();
    let named = results_ref(&daemon, &named);
    let keyed = results_ref(&daemon, &keyed);
    let out = running.finish_by(Instant::now() + Duration::from_secs(120));
    assert_eq!(out.code, Some(0), "{out:#?}");
    // Left: the branch's own (the landed change's, of the code it has
    // now) and the change's in line; gone: the dead change's, and those of
    // the code the branch had before.
    let now_key = farm::suite::results::code_key(&daemon.hub_dir(), "main", None).unwrap();
    let left = results_refs(&daemon);
    assert!(
        !left.contains(&dead),
        "a dead change's results left: {left:?}"
    );
    assert!(
        !left.contains(&branch),
        "the branch's old results left: {left:?}"
    );
    assert_eq!(
        left,
        [named, keyed, format!("refs/farm/results/{now_key}")].into(),
        "{out:#?}"
    );
    drop(behind);
    landed_once_and_queue_gone(&daemon, &tasks, &format!("{out:#?}"));
    drop(held);
}

/// Regression: a change whose place in a line elsewhere was taken away
/// while its claim was held took the last place again, with no end: taken
/// away again and again (by a farm that keeps reading its claim as gone),
/// it rode on for ever, and nothing said so. It takes the last place again
/// a few times; then the queue fails it as it fails a change it cannot
/// test: its work to a rescue branch, the attempt counted with a note that
/// says why, and the journal has it.
#[test]
fn a_change_whose_place_is_taken_away_again_and_again_is_failed_by_the_queue() {
    use crate::daemon::Running;
    use farm::run::queue::{Queue, Record};

    let task = "+++\ntitle = \"Task evicted\"\nmax_attempts = 1\n+++\nWrite your note\n";
    let (daemon, agent, dir) = served_with(&[], &[("tasks/evicted.md", task)]);
    // First in line, a change of another machine that passed and does not
    // land: two candidates of other code, for it to move between.
    let work = scratch(&daemon, "ahead");
    let hub_dir = daemon.hub_dir().display().to_string();
    let mut candidates = Vec::new();
    for n in 1..=2 {
        work.git(["checkout", "-q", "main"]);
        std::fs::write(work.dir.join("src/ahead"), format!("{n}\n")).unwrap();
        work.git(["add", "src/ahead"]);
        work.git(["commit", "-qm", &format!("ahead {n}")]);
        work.git([
            "push",
            "-q",
            &hub_dir,
            &format!("HEAD:refs/heads/ahead-{n}"),
        ]);
        candidates.push(work.git(["rev-parse", "HEAD"]));
        work.git(["reset", "-q", "--hard", "HEAD~"]);
    }
    let tmp = tempfile::tempdir().unwrap();
    let store = store_on(&daemon, tmp.path());
    let held = claimed(&store, "west", "ahead");
    let queue = Queue::remote(&store);
    let on = |n: usize| Record {
        candidate: Some(candidates[n % 2].clone()),
        refs: vec![format!("refs/heads/ahead-{}", n % 2 + 1)],
        green: true,
        ..joining(&held)
    };
    let (mut ahead, _) = queue.join(on(0)).unwrap();
    let machine = daemon.machine("east");
    let mut farm = run_on(&machine, &agent, &dir, "1");
    farm.cmd.env("FARM_QUEUE_TEST_SLEEP", "2");
    let mut running = Running::spawn(farm);
    // Each place the change takes is taken away, and the change ahead then
    // moves to its other candidate: the change builds on it again and, as
    // it says so in its place, finds it gone.
    let line = farm::claims::ClaimStore::line(&store).unwrap();
    let mut taken = 0;
    let start = Instant::now();
    while !running.exited() && taken < 8 {
        assert!(
            start.elapsed() < Duration::from_secs(150),
            "taken away {taken} times in 150 s"
        );
        for (name, text) in line.read_line(true).unwrap().files {
            let of_it = String::from_utf8_lossy(&text).contains("task = \"evicted\"");
            if of_it && line.remove_from_line(&name, &text).unwrap() {
                taken += 1;
                assert!(
                    ahead.update(on(taken)).unwrap(),
                    "the change ahead lost its place"
                );
            }
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    // (Riding on without end, it would land once the change ahead left.)
    drop(ahead);
    farm::claims::ClaimStore::release_held(&store, held).unwrap();
    let out = running.finish_by(Instant::now() + Duration::from_secs(120));
    let said = format!("{out:#?}");
    let hub = daemon.hub();
    assert_eq!(
        hub.board("main", "tasks/failed"),
        ["evicted".to_owned()].into(),
        "taken away {taken} times: {said}"
    );
    assert_eq!(taken, 4, "{said}");
    assert_eq!(
        out.stderr.matches("queued again at the end").count(),
        3,
        "{said}"
    );
    // Its work is on its rescue branch; the note says why.
    let rescued = hub.git([
        "for-each-ref",
        "--format=%(refname:short)",
        "refs/heads/farm/rescue/evicted/",
    ]);
    assert_eq!(rescued.lines().count(), 1, "{rescued:?}");
    assert_eq!(
        hub.show(&format!("{rescued}:src/note-evicted")).as_deref(),
        Some("evicted\n")
    );
    let note = hub.show("main:tasks/failed/evicted.md").unwrap();
    assert!(
        note.contains("the merge queue gave it up: its place in line was taken away 4 times"),
        "{note}"
    );
    assert!(!note.contains("tests could not be read"), "{note}");
    let journal = std::fs::read_to_string(machine.state_dir().join("journal.jsonl")).unwrap();
    let failed: Vec<serde_json::Value> = journal
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .filter(|e| e["event"] == "failed" && e["task"] == "evicted")
        .collect();
    assert_eq!(failed.len(), 1, "{journal}");
    assert!(
        failed[0]["why"]
            .as_str()
            .unwrap()
            .contains("taken away 4 times"),
        "{journal}"
    );
    assert_eq!(out.code, Some(5), "{said}");
}
