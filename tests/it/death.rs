//! A holder killed with SIGKILL is dead at once; a live one is never reaped.

use std::time::{Duration, Instant};

use crate::common::{Env, race, running, wait_for};

/// SIGKILL the holder: its command dies with it, `farm locks` says dead on the
/// very first look, `farm reap` (no age) takes the claim, the task is free.
#[test]
fn sigkilled_holder_is_dead_at_once_and_reaped_without_an_age() {
    let env = Env::new();
    let pid_file = env.tmp.path().join("command.pid");
    let script = format!("echo $$ > {}; exec sleep 60", pid_file.display());
    let mut holder = env
        .farm([
            "claim", "job", "--agent", "carol", "--", "sh", "-c", &script,
        ])
        .spawn();
    wait_for(&pid_file);
    wait_for(&env.claim_path("job"));
    let before = env.farm(["locks", "--json"]).run().success().json();
    assert_eq!(before["claims"][0]["state"], "alive");
    assert_eq!(before["claims"][0]["pid"], holder.id());

    holder.kill().unwrap(); // SIGKILL: no clean-up code runs
    holder.wait().unwrap();
    let killed_at = Instant::now();
    let after = env.farm(["locks", "--json"]).run().success().json();
    assert_eq!(after["claims"][0]["state"], "dead", "{after:#}");
    assert_eq!(
        after["claims"][0]["reason"],
        format!("process {} is gone", holder.id())
    );
    eprintln!("seen dead {:?} after SIGKILL", killed_at.elapsed());

    // The command got the parent-death signal rather than running on unclaimed.
    let command: u32 = std::fs::read_to_string(&pid_file)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let start = Instant::now();
    while running(command) {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "command {command} outlived its holder"
        );
        std::thread::sleep(Duration::from_millis(10));
    }

    let reaped = env.farm(["reap", "--json"]).run().success().json();
    assert_eq!(reaped["reaped"][0]["task"], "job");
    assert_eq!(reaped["reaped"][0]["state"], "dead");
    assert!(!env.claim_path("job").exists());
    let tombs = env.tombstones();
    assert_eq!(tombs.len(), 1);
    assert!(
        tombs[0].contains("agent = \"carol\"") && tombs[0].contains("reason = \"process"),
        "{tombs:?}"
    );
    env.farm(["claim", "job", "--agent", "dave"])
        .run()
        .success();
}

/// A live holder is never reaped — not without an age, not with any age,
/// not when reapers race each other.
#[test]
fn live_holder_survives_racing_reapers() {
    let env = Env::new();
    let mut holder = env.farm(["claim", "busy", "--", "sleep", "60"]).spawn();
    wait_for(&env.claim_path("busy"));
    let text = std::fs::read_to_string(env.claim_path("busy")).unwrap();
    for round in 0..10 {
        let reapers = race(vec![
            env.farm(["reap"]),
            env.farm(["reap"]),
            env.farm(["reap", "--older-than", "1ms"]),
            env.farm(["reap", "--older-than", "0s"]),
        ]);
        for r in reapers {
            let out = r.wait_with_output().unwrap();
            assert!(out.status.success(), "round {round}: {out:?}");
            assert!(
                out.stdout.is_empty(),
                "round {round}: reaped something: {out:?}"
            );
        }
        assert_eq!(
            std::fs::read_to_string(env.claim_path("busy")).unwrap(),
            text,
            "round {round}"
        );
    }
    assert!(env.tombstones().is_empty());
    assert!(
        holder.try_wait().unwrap().is_none(),
        "the holder is still running"
    );
    holder.kill().unwrap();
    holder.wait().unwrap();
}

/// Several reapers race for the same dead claims: each claim is taken exactly
/// once, and exactly one tombstone is kept for it.
#[test]
fn racing_reapers_take_each_dead_claim_once() {
    let env = Env::new();
    for round in 0..20 {
        let tasks: Vec<String> = (0..5).map(|i| format!("dead-{round}-{i}")).collect();
        for t in &tasks {
            env.plant(
                &crate::common::dead_local_record(t),
                std::time::SystemTime::now(),
            );
        }
        let reapers = race((0..4).map(|_| env.farm(["reap", "--json"])).collect());
        let mut taken = Vec::new();
        for r in reapers {
            let out = r.wait_with_output().unwrap();
            assert!(out.status.success(), "{out:?}");
            let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
            for r in doc["reaped"].as_array().unwrap() {
                taken.push(r["task"].as_str().unwrap().to_owned());
            }
        }
        taken.sort();
        assert_eq!(
            taken, tasks,
            "round {round}: each dead claim reaped exactly once"
        );
    }
    assert_eq!(env.tombstones().len(), 100);
}
