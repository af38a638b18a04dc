//! The sandbox against agents that attack: sessions of a real `farm run`,
//! in bubblewrap, try to write the claims, push to the hub, delete another
//! agent's clone, read the user's keys, the state directory and farm's
//! journal, signal farm, write outside their clone, fill `/tmp` and leave a
//! daemon behind. Every attempt fails or dies with its session, the run
//! goes on, every task is done exactly once, and nothing is lost.
//!
//! bwrap must be installed (`apt-get install bubblewrap`): without it these
//! tests are skipped, unless `FARM_REQUIRE_SERVERS=1` (CI), where they fail.

use std::path::Path;
use std::time::Duration;

use crate::common::Env;
use crate::run::{add_task, assert_hub_sound, run_args};

const LIMIT: Duration = Duration::from_secs(180);

/// Whether bwrap can sandbox here (else the reason printed, or a failure
/// where it must).
fn bwrap_works() -> bool {
    let works = std::process::Command::new("bwrap")
        .args(["--ro-bind", "/", "/", "--unshare-all", "--", "true"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !works {
        assert!(
            std::env::var("FARM_REQUIRE_SERVERS").as_deref() != Ok("1"),
            "bwrap cannot sandbox here, and FARM_REQUIRE_SERVERS=1: install bubblewrap"
        );
        eprintln!("skipped: bwrap cannot sandbox here (apt-get install bubblewrap)");
    }
    works
}

/// `farm run --agent AGENT --sandbox ARGS…` (the script an agent's command
/// names by its path is shown to it without a `--sandbox-bind`).
fn sandboxed(env: &Env, agent: &str, args: &[&str]) -> crate::common::Farm {
    env.farm_git(run_args(env, agent, &[args, &["--sandbox"]].concat()))
}

/// A process whose command line holds `marker`, alive anywhere.
fn alive_with(marker: &str) -> Vec<String> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        let line = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        if line.contains(marker) {
            found.push(format!("{}: {line}", entry.file_name().to_string_lossy()));
        }
    }
    found
}

