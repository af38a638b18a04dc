//! Bad input and corrupt claims: names that are paths, hubs that are not
//! repositories, and whatever else lies in `current_tasks/` — each refused
//! or reported with a clear error, and nothing written where it should not
//! be.

use std::path::Path;
use std::time::{Duration, SystemTime};

use crate::common::{Env, dead_local_record, git_in};

const LIMIT: Duration = Duration::from_secs(120);

/// Every path under `dir`, relative, sorted (to show that nothing was written).
fn tree(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            out.push(p.strip_prefix(dir).unwrap().display().to_string());
            if p.is_dir() && !p.is_symlink() {
                stack.push(p);
            }
        }
    }
    out.sort();
    out
}

fn age(path: &Path, by: Duration) {
    let f = std::fs::File::open(path).unwrap();
    f.set_modified(SystemTime::now() - by).unwrap();
}

/// Regression: `farm run --name ../../../ESCAPED` made clones next to the
/// hub and committed a session log to main. An agent name follows the
/// task-id rule: refused as bad usage before anything is written.
#[test]
fn run_refuses_an_agent_name_that_is_a_path() {
    let env = Env::git_hub(&[]);
    env.farm_git(["task", "add", "t1", "-m", "One"])
        .run()
        .success();
    let before = env.git(["rev-parse", "main"]);
    let agent = env.agent_script("agent.sh", "echo hi > hi.txt\n");
    for name in ["../../../ESCAPED", "a/b", ".hidden", "x y"] {
        let out = env
            .farm_git(["run", "--agent", &agent, "--once", "--name", name])
            .run_within(LIMIT)
            .code(2);
        assert!(out.stderr.contains("invalid agent name"), "{out:#?}");
        assert!(out.stderr.contains("an agent name is"), "{out:#?}");
    }
    for escaped in [
        env.tmp.path().join("ESCAPED"),
        env.hub.join("ESCAPED"),
        env.tmp.path().parent().unwrap().join("ESCAPED"),
    ] {
        assert!(!escaped.exists(), "{} was written", escaped.display());
    }
    assert!(!env.hub.join(".farm/clones").exists());
    assert_eq!(env.git(["rev-parse", "main"]), before);

    // With -j, the names made from it must be names too.
    let long = "x".repeat(99);
    let out = env
        .farm_git([
            "run", "--agent", &agent, "--once", "-j", "2", "--name", &long,
        ])
        .run_within(LIMIT)
        .code(2);
    assert!(out.stderr.contains("longer than 100"), "{out:#?}");
    assert_eq!(env.git(["rev-parse", "main"]), before);
}

/// Regression: `farm claim --agent ../x/y` was accepted.
#[test]
fn claim_and_release_refuse_an_agent_name_that_is_a_path() {
    let env = Env::new();
    for args in [
        vec!["claim", "c1", "--agent", "../x/y"],
        vec!["release", "c1", "--agent", "../x/y"],
    ] {
        let out = env.farm(&args).run().code(2);
        assert!(out.stderr.contains("invalid agent name"), "{out:#?}");
    }
    let out = env
        .farm(["claim", "c1"])
        .env("FARM_AGENT", "..")
        .run()
        .code(2);
    assert!(out.stderr.contains("invalid agent name"), "{out:#?}");
    assert!(!env.claims().exists(), "{:?}", tree(&env.hub));
}

