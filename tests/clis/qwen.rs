//! Qwen Code (`@qwen-code/qwen-code`), the `qwen` preset, against the
//! scripted server's OpenAI Chat Completions API (`OPENAI_BASE_URL`).

use crate::kit::{self, Cli, Env, Server};

pub const PACKAGE: &str = "@qwen-code/qwen-code";
pub const VERSION: &str = "0.24.4";

/// The `openai` auth chosen in `~/.qwen/settings.json`, without which it
/// does not start headless, and the server's URL, key and model.
fn setup(env: &Env, server: &Server) -> Vec<(&'static str, String)> {
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

fn qwen() -> Option<Cli> {
    Some(Cli {
        preset: "qwen",
        bin: kit::npm(PACKAGE, VERSION, "qwen")?,
        setup,
    })
}

#[test]
fn four_tasks_each_committed_by_qwen_codes_own_tool_call() {
    let Some(cli) = qwen() else { return };
    kit::four_tasks(&cli, ["w1", "w2", "w3", "w4"]);
}

/// Qwen Code retries 429s silently (3 s for two).
#[test]
fn a_429_for_a_while_burns_no_attempt_and_the_run_finishes() {
    let Some(cli) = qwen() else { return };
    kit::limited_for_a_while(&cli, "v1", 2, &[], &[]);
}

/// Qwen Code answers a 401 at once ("[API Error: 401 …]") and lingers.
#[test]
fn a_401_stops_the_run_with_the_fix_and_fails_no_task() {
    let Some(cli) = qwen() else { return };
    kit::refused(&cli, "y1");
}

#[test]
fn a_stalled_api_killed_by_the_timeout_is_no_failed_attempt() {
    let Some(cli) = qwen() else { return };
    // At a load of 12 (the whole suite beside it), sandboxed, Qwen Code
    // had not said its first line 8 s after its start in one run of the
    // real-CLI tests (alone it passed three times of three), and a
    // session that never started is the task's failure, not the API's.
    kit::stalled(&cli, "s9", "15s");
}

/// An overloaded API (503 twice): no attempt burned.
#[test]
fn an_overloaded_api_burns_no_attempt_and_the_run_finishes() {
    let Some(cli) = qwen() else { return };
    kit::retried_by_the_cli(&cli, "u2", serde_json::json!({"fail": 503, "times": 2}));
}

/// The preset says which version these tests verified: this one.
#[test]
fn the_preset_names_the_version_verified_here() {
    assert_eq!(kit::verified("qwen").as_deref(), Some(VERSION));
}
