//! `farm.toml` is read from the hub's branch, so that a bare hub and a hub
//! reached by URL have settings too.

use crate::daemon::{Daemon, Machine};

const TASK: &str = "+++\ntitle = \"A\"\n+++\nDo A.\n";

/// An agent that leaves one commit in its clone; its `agent = ...` line.
fn agent_line(daemon: &Daemon) -> String {
    let path = daemon.base.path().join("agent.sh");
    std::fs::write(
        &path,
        "#!/bin/sh\necho done > \"out-$FARM_TASK.txt\" && git add -A && git commit -qm \"work $FARM_TASK\"\n",
    )
    .unwrap();
    format!("agent = \"sh '{}'\"\n", path.display())
}

/// A bare hub whose branch names the agent: `farm run` with no `--agent`
/// runs it. Regression: farm.toml was read only from a hub's work tree,
/// which a bare hub does not have.
#[test]
fn a_bare_hub_s_farm_toml_on_its_branch_names_the_agent() {
    let daemon = Daemon::new();
    let line = agent_line(&daemon);
    daemon.make_hub(&[("tasks/a.md", TASK), ("farm.toml", &line)]);
    let machine = Machine::new("here", &daemon.hub_dir().display().to_string());
    run_once_and_see_a_done(&daemon, &machine);
}

/// `farm run --once` with no `--agent` on `machine` succeeds, and task `a`
/// is done on the hub's `main`.
#[track_caller]
fn run_once_and_see_a_done(daemon: &Daemon, machine: &Machine) {
    machine
        .farm(["run", "--once"])
        .run_within(std::time::Duration::from_secs(120))
        .success();
    assert!(
        daemon.hub().show("main:tasks/done/a.md").is_some(),
        "task a is not done on main"
    );
}

/// The same through `git daemon`: a hub reached by URL has settings too.
#[test]
fn a_url_hub_s_farm_toml_on_its_branch_names_the_agent() {
    let mut daemon = Daemon::new();
    let line = agent_line(&daemon);
    daemon.make_hub(&[("tasks/a.md", TASK), ("farm.toml", &line)]);
    daemon.start();
    run_once_and_see_a_done(&daemon, &daemon.machine("there"));
}

/// An invalid farm.toml on the branch is a usage error (exit 2) that names
/// the file, where it was read, and the key.
#[test]
fn an_invalid_farm_toml_on_the_branch_is_named_with_its_key() {
    let daemon = Daemon::new();
    daemon.make_hub(&[("tasks/a.md", TASK), ("farm.toml", "agnet = \"x\"\n")]);
    let machine = Machine::new("here", &daemon.hub_dir().display().to_string());
    machine
        .farm(["run", "--once", "--agent", "true"])
        .run_within(std::time::Duration::from_secs(60))
        .code(2)
        .stderr_has("agnet")
        .stderr_has("farm.toml on branch `main`");
}

/// A non-bare hub whose work tree holds an uncommitted farm.toml that
/// differs from the branch's: the branch's is used, and `farm doctor` says
/// so: an edit farm does not use must not go unnoticed.
#[test]
fn doctor_warns_when_the_work_tree_s_farm_toml_is_not_the_branch_s() {
    let env = crate::common::Env::git_hub(&[]);
    let state = env.tmp.path().join("state");
    let doctor = || {
        env.farm_git([
            "doctor",
            "--agent",
            "sh",
            "--state-dir",
            state.to_str().unwrap(),
        ])
        .run()
    };
    let fine = doctor();
    assert!(
        fine.stdout.contains("ok settings"),
        "no settings check: {fine:#?}"
    );
    std::fs::write(env.hub.join("farm.toml"), "jobs = 9\n").unwrap();
    let warned = doctor().code(1);
    assert!(warned.stdout.contains("!! settings"), "{warned:#?}");
    assert!(
        warned
            .stdout
            .contains("differs from farm.toml on branch `main`"),
        "{warned:#?}"
    );
}

