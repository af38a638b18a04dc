//! Qwen Code (`@qwen-code/qwen-code`), the `qwen` preset, against the
//! scripted server's OpenAI Chat Completions API (`OPENAI_BASE_URL`; the
//! `openai` auth chosen in `~/.qwen/settings.json`, HOME being the test's).

use std::path::PathBuf;
use std::time::Duration;

use serde_json::json;

use crate::kit::{self, Env, Server};

pub const PACKAGE: &str = "@qwen-code/qwen-code";
pub const VERSION: &str = "0.24.4";

fn qwen() -> Option<PathBuf> {
    kit::npm(PACKAGE, VERSION, "qwen")
}

fn vars(env: &Env, server: &Server) -> Vec<(&'static str, String)> {
    let dir = env.tmp.path().join(".qwen");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("settings.json"),
        r#"{"security":{"auth":{"selectedType":"openai"}}}"#,
    )
    .unwrap();
    vec![
        ("OPENAI_API_KEY", "sk-farm-test".to_owned()),
        ("OPENAI_BASE_URL", format!("{}/v1", server.url)),
        ("OPENAI_MODEL", "qwen-scripted".to_owned()),
        ("QWEN_CODE_SUPPRESS_YOLO_WARNING", "1".to_owned()),
    ]
}

const LIMIT: Duration = Duration::from_secs(240);

/// Case 1: `farm run --agent qwen -j 2` does four tasks, each a commit on
/// main made by Qwen Code's own `run_shell_command` tool call.
#[test]
fn four_tasks_each_committed_by_qwen_codes_own_tool_call() {
    let Some(bin) = qwen() else { return };
    let env = Env::git_hub(&[]);
    let server = Server::start(env.tmp.path());
    for id in ["w1", "w2", "w3", "w4"] {
        kit::add_task(&env, id, &kit::commit_steps(id));
    }
    let vars = vars(&env, &server);
    let out = kit::farm_run(&env, &bin, &vars, &["--agent", "qwen", "-j", "2"], LIMIT);
    assert_eq!(out.code, Some(0), "{out:#?}");
    let mut done = kit::board(&env, "tasks/done");
    done.sort();
    assert_eq!(done, ["w1", "w2", "w3", "w4"], "{out:#?}");
    let subjects = kit::subjects(&env);
    for id in ["w1", "w2", "w3", "w4"] {
        assert!(
            subjects.contains(&format!("{id}: by the agent CLI")),
            "{id}: {subjects:?}"
        );
    }
    let ends = kit::journal(&env, "session_end");
    assert!(ends.iter().all(|e| e["class"] == "success"), "{ends:?}");
}

/// Case 2: the API answers 429 twice; Qwen Code retries; no attempt is
/// burned and the run finishes.
#[test]
fn a_429_for_a_while_burns_no_attempt_and_the_run_finishes() {
    let Some(bin) = qwen() else { return };
    let env = Env::git_hub(&[]);
    let server = Server::start(env.tmp.path());
    let mut steps = vec![json!({"fail": 429, "times": 2})];
    steps.extend(kit::commit_steps("v1").as_array().unwrap().iter().cloned());
    kit::add_task(&env, "v1", &json!(steps));
    let vars = vars(&env, &server);
    let out = kit::farm_run(&env, &bin, &vars, &["--agent", "qwen"], LIMIT);
    assert_eq!(out.code, Some(0), "{out:#?}");
    assert_eq!(kit::board(&env, "tasks/done"), ["v1"], "{out:#?}");
    let text = env.git(["show", "main:tasks/done/v1.md"]);
    assert!(!text.contains("## Attempt"), "{text}");
}

/// Case 3: the API answers 401: the run stops with one message naming the
/// fix; no task failed.
#[test]
fn a_401_stops_the_run_with_the_fix_and_fails_no_task() {
    let Some(bin) = qwen() else { return };
    let env = Env::git_hub(&[]);
    let server = Server::start(env.tmp.path());
    kit::add_task(
        &env,
        "y1",
        &json!([{"fail": 401, "times": 1000}, {"say": "never"}]),
    );
    let vars = vars(&env, &server);
    let out = kit::farm_run(&env, &bin, &vars, &["--agent", "qwen"], LIMIT);
    assert_eq!(out.code, Some(1), "{out:#?}");
    let errors: Vec<&str> = out
        .stderr
        .lines()
        .filter(|l| l.starts_with("error:"))
        .collect();
    assert_eq!(errors.len(), 1, "{out:#?}");
    assert!(errors[0].contains("cannot work"), "{out:#?}");
    assert_eq!(kit::board(&env, "tasks/failed"), Vec::<String>::new());
    let text = env.git(["show", "main:tasks/y1.md"]);
    assert!(!text.contains("## Attempt"), "{text}");
}

/// Case 4: a stalled API and a short `--timeout`: killed, an API error.
#[test]
fn a_stalled_api_killed_by_the_timeout_is_no_failed_attempt() {
    let Some(bin) = qwen() else { return };
    let env = Env::git_hub(&[]);
    let server = Server::start(env.tmp.path());
    kit::add_task(&env, "s9", &json!([{"stall": 120}]));
    let vars = vars(&env, &server);
    let out = kit::farm_run(
        &env,
        &bin,
        &vars,
        &["--agent", "qwen", "--timeout", "8s", "--once"],
        LIMIT,
    );
    let ends = kit::journal(&env, "session_end");
    assert_eq!(ends.len(), 1, "{out:#?}");
    assert_eq!(ends[0]["outcome"], "timed out", "{ends:?}");
    assert_eq!(ends[0]["class"], "api error", "{ends:?}");
    let text = env.git(["show", "main:tasks/s9.md"]);
    assert!(!text.contains("## Attempt"), "{text}");
}

/// The preset says which version these tests verified: this one.
#[test]
fn the_preset_names_the_version_verified_here() {
    assert_eq!(kit::verified("qwen").as_deref(), Some(VERSION));
}
