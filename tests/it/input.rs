//! Bad input and corrupt claims (design notes, protocol item 10): names that
//! are paths, hubs that are not repositories, and whatever else lies in
//! `current_tasks/` — each refused or reported with a clear error, and
//! nothing written where it should not be.

use std::path::Path;
use std::time::Duration;

use crate::common::Env;

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

/// Regression (issue 10, item 5): `farm run --name ../../../ESCAPED` made
/// clones next to the hub and committed a session log to main. An agent name
/// follows the task-id rule: refused as bad usage before anything is written.
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

/// Regression (issue 10, item 5): `farm claim --agent ../x/y` was accepted.
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

/// Regression (issue 10, item 5): `farm --hub / claim c1` created
/// `/current_tasks/c1.txt`. Every command that takes a hub checks that it
/// is a git repository before touching it.
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