/// Regression: `farm --hub / claim c1` created `/current_tasks/c1.txt`.
/// Every command that takes a hub checks that it is a git repository before
/// touching it.
#[test]
fn a_hub_that_is_not_a_git_repository_is_refused_and_left_untouched() {
    let env = Env::new();
    let plain = env.tmp.path().join("plain");
    std::fs::create_dir(&plain).unwrap();
    let agent = env.agent_script("agent.sh", "true\n");
    let commands: Vec<Vec<&str>> = vec![
        vec!["claim", "c1"],
        vec!["release", "c1", "--force"],
        vec!["locks"],
        vec!["reap", "--older-than", "0s"],
        vec!["stop"],
        vec!["init"],
        vec!["tasks"],
        vec!["task", "add", "t1", "-m", "x"],
        vec!["run", "--agent", &agent, "--once"],
    ];
    for args in commands {
        let out = env
            .farm_git(&args)
            .env("FARM_HUB", &plain)
            .run_within(LIMIT)
            .code(2);
        assert!(
            out.stderr.contains("is not a git repository"),
            "{args:?}: {out:#?}"
        );
        assert!(out.stderr.contains("hint: "), "{args:?}: {out:#?}");
        assert_eq!(tree(&plain), Vec::<String>::new(), "{args:?} wrote");
    }
    // A directory inside a repository is not the hub either.
    let sub = env.hub.join("sub");
    std::fs::create_dir(&sub).unwrap();
    env.farm(["claim", "c1"])
        .env("FARM_HUB", &sub)
        .run()
        .code(2)
        .stderr_has("is not a git repository");
    assert_eq!(tree(&sub), Vec::<String>::new());
}

