//! The commands as a user meets them: output, exit codes, bad input.

use std::time::{Duration, SystemTime};

use crate::common::{Env, dead_local_record, record};

const H: Duration = Duration::from_secs(3600);
const M: Duration = Duration::from_secs(60);

#[test]
fn claim_then_claim_again_is_refused_with_who_holds_it() {
    let env = Env::new();
    let won = env
        .farm(["claim", "parse-if", "--agent", "alice"])
        .run()
        .success();
    assert!(
        won.stdout.starts_with("claimed `parse-if` as alice@"),
        "{won:?}"
    );
    let text = std::fs::read_to_string(env.claim_path("parse-if")).unwrap();
    assert!(text.contains("agent = \"alice\""), "{text}");
    assert!(
        !text.contains("pid ="),
        "a hand claim has no holder process: {text}"
    );

    let lost = env
        .farm(["claim", "parse-if", "--agent", "bob"])
        .run()
        .code(3);
    let host = &farm::claims::host::Here::current().host;
    let first = lost.stderr.lines().next().unwrap();
    assert_eq!(
        first,
        format!("error: cannot claim `parse-if`: held by alice@{host} (no holder process) for 0s")
    );
    // The safe way to take a claim back is named, not `release --force`.
    assert!(
        lost.stderr.contains("hint: wait for its release; "),
        "{lost:?}"
    );
    assert!(lost.stderr.contains("farm reap --older-than"), "{lost:?}");
    assert!(!lost.stderr.contains("--force"), "{lost:?}");
    // bob's attempt left the winner's record as it was.
    assert_eq!(
        std::fs::read_to_string(env.claim_path("parse-if")).unwrap(),
        text
    );
}

#[test]
fn claim_json_gives_the_nonce_to_release_with() {
    let env = Env::new();
    let out = env.farm(["claim", "t1", "--json"]).run().success();
    let nonce = out.json()["nonce"].as_str().unwrap().to_owned();
    env.farm([
        "release",
        "t1",
        "--agent",
        "someone-else",
        "--nonce",
        &nonce,
    ])
    .run()
    .success()
    .stdout_has("released `t1`");
    assert!(!env.claim_path("t1").exists());
}

#[test]
fn claim_several_reports_each_and_exits_3_if_any_was_held() {
    let env = Env::new();
    env.farm(["claim", "b", "--agent", "bob"]).run().success();
    let out = env
        .farm(["claim", "a", "b", "c", "--agent", "alice"])
        .run()
        .code(3);
    assert!(
        out.stdout.contains("claimed `a`") && out.stdout.contains("claimed `c`"),
        "{out:?}"
    );
    assert!(!out.stdout.contains("`b`"), "{out:?}");
    out.stderr_has("cannot claim `b`: held by bob@");
}

