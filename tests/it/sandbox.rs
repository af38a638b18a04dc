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
try tmp-uncapped sh -c '[ "$(df -k /tmp | awk "NR==2 {{print \$2}}")" -gt 1048576 ]'
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
        assert_eq!(names.len(), 9, "{t}: {report}");
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
    assert_hub_sound(&env);
}
