//! Gemini CLI (`@google/gemini-cli`), the `gemini` preset, against the
//! scripted server's Gemini API (`GOOGLE_GEMINI_BASE_URL`; API-key auth
//! chosen in its settings, which it needs to run headless).

use std::path::PathBuf;
use std::time::Duration;

use serde_json::json;

use crate::kit::{self, Env, Server};

pub const PACKAGE: &str = "@google/gemini-cli";
pub const VERSION: &str = "0.61.0";

fn gemini() -> Option<PathBuf> {
    kit::npm(PACKAGE, VERSION, "gemini")
}

/// Gemini CLI pointed at `server`: an API key, and `~/.gemini/settings.json`
/// (HOME is the test's) choosing API-key auth, without which it stops
/// with "Invalid auth method selected."
fn vars(env: &Env, server: &Server) -> Vec<(&'static str, String)> {
    let dir = env.tmp.path().join(".gemini");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("settings.json"),
        r#"{"security":{"auth":{"selectedType":"gemini-api-key"}}}"#,
    )
    .unwrap();
    vec![
        ("GEMINI_API_KEY", "farm-test-key".to_owned()),
        ("GOOGLE_GEMINI_BASE_URL", server.url.clone()),
    ]
}

const LIMIT: Duration = Duration::from_secs(240);

/// Case 1: `farm run --agent gemini -j 2` does four tasks, each a commit on
/// main made by Gemini CLI's own `run_shell_command` tool call.
#[test]
fn four_tasks_each_committed_by_gemini_clis_own_tool_call() {
    let Some(bin) = gemini() else { return };
    let env = Env::git_hub(&[]);
    let server = Server::start(env.tmp.path());
    for id in ["g1", "g2", "g3", "g4"] {
        kit::add_task(&env, id, &kit::commit_steps(id));
    }
    let vars = vars(&env, &server);
    let out = kit::farm_run(&env, &bin, &vars, &["--agent", "gemini", "-j", "2"], LIMIT);
    assert_eq!(out.code, Some(0), "{out:#?}");
    let mut done = kit::board(&env, "tasks/done");
    done.sort();
    assert_eq!(done, ["g1", "g2", "g3", "g4"], "{out:#?}");
    let subjects = kit::subjects(&env);
    for id in ["g1", "g2", "g3", "g4"] {
        assert!(
            subjects.contains(&format!("{id}: by the agent CLI")),
            "{id}: {subjects:?}"
        );
    }
    let ends = kit::journal(&env, "session_end");
    assert_eq!(ends.len(), 4, "{ends:?}");
    assert!(ends.iter().all(|e| e["class"] == "success"), "{ends:?}");
}

/// Case 2: the API answers 429 twice. Gemini CLI retries on its own,
/// silently (no event), for about 17 s; no attempt is burned and the run
/// finishes.
#[test]
fn a_429_for_a_while_burns_no_attempt_and_the_run_finishes() {
    let Some(bin) = gemini() else { return };
    let env = Env::git_hub(&[]);
    let server = Server::start(env.tmp.path());
    let mut steps = vec![json!({"fail": 429, "times": 2})];
    steps.extend(kit::commit_steps("h1").as_array().unwrap().iter().cloned());
    kit::add_task(&env, "h1", &json!(steps));
    let vars = vars(&env, &server);
    let out = kit::farm_run(&env, &bin, &vars, &["--agent", "gemini"], LIMIT);
    assert_eq!(out.code, Some(0), "{out:#?}");
    assert_eq!(kit::board(&env, "tasks/done"), ["h1"], "{out:#?}");
    let text = env.git(["show", "main:tasks/done/h1.md"]);
    assert!(!text.contains("## Attempt"), "{text}");
    assert_eq!(kit::journal(&env, "claim").len(), 1, "{out:#?}");
}

/// Case 3: the API answers 401. Gemini CLI says so at once in its result
/// but lingers for seconds; farm stops it on that line, and the run with
/// one message naming the fix.
#[test]
fn a_401_stops_the_run_with_the_fix_and_fails_no_task() {
    let Some(bin) = gemini() else { return };
    let env = Env::git_hub(&[]);
    let server = Server::start(env.tmp.path());
    kit::add_task(
        &env,
        "u1",
        &json!([{"fail": 401, "times": 1000}, {"say": "never"}]),
    );
    let vars = vars(&env, &server);
    let out = kit::farm_run(&env, &bin, &vars, &["--agent", "gemini"], LIMIT);
    assert_eq!(out.code, Some(1), "{out:#?}");
    let errors: Vec<&str> = out
        .stderr
        .lines()
        .filter(|l| l.starts_with("error:"))
        .collect();
    assert_eq!(errors.len(), 1, "{out:#?}");
    assert!(errors[0].contains("HTTP 401"), "{out:#?}");
    assert_eq!(kit::board(&env, "tasks/failed"), Vec::<String>::new());
    let text = env.git(["show", "main:tasks/u1.md"]);
    assert!(!text.contains("## Attempt"), "{text}");
}

/// Case 4: a stalled API and a short `--timeout`: killed, an API error.
#[test]
fn a_stalled_api_killed_by_the_timeout_is_no_failed_attempt() {
    let Some(bin) = gemini() else { return };
    let env = Env::git_hub(&[]);
    let server = Server::start(env.tmp.path());
    kit::add_task(&env, "w1", &json!([{"stall": 120}]));
    let vars = vars(&env, &server);
    let out = kit::farm_run(
        &env,
        &bin,
        &vars,
        &["--agent", "gemini", "--timeout", "8s", "--once"],
        LIMIT,
    );
    let ends = kit::journal(&env, "session_end");
    assert_eq!(ends.len(), 1, "{out:#?}");
    assert_eq!(ends[0]["outcome"], "timed out", "{ends:?}");
    assert_eq!(ends[0]["class"], "api error", "{ends:?}");
    let text = env.git(["show", "main:tasks/w1.md"]);
    assert!(!text.contains("## Attempt"), "{text}");
}

/// The preset says which version these tests verified: this one.
#[test]
fn the_preset_names_the_version_verified_here() {
    assert_eq!(kit::verified("gemini").as_deref(), Some(VERSION));
}
