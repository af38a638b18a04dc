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

/// opencode retries 429s with no JSON event, but its log lines (the
/// preset's `--print-logs`) say so: the other agent, done with its task,
/// starts no session while it retries. p1's four 429s keep opencode
/// retrying for about 35 s after its first request; p2, begun with it,
/// sleeps 10 s first, so that it ends inside that window however slowly
/// opencode starts on a loaded machine (a quick p2 once ended before p1's
/// first request went out).
#[test]
fn a_429_for_a_while_burns_no_attempt_and_holds_the_other_agent() {
    let Some(cli) = opencode() else { return };
    let slow = ("p2", kit::slow_commit_steps("p2", 10));
    kit::limited_holds_the_other_agent(&cli, "p1", 4, slow, "p3");
}

/// opencode reports a 401 at once (`APIError`, not retryable) and lingers:
/// farm cuts it short.
#[test]
fn a_401_stops_the_run_with_the_fix_and_fails_no_task() {
    let Some(cli) = opencode() else { return };
    kit::refused(&cli, "n1");
}

/// Its log line says the model's request went out, and no JSON event
/// follows: an API error. The timeout is longer than for the other CLIs:
/// opencode takes 7–15 s offline to send its first request.
#[test]
fn a_stalled_api_killed_by_the_timeout_is_no_failed_attempt() {
    let Some(cli) = opencode() else { return };
    kit::stalled(&cli, "q1", "40s");
}

/// An overloaded API (529 twice): opencode retries it, its log lines
/// say so; no attempt burned.
#[test]
fn an_overloaded_api_burns_no_attempt_and_the_run_finishes() {
    let Some(cli) = opencode() else { return };
    kit::retried_by_the_cli(&cli, "u3", serde_json::json!({"fail": 529, "times": 2}));
}

/// The preset says which version these tests verified: this one.
#[test]
fn the_preset_names_the_version_verified_here() {
    assert_eq!(kit::verified("opencode").as_deref(), Some(VERSION));
}