/// Regression: a directory named `b.txt` in `current_tasks/` made
/// `farm reap` fail at it and reap nothing after it. Now it is listed as
/// corrupt, and a reap takes the dead claim before it, the directory itself
/// and the garbage file after it, and exits 0.
#[test]
fn reap_takes_dead_corrupt_and_directory_claims_alike() {
    let env = Env::new();
    let now = SystemTime::now();
    env.plant(&dead_local_record("a"), now);
    std::fs::create_dir_all(env.claim_path("b")).unwrap();
    std::fs::write(env.claim_path("b").join("inside"), "user data\n").unwrap();
    std::fs::write(env.claim_path("c"), "garbage, not a claim\n").unwrap();
    std::fs::write(env.claim_path("d"), "").unwrap();
    for t in ["b", "c", "d"] {
        age(&env.claim_path(t), Duration::from_secs(7200));
    }

    let locks = env.farm(["locks", "--json"]).run().success().json();
    let states: Vec<(String, String)> = locks["claims"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["task"].as_str().unwrap().to_owned(),
                c["state"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    assert_eq!(
        states,
        [
            ("a".into(), "dead".into()),
            ("b".into(), "corrupt".into()),
            ("c".into(), "corrupt".into()),
            ("d".into(), "corrupt".into()),
        ],
        "{locks:#}"
    );
    let why_b = locks["claims"][1]["reason"].as_str().unwrap();
    assert!(why_b.contains("a directory"), "{why_b}");
    env.farm(["locks"])
        .run()
        .success()
        .stdout_has("a directory");

    // Without an age only the dead one goes; nothing fails.
    let out = env.farm(["reap"]).run().success();
    assert!(out.stdout.contains("reaped `a`"), "{out:#?}");
    assert!(!env.claim_path("a").exists());
    assert!(env.claim_path("b").exists());

    let out = env.farm(["reap", "--older-than", "1h"]).run().success();
    for t in ["b", "c", "d"] {
        assert!(out.stdout.contains(&format!("reaped `{t}`")), "{out:#?}");
        assert!(!env.claim_path(t).exists(), "{t} is still there");
    }
    // The directory was moved aside whole, its contents kept.
    let reaped = env.claims().join(".reaped");
    let kept: Vec<_> = tree(&reaped)
        .into_iter()
        .filter(|p| p.starts_with("b.") && p.ends_with("/inside"))
        .collect();
    assert_eq!(kept.len(), 1, "{:?}", tree(&reaped));
    let locks = env.farm(["locks", "--json"]).run().success().json();
    assert_eq!(locks["claims"], serde_json::json!([]));
}

/// Regression: `farm release b --force` failed on a directory `b.txt`; a
/// socket or a fifo there must not break anything either.
#[test]
fn release_force_takes_a_directory_or_a_special_file() {
    let env = Env::new();
    std::fs::create_dir_all(env.claim_path("b")).unwrap();
    let fifo = env.claim_path("f");
    let made = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap();
    assert!(made.success());
    let socket = std::os::unix::net::UnixListener::bind(env.claim_path("s")).unwrap();

    let locks = env.farm(["locks", "--json"]).run().success().json();
    let states: Vec<&str> = locks["claims"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["state"].as_str().unwrap())
        .collect();
    assert_eq!(states, ["corrupt", "corrupt", "corrupt"], "{locks:#}");

    // Not forced: refused, with the way to take it.
    env.farm(["release", "b"])
        .run()
        .code(1)
        .stderr_has("corrupt")
        .stderr_has("farm release b --force");
    for t in ["b", "f", "s"] {
        env.farm(["release", t, "--force"])
            .run()
            .success()
            .stdout_has(&format!("released `{t}` by force"));
        assert!(
            std::fs::symlink_metadata(env.claim_path(t)).is_err(),
            "{t} is still there"
        );
    }
    drop(socket);
    env.farm(["claim", "b"]).run().success();
}

/// Regression: a run waited silently, forever, on a task whose claim file
/// is a directory (and silently for up to --stale-after on an empty one).
/// It says once what it waits on, takes the claim once it is older than
/// --stale-after, and finishes the task.
#[test]
fn a_run_says_what_it_waits_on_and_takes_a_corrupt_claim_once_old_enough() {
    for kind in ["directory", "empty"] {
        let env = Env::git_hub(&[]);
        env.farm_git(["task", "add", "t1", "-m", "One"])
            .run()
            .success();
        match kind {
            "directory" => std::fs::create_dir_all(env.claim_path("t1")).unwrap(),
            _ => std::fs::write(env.claim_path("t1"), "").unwrap(),
        }
        let agent = env.agent_script(
            "agent.sh",
            "set -eu\necho done > t1.txt\ngit add -A\ngit commit -q -m t1\n",
        );
        let state = env.tmp.path().join("state");
        let out = env
            .farm_git([
                "run",
                "--agent",
                &agent,
                "--state-dir",
                &state.display().to_string(),
                "--stale-after",
                "3s",
            ])
            .run_within(LIMIT)
            .success();
        let waiting: Vec<_> = out
            .stderr
            .lines()
            .filter(|l| l.contains("waiting on `t1`"))
            .collect();
        assert_eq!(waiting.len(), 1, "{kind}: said once: {out:#?}");
        assert!(waiting[0].contains("corrupt"), "{kind}: {out:#?}");
        assert!(
            waiting[0].contains("farm reap --older-than"),
            "{kind}: {out:#?}"
        );
        assert!(out.stderr.contains("reaped `t1`"), "{kind}: {out:#?}");
        let done = env.git(["ls-tree", "--name-only", "main", "tasks/done/"]);
        assert_eq!(done, "tasks/done/t1.md", "{kind}: {out:#?}");
    }
}

/// Regression: an agent could force-push main away on a hub made by
/// `farm init`. init now refuses non-fast-forwards and deletions.
#[test]
fn init_makes_the_hub_refuse_force_pushes_and_deletions() {
    let env = Env::git_hub(&[("a.txt", "a\n")]);
    assert_eq!(env.git(["config", "receive.denyNonFastForwards"]), "true");
    assert_eq!(env.git(["config", "receive.denyDeletes"]), "true");
    env.git(["branch", "side"]);
    let before = env.git(["rev-parse", "main"]);
    let clone = env.tmp.path().join("rogue");
    let home = env.tmp.path();
    let git = |args: &[&str]| git_in(&clone, home, args);
    let (ok, _, err) = git_in(
        home,
        home,
        ["clone", "-q", &env.hub.display().to_string(), "rogue"],
    );
    assert!(ok, "{err}");
    assert!(git(&["checkout", "-q", "--orphan", "evil"]).0);
    assert!(git(&["commit", "-q", "--allow-empty", "-m", "history rewritten"]).0);
    let (ok, _, err) = git(&["push", "--force", "origin", "evil:main"]);
    assert!(!ok, "a force-push to main was accepted");
    assert!(
        err.contains("non-fast-forward") || err.contains("denied"),
        "{err}"
    );
    let (ok, _, err) = git(&["push", "origin", "--delete", "side"]);
    assert!(!ok, "a deletion was accepted");
    assert!(err.contains("deletion"), "{err}");
    assert_eq!(env.git(["rev-parse", "main"]), before);
    assert!(env.git_ok(["rev-parse", "--verify", "refs/heads/side"]));
}

/// Regression: `farm task add README` said "added" but the board skips
/// `tasks/README.md` (it is the board's readme): refused.
#[test]
fn task_add_refuses_the_name_of_the_boards_readme() {
    let env = Env::git_hub(&[]);
    let before = env.git(["rev-parse", "main"]);
    let out = env
        .farm_git(["task", "add", "README", "-m", "x"])
        .run()
        .code(2);
    assert!(out.stderr.contains("`README`"), "{out:#?}");
    assert!(out.stderr.contains("reserved"), "{out:#?}");
    assert!(out.stderr.contains("hint: "), "{out:#?}");
    assert_eq!(env.git(["rev-parse", "main"]), before);
    // Other spellings are ordinary tasks the board lists.
    env.farm_git(["task", "add", "readme", "-m", "x"])
        .run()
        .success();
    let json = env.farm_git(["tasks", "--json"]).run().success().json();
    assert!(json.to_string().contains("\"readme\""), "{json:#}");
}

/// Regression: farm run from a git hook, `git rebase -x` or `git bisect run`
/// inherits git's repository variables (`GIT_DIR`, `GIT_INDEX_FILE`,
/// `GIT_WORK_TREE`) naming the user's repository. farm's git commands — and
/// its agents' — followed them there instead of to the hub and the clones:
/// the user's branch was moved and its index rewritten (found when a unit
/// test run under `git rebase -x` moved this project's own `main`). They work
/// on the hub and the clones only; the other repository is untouched.
/// Configuration given in the environment (`GIT_CONFIG_COUNT`) is kept:
/// dropping it lost the chaos suite's `core.hooksPath`, and two thirds of its
/// kills with it.
#[test]
fn git_variables_naming_another_repository_do_not_steer_farm() {
    let env = Env::git_hub(&[]);
    crate::run::add_task(&env, &["v1", "-m", "Anything"]);
    let home = env.tmp.path().join("home");
    std::fs::create_dir_all(&home).unwrap();
    let other = env.tmp.path().join("bystander");
    std::fs::create_dir_all(&other).unwrap();
    for args in [
        &["init", "-q", "-b", "main"][..],
        &["commit", "-q", "--allow-empty", "-m", "mine"],
    ] {
        let (ok, _, err) = git_in(&other, &home, args);
        assert!(ok, "{err}");
    }
    let before = git_in(&other, &home, ["rev-parse", "HEAD"]).1;
    let probe = env.tmp.path().join("probe");
    let agent = env.agent_script(
        "work.sh",
        &format!(
            "set -eu\ngit config --get farm.probe > '{}'\necho w > w-v1\ngit add -A\ngit commit -q -m v1\n",
            probe.display()
        ),
    );
    let out = env
        .farm_git(crate::run::run_args(&env, &agent, &[]))
        // Configuration in the environment is the user's: it stays.
        .env("GIT_CONFIG_COUNT", "1")
        .env("GIT_CONFIG_KEY_0", "farm.probe")
        .env("GIT_CONFIG_VALUE_0", "kept")
        .env("GIT_DIR", other.join(".git"))
        .env("GIT_WORK_TREE", &other)
        .env("GIT_INDEX_FILE", other.join(".git/index"))
        .run_within(LIMIT);
    assert_eq!(
        git_in(&other, &home, ["rev-parse", "HEAD"]).1,
        before,
        "the other repository's branch moved: {out:#?}"
    );
    assert_eq!(
        git_in(&other, &home, ["status", "--porcelain"]).1,
        "",
        "the other repository's files or index changed: {out:#?}"
    );
    assert_eq!(out.code, Some(0), "{out:#?}");
    assert_eq!(
        std::fs::read_to_string(&probe).unwrap_or_default(),
        "kept\n",
        "configuration given in the environment reaches the agent's git: {out:#?}"
    );
    assert_eq!(
        env.git(["show", "main:w-v1"]),
        "w",
        "the work landed on the hub: {out:#?}"
    );
}
