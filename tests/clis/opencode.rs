//! opencode (`opencode-ai`), the `opencode` preset, against the scripted
//! server's Anthropic Messages API: its built-in `anthropic` provider with
//! the base URL moved, in `~/.config/opencode/opencode.json` (HOME is the
//! test's).

use std::path::PathBuf;
use std::time::Duration;

use serde_json::json;

use crate::kit::{self, Env, Server};

pub const PACKAGE: &str = "opencode-ai";
pub const VERSION: &str = "1.18.33";

fn opencode() -> Option<PathBuf> {
    kit::npm(PACKAGE, VERSION, "opencode")
}

fn vars(env: &Env, server: &Server) -> Vec<(&'static str, String)> {
    let dir = env.tmp.path().join(".config/opencode");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("opencode.json"),
        json!({
            "model": "anthropic/claude-sonnet-4-5",
            "provider": {"anthropic": {"options": {
                "baseURL": format!("{}/v1", server.url),
                "apiKey": "sk-ant-farm-test",
            }}},
            "autoupdate": false,
            "share": "disabled",
        })
        .to_string(),
    )
    .unwrap();
    Vec::new()
}

const LIMIT: Duration = Duration::from_secs(240);

/// Case 1: `farm run --agent opencode -j 2` (the prompt on stdin) does four
/// tasks, each a commit on main made by opencode's own bash tool call.
#[test]
fn four_tasks_each_committed_by_opencodes_own_tool_call() {
    let Some(bin) = opencode() else { return };
    let env = Env::git_hub(&[]);
    let server = Server::start(env.tmp.path());
    for id in ["o1", "o2", "o3", "o4"] {
        kit::add_task(&env, id, &kit::commit_steps(id));
    }
    let vars = vars(&env, &server);
    let out = kit::farm_run(
        &env,
        &bin,
        &vars,
        &["--agent", "opencode", "-j", "2"],
        LIMIT,
    );
    assert_eq!(out.code, Some(0), "{out:#?}");
    let mut done = kit::board(&env, "tasks/done");
    done.sort();
    assert_eq!(done, ["o1", "o2", "o3", "o4"], "{out:#?}");
    let subjects = kit::subjects(&env);
    for id in ["o1", "o2", "o3", "o4"] {
        assert!(
            subjects.contains(&format!("{id}: by the agent CLI")),
            "{id}: {subjects:?}"
        );
    }
}

/// Case 2: the API answers 429 twice. opencode retries silently (21 s for
/// two); no attempt is burned and the run finishes.
#[test]
fn a_429_for_a_while_burns_no_attempt_and_the_run_finishes() {
    let Some(bin) = opencode() else { return };
    let env = Env::git_hub(&[]);
    let server = Server::start(env.tmp.path());
    let mut steps = vec![json!({"fail": 429, "times": 2})];
    steps.extend(kit::commit_steps("p1").as_array().unwrap().iter().cloned());
    kit::add_task(&env, "p1", &json!(steps));
    let vars = vars(&env, &server);
    let out = kit::farm_run(&env, &bin, &vars, &["--agent", "opencode"], LIMIT);
    assert_eq!(out.code, Some(0), "{out:#?}");
    assert_eq!(kit::board(&env, "tasks/done"), ["p1"], "{out:#?}");
    let text = env.git(["show", "main:tasks/done/p1.md"]);
    assert!(!text.contains("## Attempt"), "{text}");
    assert_eq!(kit::journal(&env, "claim").len(), 1, "{out:#?}");
}

/// Case 3: the API answers 401. opencode says so at once (an `APIError`
/// event, `"isRetryable": false`) and lingers for seconds; farm stops it on
/// that line, and the run with one message naming the fix.
#[test]
fn a_401_stops_the_run_with_the_fix_and_fails_no_task() {
    let Some(bin) = opencode() else { return };
    let env = Env::git_hub(&[]);
    let server = Server::start(env.tmp.path());
    kit::add_task(
        &env,
        "n1",
        &json!([{"fail": 401, "times": 1000}, {"say": "never"}]),
    );
    let vars = vars(&env, &server);
    let out = kit::farm_run(&env, &bin, &vars, &["--agent", "opencode"], LIMIT);
    assert_eq!(out.code, Some(1), "{out:#?}");
    let errors: Vec<&str> = out
        .stderr
        .lines()
        .filter(|l| l.starts_with("error:"))
        .collect();
    assert_eq!(errors.len(), 1, "{out:#?}");
    assert!(errors[0].contains("HTTP 401"), "{out:#?}");
    assert_eq!(kit::board(&env, "tasks/failed"), Vec::<String>::new());
    let text = env.git(["show", "main:tasks/n1.md"]);
    assert!(!text.contains("## Attempt"), "{text}");
}

/// The preset says which version these tests verified: this one.
#[test]
fn the_preset_names_the_version_verified_here() {
    assert_eq!(kit::verified("opencode").as_deref(), Some(VERSION));
}
