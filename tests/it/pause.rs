//! Per-agent and per-role control of a running fleet: `farm stop --agent`
//! drains one agent while the others go on; `farm pause` holds claims until
//! `farm resume`, through the hub, across a farm killed and started again,
//! and across machines (a `git daemon` hub).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};

use crate::common::{Env, Farm, wait_for};
use crate::daemon::{Daemon, Machine, Running};
use crate::stop::{done, farm, hub, signal};

/// The agent: logs "TASK AGENT" to `starts.log` in `logs`, touches
/// `logs/AGENT`, takes `secs`, then commits a file of its own.
fn agent(dir: &Path, logs: &Path, secs: &str) -> String {
    std::fs::create_dir_all(logs).unwrap();
    let path = dir.join("agent.sh");
    std::fs::write(
        &path,
        format!(
            "#!/bin/sh\nset -e\necho \"$FARM_TASK $FARM_AGENT\" >> '{l}/starts.log'\n\
             touch \"{l}/$FARM_AGENT\"\nsleep {secs}\n\
             echo \"$FARM_TASK\" > \"$FARM_TASK.txt\"\ngit add -A\ngit commit -qm \"work on $FARM_TASK\"\n",
            l = logs.display()
        ),
    )
    .unwrap();
    // Run through `sh`: never exec a file a forked test thread may still
    // hold open for writing.
    format!("sh '{}'", path.display())
}

