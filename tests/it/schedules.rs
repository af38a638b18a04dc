//! Schedules: occurrences become tasks on the board, exactly once across
//! farms, caught up after downtime. Time is the test clock
//! (`FARM_TEST_NOW`); the races are real processes.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::common::race;
use crate::daemon::{Daemon, Machine};

/// 2026-12-01T00:00Z plus `minutes`, RFC 3339.
fn at(minutes: i64) -> String {
    let t: jiff::Timestamp = "2026-12-01T00:00:00Z".parse().unwrap();
    (t + jiff::SignedDuration::from_mins(minutes)).to_string()
}

/// The occurrence stamp of minute `minutes`: `YYYYMMDDTHHMMZ`.
fn stamp(minutes: i64) -> String {
    at(minutes)
        .parse::<jiff::Timestamp>()
        .unwrap()
        .strftime("%Y%m%dT%H%MZ")
        .to_string()
}

/// `farm fire` on `machine` at minute `minutes` of the test clock.
fn fire(machine: &Machine, minutes: i64) -> crate::common::Farm {
    machine.farm(["fire"]).env("FARM_TEST_NOW", at(minutes))
}

/// How many commits on the hub's main added each task file.
fn additions(daemon: &Daemon) -> BTreeMap<String, usize> {
    let log = daemon.hub().git([
        "log",
        "main",
        "--diff-filter=A",
        "--name-only",
        "--format=",
        "--",
        "tasks",
    ]);
    let mut added = BTreeMap::new();
    for path in log.lines().filter(|l| !l.is_empty()) {
        let id = path.rsplit('/').next().unwrap().trim_end_matches(".md");
        *added.entry(id.to_owned()).or_insert(0) += 1;
    }
    added
}

