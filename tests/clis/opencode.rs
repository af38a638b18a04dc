//! opencode (`opencode-ai`), the `opencode` preset (prompt on stdin),
//! against the scripted server's Anthropic Messages API: its built-in
//! `anthropic` provider with the base URL moved.

use serde_json::json;

use crate::kit::{self, Cli, Env, Server};

pub const PACKAGE: &str = "opencode-ai";
pub const VERSION: &str = "1.18.33";

fn setup(env: &Env, server: &Server) -> Vec<(&'static str, String)> {
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

fn opencode() -> Option<Cli> {
    Some(Cli {
        preset: "opencode",
        bin: kit::npm(PACKAGE, VERSION, "opencode")?,
        setup,
    })
}

#[test]
fn four_tasks_each_committed_by_opencodes_own_tool_call() {
    let Some(cli) = opencode() else { return };
    kit::four_tasks(&cli, ["o1", "o2", "o3", "o4"]);
}

/// opencode retries 429s silently (21 s for two).
#[test]
fn a_429_for_a_while_burns_no_attempt_and_the_run_finishes() {
    let Some(cli) = opencode() else { return };
    let (env, _server, out) = kit::limited_for_a_while(&cli, "p1", 2, &[], &[]);
    assert_eq!(kit::journal(&env, "claim").len(), 1, "{out:#?}");
}

/// opencode reports a 401 at once (`APIError`, not retryable) and lingers:
/// farm cuts it short.
#[test]
fn a_401_stops_the_run_with_the_fix_and_fails_no_task() {
    let Some(cli) = opencode() else { return };
    kit::refused(&cli, "n1");
}

// No stall case: opencode prints nothing until the model's first answer, so
// a stalled API cannot be told from a long task yet (see the README).

/// The preset says which version these tests verified: this one.
#[test]
fn the_preset_names_the_version_verified_here() {
    assert_eq!(kit::verified("opencode").as_deref(), Some(VERSION));
}
