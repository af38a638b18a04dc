//! Claude Code (`@anthropic-ai/claude-code`), the `claude` preset, against
//! the scripted Anthropic Messages server.

use std::path::PathBuf;
use std::time::Duration;

use serde_json::json;

use crate::kit::{self, Env, Server};

pub const PACKAGE: &str = "@anthropic-ai/claude-code";
pub const VERSION: &str = "2.1.332";

fn claude() -> Option<PathBuf> {
    kit::npm(PACKAGE, VERSION, "claude")
}

/// Claude Code pointed at `server`: an API key it sends, telemetry off, and
/// `IS_SANDBOX=1`, without which it refuses `--dangerously-skip-permissions`
/// to root (CI runs as root).
fn vars(server: &Server) -> Vec<(&'static str, String)> {
    vec![
        ("ANTHROPIC_BASE_URL", server.url.clone()),
        ("ANTHROPIC_API_KEY", "sk-ant-farm-test".to_owned()),
        ("IS_SANDBOX", "1".to_owned()),
        ("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1".to_owned()),
        ("DISABLE_AUTOUPDATER", "1".to_owned()),
    ]
}

const LIMIT: Duration = Duration::from_secs(240);

/// Case 1: `farm run --agent claude -j 2` does four tasks, each a commit on
/// main made by Claude Code's own Bash tool call.
#[test]
fn four_tasks_each_committed_by_claude_codes_own_tool_call() {
    let Some(bin) = claude() else { return };
    let env = Env::git_hub(&[]);
    let server = Server::start(env.tmp.path());
    for id in ["c1", "c2", "c3", "c4"] {
        kit::add_task(&env, id, &kit::commit_steps(id));
    }
    let out = kit::farm_run(
        &env,
        &bin,
        &vars(&server),
        &["--agent", "claude", "-j", "2"],
        LIMIT,
    );
    assert_eq!(out.code, Some(0), "{out:#?}");
    let mut done = kit::board(&env, "tasks/done");
    done.sort();
    assert_eq!(done, ["c1", "c2", "c3", "c4"], "{out:#?}");
    let subjects = kit::subjects(&env);
    for id in ["c1", "c2", "c3", "c4"] {
        assert!(
            subjects.contains(&format!("{id}: by the agent CLI")),
            "{id}: {subjects:?}"
        );
        assert_eq!(
            env.git(["show", &format!("main:{id}.txt")]),
            id,
            "{id}.txt on main"
        );
    }
    // Every task's conversation went two model turns: the tool call, the
    // answer after its result.
    let scripted: Vec<_> = server
        .requests()
        .into_iter()
        .filter(|r| r["scripted"] == true)
        .collect();
    assert!(scripted.iter().any(|r| r["step"] == 1), "{scripted:?}");
    let ends = kit::journal(&env, "session_end");
    assert_eq!(ends.len(), 4, "{ends:?}");
    assert!(ends.iter().all(|e| e["class"] == "success"), "{ends:?}");
    // Claude's result event states its cost: the journal keeps it.
    assert!(
        ends.iter().all(|e| e["cost_usd"].as_f64().is_some()),
        "{ends:?}"
    );
}

/// Case 2: the API answers 429 for a while. Claude Code retries on its own
/// (an `api_retry` event each time); farm burns no attempt, starts no other
/// session on the CLI while it retries, and the run finishes.
#[test]
fn a_429_for_a_while_burns_no_attempt_and_holds_other_sessions_back() {
    let Some(bin) = claude() else { return };
    let env = Env::git_hub(&[]);
    let server = Server::start(env.tmp.path());
    let mut steps = vec![json!({"fail": 429, "times": 5})];
    steps.extend(kit::commit_steps("r1").as_array().unwrap().iter().cloned());
    kit::add_task(&env, "r1", &json!(steps));
    for id in ["r2", "r3"] {
        kit::add_task(&env, id, &kit::commit_steps(id));
    }
    let out = kit::farm_run(
        &env,
        &bin,
        &vars(&server),
        &["--agent", "claude", "-j", "2"],
        LIMIT,
    );
    assert_eq!(out.code, Some(0), "{out:#?}");
    let mut done = kit::board(&env, "tasks/done");
    done.sort();
    assert_eq!(done, ["r1", "r2", "r3"], "{out:#?}");
    // r1 was done by its first session: no attempt burned.
    let claims: Vec<_> = kit::journal(&env, "claim")
        .into_iter()
        .filter(|c| c["task"] == "r1")
        .collect();
    assert_eq!(claims.len(), 1, "{claims:?}");
    let text = env.git(["show", "main:tasks/done/r1.md"]);
    assert!(!text.contains("## Attempt"), "{text}");
    // While Claude Code retried r1's 429s, farm said so and held the other
    // agent back.
    assert!(
        out.stderr
            .contains("waiting: the agent CLI is retrying its API in another session"),
        "{out:#?}"
    );
}