/// Farms that start at once on one machine with a hub given by URL all read
/// its farm.toml. Regression (found by the chaos suite, seed
/// `1796104356084191668`): the branch's tip was fetched `--depth 1` into
/// one cache repository in the state dir, and two fetches at once collided
/// on its `shallow` file ("shallow file has changed since we read it"): the
/// second farm exited 2. A farm restarted while its killed predecessor's
/// fetch still ran did the same.
#[test]
fn farms_starting_at_once_on_one_machine_all_read_a_url_hub_s_settings() {
    let daemon = Daemon::new();
    daemon.make_hub(&[("farm.toml", "jobs = 1\n")]);
    let url = format!("file://{}", daemon.hub_dir().display());
    let machine = Machine::new("here", &url);
    let mut failed = Vec::new();
    for round in 0..4 {
        let farms = (0..6)
            .map(|i| {
                let name = format!("a{round}-{i}");
                machine.farm(["run", "--once", "--agent", "true", "--name", &name])
            })
            .collect();
        for child in crate::common::race(farms) {
            let out = child.wait_with_output().unwrap();
            if !out.status.success() {
                failed.push(String::from_utf8_lossy(&out.stderr).into_owned());
            }
        }
    }
    assert!(
        failed.is_empty(),
        "{} of 24 farms failed: {failed:#?}",
        failed.len()
    );
}

/// What a farm killed in the middle of that fetch leaves in the state dir
/// (a git killed by SIGKILL leaves its lock files) stops no later farm, and
/// a scratch repository older than an hour is removed.
#[test]
fn what_a_killed_fetch_of_a_url_hub_s_settings_leaves_stops_no_farm() {
    let daemon = Daemon::new();
    daemon.make_hub(&[("farm.toml", "jobs = 1\n")]);
    let url = format!("file://{}", daemon.hub_dir().display());
    let machine = Machine::new("here", &url);
    let state = machine.state_dir();
    for left in ["hub-tip.git", "hub-tip-Xy12Ab.git"] {
        let dir = state.join(left);
        std::fs::create_dir_all(&dir).unwrap();
        assert!(
            std::process::Command::new("git")
                .args(["init", "--quiet", "--bare"])
                .arg(&dir)
                .status()
                .unwrap()
                .success()
        );
        std::fs::write(dir.join("shallow.lock"), "").unwrap();
        std::fs::write(dir.join("shallow"), "").unwrap();
    }
    let old = std::time::SystemTime::now() - std::time::Duration::from_secs(2 * 3600);
    std::fs::File::open(state.join("hub-tip-Xy12Ab.git"))
        .unwrap()
        .set_modified(old)
        .unwrap();
    machine
        .farm(["run", "--once", "--agent", "true"])
        .run_within(std::time::Duration::from_secs(60))
        .success();
    assert!(
        !state.join("hub-tip-Xy12Ab.git").exists(),
        "an old scratch repository was left in {}",
        state.display()
    );
}

/// Regression: farm.toml's `max_cost = -5` was taken (the flag refuses it),
/// `stale_after = "0s"` and `jobs = 0` were refused as if they were flags
/// (`--stale-after`, `-j 0`), and `farm doctor` called all three fine. Each
/// is now refused by `farm run` with exit 2 naming the farm.toml key, and
/// `farm doctor` fails its settings check on it.
#[test]
fn a_farm_toml_value_out_of_range_is_named_by_its_key_in_run_and_doctor() {
    for (line, key) in [
        ("max_cost = -5", "`max_cost`"),
        ("stale_after = \"0s\"", "`stale_after`"),
        ("jobs = 0", "`jobs`"),
        ("timeout = \"0s\"", "`timeout`"),
    ] {
        let env = crate::common::Env::git_hub(&[("farm.toml", &format!("{line}\n"))]);
        crate::run::add_task(&env, &["t", "-m", "Anything"]);
        let state = env.tmp.path().join("state");
        let run = env
            .farm_git([
                "run",
                "--agent",
                "true",
                "--state-dir",
                state.to_str().unwrap(),
            ])
            .run_within(std::time::Duration::from_secs(60));
        assert_eq!(run.code, Some(2), "{line}: {run:#?}");
        assert!(
            run.stderr.contains(&format!("farm.toml {key}")),
            "{line}: {run:#?}"
        );
        assert!(!run.stderr.contains("--"), "{line}: names a flag: {run:#?}");
        let doctor = env
            .farm_git([
                "doctor",
                "--agent",
                "sh",
                "--state-dir",
                state.to_str().unwrap(),
            ])
            .run();
        assert!(
            doctor.stdout.contains("!! settings") && doctor.stdout.contains(key),
            "{line}: {doctor:#?}"
        );
    }
}
