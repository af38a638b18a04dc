//! Gemini CLI (`@google/gemini-cli`), the `gemini` preset, against the
//! scripted server's Gemini API (`GOOGLE_GEMINI_BASE_URL`).

use crate::kit::{self, Cli, Env, Server};

pub const PACKAGE: &str = "@google/gemini-cli";
pub const VERSION: &str = "0.61.0";

/// An API key, and `~/.gemini/settings.json` choosing API-key auth, without
/// which it stops headless with "Invalid auth method selected."
fn setup(env: &Env, server: &Server) -> Vec<(&'static str, String)> {
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

fn gemini() -> Option<Cli> {
    Some(Cli {
        preset: "gemini",
        bin: kit::npm(PACKAGE, VERSION, "gemini")?,
        setup,
    })
}

#[test]
fn four_tasks_each_committed_by_gemini_clis_own_tool_call() {
    let Some(cli) = gemini() else { return };
    kit::four_tasks(&cli, ["g1", "g2", "g3", "g4"]);
}

/// Gemini CLI retries 429s silently (no event; about 17 s for two).
#[test]
fn a_429_for_a_while_burns_no_attempt_and_the_run_finishes() {
    let Some(cli) = gemini() else { return };
    let (env, _server, out) = kit::limited_for_a_while(&cli, "h1", 2, &[], &[]);
    assert_eq!(kit::journal(&env, "claim").len(), 1, "{out:#?}");
}

/// Gemini CLI reports a 401 at once, then lingers: farm cuts it short.
#[test]
fn a_401_stops_the_run_with_the_fix_and_fails_no_task() {
    let Some(cli) = gemini() else { return };
    kit::refused(&cli, "u1");
}

#[test]
fn a_stalled_api_killed_by_the_timeout_is_no_failed_attempt() {
    let Some(cli) = gemini() else { return };
    kit::stalled(&cli, "w1", "8s");
}

/// An overloaded API (503 twice, `UNAVAILABLE`): no attempt burned.
#[test]
fn an_overloaded_api_burns_no_attempt_and_the_run_finishes() {
    let Some(cli) = gemini() else { return };
    kit::retried_by_the_cli(&cli, "u1", serde_json::json!({"fail": 503, "times": 2}));
}

/// The preset says which version these tests verified: this one.
#[test]
fn the_preset_names_the_version_verified_here() {
    assert_eq!(kit::verified("gemini").as_deref(), Some(VERSION));
}
