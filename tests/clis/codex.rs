//! Codex (`@openai/codex`), the `codex` preset, against the scripted OpenAI
//! Responses server: a model provider of its own in `CODEX_HOME/config.toml`
//! (this version ignores `OPENAI_BASE_URL`).

use crate::kit::{self, Cli, Env, Server};

pub const PACKAGE: &str = "@openai/codex";
pub const VERSION: &str = "0.171.0";

fn setup(env: &Env, server: &Server) -> Vec<(&'static str, String)> {
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

fn codex() -> Option<Cli> {
    Some(Cli {
        preset: "codex",
        bin: kit::npm(PACKAGE, VERSION, "codex")?,
        setup,
    })
}

#[test]
fn four_tasks_each_committed_by_codexs_own_tool_call() {
    let Some(cli) = codex() else { return };
    let (env, _server, _) = kit::four_tasks(&cli, ["x1", "x2", "x3", "x4"]);
    // Codex's turn.completed states its tokens: the journal keeps them.
    let ends = kit::journal(&env, "session_end");
    assert!(
        ends.iter().all(|e| e["input_tokens"].as_u64().is_some()),
        "{ends:?}"
    );
}

/// Codex 0.171.0 does not retry a 429 without retry-after: it exits 1 at
/// once. farm burns no attempt, waits out the limit, and the run finishes.
#[test]
fn a_429_burns_no_attempt_and_the_run_waits_then_finishes() {
    let Some(cli) = codex() else { return };
    let (env, _server, _) = kit::limited_for_a_while(&cli, "q1", 1, &[], &[]);
    let limits = kit::journal(&env, "limit");
    assert_eq!(limits.len(), 1, "{limits:?}");
    assert_eq!(limits[0]["why"], "usage limit", "{limits:?}");
}

/// Codex reconnects five times on a 401: farm stops it at the first.
#[test]
fn a_401_stops_the_run_with_the_fix_and_fails_no_task() {
    let Some(cli) = codex() else { return };
    kit::refused(&cli, "k1");
}

#[test]
fn a_stalled_api_killed_by_the_timeout_is_no_failed_attempt() {
    let Some(cli) = codex() else { return };
    kit::stalled(&cli, "z1", "8s");
}

/// A 429 with `retry-after`: Codex waits it out and tries again itself
/// (`Reconnecting…`); no attempt burned.
#[test]
fn a_429_with_retry_after_burns_no_attempt_and_the_run_finishes() {
    let Some(cli) = codex() else { return };
    kit::retried_by_the_cli(
        &cli,
        "q2",
        serde_json::json!({"fail": 429, "times": 1, "retry_after": 1}),
    );
}

/// The preset says which version these tests verified: this one.
#[test]
fn the_preset_names_the_version_verified_here() {
    assert_eq!(kit::verified("codex").as_deref(), Some(VERSION));
}
