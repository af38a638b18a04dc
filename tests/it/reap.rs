//! Reaping by age, and what a tombstone keeps.

use std::time::{Duration, SystemTime};

use crate::common::{Env, record};

const H: Duration = Duration::from_secs(3600);

#[test]
fn old_heartbeat_is_reaped_by_older_than_and_fresh_one_is_not() {
    let env = Env::new();
    let now = SystemTime::now();
    env.plant(&record("old", "bob", "box2", 5 * H, 3 * H), now - 3 * H);
    env.plant(
        &record("fresh", "alice", "box2", 5 * H, Duration::from_secs(5)),
        now,
    );

    // Without an age nothing from another host is ever reaped.
    let none = env.farm(["reap", "--json"]).run().success().json();
    assert_eq!(none["reaped"], serde_json::json!([]));

    let dry = env
        .farm(["reap", "--older-than", "2h", "--dry-run"])
        .run()
        .success();
    assert!(
        dry.stdout
            .starts_with("would reap `old` (held by bob@box2 (no holder process) for 5h): stale"),
        "{dry:?}"
    );
    assert!(env.claim_path("old").exists(), "a dry run changes nothing");

    let out = env.farm(["reap", "--older-than", "2h"]).run().success();
    assert_eq!(
        out.stdout,
        "reaped `old` (held by bob@box2 (no holder process) for 5h): stale: heartbeat 3h ago, older than 2h\n"
    );
    assert!(!env.claim_path("old").exists());
    assert!(env.claim_path("fresh").exists());
    let tombs = env.tombstones();
    assert_eq!(tombs.len(), 1);
    assert!(
        tombs[0].contains("[reaped]") && tombs[0].contains("older than 2h"),
        "{tombs:?}"
    );
    // The tombstone is still a readable record of who held what.
    let original: toml::Table = toml::from_str(&tombs[0]).unwrap();
    assert_eq!(original["agent"].as_str(), Some("bob"));
}

#[test]
fn a_recent_mtime_is_a_heartbeat_even_when_the_record_is_old() {
    let env = Env::new();
    env.plant(
        &record("beating", "bob", "box2", 5 * H, 3 * H),
        SystemTime::now(),
    );
    let out = env.farm(["reap", "--older-than", "2h"]).run().success();
    assert_eq!(out.stdout, "");
    assert!(env.claim_path("beating").exists());
}

#[test]
fn a_claim_made_by_hand_lives_until_it_goes_stale() {
    let env = Env::new();
    env.farm(["claim", "manual"]).run().success();
    env.farm(["reap"]).run().success();
    assert!(
        env.claim_path("manual").exists(),
        "no holder process is not proof of death"
    );
    let f = std::fs::File::options()
        .write(true)
        .open(env.claim_path("manual"))
        .unwrap();
    f.set_modified(SystemTime::now() - 3 * H).unwrap();
    let text = std::fs::read_to_string(env.claim_path("manual")).unwrap();
    let aged = text.replace(
        text.lines()
            .find(|l| l.starts_with("heartbeat_at"))
            .unwrap(),
        &format!(
            "heartbeat_at = \"{}\"",
            farm::claims::record::timestamp(SystemTime::now() - 3 * H)
        ),
    );
    std::fs::write(env.claim_path("manual"), aged).unwrap();
    f.set_modified(SystemTime::now() - 3 * H).unwrap();
    let locks = env.farm(["locks", "--json"]).run().success().json();
    assert_eq!(locks["claims"][0]["state"], "stale");
    env.farm(["reap", "--older-than", "2h"])
        .run()
        .success()
        .stdout_has("reaped `manual`");
}

/// Age the heartbeat of claim `task` (made by hand, no holder process) to
/// `age` ago.
fn age_heartbeat(env: &Env, task: &str, age: Duration) {
    let path = env.claim_path(task);
    let text = std::fs::read_to_string(&path).unwrap();
    let line = text
        .lines()
        .find(|l| l.starts_with("heartbeat_at"))
        .unwrap();
    let aged = text.replace(
        line,
        &format!(
            "heartbeat_at = \"{}\"",
            farm::claims::record::timestamp(SystemTime::now() - age)
        ),
    );
    std::fs::write(&path, aged).unwrap();
    let f = std::fs::File::options().write(true).open(&path).unwrap();
    f.set_modified(SystemTime::now() - age).unwrap();
}

/// Regression: `farm locks` judged staleness at 2h while `farm run` reaps at
/// 30m, so a claim a run would reap showed as alive. Both now use the same
/// threshold: farm.toml's `stale_after`, else 30m.
#[test]
fn locks_judge_staleness_as_the_run_does() {
    let env = Env::git_hub(&[]);
    env.farm_git(["claim", "manual"]).run().success();
    age_heartbeat(&env, "manual", Duration::from_secs(45 * 60));
    let locks = env.farm_git(["locks", "--json"]).run().success().json();
    assert_eq!(locks["stale_after_secs"], 1800, "{locks:#}");
    assert_eq!(locks["claims"][0]["state"], "stale", "{locks:#}");
    // farm.toml says an hour: then it is alive, for locks as for run.
    std::fs::write(env.hub.join("farm.toml"), "stale_after = \"1h\"\n").unwrap();
    env.git(["add", "farm.toml"]);
    env.git(["commit", "-q", "-m", "an hour"]);
    let locks = env.farm_git(["locks", "--json"]).run().success().json();
    assert_eq!(locks["stale_after_secs"], 3600, "{locks:#}");
    assert_eq!(locks["claims"][0]["state"], "alive", "{locks:#}");
    // The flag wins.
    let locks = env
        .farm_git(["locks", "--json", "--stale-after", "40m"])
        .run()
        .success()
        .json();
    assert_eq!(locks["claims"][0]["state"], "stale", "{locks:#}");
}