/// Three farms, each with a state dir of its own, fire the same schedules
/// at the same moments of the test clock, racing; ten rounds, a hundred
/// minutes apart, drive 1,000 occurrences of an every-minute schedule and
/// 143 of an every-seven-minutes one. Each occurrence is on main exactly
/// once: none missing, none added twice.
fn three_farms_make_each_occurrence_once(through_daemon: bool) {
    let mut daemon = Daemon::new();
    let schedule = |cron: &str| {
        format!(
            "cron = \"{cron}\"\ntitle = \"T\"\ncatchup = \"all\"\noverlap = \"allow\"\ncreated = \"{}\"\n",
            at(0)
        )
    };
    daemon.make_hub(&[
        ("schedules/m.toml", &schedule("* * * * *")),
        ("schedules/s.toml", &schedule("*/7 * * * *")),
    ]);
    let url = if through_daemon {
        daemon.start();
        daemon.url()
    } else {
        daemon.hub_dir().display().to_string()
    };
    let farms: Vec<Machine> = ["one", "two", "three"]
        .iter()
        .map(|h| Machine::new(h, &url))
        .collect();
    let work = daemon.base.path().join("work");
    let hub = daemon.hub_dir().display().to_string();
    daemon
        .hub()
        .git(["clone", "-q", &hub, work.to_str().unwrap()]);
    let worker = crate::daemon::Repo {
        dir: work.clone(),
        home: daemon.base.path().to_owned(),
    };
    for round in 1..=10 {
        let racers = farms.iter().map(|m| fire(m, round * 100)).collect();
        for child in race(racers) {
            let out = child.wait_with_output().unwrap();
            assert!(
                out.status.success(),
                "round {round}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        // The agents' part: every task made so far is done, so that a farm
        // that made an occurrence again would add its file again.
        worker.git(["pull", "-q", "--ff-only"]);
        std::fs::create_dir_all(work.join("tasks/done")).unwrap();
        for entry in std::fs::read_dir(work.join("tasks")).unwrap().flatten() {
            let name = entry.file_name().into_string().unwrap();
            if name.ends_with(".md") {
                worker.git([
                    "mv",
                    &format!("tasks/{name}"),
                    &format!("tasks/done/{name}"),
                ]);
            }
        }
        worker.git(["commit", "-qm", &format!("done, round {round}")]);
        worker.git(["push", "-q", "origin", "HEAD:main"]);
    }
    let added = additions(&daemon);
    let twice: Vec<_> = added.iter().filter(|(_, n)| **n > 1).collect();
    assert!(twice.is_empty(), "added more than once: {twice:?}");
    let minutes: Vec<String> = (1..=1000).map(|m| format!("m-{}", stamp(m))).collect();
    let missing: Vec<_> = minutes
        .iter()
        .filter(|id| !added.contains_key(*id))
        .collect();
    assert!(
        missing.is_empty(),
        "{} occurrence(s) missing: {:?}",
        missing.len(),
        &missing[..missing.len().min(5)]
    );
    let sevens = added.keys().filter(|id| id.starts_with("s-")).count();
    // Minutes 1..=1000 of a day starting at 00:00 whose minute-of-hour is a multiple of 7.
    let want = (1..=1000).filter(|m| (m % 60) % 7 == 0).count();
    assert_eq!(sevens, want);
    assert_eq!(added.len(), 1000 + want, "nothing else was added");
}

#[test]
fn three_farms_on_a_shared_hub_make_each_occurrence_once() {
    three_farms_make_each_occurrence_once(false);
}

#[test]
fn three_farms_through_git_daemon_make_each_occurrence_once() {
    three_farms_make_each_occurrence_once(true);
}

/// While yesterday's occurrence is still on the board, today's is not made
/// (`overlap = "skip"`, the default), and the skip is in the journal. A
/// broken schedule file is named and skipped; the others fire. A one-shot
/// schedule goes in the commit that makes its task.
#[test]
fn skips_are_journaled_broken_files_skipped_and_one_shots_retired() {
    let daemon = Daemon::new();
    daemon.make_hub(&[
        (
            "schedules/daily.toml",
            "cron = \"0 9 * * *\"\ntitle = \"Daily\"\n",
        ),
        (
            "schedules/broken.toml",
            "cron = \"0 9 * *\"\ntitle = \"Broken\"\n",
        ),
        (
            "schedules/once.toml",
            &format!("at = \"{}\"\ntitle = \"Once\"\n", at(24 * 60 + 9 * 60)),
        ),
    ]);
    let machine = Machine::new("here", &daemon.hub_dir().display().to_string());
    let day1 = fire(&machine, 9 * 60).run();
    assert_eq!(day1.code, Some(0), "{day1:?}");
    assert!(
        day1.stdout.contains("made `daily-20261201T0900Z`"),
        "{day1:?}"
    );
    assert!(
        day1.stderr
            .contains("schedules/broken.toml is not a valid schedule")
            && day1.stderr.contains("4 field(s)"),
        "{day1:?}"
    );
    let day2 = fire(&machine, 24 * 60 + 9 * 60).run();
    assert_eq!(day2.code, Some(0), "{day2:?}");
    assert!(
        day2.stderr.contains(
            "skipped `daily-20261202T0900Z`: `daily-20261201T0900Z` is still on the board"
        ),
        "{day2:?}"
    );
    assert!(
        day2.stdout.contains("made `once-20261202T0900Z`"),
        "{day2:?}"
    );
    let hub = daemon.hub();
    assert!(hub.show("main:tasks/daily-20261202T0900Z.md").is_none());
    assert!(hub.show("main:tasks/once-20261202T0900Z.md").is_some());
    assert!(
        hub.show("main:schedules/once.toml").is_none(),
        "the one-shot is retired"
    );
    let journal = std::fs::read_to_string(machine.state_dir().join("journal.jsonl")).unwrap();
    assert!(
        journal
            .lines()
            .any(|l| l.contains("\"schedule_skip\"") && l.contains("daily-20261202T0900Z")),
        "{journal}"
    );
}

/// `farm schedule add`, `schedules`, `schedule next` and `schedule rm` on
/// a bare hub; bad input is a usage error (exit 2) naming the field, and
/// writes nothing.
#[test]
fn schedule_commands_add_list_preview_remove_and_refuse_bad_input() {
    let daemon = Daemon::new();
    daemon.make_hub(&[("README.md", "hub\n")]);
    let machine = Machine::new("here", &daemon.hub_dir().display().to_string());
    let farm = |args: &[&str]| {
        machine
            .farm(args)
            .env("FARM_TEST_NOW", "2026-12-01T08:00:00Z")
            .run()
    };
    let added = farm(&[
        "schedule",
        "add",
        "deps",
        "--cron",
        "0 9 * * 1-5",
        "--tz",
        "Europe/Berlin",
        "-m",
        "Bump the dependencies",
    ]);
    assert_eq!(added.code, Some(0), "{added:?}");
    assert!(
        added
            .stdout
            .contains("next 2026-12-02 09:00 CET (2026-12-02T08:00Z)"),
        "{added:?}"
    );
    let text = daemon.hub().show("main:schedules/deps.toml").unwrap();
    assert!(
        text.contains("cron = \"0 9 * * 1-5\"")
            && text.contains("created = \"2026-12-01T08:00:00Z\""),
        "{text}"
    );
    for (args, want) in [
        (vec!["--cron", "0 9 * *"], "4 field(s)"),
        (vec!["--cron", "0 9 * * *", "--tz", "Mars/Base"], "IANA"),
        (vec!["--at", "2026-11-01T00:00:00Z"], "in the past"),
        (vec!["--at", "tomorrow"], "RFC 3339"),
    ] {
        let mut argv = vec!["schedule", "add", "bad"];
        argv.extend(args);
        argv.extend(["-m", "x"]);
        let out = farm(&argv);
        assert_eq!(out.code, Some(2), "{argv:?}: {out:?}");
        assert!(
            out.stderr.contains(want),
            "{argv:?}: want {want:?}: {out:?}"
        );
    }
    let again = farm(&["schedule", "add", "deps", "--cron", "0 * * * *", "-m", "x"]);
    assert_eq!(again.code, Some(2), "{again:?}");
    assert!(again.stderr.contains("already exists"), "{again:?}");
    assert!(daemon.hub().show("main:schedules/bad.toml").is_none());

    let listed = machine
        .farm(["schedules", "--json"])
        .env("FARM_TEST_NOW", "2026-12-01T08:00:00Z")
        .run()
        .success()
        .json();
    let s = &listed["schedules"][0];
    assert_eq!(s["id"], "deps");
    assert_eq!(s["next_utc"], "2026-12-02T08:00:00Z");
    let next = farm(&["schedule", "next", "deps", "-n", "3"]);
    assert_eq!(
        next.stdout.lines().collect::<Vec<_>>(),
        [
            "2026-12-02 09:00 CET (2026-12-02T08:00Z)",
            "2026-12-03 09:00 CET (2026-12-03T08:00Z)",
            "2026-12-04 09:00 CET (2026-12-04T08:00Z)",
        ]
    );
    assert_eq!(farm(&["schedule", "rm", "deps"]).code, Some(0));
    assert!(daemon.hub().show("main:schedules/deps.toml").is_none());
    let gone = farm(&["schedule", "rm", "deps"]);
    assert_eq!(gone.code, Some(2));
    assert!(gone.stderr.contains("no schedule `deps`"), "{gone:?}");
}

/// `farm run` fires at start-up: the occurrence due now is made and worked
/// in the same run, and the firing is in the journal.
#[test]
fn farm_run_fires_at_start_up_and_works_the_occurrence() {
    let daemon = Daemon::new();
    let agent = daemon.base.path().join("agent.sh");
    std::fs::write(
        &agent,
        "#!/bin/sh\necho done > \"out-$FARM_TASK.txt\" && git add -A && git commit -qm \"work $FARM_TASK\"\n",
    )
    .unwrap();
    daemon.make_hub(&[(
        "schedules/daily.toml",
        "cron = \"0 9 * * *\"\ntitle = \"Daily\"\ncreated = \"2026-11-30T00:00:00Z\"\n",
    )]);
    let machine = Machine::new("here", &daemon.hub_dir().display().to_string());
    let out = machine
        .farm([
            "run",
            "--once",
            "--agent",
            &format!("sh {}", agent.display()),
        ])
        .env("FARM_TEST_NOW", "2026-12-01T09:00:30Z")
        .run_within(Duration::from_secs(120));
    assert_eq!(out.code, Some(0), "{out:?}");
    assert!(
        out.stderr.contains("schedules made daily-20261201T0900Z"),
        "{out:?}"
    );
    let hub = daemon.hub();
    assert!(
        hub.show("main:tasks/done/daily-20261201T0900Z.md")
            .is_some(),
        "{out:?}"
    );
    assert!(hub.show("main:out-daily-20261201T0900Z.txt").is_some());
    let journal = std::fs::read_to_string(machine.state_dir().join("journal.jsonl")).unwrap();
    assert!(journal.contains("\"schedule_fire\""), "{journal}");
}