/// Case 3: the API answers 401. Claude Code would retry it for minutes;
/// farm stops the session at its first retry, and the run (exit 1, as for
/// every setup error) with one message naming the fix; no task failed, no
/// attempt counted.
#[test]
fn a_401_stops_the_run_with_the_fix_and_fails_no_task() {
    let Some(bin) = claude() else { return };
    let env = Env::git_hub(&[]);
    let server = Server::start(env.tmp.path());
    kit::add_task(
        &env,
        "a1",
        &json!([{"fail": 401, "times": 1000}, {"say": "never"}]),
    );
    kit::add_task(&env, "a2", &kit::commit_steps("a2"));
    let started = std::time::Instant::now();
    let out = kit::farm_run(&env, &bin, &vars(&server), &["--agent", "claude"], LIMIT);
    eprintln!("stopped after {:?}", started.elapsed());
    assert_eq!(out.code, Some(1), "{out:#?}");
    let errors: Vec<&str> = out
        .stderr
        .lines()
        .filter(|l| l.starts_with("error:"))
        .collect();
    assert_eq!(errors.len(), 1, "{out:#?}");
    assert!(
        errors[0].contains("refuses its credentials (HTTP 401"),
        "{out:#?}"
    );
    assert!(out.stderr.contains("hint: "), "{out:#?}");
    assert_eq!(kit::board(&env, "tasks/failed"), Vec::<String>::new());
    let text = env.git(["show", "main:tasks/a1.md"]);
    assert!(!text.contains("## Attempt"), "{text}");
    // Stopped at the first retries, not after Claude Code's ten.
    let refused = server
        .requests()
        .into_iter()
        .filter(|r| r["scripted"] == true)
        .count();
    assert!(refused <= 3, "{refused} requests answered 401");
}

/// Case 4: a stalled API and a short `--timeout`: the session is killed and
/// classified as the API's trouble (it never answered), not the task's —
/// and a session killed while Claude Code retries a 429 is a usage limit.
#[test]
fn a_stalled_or_retrying_api_killed_by_the_timeout_is_no_failed_attempt() {
    let Some(bin) = claude() else { return };
    let env = Env::git_hub(&[]);
    let server = Server::start(env.tmp.path());
    kit::add_task(&env, "s1", &json!([{"stall": 120}]));
    let out = kit::farm_run(
        &env,
        &bin,
        &vars(&server),
        &["--agent", "claude", "--timeout", "8s", "--once"],
        LIMIT,
    );
    let ends = kit::journal(&env, "session_end");
    assert_eq!(ends.len(), 1, "{out:#?}");
    assert_eq!(ends[0]["outcome"], "timed out", "{ends:?}");
    assert_eq!(ends[0]["class"], "api error", "{ends:?}");
    let text = env.git(["show", "main:tasks/s1.md"]);
    assert!(!text.contains("## Attempt"), "{text}");

    let env = Env::git_hub(&[]);
    let server = Server::start(env.tmp.path());
    kit::add_task(
        &env,
        "l1",
        &json!([{"fail": 429, "times": 1000}, {"say": "never"}]),
    );
    let out = kit::farm_run(
        &env,
        &bin,
        &vars(&server),
        &["--agent", "claude", "--timeout", "8s", "--once"],
        LIMIT,
    );
    let ends = kit::journal(&env, "session_end");
    assert_eq!(ends.len(), 1, "{out:#?}");
    assert_eq!(ends[0]["outcome"], "timed out", "{ends:?}");
    assert_eq!(ends[0]["class"], "usage limit", "{ends:?}");
    assert_eq!(kit::journal(&env, "limit").len(), 1, "{out:#?}");
    let text = env.git(["show", "main:tasks/l1.md"]);
    assert!(!text.contains("## Attempt"), "{text}");
}

/// The preset says which version these tests verified: this one.
#[test]
fn the_preset_names_the_version_verified_here() {
    assert_eq!(kit::verified("claude").as_deref(), Some(VERSION));
}
