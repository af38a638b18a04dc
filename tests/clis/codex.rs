//! Codex (`@openai/codex`), the `codex` preset, against the scripted OpenAI
//! Responses server: a model provider of its own in `CODEX_HOME/config.toml`
//! (this version ignores `OPENAI_BASE_URL`).

use std::path::PathBuf;
use std::time::Duration;

use serde_json::json;

use crate::kit::{self, Env, Server};

pub const PACKAGE: &str = "@openai/codex";
pub const VERSION: &str = "0.171.0";

fn codex() -> Option<PathBuf> {
    kit::npm(PACKAGE, VERSION, "codex")
}

/// Codex pointed at `server` through a `CODEX_HOME` of the test's own.
fn vars(env: &Env, server: &Server) -> Vec<(&'static str, String)> {
    let home = env.tmp.path().join("codex-home");
    std::fs::create_dir_all(&home).unwrap();
    std::fs::write(
        home.join("config.toml"),
        format!(
            "model = \"gpt-scripted\"\nmodel_provider = \"scripted\"\n\n\
             [model_providers.scripted]\nname = \"scripted\"\nbase_url = \"{}/v1\"\n\
             wire_api = \"responses\"\nenv_key = \"OPENAI_API_KEY\"\n",
            server.url
        ),
    )
    .unwrap();
    vec![
        ("CODEX_HOME", home.display().to_string()),
        ("OPENAI_API_KEY", "sk-farm-test".to_owned()),
    ]
}

const LIMIT: Duration = Duration::from_secs(240);

/// Case 1: `farm run --agent codex -j 2` does four tasks, each a commit on
/// main made by Codex's own `exec_command` tool call.
#[test]
fn four_tasks_each_committed_by_codexs_own_tool_call() {
    let Some(bin) = codex() else { return };
    let env = Env::git_hub(&[]);
    let server = Server::start(env.tmp.path());
    for id in ["x1", "x2", "x3", "x4"] {
        kit::add_task(&env, id, &kit::commit_steps(id));
    }
    let vars = vars(&env, &server);
    let out = kit::farm_run(&env, &bin, &vars, &["--agent", "codex", "-j", "2"], LIMIT);
    assert_eq!(out.code, Some(0), "{out:#?}");
    let mut done = kit::board(&env, "tasks/done");
    done.sort();
    assert_eq!(done, ["x1", "x2", "x3", "x4"], "{out:#?}");
    let subjects = kit::subjects(&env);
    for id in ["x1", "x2", "x3", "x4"] {
        assert!(
            subjects.contains(&format!("{id}: by the agent CLI")),
            "{id}: {subjects:?}"
        );
    }
    let ends = kit::journal(&env, "session_end");
    assert_eq!(ends.len(), 4, "{ends:?}");
    // Codex's turn.completed states its tokens: the journal keeps them.
    assert!(
        ends.iter().all(|e| e["input_tokens"].as_u64().is_some()),
        "{ends:?}"
    );
}

/// Case 2: a 429 with no retry-after. Codex 0.171.0 does not retry it: it
/// exits 1 at once ("exceeded retry limit, last status: 429"). farm burns
/// no attempt, every agent waits out the limit, and the run finishes.
#[test]
fn a_429_burns_no_attempt_and_the_run_waits_then_finishes() {
    let Some(bin) = codex() else { return };
    let env = Env::git_hub(&[]);
    let server = Server::start(env.tmp.path());
    let mut steps = vec![json!({"fail": 429, "times": 1})];
    steps.extend(kit::commit_steps("q1").as_array().unwrap().iter().cloned());
    kit::add_task(&env, "q1", &json!(steps));
    let vars = vars(&env, &server);
    let out = kit::farm_run(&env, &bin, &vars, &["--agent", "codex"], LIMIT);
    assert_eq!(out.code, Some(0), "{out:#?}");
    assert_eq!(kit::board(&env, "tasks/done"), ["q1"], "{out:#?}");
    let limits = kit::journal(&env, "limit");
    assert_eq!(limits.len(), 1, "{out:#?}");
    assert_eq!(limits[0]["why"], "usage limit", "{limits:?}");
    let text = env.git(["show", "main:tasks/done/q1.md"]);
    assert!(!text.contains("## Attempt"), "{text}");
}

/// Case 3: the API answers 401. Codex reconnects five times; farm stops
/// the session at the first and the run with one message naming the fix.
#[test]
fn a_401_stops_the_run_with_the_fix_and_fails_no_task() {
    let Some(bin) = codex() else { return };
    let env = Env::git_hub(&[]);
    let server = Server::start(env.tmp.path());
    kit::add_task(
        &env,
        "k1",
        &json!([{"fail": 401, "times": 1000}, {"say": "never"}]),
    );
    let vars = vars(&env, &server);
    let out = kit::farm_run(&env, &bin, &vars, &["--agent", "codex"], LIMIT);
    assert_eq!(out.code, Some(1), "{out:#?}");
    let errors: Vec<&str> = out
        .stderr
        .lines()
        .filter(|l| l.starts_with("error:"))
        .collect();
    assert_eq!(errors.len(), 1, "{out:#?}");
    assert!(errors[0].contains("HTTP 401"), "{out:#?}");
    assert_eq!(kit::board(&env, "tasks/failed"), Vec::<String>::new());
    let text = env.git(["show", "main:tasks/k1.md"]);
    assert!(!text.contains("## Attempt"), "{text}");
}

/// Case 4: a stalled API and a short `--timeout`: killed, and classified as
/// the API's trouble (Codex started a turn and nothing came), not the task's.
#[test]
fn a_stalled_api_killed_by_the_timeout_is_no_failed_attempt() {
    let Some(bin) = codex() else { return };
    let env = Env::git_hub(&[]);
    let server = Server::start(env.tmp.path());
    kit::add_task(&env, "z1", &json!([{"stall": 120}]));
    let vars = vars(&env, &server);
    let out = kit::farm_run(
        &env,
        &bin,
        &vars,
        &["--agent", "codex", "--timeout", "8s", "--once"],
        LIMIT,
    );
    let ends = kit::journal(&env, "session_end");
    assert_eq!(ends.len(), 1, "{out:#?}");
    assert_eq!(ends[0]["outcome"], "timed out", "{ends:?}");
    assert_eq!(ends[0]["class"], "api error", "{ends:?}");
    let text = env.git(["show", "main:tasks/z1.md"]);
    assert!(!text.contains("## Attempt"), "{text}");
}

/// The preset says which version these tests verified: this one.
#[test]
fn the_preset_names_the_version_verified_here() {
    assert_eq!(kit::verified("codex").as_deref(), Some(VERSION));
}
