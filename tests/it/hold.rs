//! `farm claim TASK -- COMMAND`: hold the claim while a command runs.

use crate::common::{Env, wait_for};

#[test]
fn command_runs_holding_the_claim_and_its_status_passes_through() {
    let env = Env::new();
    let seen = env.tmp.path().join("seen");
    let script = format!(
        "cat \"$FARM_CLAIM\" > {0}; echo \"task=$FARM_TASK agent=$FARM_AGENT nonce=$FARM_NONCE\" >> {0}; exit 7",
        seen.display()
    );
    env.farm([
        "claim", "job", "--agent", "carol", "--", "sh", "-c", &script,
    ])
    .run()
    .code(7);
    let text = std::fs::read_to_string(&seen).unwrap();
    assert!(
        text.contains("task = \"job\"") && text.contains("pid = "),
        "{text}"
    );
    assert!(text.contains("task=job agent=carol nonce="), "{text}");
    assert!(
        !env.claim_path("job").exists(),
        "released after the command"
    );
    assert!(env.tombstones().is_empty());
}

#[test]
fn a_held_task_does_not_run_the_command() {
    let env = Env::new();
    env.farm(["claim", "job", "--agent", "alice"])
        .run()
        .success();
    let marker = env.tmp.path().join("ran");
    env.farm([
        "claim",
        "job",
        "--agent",
        "bob",
        "--",
        "touch",
        marker.to_str().unwrap(),
    ])
    .run()
    .code(3)
    .stderr_has("held by alice@");
    assert!(!marker.exists());
}

#[test]
fn a_missing_command_exits_127_and_releases() {
    let env = Env::new();
    env.farm(["claim", "job", "--", "no-such-command-xyz"])
        .run()
        .code(127)
        .stderr_has("cannot run `no-such-command-xyz`");
    assert!(!env.claim_path("job").exists());
}

#[test]
fn sigterm_to_farm_reaches_the_command_and_the_claim_is_released() {
    let env = Env::new();
    let started = env.tmp.path().join("started");
    let script = format!(
        "trap 'exit 42' TERM; touch {}; while :; do sleep 0.05; done",
        started.display()
    );
    let holder = env
        .farm(["claim", "job", "--", "sh", "-c", &script])
        .spawn();
    wait_for(&started);
    unsafe { libc::kill(holder.id() as i32, libc::SIGTERM) };
    let out = holder.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(42), "{out:?}");
    assert!(!env.claim_path("job").exists());
}

#[test]
fn heartbeats_refresh_the_claim_while_the_command_runs() {
    let env = Env::new();
    let script = "sleep 1.5";
    let mut holder = env
        .farm([
            "claim",
            "job",
            "--heartbeat",
            "200ms",
            "--",
            "sh",
            "-c",
            script,
        ])
        .spawn();
    wait_for(&env.claim_path("job"));
    let first = std::fs::metadata(env.claim_path("job"))
        .unwrap()
        .modified()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(800));
    let later = std::fs::metadata(env.claim_path("job"))
        .unwrap()
        .modified()
        .unwrap();
    assert!(later > first, "mtime moved on: {first:?} -> {later:?}");
    assert!(holder.wait().unwrap().success());
}

#[test]
fn several_tasks_with_a_command_is_a_usage_error() {
    let env = Env::new();
    env.farm(["claim", "a", "b", "--", "true"])
        .run()
        .code(2)
        .stderr_has("exactly one task");
    assert!(!env.claims().exists());
}