#[test]
fn locks_table_is_aligned_and_sorted() {
    let env = Env::new();
    env.plant(
        &record("parse-if", "alice", "box2", 3 * H, 10 * M),
        SystemTime::now() - 10 * M,
    );
    env.plant(
        &record("lexer", "bob", "box3", 5 * H, 3 * H),
        SystemTime::now() - 3 * H,
    );
    std::fs::write(env.claim_path("broken"), "not a claim").unwrap();
    let out = env.farm(["locks"]).run().success();
    let text = out
        .stdout
        .replace(&farm::claims::host::Here::current().host, "[HOST]");
    insta::assert_snapshot!(text, @r"
    TASK      AGENT  HOST  PID  AGE  HEARTBEAT  STATE    WHY
    broken    -      -     -    0s   -          corrupt  corrupt (not a claim record: key with no value, expected `=`), modified 0s ago
    lexer     bob    box3  -    5h   3h         stale    heartbeat 3h ago, older than 30m
    parse-if  alice  box2  -    3h   10m        alive
    ");
}

#[test]
fn locks_json_is_stable_for_scripts() {
    let env = Env::new();
    env.plant(&dead_local_record("gone"), SystemTime::now());
    let out = env.farm(["locks", "--json"]).run().success();
    let doc = out.json();
    assert_eq!(doc["store"], "fs");
    assert_eq!(doc["stale_after_secs"], 1800);
    let claim = &doc["claims"][0];
    let mut keys: Vec<_> = claim.as_object().unwrap().keys().cloned().collect();
    keys.sort();
    assert_eq!(
        keys,
        [
            "age_secs",
            "agent",
            "attempt",
            "boot_id",
            "claimed_at",
            "heartbeat_age_secs",
            "heartbeat_at",
            "host",
            "modified_at",
            "nonce",
            "pid",
            "pid_start",
            "reason",
            "state",
            "task"
        ]
    );
    assert_eq!(claim["state"], "dead");
    assert_eq!(claim["task"], "gone");
}

/// A listing of many claims keeps what it read (in
/// `current_tasks/.read-cache`), and the next one reads again exactly the
/// files that changed since — rewritten in place at the same size, or
/// removed and made again — whatever the cache file holds.
#[test]
fn locks_over_many_claims_reads_again_the_claims_that_changed() {
    let env = Env::new();
    let ids: Vec<String> = (0..300).map(|i| format!("t{i:03}")).collect();
    let mut claim = vec!["-q".to_owned(), "claim".to_owned()];
    claim.extend(ids.iter().cloned());
    env.farm(claim).run().success();
    // Reads of files changed in the last two seconds are not kept (see
    // read_cache.rs): let these settle first.
    std::thread::sleep(Duration::from_millis(2100));
    let nonces = || -> Vec<(String, String)> {
        let doc = env.farm(["locks", "--json"]).run().success().json();
        doc["claims"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| {
                (
                    c["task"].as_str().unwrap().to_owned(),
                    c["nonce"].to_string(),
                )
            })
            .collect()
    };
    let cold = nonces();
    assert_eq!(cold.len(), 300);
    let cache = env.claims().join(".read-cache");
    assert!(cache.is_file(), "a long listing keeps its reads");
    let differ = |got: Vec<(String, String)>, want: &[(String, String)]| -> Vec<String> {
        assert_eq!(got.len(), want.len());
        got.iter()
            .zip(want)
            .filter(|(g, w)| g != w)
            .map(|(g, w)| format!("{g:?}, expected {w:?}"))
            .collect()
    };
    assert_eq!(
        differ(nonces(), &cold),
        [] as [String; 0],
        "read from the cache"
    );

    // Another nonce of the same length: in place, and in a new file.
    let other = |task: &str| {
        let text = std::fs::read_to_string(env.claim_path(task)).unwrap();
        let (before, after) = text.split_once("nonce = \"").unwrap();
        let flipped = if after.starts_with('0') { '1' } else { '0' };
        format!("{before}nonce = \"{flipped}{}", &after[1..])
    };
    let t007 = other("t007");
    std::fs::write(env.claim_path("t007"), &t007).unwrap();
    let t008 = other("t008");
    std::fs::remove_file(env.claim_path("t008")).unwrap();
    std::fs::write(env.claim_path("t008"), &t008).unwrap();
    let mut expected = cold.clone();
    for (task, text) in [("t007", &t007), ("t008", &t008)] {
        let nonce = text
            .split("nonce = ")
            .nth(1)
            .unwrap()
            .lines()
            .next()
            .unwrap();
        let row = expected.iter_mut().find(|(t, _)| t == task).unwrap();
        assert_ne!(row.1, nonce);
        row.1 = nonce.to_owned();
    }
    assert_eq!(
        differ(nonces(), &expected),
        [] as [String; 0],
        "the two changed claims read again"
    );

    // A cache cut short, or of something else, is ignored.
    let whole = std::fs::read(&cache).unwrap();
    for bad in [&whole[..whole.len() / 2], b"not a cache".as_slice()] {
        std::fs::write(&cache, bad).unwrap();
        assert_eq!(differ(nonces(), &expected), [] as [String; 0]);
    }
}

#[test]
fn locks_on_an_empty_hub_says_so_and_creates_nothing() {
    let env = Env::new();
    let out = env.farm(["locks"]).run().success();
    assert_eq!(out.stdout, "");
    assert_eq!(
        env.normalize(&out.stderr),
        "no claims in [HUB]/current_tasks (fs store)\n"
    );
    assert!(!env.claims().exists());
    let json = env.farm(["locks", "--json"]).run().success().json();
    assert_eq!(json["claims"], serde_json::json!([]));
}

#[test]
fn release_refuses_someone_elses_claim_unless_forced() {
    let env = Env::new();
    env.farm(["claim", "t", "--agent", "alice"]).run().success();
    let out = env.farm(["release", "t", "--agent", "bob"]).run().code(3);
    out.stderr_has("cannot release `t`: held by alice@")
        .stderr_has("--force");
    assert!(env.claim_path("t").exists());

    env.farm(["release", "t", "--agent", "bob", "--force"])
        .run()
        .success()
        .stdout_has("released `t` by force (was held by alice@");
    assert!(!env.claim_path("t").exists());
    let tombs = env.tombstones();
    assert_eq!(tombs.len(), 1);
    assert!(
        tombs[0].contains("agent = \"alice\"") && tombs[0].contains("released by force by bob@"),
        "{tombs:?}"
    );
}

#[test]
fn release_of_nothing_exits_4() {
    let env = Env::new();
    env.farm(["release", "nothing"])
        .run()
        .code(4)
        .stderr_has("`nothing` is not claimed");
}

#[test]
fn release_refuses_a_claim_whose_holder_process_is_alive() {
    let env = Env::new();
    let mut holder = env
        .farm(["claim", "busy", "--agent", "tester", "--", "sleep", "30"])
        .spawn();
    crate::common::wait_for(&env.claim_path("busy"));
    let out = env.farm(["release", "busy"]).run().code(3);
    out.stderr_has(&format!("held by a live process (pid {})", holder.id()));
    assert!(env.claim_path("busy").exists());
    holder.kill().unwrap();
    holder.wait().unwrap();
}

#[test]
fn bad_task_ids_are_refused_with_the_rule_and_nothing_is_written() {
    let env = Env::new();
    for bad in ["../etc/passwd", "a/b", ".hidden", "a..b", "a b", ""] {
        let out = env.farm(["claim", bad]).run().code(2);
        out.stderr_has("invalid task id")
            .stderr_has("a task id is a letter or digit");
        env.farm(["release", bad]).run().code(2);
    }
    assert!(!env.claims().exists(), "nothing written");
}

#[test]
fn missing_hub_is_one_clear_line_and_a_hint() {
    let env = Env::new();
    let missing = env.tmp.path().join("no-such-hub");
    let out = env
        .farm(["claim", "t"])
        .env("FARM_HUB", &missing)
        .run()
        .code(2);
    assert_eq!(
        env.normalize(&out.stderr),
        "error: hub `[TMP]/no-such-hub` does not exist\n\
         hint: check the path given with --hub or FARM_HUB, or create a hub: git init --bare [TMP]/no-such-hub\n"
    );
    assert!(!missing.exists());
}

#[test]
fn no_hub_outside_a_repository() {
    let env = Env::new();
    let mut farm = env.farm(["locks"]);
    farm.cmd.env_remove("FARM_HUB");
    farm.run()
        .code(2)
        .stderr_has("is not inside a git repository")
        .stderr_has("--hub");
}

#[test]
fn bad_durations_are_refused() {
    let env = Env::new();
    env.farm(["reap", "--older-than", "2 fortnights"])
        .run()
        .code(2)
        .stderr_has("invalid duration `2 fortnights`")
        .stderr_has("90s, 10m, 2h or 1d");
    env.farm(["locks", "--stale-after", "soon"]).run().code(2);
    assert!(!env.claims().exists());
}

#[test]
fn a_planted_symlink_is_never_followed_or_written_through() {
    let env = Env::new();
    let target = env.tmp.path().join("precious");
    std::fs::write(&target, "keep me").unwrap();
    std::fs::create_dir(env.claims()).unwrap();
    std::os::unix::fs::symlink(&target, env.claim_path("t")).unwrap();

    env.farm(["claim", "t"])
        .run()
        .code(3)
        .stderr_has("corrupt claim file (a symlink");
    let locks = env.farm(["locks", "--json"]).run().success().json();
    assert_eq!(locks["claims"][0]["state"], "corrupt");
    env.farm(["release", "t"])
        .run()
        .code(1)
        .stderr_has("corrupt");
    env.farm(["reap"]).run().success();
    assert!(
        env.claim_path("t").is_symlink(),
        "a young corrupt entry is not reaped without an age"
    );
    env.farm(["reap", "--older-than", "0s"])
        .run()
        .success()
        .stdout_has("reaped `t`");
    assert!(!env.claim_path("t").exists() && !env.claim_path("t").is_symlink());
    assert_eq!(std::fs::read_to_string(&target).unwrap(), "keep me");
    env.farm(["claim", "t"]).run().success();
    assert_eq!(std::fs::read_to_string(&target).unwrap(), "keep me");
}

#[test]
fn current_tasks_as_a_symlink_or_a_file_is_refused() {
    let env = Env::new();
    let elsewhere = env.tmp.path().join("elsewhere");
    std::fs::create_dir(&elsewhere).unwrap();
    std::os::unix::fs::symlink(&elsewhere, env.claims()).unwrap();
    env.farm(["claim", "t"])
        .run()
        .code(1)
        .stderr_has("is a symlink");
    assert_eq!(std::fs::read_dir(&elsewhere).unwrap().count(), 0);

    std::fs::remove_file(env.claims()).unwrap();
    std::fs::write(env.claims(), "").unwrap();
    env.farm(["claim", "t"])
        .run()
        .code(1)
        .stderr_has("is not a directory")
        .stderr_has("hint:");
}

#[test]
fn an_unwritable_current_tasks_is_one_clear_error_and_nothing_written() {
    use std::os::unix::fs::PermissionsExt;
    let env = Env::new();
    std::fs::create_dir(env.claims()).unwrap();
    for dir in [env.tmp.path(), &env.hub, &env.claims()] {
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    // Root writes anywhere, so as root the test runs farm as `nobody`.
    let farm = if unsafe { libc::geteuid() } == 0 {
        let mut f = env.farm([
            "--hub".as_ref(),
            env.hub.as_os_str(),
            "claim".as_ref(),
            "t".as_ref(),
        ]);
        let args: Vec<_> = f.cmd.get_args().map(|a| a.to_owned()).collect();
        let mut cmd = std::process::Command::new("setpriv");
        cmd.args([
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            crate::common::FARM,
        ])
        .args(args);
        cmd.env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap())
            .env("NO_COLOR", "1");
        f.cmd = cmd;
        f
    } else {
        std::fs::set_permissions(env.claims(), std::fs::Permissions::from_mode(0o555)).unwrap();
        env.farm(["claim", "t"])
    };
    let out = farm.run().code(1);
    let err = env.normalize(&out.stderr);
    assert!(
        err.starts_with("error: cannot create a claim in `[HUB]/current_tasks`: Permission denied"),
        "{err}"
    );
    assert!(
        err.contains("hint: farm needs to create and rename files in `[HUB]/current_tasks`"),
        "{err}"
    );
    assert_eq!(err.lines().count(), 2, "{err}");
    assert_eq!(std::fs::read_dir(env.claims()).unwrap().count(), 0);
}

#[test]
fn help_has_examples() {
    let env = Env::new();
    let out = env.farm(["--help"]).run().success();
    out.stdout_has("farm claim parse-if -- make test")
        .stdout_has("Exit codes");
    for sub in ["claim", "release", "locks", "reap", "approve", "reject"] {
        env.farm([sub, "--help"])
            .run()
            .success()
            .stdout_has("Examples:");
    }
}

/// A manual page for farm and one per command.
#[test]
fn man_pages_for_farm_and_each_command() {
    let env = Env::new();
    let out = env.farm(["man"]).run().success();
    assert!(out.stdout.contains(".TH farm 1"), "{}", &out.stdout[..200]);
    assert!(out.stdout.contains("farm\\-run"), "the commands are listed");
    let dir = env.tmp.path().join("man1");
    env.farm(["man", "--dir", dir.to_str().unwrap()])
        .run()
        .success();
    for page in [
        "farm.1",
        "farm-run.1",
        "farm-reap.1",
        "farm-tests.1",
        "farm-approve.1",
        "farm-reject.1",
    ] {
        let text = std::fs::read_to_string(dir.join(page)).unwrap();
        assert!(text.contains(".SH NAME"), "{page}");
    }
    let run = std::fs::read_to_string(dir.join("farm-run.1")).unwrap();
    assert!(
        run.contains(".TH farm\\-run 1") || run.contains(".TH farm-run 1"),
        "{}",
        &run[..300]
    );
    assert!(run.contains("steer"), "farm-run.1 documents its flags");
    assert!(
        !dir.join("farm-demo-agent.1").exists(),
        "hidden commands have none"
    );
}

/// The commands with subcommands, and the demo, show examples in their
/// `--help` (they once showed none).
#[test]
fn help_of_task_schedule_rescue_and_demo_has_examples() {
    let env = Env::new();
    for (cmd, example) in [
        ("task", "farm task add lexer"),
        ("schedule", "farm schedule add deps --cron"),
        ("rescue", "farm rescue list"),
        ("demo", "farm demo --keep"),
    ] {
        env.farm([cmd, "--help"])
            .run()
            .success()
            .stdout_has("Examples:")
            .stdout_has(example);
    }
    env.farm(["rescue", "apply", "--help"])
        .run()
        .success()
        .stdout_has("farm rescue apply parse-if --land")
        .stdout_has("--land --done");
}

/// Regression: `farm-task.1` referred to `farm-task-add(1)`, and no such
/// page was written: every page a page refers to is written, nested
/// subcommands (and the `help` ones) included.
#[test]
fn man_pages_are_written_for_every_page_referred_to() {
    let env = Env::new();
    let dir = env.tmp.path().join("man1");
    env.farm(["man", "--dir", dir.to_str().unwrap()])
        .run()
        .success();
    let mut referred = std::collections::BTreeSet::new();
    for entry in std::fs::read_dir(&dir).unwrap() {
        let text = std::fs::read_to_string(entry.unwrap().path()).unwrap();
        for (at, _) in text.match_indices("(1)") {
            let start = text[..at]
                .rfind(|c: char| c.is_whitespace() || c == '>')
                .map_or(0, |i| i + 1);
            let name = text[start..at].replace("\\-", "-").replace("\\fB", "");
            if name.starts_with("farm") {
                referred.insert(name);
            }
        }
    }
    for page in [
        "farm-task-add",
        "farm-task-edit",
        "farm-schedule-add",
        "farm-rescue-drop",
    ] {
        assert!(
            referred.contains(page),
            "{page} is referred to: {referred:?}"
        );
    }
    for page in &referred {
        assert!(
            dir.join(format!("{page}.1")).is_file(),
            "{page}.1 is referred to and not written"
        );
    }
    let add = std::fs::read_to_string(dir.join("farm-task-add.1")).unwrap();
    assert!(add.contains(".SH NAME") && add.contains("from"), "{add}");
}

/// `run --help` lists the global flags apart from run's own, and says the
/// defaults of -j, --timeout and --stale-after.
#[test]
fn run_help_groups_global_flags_and_shows_defaults() {
    let env = Env::new();
    let help = env.farm(["run", "--help"]).run().success().stdout;
    let global = help
        .find("Global options:")
        .unwrap_or_else(|| panic!("{help}"));
    let own = help.find("--max-sessions").unwrap();
    assert!(own < global, "run's own flags come first: {help}");
    assert!(help[global..].contains("--hub"), "{help}");
    assert!(!help[..global].contains("--state-dir"), "{help}");
    for default in ["[default: 1,", "[default: 60m,", "[default: 30m,"] {
        assert!(help.contains(default), "{default}: {help}");
    }
}

/// Regression: `farm demo` ended on its last command's output, saying
/// neither what to do next nor where its report went (removed with the
/// scratch hub). It ends with the commands to start on a repository of
/// one's own, and that `--keep` keeps the hub and its report.
#[test]
fn the_demo_ends_saying_what_to_do_next() {
    let env = Env::new();
    let out = env
        .farm(["demo"])
        .env("TMPDIR", env.tmp.path())
        .run_within(Duration::from_secs(120))
        .success();
    let end: Vec<&str> = out.stderr.lines().rev().take(12).collect();
    let end = end.join("\n");
    for words in ["farm init", "farm task add", "farm run --agent", "--keep"] {
        assert!(
            end.contains(words),
            "no `{words}` at the end:\n{}",
            out.stderr
        );
    }
}

/// Regression: after `cargo install --path .` the overnight wrapper
/// `loop.sh` the README runs was nowhere on the machine. farm prints it,
/// the very script of its source tree.
#[test]
fn farm_prints_the_overnight_wrapper() {
    let env = Env::new();
    let out = env.farm(["loop-script"]).run().success();
    assert_eq!(out.stdout, include_str!("../../loop.sh"));
}

/// The exit codes the help texts give agree with docs/commands.md: `farm
/// --help` left out 130, `farm run --help` gave none but 130, and `farm
/// loop-script --help` left out 5 among the exits the wrapper stops on.
#[test]
fn help_texts_give_the_exit_codes_the_docs_give() {
    let docs =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/commands.md")).unwrap();
    let section = docs.split("## Exit codes").nth(1).unwrap();
    let codes: Vec<&str> = section
        .lines()
        .filter_map(|l| l.strip_prefix("- ")?.split_whitespace().next())
        .take_while(|c| c.parse::<u8>().is_ok())
        .collect();
    assert_eq!(codes, ["0", "1", "2", "3", "4", "5", "6", "130"]);
    let env = Env::new();
    let top = env.farm(["--help"]).run().success().stdout;
    let line = top[top.find("Exit codes").unwrap()..].replace('\n', " ");
    for code in &codes {
        assert!(
            line.contains(&format!(" {code} ")),
            "`farm --help` lacks {code}: {line}"
        );
    }
    let run = env.farm(["run", "--help"]).run().success().stdout;
    for want in [
        "0 every task done",
        "5 settled",
        "6 work left",
        "130 stopped",
        "1 an agent loop failed",
    ] {
        assert!(
            run.contains(want),
            "`farm run --help` lacks {want:?}: {run}"
        );
    }
    let stop = env.farm(["stop", "--help"]).run().success().stdout;
    assert!(stop.contains("exits 6, work left"), "{stop}");
    assert!(!stop.contains("exits 0"), "{stop}");
    let wrapper = env.farm(["loop-script", "--help"]).run().success().stdout;
    for code in ["0", "5", "6", "130", "2"] {
        assert!(
            wrapper.contains(&format!("({code})")),
            "`farm loop-script --help` lacks {code}: {wrapper}"
        );
    }
}