/// The attacks, as `sh` lines. What a session would read or see is tried
/// with `try NAME COMMAND…`, which notes `NAME: blocked` when the command
/// fails and `NAME: ESCAPED` when it succeeds in the session's report file
/// (committed with its work); what it would write, delete or kill is done
/// blindly, and the test looks at the real files and processes. (Inside,
/// a write into a private `/tmp` succeeds and goes nowhere.) Patterns end
/// in `[x]` so that the attacking command's own line does not match.
fn attacks(env: &Env, marker: &str) -> String {
    let tmp = env.tmp.path().display();
    let state = env.tmp.path().join("state");
    let state = state.display().to_string();
    let (stem, last) = state.split_at(state.len() - 1);
    format!(
        r#"
echo stolen > "$FARM_CLAIM"
rm -f "$FARM_CLAIM" "$(dirname "$FARM_CLAIM")"/*
git push -q "$FARM_HUB" HEAD:refs/heads/evil
echo x > "$FARM_HUB/pwned"
for d in ../*; do [ "$d" = "../$(basename "$PWD")" ] || rm -rf "$d"; done
echo x > '{tmp}/outside-$FARM_TASK'
echo x > /etc/farm-pwned
for p in /proc/[0-9]*; do tr '\0' ' ' < $p/cmdline 2>/dev/null | grep -q -e '--state-dir {stem}[{last}]' && kill -KILL "${{p#/proc/}}"; done
setsid sh -c 'sleep 300; : {marker}' >/dev/null 2>&1 < /dev/null &
env -i /bin/sh -c 'cd /; (setsid sh -c "sleep 300; : {marker}" &) >/dev/null 2>&1 < /dev/null'
try claims-list sh -c 'ls "$(dirname "$FARM_CLAIM")" | grep -q .'
try other-clone sh -c 'ls .. | grep -v -x "$(basename "$PWD")" | grep -q .'
try ssh-key cat '{tmp}/.ssh/id_ed25519'
try journal sh -c "cat '{state}'/journal* | grep -q ."
try logs sh -c "ls '{state}/logs' | grep -q ."
try see-farm sh -c 'for p in /proc/[0-9]*; do tr "\0" " " < $p/cmdline; echo; done | grep -q -e "--state-dir {stem}[{last}]"'
try ssh-agent sh -c '[ -n "${{SSH_AUTH_SOCK:-}}" ]'
try cloud-token sh -c '[ -n "${{AWS_SECRET_ACCESS_KEY:-}}" ]'
[ "$FARM_TASK" = a1 ] && try tmp-fill dd if=/dev/zero of=/tmp/fill bs=1M count=1100
rm -f /tmp/fill
try tmp-uncapped sh -c '[ "$(df -k /tmp | awk "NR==2 {{print \$2}}")" -gt 1048576 ]'
echo "0 0" > .git/farm-session; echo "0 0" > "$PWD.session"
"#
    )
}

/// Three agents whose every session attacks; the attacks fail, the tasks
/// are each done once, the run ends well and leaves nothing running.
#[test]
fn hostile_sessions_touch_nothing_but_their_clone() {
    if !bwrap_works() {
        return;
    }
    let env = Env::git_hub(&[("README", "x\n")]);
    let tasks = ["a1", "a2", "a3", "a4", "a5", "a6"];
    for t in tasks {
        add_task(&env, &[t, "-m", "attack, then work"]);
    }
    std::fs::create_dir_all(env.tmp.path().join(".ssh")).unwrap();
    std::fs::write(env.tmp.path().join(".ssh/id_ed25519"), "SECRET-KEY\n").unwrap();
    let marker = format!("farm-sandbox-daemon-{}", std::process::id());
    let script = env.tmp.path().join("hostile.sh");
    std::fs::write(
        &script,
        format!(
            "set -u\n\
             r=\"$PWD/attacks-$FARM_TASK.txt\"\n\
             try() {{ name=$1; shift; if ( \"$@\" ) >/dev/null 2>&1; then echo \"$name: ESCAPED\" >> \"$r\"; else echo \"$name: blocked\" >> \"$r\"; fi; }}\n\
             {}\n\
             echo \"work on $FARM_TASK\" > \"work-$FARM_TASK.txt\"\n\
             git add -A && git commit -q -m \"do $FARM_TASK\"\n",
            attacks(&env, &marker)
        ),
    )
    .unwrap();
    let agent = format!("sh {}", script.display());
    let bind = script.display().to_string();
    let out = env
        .farm_git(run_args(
            &env,
            &agent,
            &["-j", "3", "--sandbox", "--sandbox-bind", &bind],
        ))
        .env("SSH_AUTH_SOCK", env.tmp.path().join("agent.sock"))
        .env("AWS_SECRET_ACCESS_KEY", "cloud-secret")
        .run_within(LIMIT);
    assert_eq!(out.code, Some(0), "{}{}", out.stdout, out.stderr);
    assert!(
        out.stderr.contains("sandbox: on"),
        "the start-up line: {}",
        out.stderr
    );
    // Each task done once, its report and work on the branch.
    for t in tasks {
        let report = env.git_output(["show", &format!("main:attacks-{t}.txt")]).1;
        let names: Vec<&str> = report.lines().collect();
        // a1 also tried to write 1,100 MiB into its /tmp.
        let tries = if t == "a1" { 10 } else { 9 };
        assert_eq!(names.len(), tries, "{t}: {report}");
        for line in &names {
            assert!(line.ends_with(": blocked"), "{t}: {line}\n{report}");
        }
        let work = env.git_output(["show", &format!("main:work-{t}.txt")]).1;
        assert_eq!(work, format!("work on {t}\n"));
        let (_, log, _) = env.git_output(["log", "--format=%s", "main"]);
        assert_eq!(
            log.lines().filter(|l| *l == format!("do {t}")).count(),
            1,
            "{t} landed more or less than once:\n{log}"
        );
    }
    // Nothing of theirs outside: no ref, no file, no process.
    let (_, refs, _) = env.git_output(["for-each-ref", "--format=%(refname)"]);
    assert!(!refs.contains("evil"), "{refs}");
    assert!(!env.hub.join("pwned").exists());
    assert!(!Path::new("/etc/farm-pwned").exists());
    for t in tasks {
        assert!(!env.tmp.path().join(format!("outside-{t}")).exists());
    }
    assert_eq!(
        std::fs::read_to_string(env.tmp.path().join(".ssh/id_ed25519")).unwrap(),
        "SECRET-KEY\n"
    );
    assert_eq!(alive_with(&marker), Vec::<String>::new(), "daemons left");
    // The records of the sessions' process groups, which the next farm's
    // clean-up kills, are farm's: beside the clones, out of their reach.
    for record in std::fs::read_dir(env.tmp.path().join("state/clones"))
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().ends_with(".session"))
    {
        let text = std::fs::read_to_string(record.path()).unwrap();
        assert!(!text.starts_with("0 0"), "{text}");
    }
    assert_hub_sound(&env);
}

/// An agent that notes in its work whether it saw `$HOME/secret`.
fn peeking_agent(env: &Env) -> String {
    std::fs::write(env.tmp.path().join("secret"), "s\n").unwrap();
    env.agent_script(
        "peek.sh",
        "if [ -e \"$HOME/secret\" ]; then echo seen; else echo unseen; fi > \"$FARM_TASK.txt\"\n\
         git add -A && git commit -q -m \"do $FARM_TASK\"\n",
    )
}

/// Without a word on it, `farm run` sandboxes its sessions where bwrap
/// works, and says so.
#[test]
fn the_sandbox_is_on_by_default_where_bwrap_works() {
    if !bwrap_works() {
        return;
    }
    let env = Env::git_hub(&[]);
    add_task(&env, &["p1", "-m", "peek"]);
    // `sh /…/peek.sh`: the script a command names by its path is shown
    // (alone: its directory holds the hub and the state directory).
    let agent = peeking_agent(&env);
    let mut farm = env.farm_git(run_args(&env, &agent, &["--once"]));
    farm.cmd.env_remove("FARM_SANDBOX");
    let out = farm.run_within(LIMIT);
    assert_eq!(out.code, Some(0), "{out:#?}");
    assert!(out.stderr.contains("farm run: sandbox: on"), "{out:#?}");
    assert_eq!(env.git_output(["show", "main:p1.txt"]).1, "unseen\n");
    // The same agent unsandboxed sees it: the test can tell.
    add_task(&env, &["p2", "-m", "peek"]);
    let out = env
        .farm_git(run_args(&env, &agent, &["--once", "--no-sandbox"]))
        .run_within(LIMIT);
    assert_eq!(out.code, Some(0), "{out:#?}");
    assert!(
        out.stderr
            .contains("sandbox: off (--no-sandbox): sessions run as you"),
        "{out:#?}"
    );
    assert_eq!(env.git_output(["show", "main:p2.txt"]).1, "seen\n");
}

/// A `PATH` of symlinks to what farm needs, without bwrap.
fn path_without_bwrap(env: &Env) -> std::path::PathBuf {
    let bin = env.tmp.path().join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let path = std::env::var_os("PATH").unwrap();
    for tool in ["git", "sh", "true"] {
        let found = std::env::split_paths(&path)
            .map(|d| d.join(tool))
            .find(|p| p.is_file())
            .unwrap_or_else(|| panic!("no {tool} on PATH"));
        std::os::unix::fs::symlink(found, bin.join(tool)).unwrap();
    }
    bin
}

/// `--sandbox` where bwrap is missing: the run refuses to start, naming
/// the package, before it claims anything; by default it runs unsandboxed
/// and says why.
#[test]
fn a_sandbox_asked_for_without_bwrap_refuses_to_start() {
    let env = Env::git_hub(&[]);
    add_task(&env, &["m1", "-m", "anything"]);
    let bin = path_without_bwrap(&env);
    let out = env
        .farm_git(run_args(&env, "true", &["--once", "--sandbox"]))
        .env("PATH", &bin)
        .run_within(LIMIT);
    assert_eq!(out.code, Some(2), "{out:#?}");
    assert!(
        out.stderr.contains("needs bwrap, which is not installed")
            && out.stderr.contains("bubblewrap")
            && out.stderr.contains("--no-sandbox"),
        "{out:#?}"
    );
    assert!(!env.tmp.path().join("state/journal.jsonl").exists());
    let mut farm = env
        .farm_git(run_args(&env, "true", &["--once"]))
        .env("PATH", &bin);
    farm.cmd.env_remove("FARM_SANDBOX");
    let out = farm.run_within(LIMIT);
    assert!(
        out.stderr
            .contains("sandbox: off (bwrap is not installed: install the package `bubblewrap`"),
        "{out:#?}"
    );
}

/// A sandboxed session that outlives `--timeout` gets SIGTERM itself, as
/// outside: bwrap passes no signal on, and would die of it, taking the
/// agent with SIGKILL unwarned.
#[test]
fn a_timed_out_sandboxed_session_is_told_to_stop() {
    if !bwrap_works() {
        return;
    }
    let env = Env::git_hub(&[]);
    add_task(&env, &["t1", "-m", "never ends"]);
    let agent = env.agent_script(
        "slow.sh",
        "trap 'echo got TERM; exit 1' TERM\nsleep 60 &\nwait\n",
    );
    let out = sandboxed(&env, &agent, &["--once", "--timeout", "2s"]).run_within(LIMIT);
    assert_eq!(out.code, Some(6), "{out:#?}");
    let text = all_logs(&env.tmp.path().join("state/logs"));
    assert!(text.contains("got TERM"), "{text}");
    assert!(text.contains("ended: timed out"), "{text}");
}

/// Regression: bwrap reports its agent's death by a signal as its own
/// exit, 128 + the signal. farm took a sandboxed agent killed with SIGKILL
/// for one that failed with exit 137 at once, silent — one that cannot
/// start — and two such in a row stopped the run ("cannot work: it does
/// not start"). A killed agent is a killed agent, sandboxed or not.
#[test]
fn a_sandboxed_agent_killed_by_a_signal_is_killed_not_unstarted() {
    if !bwrap_works() {
        return;
    }
    let env = Env::git_hub(&[]);
    for task in ["t1", "t2", "t3"] {
        add_task(&env, &[task, "-m", "dies at once"]);
    }
    let agent = env.agent_script("dies.sh", "kill -9 $$\n");
    let out = sandboxed(&env, &agent, &["--max-sessions", "3"]).run_within(LIMIT);
    assert!(!out.stderr.contains("does not start"), "{out:#?}");
    let journal = std::fs::read_to_string(env.tmp.path().join("state/journal.jsonl")).unwrap();
    let ends: Vec<serde_json::Value> = journal
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .filter(|e| e["event"] == "session_end")
        .collect();
    assert_eq!(ends.len(), 3, "{journal}");
    for end in &ends {
        assert_eq!(end["outcome"], "killed by signal 9", "{journal}");
    }
}

/// Regression: farm checked that bwrap works here with its own whole
/// environment, which sessions never get: under libfaketime (its
/// `LD_PRELOAD` wants a writable /dev/shm at start) the check failed and a
/// sandbox asked for refused to start, though every session would have
/// run.
#[test]
fn a_preloaded_library_of_farms_own_does_not_fail_the_sandbox_check() {
    if !bwrap_works() {
        return;
    }
    let Some(lib) = crate::chaos::faketime_lib() else {
        return;
    };
    let env = Env::git_hub(&[]);
    add_task(&env, &["t1", "-m", "one line"]);
    let agent = env.agent_script(
        "one.sh",
        "echo x > one.txt\ngit add -A\ngit commit -qm one\n",
    );
    let mut farm = sandboxed(&env, &agent, &["--once"]);
    farm.cmd.env("LD_PRELOAD", lib).env("FAKETIME", "+0");
    let out = farm.run_within(LIMIT);
    assert_eq!(out.code, Some(0), "{out:#?}");
    assert!(out.stderr.contains("sandbox: on"), "{out:#?}");
}

/// Every session log under `dir`, one after the other.
fn all_logs(dir: &Path) -> String {
    let mut text = String::new();
    for agent in std::fs::read_dir(dir).unwrap().flatten() {
        for log in std::fs::read_dir(agent.path()).unwrap().flatten() {
            text.push_str(&std::fs::read_to_string(log.path()).unwrap());
        }
    }
    text
}

/// farm killed with SIGKILL while a sandboxed session runs: the session
/// and what it started — in the background, `setsid`, with its
/// environment cleared and out of its directory — are gone within
/// moments, taken by the sandbox's end. (Unsandboxed, the escapee with no
/// environment outside the clone outlives farm: seen.)
#[test]
fn farm_killed_mid_session_takes_the_sandbox_with_it() {
    if !bwrap_works() {
        return;
    }
    let env = Env::git_hub(&[]);
    add_task(&env, &["k1", "-m", "runs long"]);
    let marker = format!("farm-sandbox-orphan-{}", std::process::id());
    let agent = env.agent_script(
        "long.sh",
        &format!(
            "setsid sh -c 'sleep 300; : {marker}' >/dev/null 2>&1 < /dev/null &\n\
             env -i /bin/sh -c 'cd /; (setsid sh -c \"sleep 300; : {marker}\" &) >/dev/null 2>&1 < /dev/null'\n\
             touch started\n\
             sleep 300\n"
        ),
    );
    let mut farm = sandboxed(&env, &agent, &["--once"]).spawn();
    let clones = env.tmp.path().join("state/clones");
    let start = std::time::Instant::now();
    // The two escapees: `setsid`, and `setsid` with no environment.
    while alive_with(&marker).len() < 2 || !started(&clones) {
        assert!(start.elapsed() < LIMIT, "the session never started");
        std::thread::sleep(Duration::from_millis(20));
    }
    farm.kill().unwrap();
    farm.wait().unwrap();
    let start = std::time::Instant::now();
    while !alive_with(&marker).is_empty() {
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "left running after farm's SIGKILL: {:?}",
            alive_with(&marker)
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Whether a clone under `clones` holds the file `started`.
fn started(clones: &Path) -> bool {
    std::fs::read_dir(clones)
        .into_iter()
        .flatten()
        .flatten()
        .any(|c| c.path().join("started").exists())
}

/// A hub whose `[tests]` fail when they can see the user's `secret` (in
/// the test's home) or a cloud token.
fn hub_with_prying_tests() -> Env {
    let env = Env::git_hub(&[]);
    std::fs::write(env.tmp.path().join("secret"), "s\n").unwrap();
    let suite = format!(
        "echo 1..1\n\
         if [ -e '{}/secret' ] || [ -n \"${{AWS_SECRET_ACCESS_KEY:-}}\" ]; then echo 'not ok 1 - confined'; else echo 'ok 1 - confined'; fi\n",
        env.tmp.path().display()
    );
    std::fs::write(env.hub.join("t.sh"), suite).unwrap();
    let toml = env.hub.join("farm.toml");
    let mut text = std::fs::read_to_string(&toml).unwrap();
    text.push_str("\n[tests]\ncommand = \"sh t.sh\"\nformat = \"tap\"\n");
    std::fs::write(&toml, text).unwrap();
    env.git(["add", "-A"]);
    env.git(["commit", "-qm", "the tests"]);
    env
}

/// `farm tests` runs the branch's tests — code agents wrote — in the
/// sandbox too.
#[test]
fn farm_tests_runs_the_suite_in_the_sandbox() {
    if !bwrap_works() {
        return;
    }
    let env = hub_with_prying_tests();
    let counts = |args: &[&str]| {
        let mut farm = env.farm_git([&["tests", "--json"][..], args].concat());
        farm.cmd.env_remove("FARM_SANDBOX");
        let doc = farm.env("AWS_SECRET_ACCESS_KEY", "x").run().json();
        (
            doc["counts"]["passed"].clone(),
            doc["counts"]["failed"].clone(),
        )
    };
    assert_eq!(counts(&[]), (1.into(), 0.into()));
    assert_eq!(counts(&["--no-sandbox"]), (0.into(), 1.into()));
}

/// The test gate runs the project's tests — code an agent may have
/// written — in the session's sandbox: a suite that can see the user's
/// home or credentials fails, so the change lands only where it cannot
/// (and does not, unsandboxed: the test can tell).
#[test]
fn the_gates_tests_run_in_the_sandbox() {
    if !bwrap_works() {
        return;
    }
    let env = hub_with_prying_tests();
    add_task(&env, &["g1", "-m", "work"]);
    let agent = env.agent_script(
        "work.sh",
        "echo w > \"$FARM_TASK.txt\"\ngit add -A && git commit -q -m \"do $FARM_TASK\"\n",
    );
    let out = sandboxed(&env, &agent, &["--once"])
        .env("AWS_SECRET_ACCESS_KEY", "cloud-secret")
        .run_within(LIMIT);
    assert_eq!(out.code, Some(0), "{out:#?}");
    assert_eq!(env.git_output(["show", "main:g1.txt"]).1, "w\n");
    add_task(&env, &["g2", "-m", "work"]);
    let out = env
        .farm_git(run_args(&env, &agent, &["--once", "--no-sandbox"]))
        .env("AWS_SECRET_ACCESS_KEY", "cloud-secret")
        .run_within(LIMIT);
    assert_ne!(out.code, Some(0), "{out:#?}");
    assert!(!env.git_output(["show", "main:g2.txt"]).0, "{out:#?}");
}

/// `farm doctor` says whether sessions can be sandboxed here, and the fix
/// when they cannot; `farm agents` which presets CI ran inside it.
#[test]
fn doctor_checks_the_sandbox_and_agents_say_which_presets_ran_inside() {
    let env = Env::git_hub(&[]);
    let bin = path_without_bwrap(&env);
    let doctor = |path: Option<&Path>| {
        let mut farm = env.farm_git(["doctor"]);
        farm.cmd.env_remove("FARM_SANDBOX");
        if let Some(path) = path {
            farm.cmd.env("PATH", path);
        }
        farm.run()
    };
    let out = doctor(Some(&bin));
    assert!(
        out.stdout
            .contains("!! sandbox   bwrap is not installed: sessions would run unsandboxed")
            && out.stdout.contains("install the package `bubblewrap`"),
        "{out:#?}"
    );
    if bwrap_works() {
        let out = doctor(None);
        assert!(out.stdout.contains("ok sandbox   bubblewrap"), "{out:#?}");
    }
    let off = env.farm_git(["doctor"]).env("PATH", &bin).run();
    assert!(
        off.stdout.contains("ok sandbox   off (FARM_SANDBOX=off)"),
        "{off:#?}"
    );
    let doc = env.farm(["agents", "--json"]).run().success().json();
    let tested = |name: &str| {
        doc["agents"]
            .as_array()
            .unwrap()
            .iter()
            .find(|a| a["name"] == name)
            .unwrap()["sandbox_tested"]
            .clone()
    };
    assert_eq!(tested("claude"), true);
    assert_eq!(tested("aider"), false);
}
