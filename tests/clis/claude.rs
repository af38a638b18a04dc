//! Claude Code (`@anthropic-ai/claude-code`), the `claude` preset, against
//! the scripted Anthropic Messages server.

use serde_json::json;

use crate::kit::{self, Cli, Env, Server};

pub const PACKAGE: &str = "@anthropic-ai/claude-code";
pub const VERSION: &str = "2.1.332";

/// Claude Code pointed at the server: an API key it sends, telemetry off,
/// and `IS_SANDBOX=1`, without which it refuses
/// `--dangerously-skip-permissions` to root (CI runs as root).
fn setup(_: &Env, server: &Server) -> Vec<(&'static str, String)> {
    vec![
        ("ANTHROPIC_BASE_URL", server.url.clone()),
        ("ANTHROPIC_API_KEY", "sk-ant-farm-test".to_owned()),
        ("IS_SANDBOX", "1".to_owned()),
        ("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1".to_owned()),
        ("DISABLE_AUTOUPDATER", "1".to_owned()),
    ]
}

fn claude() -> Option<Cli> {
    Some(Cli {
        preset: "claude",
        bin: kit::npm(PACKAGE, VERSION, "claude")?,
        setup,
    })
}

#[test]
fn four_tasks_each_committed_by_claude_codes_own_tool_call() {
    let Some(cli) = claude() else { return };
    let (env, server, _) = kit::four_tasks(&cli, ["c1", "c2", "c3", "c4"]);
    // Every conversation went two model turns: the tool call, the answer.
    assert!(
        server
            .requests()
            .iter()
            .any(|r| r["scripted"] == true && r["step"] == 1)
    );
    // Claude's result event states its cost: the journal keeps it.
    let ends = kit::journal(&env, "session_end");
    assert!(
        ends.iter().all(|e| e["cost_usd"].as_f64().is_some()),
        "{ends:?}"
    );
}

/// Claude Code retries 429s on its own, an `api_retry` event each time:
/// while it does, farm starts no other session on it (they share the
/// account). r1 gets five 429s (about 17 s of its back-off); r2 is quick;
/// r3 must wait for r1's retries to end.
#[test]
fn a_429_for_a_while_burns_no_attempt_and_holds_other_sessions_back() {
    let Some(cli) = claude() else { return };
    kit::limited_holds_the_other_agent(&cli, "r1", 5, ("r2", kit::commit_steps("r2")), "r3");
}

/// Claude Code would retry a 401 for three minutes: farm stops it at the
/// first retry.
#[test]
fn a_401_stops_the_run_with_the_fix_and_fails_no_task() {
    let Some(cli) = claude() else { return };
    let started = std::time::Instant::now();
    kit::refused(&cli, "a1");
    eprintln!("stopped after {:?}", started.elapsed());
}

/// A stall, and a 429 retry cut by the timeout: an API error, a usage limit.
#[test]
fn a_stalled_or_retrying_api_killed_by_the_timeout_is_no_failed_attempt() {
    let Some(cli) = claude() else { return };
    kit::stalled(&cli, "s1", "8s");
    let steps = json!([{"fail": 429, "times": 1000}, {"say": "never"}]);
    let (env, _server, out) = kit::run(&cli, &[("l1", steps)], &["--timeout", "8s", "--once"]);
    let ends = kit::journal(&env, "session_end");
    assert_eq!(ends.len(), 1, "{out:#?}");
    assert_eq!(ends[0]["outcome"], "timed out", "{ends:?}");
    assert_eq!(ends[0]["class"], "usage limit", "{ends:?}");
    assert_eq!(kit::journal(&env, "limit").len(), 1, "{out:#?}");
}

/// An overloaded API (529 twice): Claude Code retries it (`api_retry`
/// with `error_status` 529); no attempt burned.
#[test]
fn an_overloaded_api_burns_no_attempt_and_the_run_finishes() {
    let Some(cli) = claude() else { return };
    kit::retried_by_the_cli(&cli, "o1", serde_json::json!({"fail": 529, "times": 2}));
}

/// The preset says which version these tests verified: this one.
#[test]
fn the_preset_names_the_version_verified_here() {
    assert_eq!(kit::verified("claude").as_deref(), Some(VERSION));
}