/// The sessions started, as (task, agent), from `starts.log`.
fn starts(logs: &Path) -> Vec<(String, String)> {
    std::fs::read_to_string(logs.join("starts.log"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.split_once(' '))
        .map(|(t, a)| (t.to_owned(), a.to_owned()))
        .collect()
}

/// Each task in `tasks` started exactly once.
#[track_caller]
fn assert_each_started_once(logs: &Path, tasks: &[&str], out: &impl std::fmt::Debug) {
    let mut count: BTreeMap<String, usize> = BTreeMap::new();
    for (t, _) in starts(logs) {
        *count.entry(t).or_default() += 1;
    }
    for t in tasks {
        assert_eq!(count.get(*t), Some(&1), "`{t}` started: {count:?} {out:#?}");
    }
}

/// The times of the journal's claim events in the state dir `state`.
fn claim_times(state: &Path) -> Vec<(SystemTime, String)> {
    std::fs::read_to_string(state.join("journal.jsonl"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|v| v["event"] == "claim")
        .map(|v| {
            let at = humantime::parse_rfc3339_weak(v["at"].as_str().unwrap()).unwrap();
            (at, format!("{} by {}", v["task"], v["agent"]))
        })
        .collect()
}

/// No claim in the journals of `states` between `from` and `to`. A claim
/// is journaled just after farm looks for a pause (once the claim is won),
/// so one decided before `from` may be written a moment after it.
#[track_caller]
fn assert_no_claim_between(states: &[PathBuf], from: SystemTime, to: SystemTime) {
    let slack = Duration::from_millis(50);
    for state in states {
        let during: Vec<_> = claim_times(state)
            .into_iter()
            .filter(|(at, _)| *at > from + slack && *at < to)
            .collect();
        assert!(
            during.is_empty(),
            "claimed while paused ({:?} after the pause): {during:?}",
            during
                .first()
                .map(|(at, _)| at.duration_since(from).unwrap())
        );
    }
}

/// `farm stop --agent` mid-run drains that agent alone: its running session
/// finishes and is integrated, it claims nothing new, and the two other
/// agents finish the board; no task is done twice, none is lost.
#[test]
fn stop_agent_drains_that_agent_alone_and_the_others_finish_the_board() {
    let env = Env::new();
    let tasks = ["a", "b", "c", "d", "e", "f"];
    hub(&env, &tasks);
    let logs = env.tmp.path().join("logs");
    let agent = agent(env.tmp.path(), &logs, "2");
    let run = farm(&env, ["run", "--agent", &agent, "-j", "3", "--name", "box"]).spawn();
    for name in ["box-1", "box-2", "box-3"] {
        wait_for(&logs.join(name));
    }
    farm(&env, ["stop", "--agent", "box-2"])
        .run()
        .success()
        .stdout_has("asked agent `box-2` to drain");
    // The stop shows in status, on box-2 alone, with who asked.
    let status = farm(&env, ["status", "--json"]).run().success().json();
    let agents = status["agents"].as_array().unwrap();
    for a in agents {
        let stopping = &a["stopping"];
        if a["agent"] == "box-2" {
            assert!(
                stopping["by"].as_str().unwrap().starts_with("tester@"),
                "{status:#}"
            );
            assert_eq!(stopping["target"], "agent", "{status:#}");
        } else {
            assert!(stopping.is_null(), "{status:#}");
        }
    }
    let text = farm(&env, ["status"]).run().success();
    assert!(
        text.stdout.contains("stopping: agent `box-2`, by tester@"),
        "{text:#?}"
    );

    let out = Farm::wait_within(run, Duration::from_secs(90));
    assert_eq!(out.code, Some(0), "the others settled the board: {out:#?}");
    assert!(
        out.stderr
            .contains("`box-2` draining, asked by farm stop for agent `box-2`"),
        "{out:#?}"
    );
    assert!(tasks.iter().all(|t| done(&env, t)), "{out:#?}");
    assert_each_started_once(&logs, &tasks, &out);
    let by_box2 = starts(&logs).iter().filter(|(_, a)| a == "box-2").count();
    assert_eq!(by_box2, 1, "box-2 started nothing after its stop: {out:#?}");
    for other in ["box-1", "box-3"] {
        assert!(
            starts(&logs).iter().any(|(_, a)| a == other),
            "{other} worked: {out:#?}"
        );
    }
}

/// A stop or pause of a name that no running agent has: `farm stop` (hub by
/// path) refuses and names the agents that run, posting nothing; `farm
/// pause` keeps the pause and says it applies when such an agent runs.
#[test]
fn an_unknown_agent_or_role_is_named_with_those_that_run() {
    let env = Env::new();
    hub(&env, &["a", "b"]);
    let logs = env.tmp.path().join("logs");
    let agent = agent(env.tmp.path(), &logs, "2");
    let run = farm(&env, ["run", "--agent", &agent, "-j", "2", "--name", "box"]).spawn();
    wait_for(&logs.join("box-1"));
    wait_for(&logs.join("box-2"));
    let out = farm(&env, ["stop", "--agent", "nobody"]).run().code(2);
    assert!(
        out.stderr
            .contains("no running agent here is named `nobody`")
            && out.stderr.contains("agents running here: box-1, box-2"),
        "{out:#?}"
    );
    let out = farm(&env, ["stop", "--role", "docs"]).run().code(2);
    assert!(
        out.stderr
            .contains("no running agent here has the role `docs`"),
        "{out:#?}"
    );
    assert!(!env.claims().join(".stop.agent.nobody.txt").exists());
    let out = farm(&env, ["pause", "--agent", "nobody"]).run().success();
    assert!(
        out.stderr
            .contains("no running agent here is named `nobody`")
            && out
                .stderr
                .contains("the pause holds such an agent when one runs"),
        "{out:#?}"
    );
    assert!(env.claims().join(".pause.agent.nobody.txt").exists());
    let out = farm(&env, ["resume", "--agent", "nobody", "--json"])
        .run()
        .success()
        .json();
    assert_eq!(out["resumed"]["name"], "nobody", "{out:#}");
    let out = farm(&env, ["stop", "--agent", "a/b"]).run().code(2);
    assert!(out.stderr.contains("invalid"), "{out:#?}");
    let out = Farm::wait_within(run, Duration::from_secs(60));
    assert_eq!(out.code, Some(0), "{out:#?}");
}

/// `farm pause` mid-run: once it returns, nothing is claimed (the journal's
/// claim events against the time it returned) until `farm resume`; the
/// sessions running finish and are integrated; status shows the pause with
/// who asked; after the resume the board is finished, each task once.
#[test]
fn pause_holds_every_claim_until_resume_then_the_work_goes_on() {
    let env = Env::new();
    let tasks = ["a", "b", "c", "d", "e", "f", "g", "h"];
    hub(&env, &tasks);
    let logs = env.tmp.path().join("logs");
    let agent = agent(env.tmp.path(), &logs, "0.5");
    let run = farm(&env, ["run", "--agent", &agent, "-j", "3", "--name", "box"]).spawn();
    wait_for(&logs.join("box-1"));
    farm(&env, ["pause"])
        .run()
        .success()
        .stdout_has("paused every agent");
    let paused = SystemTime::now();
    let status = farm(&env, ["status", "--json"]).run().success().json();
    assert_eq!(status["paused"].as_array().unwrap().len(), 1, "{status:#}");
    assert_eq!(status["paused"][0]["target"], "all", "{status:#}");
    for a in status["agents"].as_array().unwrap() {
        assert!(
            a["paused"]["by"].as_str().unwrap().starts_with("tester@"),
            "{status:#}"
        );
    }
    let text = farm(&env, ["status"]).run().success();
    assert!(
        text.stdout.contains("paused: every agent, by tester@"),
        "{text:#?}"
    );
    // Pausing again keeps the first pause.
    farm(&env, ["pause"])
        .run()
        .success()
        .stdout_has("already paused");
    std::thread::sleep(Duration::from_secs(3));
    let started_while_paused = starts(&logs).len();
    let resumed = SystemTime::now();
    farm(&env, ["resume"])
        .run()
        .success()
        .stdout_has("resumed every agent");
    let out = Farm::wait_within(run, Duration::from_secs(90));
    assert_eq!(out.code, Some(0), "{out:#?}");
    assert!(out.stderr.contains("paused by farm pause"), "{out:#?}");
    assert!(out.stderr.contains("resumed: claiming again"), "{out:#?}");
    assert_no_claim_between(&[env.hub.join(".farm")], paused, resumed);
    assert!(
        started_while_paused < tasks.len(),
        "work was left for after the resume: {out:#?}"
    );
    let first_after = claim_times(&env.hub.join(".farm"))
        .into_iter()
        .map(|(at, _)| at)
        .filter(|at| *at > resumed)
        .min();
    let Some(first_after) = first_after else {
        panic!("claims went on after the resume: {out:#?}");
    };
    eprintln!(
        "first claim {:?} after farm resume began; sessions started before it: {started_while_paused}",
        first_after.duration_since(resumed).unwrap()
    );
    assert!(tasks.iter().all(|t| done(&env, t)), "{out:#?}");
    assert_each_started_once(&logs, &tasks, &out);
}

/// A pause lives on the hub: a run started under it claims nothing, and
/// neither does the run started again after that one was killed with
/// SIGKILL; `farm resume` lets it go, and a role's pause holds that role's
/// agents alone.
#[test]
fn a_pause_holds_a_farm_killed_and_started_again_and_a_role_pause_holds_its_role() {
    let env = Env::new();
    hub(&env, &["a", "b", "c"]);
    let toml = env.hub.join("farm.toml");
    let text = std::fs::read_to_string(&toml).unwrap();
    std::fs::write(
        &toml,
        format!("{text}\n[roles.docs]\nagents = 1\n\n[roles.code]\nagents = 1\n"),
    )
    .unwrap();
    crate::stop::git(&env.hub, &["commit", "-qam", "roles"]);
    let logs = env.tmp.path().join("logs");
    let agent = agent(env.tmp.path(), &logs, "0.2");
    farm(&env, ["pause", "--json"]).run().success();
    let first = farm(&env, ["run", "--agent", &agent, "--name", "box"]).spawn();
    std::thread::sleep(Duration::from_secs(3));
    signal(first.id(), libc::SIGKILL);
    let out = first.wait_with_output().unwrap();
    assert!(starts(&logs).is_empty(), "{out:?}");
    // Started again: still held. Its docs agent is held by the role's
    // pause after the fleet's is lifted; the code agent does the work.
    farm(&env, ["pause", "--role", "docs"]).run().success();
    let second = farm(&env, ["run", "--agent", &agent, "--name", "box"]).spawn();
    std::thread::sleep(Duration::from_secs(3));
    assert!(starts(&logs).is_empty(), "claimed under the pause");
    let out = farm(&env, ["resume"]).run().success();
    assert!(
        out.stderr.contains("still paused: role `docs`") && out.stderr.contains("--role docs"),
        "{out:#?}"
    );
    let out = Farm::wait_within(second, Duration::from_secs(60));
    assert_eq!(out.code, Some(0), "{out:#?}");
    let who: Vec<String> = starts(&logs).into_iter().map(|(_, a)| a).collect();
    assert_eq!(who.len(), 3, "{who:?} {out:#?}");
    assert!(who.iter().all(|a| a == "box-code-1"), "{who:?} {out:#?}");
}

/// Across machines, through a `git daemon` hub: two `farm run`s (`east` and
/// `west`, two agents each). `farm pause` from a third machine holds both:
/// no claim is made on either between the pause and the resume. A `farm
/// stop --agent west-2` posted during the pause drains that agent alone:
/// after the resume it claims nothing; the others finish the board, each
/// task once.
#[test]
fn pause_resume_and_stop_agent_across_two_machines() {
    let tasks: Vec<String> = (1..=10).map(|i| format!("t{i:02}")).collect();
    let files: Vec<(String, String)> = tasks
        .iter()
        .map(|t| {
            (
                format!("tasks/{t}.md"),
                format!("+++\ntitle = \"Task {t}\"\n+++\ndo it\n"),
            )
        })
        .collect();
    let files: Vec<(&str, &str)> = files
        .iter()
        .map(|(p, t)| (p.as_str(), t.as_str()))
        .collect();
    let daemon = Daemon::with_hub(&files);
    let admin = Machine::new("admin", &daemon.url());
    let logs = daemon.base.path().join("logs");
    let agent = agent(daemon.base.path(), &logs, "1");
    let machines = [daemon.machine("east"), daemon.machine("west")];
    let runs: Vec<Running> = machines
        .iter()
        .map(|m| Running::spawn(m.farm(["run", "--agent", &agent, "-j", "2", "--name", &m.host])))
        .collect();
    for name in ["east-1", "east-2", "west-1", "west-2"] {
        wait_for(&logs.join(name));
    }
    admin.farm(["pause"]).run().success();
    let paused = SystemTime::now();
    admin
        .farm(["stop", "--agent", "west-2"])
        .run()
        .success()
        .stdout_has("asked agent `west-2` to drain");
    let west2_before = starts(&logs).iter().filter(|(_, a)| a == "west-2").count();
    let status = machines[0]
        .farm(["status", "--json"])
        .run()
        .success()
        .json();
    assert_eq!(status["paused"][0]["target"], "all", "{status:#}");
    // Long enough for west to look for stops (every ten seconds).
    std::thread::sleep(Duration::from_secs(12));
    let resumed = SystemTime::now();
    admin.farm(["resume"]).run().success();
    let deadline = Instant::now() + Duration::from_secs(120);
    let outs: Vec<_> = runs.into_iter().map(|r| r.finish_by(deadline)).collect();
    for out in &outs {
        assert_eq!(out.code, Some(0), "{out:#?}");
    }
    let states: Vec<PathBuf> = machines.iter().map(Machine::state_dir).collect();
    assert_no_claim_between(&states, paused, resumed);
    assert!(
        outs[1]
            .stderr
            .contains("`west-2` draining, asked by farm stop for agent `west-2`"),
        "{outs:#?}"
    );
    let first_after = states
        .iter()
        .flat_map(|s| claim_times(s))
        .map(|(at, _)| at)
        .filter(|at| *at > resumed)
        .min()
        .expect("claims after the resume");
    eprintln!(
        "first claim {:?} after farm resume began (git daemon hub)",
        first_after.duration_since(resumed).unwrap()
    );
    let west2 = starts(&logs).iter().filter(|(_, a)| a == "west-2").count();
    assert_eq!(
        west2, west2_before,
        "west-2 claimed after its stop: {outs:#?}"
    );
    let task_refs: Vec<&str> = tasks.iter().map(String::as_str).collect();
    assert_each_started_once(&logs, &task_refs, &outs);
    let done_on_hub = daemon.hub().board("main", "tasks/done");
    assert_eq!(done_on_hub.len(), tasks.len(), "{done_on_hub:?} {outs:#?}");
}