#[test]
fn corrupt_claims_are_reaped_by_age_only() {
    let env = Env::new();
    std::fs::create_dir(env.claims()).unwrap();
    for (name, bytes) in [
        ("empty", Vec::new()),
        ("huge", vec![b'x'; 10_000]),
        ("junk", b"\xff\xfe".to_vec()),
    ] {
        std::fs::write(env.claim_path(name), bytes).unwrap();
    }
    let locks = env.farm(["locks", "--json"]).run().success().json();
    let states: Vec<_> = locks["claims"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["state"].clone())
        .collect();
    assert_eq!(states, ["corrupt", "corrupt", "corrupt"]);
    env.farm(["reap"]).run().success();
    assert_eq!(env.tombstones().len(), 0);
    let out = env
        .farm(["reap", "--older-than", "0s", "--json"])
        .run()
        .success()
        .json();
    assert_eq!(out["reaped"].as_array().unwrap().len(), 3);
    assert_eq!(env.tombstones().len(), 3);
}

/// Guards against scratch piling up: a claimer or releaser killed between
/// its steps leaves a dot file that nothing else would ever remove.
#[test]
fn reap_removes_old_scratch_left_by_crashes_and_nothing_else() {
    let env = Env::new();
    std::fs::create_dir(env.claims()).unwrap();
    let old = SystemTime::now() - H;
    for name in [
        ".t.0011.tmp",
        ".t.0022.released",
        ".young.0033.tmp",
        "README.md",
        ".gitignore",
    ] {
        std::fs::write(env.claims().join(name), "x").unwrap();
        if !name.starts_with(".young") {
            std::fs::File::options()
                .write(true)
                .open(env.claims().join(name))
                .unwrap()
                .set_modified(old)
                .unwrap();
        }
    }
    env.farm(["reap", "--dry-run"]).run().success();
    assert_eq!(
        std::fs::read_dir(env.claims()).unwrap().count(),
        5,
        "a dry run removes nothing"
    );
    env.farm(["reap"]).run().success();
    let mut left: Vec<_> = std::fs::read_dir(env.claims())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    left.sort();
    assert_eq!(left, [".gitignore", ".young.0033.tmp", "README.md"]);
}

/// `farm reap --older-than 0s` through the git store, on a machine that
/// had never looked at the claims, reaped nothing and said "none older than
/// 0s" for a claim it had only just seen (claims from other hosts are aged
/// on this machine's clock). It says so, and when it can be reaped.
#[test]
fn a_claim_first_seen_by_this_reap_is_said_to_be_too_new_here() {
    let env = Env::git_hub(&[]);
    env.farm_git(["claim", "t1", "--claims", "git"])
        .run()
        .success();
    std::thread::sleep(Duration::from_millis(1100));
    let fresh = env.tmp.path().join("another-state");
    let first = env
        .farm_git(["reap", "--older-than", "0s", "--claims", "git"])
        .env("FARM_STATE_DIR", &fresh)
        .run()
        .success();
    assert!(
        first.stderr.contains("kept `t1`") && first.stderr.contains("first saw it"),
        "{first:?}"
    );
    assert!(
        first.stderr.contains("farm release t1 --force"),
        "{first:?}"
    );
    std::thread::sleep(Duration::from_millis(1100));
    let second = env
        .farm_git(["reap", "--older-than", "0s", "--claims", "git"])
        .env("FARM_STATE_DIR", &fresh)
        .run()
        .success();
    assert!(second.stdout.contains("reaped `t1`"), "{second:?}");
}

/// A machine whose clock runs 7 minutes behind claims a task: farm doctor
/// and farm status on a machine that saw the claim appear name that clock
/// (and the claim is not taken for stale, see the contract suite).
#[test]
fn doctor_and_status_name_a_host_whose_clock_is_off() {
    use farm::claims::ClaimStore;
    let env = Env::git_hub(&[]);
    env.farm_git(["locks", "--claims", "git"]).run().success();
    let there = farm::claims::git::GitStore::open(
        env.hub.to_str().unwrap(),
        &env.tmp.path().join("elsewhere/claims.git"),
    )
    .unwrap();
    let behind = SystemTime::now() - Duration::from_secs(420);
    let mut slow = farm::claims::record::Claim::new(
        farm::names::TaskId::parse("t1").unwrap(),
        "bob",
        None,
        1,
        behind,
    );
    slow.host = "box2".into();
    assert!(matches!(
        there.try_claim(slow, false).unwrap(),
        farm::claims::Attempt::Won(_)
    ));
    let status = env.farm_git(["status", "--claims", "git"]).run().success();
    assert!(
        status
            .stdout
            .contains("clock: the clock of `box2` runs about 7m behind"),
        "{status:?}"
    );
    let json = env
        .farm_git(["status", "--claims", "git", "--json"])
        .run()
        .success()
        .json();
    let secs = json["clocks_off_secs"]["box2"].as_i64().unwrap();
    assert!((-440..=-410).contains(&secs), "{json:#}");
    let doctor = env.farm_git(["doctor", "--claims", "git"]).run();
    assert!(doctor.stdout.contains("clocks"), "{doctor:?}");
    assert!(
        doctor.stdout.contains("`box2` runs about 7m behind"),
        "{doctor:?}"
    );
    let reap = env
        .farm_git(["reap", "--older-than", "2m", "--claims", "git"])
        .run()
        .success();
    assert!(!reap.stdout.contains("reaped"), "{reap:?}");
}
