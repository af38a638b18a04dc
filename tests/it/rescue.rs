//! `farm rescue`: the work farm kept on rescue branches — listed with why,
//! shown, handed to a task's next session, dropped with a record — and the
//! next session of a task told where its earlier work is.

use crate::common::{Env, wait_for};
use crate::run::{add_task, farm_run, logs, rescue_branches, show};

/// An agent that commits `half-$FARM_ATTEMPT.txt` and fails (exit 3) on
/// the attempts given, and otherwise writes its prompt to `TMP/logs/prompt-N`,
/// merges the earlier work it was offered (the first `origin/farm/rescue/…`
/// its prompt names) and finishes.
fn agent(env: &Env, fail_on: &str) -> String {
    let logs = logs(env);
    env.agent_script(
        "agent.sh",
        &format!(
            r#"set -eu
printf '%s' "$1" > '{logs}/prompt-'"$FARM_ATTEMPT"
case " {fail_on} " in *" $FARM_ATTEMPT "*)
  echo "half of it" > "half-$FARM_ATTEMPT.txt"
  git add -A && git commit -q -m "half of $FARM_TASK"
  echo "cannot finish"
  exit 3;;
esac
ref=$(printf '%s' "$1" | grep -o 'origin/farm/rescue/[A-Za-z0-9._/-]*' | head -n 1 || true)
if [ -n "$ref" ]; then git merge -q --no-edit "$ref"; fi
echo rest > rest.txt
git add -A && git commit -q -m "the rest of $FARM_TASK"
"#,
            logs = logs.display()
        ),
    )
}

/// Regression: an interrupted session's work went to a rescue branch and
/// the next attempt's prompt said nothing of it, so it started over. (A
/// usage limit here: no attempt counted, no note on the board.)
#[test]
fn the_next_session_of_an_interrupted_task_is_told_where_its_work_is() {
    let env = Env::git_hub(&[]);
    add_task(&env, &["t", "-m", "Do it"]);
    let logs = logs(&env);
    let agent = env.agent_script(
        "limited.sh",
        &format!(
            r#"set -eu
n=$(ls '{logs}' | grep -c '^prompt-' || true)
printf '%s' "$1" > '{logs}/prompt-'"$n"
if [ "$n" = 0 ]; then
  echo first > first.txt && git add -A && git commit -q -m "first half"
  echo "Claude AI usage limit reached|$(( $(date +%s) + 1 ))"
  exit 1
fi
ref=$(printf '%s' "$1" | grep -o 'origin/farm/rescue/[A-Za-z0-9._/-]*' | head -n 1)
git merge -q --no-edit "$ref"
echo second > second.txt && git add -A && git commit -q -m "second half"
"#,
            logs = logs.display()
        ),
    );
    farm_run(&env, &agent, &[]).success();
    let first = std::fs::read_to_string(logs.join("prompt-0")).unwrap();
    assert!(!first.contains("origin/farm/rescue/"), "{first}");
    let second = std::fs::read_to_string(logs.join("prompt-1")).unwrap();
    let [branch] = &rescue_branches(&env, "t")[..] else {
        panic!("one rescue branch: {:?}", rescue_branches(&env, "t"));
    };
    assert!(
        second.contains("# Work of earlier attempts")
            && second.contains(&format!("`origin/{branch}`: 1 commit (\"first half\")"))
            && second.contains("git merge --no-edit"),
        "{second}"
    );
    // The work was started from: both halves landed, and no attempt counted.
    assert_eq!(show(&env, "main:first.txt").as_deref(), Some("first\n"));
    assert_eq!(show(&env, "main:second.txt").as_deref(), Some("second\n"));
    assert!(
        !show(&env, "main:tasks/done/t.md")
            .unwrap()
            .contains("## Attempt")
    );
}

#[test]
fn rescue_list_and_show_say_what_was_kept_and_why() {
    let env = Env::git_hub(&[]);
    add_task(&env, &["t", "--max-attempts", "1", "-m", "Do it"]);
    farm_run(&env, &agent(&env, "1"), &[]).code(5);
    let [branch] = &rescue_branches(&env, "t")[..] else {
        panic!("one rescue branch");
    };
    let nonce = branch.strip_prefix("farm/rescue/t/").unwrap();
    let state = env.tmp.path().join("state");
    let state = state.to_str().unwrap();

    let out = env
        .farm_git(["rescue", "list", "--state-dir", state])
        .run()
        .success();
    let line = out
        .stdout
        .lines()
        .find(|l| l.starts_with(&format!("t/{}", &nonce[..8])))
        .unwrap_or_else(|| panic!("{out:#?}"));
    assert!(
        line.contains(" ago") && line.contains("session failed with exit code 3"),
        "{line}"
    );
    let doc = env
        .farm_git(["rescue", "list", "--json", "--state-dir", state])
        .run()
        .success()
        .json();
    let r = &doc["rescues"][0];
    assert_eq!(r["branch"], branch.as_str(), "{doc:#}");
    assert_eq!(r["task"], "t");
    assert_eq!(r["ahead"], 1);
    assert_eq!(r["why"], "session failed with exit code 3");
    assert!(r["agent"].is_string() && r["when"].is_string(), "{doc:#}");
    // Without the journal (another machine's state dir), the board's note says why.
    let doc = env
        .farm_git(["rescue", "list", "--json", "--state-dir", "elsewhere"])
        .run()
        .success()
        .json();
    assert_eq!(
        doc["rescues"][0]["why"], "failed with exit code 3",
        "{doc:#}"
    );

    // A hub reached by URL reads the same (fetched into a scratch repository).
    let url = format!("file://{}", env.hub.display());
    let doc = env
        .farm_git([
            "rescue",
            "list",
            "--json",
            "--hub",
            &url,
            "--state-dir",
            state,
        ])
        .run()
        .success()
        .json();
    assert_eq!(doc["rescues"][0]["branch"], branch.as_str(), "{doc:#}");
    assert_eq!(doc["rescues"][0]["ahead"], 1, "{doc:#}");

    for name in ["t", branch.as_str(), &format!("t/{}", &nonce[..6])] {
        env.farm_git(["rescue", "show", name, "--state-dir", state])
            .run()
            .success()
            .stdout_has(&format!("rescue:  `{branch}`"))
            .stdout_has("half of t")
            .stdout_has("half-1.txt | 1 +");
    }
    let doc = env
        .farm_git(["rescue", "show", "t", "--json", "--state-dir", state])
        .run()
        .success()
        .json();
    assert_eq!(doc["log"][0]["subject"], "half of t", "{doc:#}");
    assert!(doc["diffstat"].as_str().unwrap().contains("half-1.txt"));
    env.farm_git(["rescue", "show", "nope"])
        .run()
        .code(2)
        .stderr_has("no rescue branch `nope` on the hub")
        .stderr_has("hint: list them: farm rescue list");
}

#[test]
fn rescue_apply_hands_the_work_to_the_tasks_next_session() {
    let env = Env::git_hub(&[]);
    add_task(&env, &["t", "--max-attempts", "1", "-m", "Do it"]);
    farm_run(&env, &agent(&env, "1"), &[]).code(5);
    let [branch] = &rescue_branches(&env, "t")[..] else {
        panic!("one rescue branch");
    };
    // A failed task has no next session: put it back first.
    let head = env.git(["rev-parse", "main"]);
    env.farm_git(["rescue", "apply", "t"])
        .run()
        .code(2)
        .stderr_has("`t` has failed")
        .stderr_has("farm task retry t");
    env.farm_git(["rescue", "apply", "nope"])
        .run()
        .code(2)
        .stderr_has("no rescue branch `nope`");
    assert_eq!(env.git(["rev-parse", "main"]), head, "nothing written");

    env.farm_git(["task", "retry", "t"]).run().success();
    env.farm_git(["rescue", "apply", "t"])
        .run()
        .success()
        .stdout_has(&format!(
            "`t`'s next session starts from `{branch}` (1 commit)"
        ));
    let text = show(&env, "main:tasks/t.md").unwrap();
    assert!(
        text.contains(&format!("- start from branch `{branch}`")),
        "{text}"
    );
    // Applied twice is applied once.
    env.farm_git(["rescue", "apply", "t"])
        .run()
        .success()
        .stdout_has("already");

    farm_run(&env, &agent(&env, ""), &[]).success();
    let prompt = std::fs::read_to_string(logs(&env).join("prompt-1")).unwrap();
    assert!(
        prompt.contains(&format!("`origin/{branch}`"))
            && prompt.contains("a person chose this one"),
        "{prompt}"
    );
    // The session started from it: the rescued commit landed with the rest.
    assert_eq!(
        show(&env, "main:half-1.txt").as_deref(),
        Some("half of it\n")
    );
    assert_eq!(show(&env, "main:rest.txt").as_deref(), Some("rest\n"));
}

#[test]
fn rescue_drop_keeps_a_record_and_says_what_to_do_when_the_hub_refuses_deletes() {
    let env = Env::git_hub(&[]);
    add_task(&env, &["t", "--max-attempts", "1", "-m", "Do it"]);
    farm_run(&env, &agent(&env, "1"), &[]).code(5);
    let [branch] = &rescue_branches(&env, "t")[..] else {
        panic!("one rescue branch");
    };
    let commit = env.git(["rev-parse", branch]);
    let record = format!(
        "refs/farm/dropped/{}",
        branch.strip_prefix("farm/rescue/").unwrap()
    );

    // farm init's hub refuses deletes by push: the branch stays, and farm
    // says how to remove it there.
    let out = env.farm_git(["rescue", "drop", "t"]).run().success();
    assert!(
        out.stderr
            .contains("the hub refuses deletes by push (receive.denyDeletes")
            && out.stderr.contains(&format!(
                "git -C {} update-ref -d refs/heads/{branch} {commit}",
                env.hub.display()
            )),
        "{out:#?}"
    );
    assert_eq!(env.git(["rev-parse", &record]), commit, "the record");
    assert_eq!(rescue_branches(&env, "t").len(), 1, "the branch stays");
    let listed = env.farm_git(["rescue", "list"]).run().success();
    assert!(listed.stdout.contains("no rescued work"), "{listed:#?}");
    let all = env
        .farm_git(["rescue", "list", "--all", "--json"])
        .run()
        .success()
        .json();
    assert_eq!(all["rescues"][0]["dropped"], true, "{all:#}");

    // Where the hub allows deletes, the branch goes; the record stays.
    env.git(["config", "receive.denyDeletes", "false"]);
    env.farm_git(["rescue", "drop", "t"])
        .run()
        .success()
        .stdout_has(&format!(
            "dropped `{branch}`; its commits are kept under {record}"
        ));
    assert!(rescue_branches(&env, "t").is_empty());
    assert_eq!(env.git(["rev-parse", &record]), commit);
    // And it can be brought back from the record, as farm said.
    env.git(["branch", branch, &record]);
    assert_eq!(env.git(["rev-parse", branch]), commit);
}

// --- farm rescue apply --land ------------------------------------------------

/// The hub's test command for the landing tests: each `tests/N.t` wants
/// `src/N` to hold its text. With `FARM_LAND_TEST_HANG` set, a tree that
/// has `src/c` (the rescue's) touches that file and hangs in the middle
/// of its tests, for a test to kill farm there.
const GATE: &str = r#"set -eu
if [ -n "${FARM_LAND_TEST_HANG:-}" ] && [ -f src/c ]; then
  touch "$FARM_LAND_TEST_HANG"
  sleep 20
fi
for t in tests/*.t; do
  n=${t#tests/}; n=${n%.t}
  read want < "$t"
  got=; [ -f "src/$n" ] && read got < "src/$n"
  if [ "$got" = "$want" ]; then echo "PASS: $n"; else echo "FAIL: $n: want $want got $got"; fi
done
"#;

/// A hub whose pushes go through [`GATE`], with task `t` pending.
fn gated() -> Env {
    let env = Env::git_hub(&[("gate.sh", GATE), ("tests/a.t", "1\n"), ("src/a", "1\n")]);
    let toml = env.hub.join("farm.toml");
    let mut text = std::fs::read_to_string(&toml).unwrap();
    text.push_str(
        "\n[tests]\ncommand = \"sh gate.sh\"\nformat = \"lines\"\nfailed = '^FAIL: (?P<name>\\S+): (?P<why>.*)$'\ntimeout = \"60s\"\n",
    );
    std::fs::write(&toml, text).unwrap();
    env.git(["commit", "-qam", "the gate"]);
    add_task(&env, &["t", "-m", "Do it"]);
    env
}

/// Put a rescue branch `farm/rescue/TASK/NONCE` on the hub: one commit on
/// top of `main` writing `files`; its name.
fn plant_rescue(env: &Env, task: &str, nonce: &str, files: &[(&str, &str)]) -> String {
    let branch = format!("farm/rescue/{task}/{nonce}");
    env.git(["checkout", "-q", "-b", &branch, "main"]);
    for (path, text) in files {
        let path = env.hub.join(path);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }
    env.git(["add", "-A"]);
    env.git(["commit", "-qm", &format!("half of {task}")]);
    env.git(["checkout", "-q", "main"]);
    branch
}

fn dropped_record(branch: &str) -> String {
    format!(
        "refs/farm/dropped/{}",
        branch.strip_prefix("farm/rescue/").unwrap()
    )
}

/// `--land` lands the rescue through the integration, once: the task keeps
/// its place and gets a note with the commit, the rescue is dropped, and a
/// second landing pushes nothing.
#[test]
fn rescue_land_lands_once_and_leaves_the_task_where_it_is() {
    let env = gated();
    let branch = plant_rescue(&env, "t", "0c1d2e3f", &[("src/c", "c\n")]);
    let out = env
        .farm_git(["rescue", "apply", "t", "--land"])
        .run()
        .success();
    // The commit that landed it, and the note on top.
    let landed = env.git(["rev-parse", "main~1"]);
    assert!(
        out.stdout
            .contains(&format!("landed `{branch}` on `main` at {}", &landed[..12])),
        "{out:#?}"
    );
    assert_eq!(
        show(&env, &format!("{landed}:src/c")).as_deref(),
        Some("c\n")
    );
    // Not done: the task is where it was, with a note naming the commit.
    let text = show(&env, "main:tasks/t.md").expect("still pending");
    assert!(
        text.contains(&format!(
            "- landed branch `{branch}`: on `main` at {landed}"
        )),
        "{text}"
    );
    assert!(show(&env, "main:tasks/done/t.md").is_none());
    // Dropped with its record; farm init's hub keeps the branch itself.
    assert_eq!(
        env.git(["rev-parse", &dropped_record(&branch)]),
        env.git(["rev-parse", &branch])
    );
    assert!(
        out.stderr.contains("the hub refuses deletes by push"),
        "{out:#?}"
    );
    let locks = env.farm_git(["locks", "--json"]).run().success().json();
    assert_eq!(locks["claims"], serde_json::json!([]), "{locks:#}");

    // Landed twice is landed once.
    let main = env.git(["rev-parse", "main"]);
    let doc = env
        .farm_git(["rescue", "apply", "t", "--land", "--json"])
        .run()
        .success()
        .json();
    assert_eq!(doc["landed"], true, "{doc:#}");
    assert_eq!(doc["already"], true, "{doc:#}");
    assert_eq!(env.git(["rev-parse", "main"]), main, "nothing pushed twice");
    let count = env.git(["log", "--oneline", "main", "--", "src/c"]);
    assert_eq!(count.lines().count(), 1, "{count}");
}

/// `--land --done` moves the task to done with the work, exactly once.
#[test]
fn rescue_land_done_finishes_the_task_once() {
    let env = gated();
    let branch = plant_rescue(&env, "t", "1a2b3c4d", &[("src/c", "c\n")]);
    env.git(["config", "receive.denyDeletes", "false"]);
    let doc = env
        .farm_git(["rescue", "apply", "t", "--land", "--done", "--json"])
        .run()
        .success()
        .json();
    assert_eq!(
        (
            &doc["landed"],
            &doc["already"],
            &doc["done"],
            &doc["dropped"]
        ),
        (
            &serde_json::json!(true),
            &serde_json::json!(false),
            &serde_json::json!(true),
            &serde_json::json!("deleted")
        ),
        "{doc:#}"
    );
    assert_eq!(doc["commit"], env.git(["rev-parse", "main~1"]).as_str());
    assert!(show(&env, "main:tasks/t.md").is_none());
    let done = show(&env, "main:tasks/done/t.md").expect("done");
    assert!(
        done.contains("## Result") && done.contains(&branch),
        "{done}"
    );
    assert!(
        rescue_branches(&env, "t").is_empty(),
        "the branch is deleted"
    );
    env.farm_git(["rescue", "apply", "t", "--land", "--done"])
        .run()
        .success()
        .stdout_has("already");
    let moves = env.git(["log", "--oneline", "main", "--", "tasks/done/t.md"]);
    assert_eq!(moves.lines().count(), 2, "moved once, noted once: {moves}");
}

/// A rescue that turns a test red lands nothing: the `ERROR:` lines are
/// said, the rescue and the branch stay as they were, the claim is let go.
#[test]
fn rescue_land_through_a_red_gate_lands_nothing() {
    let env = gated();
    let branch = plant_rescue(&env, "t", "5e6f7a8b", &[("src/a", "0\n")]);
    let (main, tip) = (
        env.git(["rev-parse", "main"]),
        env.git(["rev-parse", &branch]),
    );
    let out = env
        .farm_git(["rescue", "apply", "t", "--land"])
        .run()
        .code(1);
    assert!(
        out.stderr
            .contains(&format!("cannot land `{branch}`: the tests"))
            && out.stderr.contains("ERROR:")
            && out.stderr.contains("want 1 got 0")
            && out.stderr.contains("farm rescue apply t/5e6f7a8b"),
        "{out:#?}"
    );
    assert_eq!(env.git(["rev-parse", "main"]), main, "nothing landed");
    assert_eq!(env.git(["rev-parse", &branch]), tip, "the rescue is kept");
    assert!(!env.git_ok(["rev-parse", "--verify", "-q", &dropped_record(&branch)]));
    let locks = env.farm_git(["locks", "--json"]).run().success().json();
    assert_eq!(locks["claims"], serde_json::json!([]), "{locks:#}");
}

/// A conflict with the branch lands nothing and says how to go on.
#[test]
fn rescue_land_that_conflicts_lands_nothing_and_says_what_to_do() {
    let env = gated();
    let branch = plant_rescue(&env, "t", "9c0d1e2f", &[("src/c", "rescued\n")]);
    std::fs::write(env.hub.join("src/c"), "theirs\n").unwrap();
    env.git(["add", "-A"]);
    env.git(["commit", "-qm", "src/c meanwhile"]);
    let main = env.git(["rev-parse", "main"]);
    env.farm_git(["rescue", "apply", "t", "--land"])
        .run()
        .code(1)
        .stderr_has(&format!(
            "cannot land `{branch}`: it conflicts with `main` in src/c"
        ))
        .stderr_has("farm rescue apply t/9c0d1e2f");
    assert_eq!(env.git(["rev-parse", "main"]), main);
    assert_eq!(rescue_branches(&env, "t"), [branch]);
}

/// A task a live holder has is not landed on: exit 3, saying who.
#[test]
fn rescue_land_refuses_a_task_held_by_a_live_holder() {
    let env = gated();
    let branch = plant_rescue(&env, "t", "3a4b5c6d", &[("src/c", "c\n")]);
    env.farm_git(["claim", "t", "--agent", "bob"])
        .run()
        .success();
    let main = env.git(["rev-parse", "main"]);
    env.farm_git(["rescue", "apply", "t", "--land"])
        .run()
        .code(3)
        .stderr_has(&format!("cannot land `{branch}`: `t` is held by bob@"));
    assert_eq!(env.git(["rev-parse", "main"]), main);
    env.farm_git(["release", "t", "--agent", "bob"])
        .run()
        .success();
    env.farm_git(["rescue", "apply", "t", "--land"])
        .run()
        .success();
    assert_eq!(show(&env, "main:src/c").as_deref(), Some("c\n"));
}

/// Farm killed (SIGKILL) while the gate tests the rescue: the rescue is
/// intact, the claim is a dead one, and landing again takes it back and
/// lands the work.
#[test]
fn rescue_land_killed_mid_gate_loses_nothing_and_lands_when_run_again() {
    let env = gated();
    let branch = plant_rescue(&env, "t", "7e8f9a0b", &[("src/c", "c\n")]);
    let (main, tip) = (
        env.git(["rev-parse", "main"]),
        env.git(["rev-parse", &branch]),
    );
    let hang = env.tmp.path().join("hanging");
    let mut child = env
        .farm_git(["rescue", "apply", "t", "--land"])
        .env("FARM_LAND_TEST_HANG", &hang)
        .spawn();
    wait_for(&hang);
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    assert_eq!(env.git(["rev-parse", "main"]), main, "nothing landed");
    assert_eq!(env.git(["rev-parse", &branch]), tip, "the rescue is intact");
    let locks = env.farm_git(["locks", "--json"]).run().success().json();
    assert_eq!(locks["claims"][0]["task"], "t", "{locks:#}");
    assert_eq!(locks["claims"][0]["state"], "dead", "{locks:#}");

    env.farm_git(["rescue", "apply", "t", "--land"])
        .run()
        .success()
        .stderr_has("took back `t`'s claim")
        .stdout_has(&format!("landed `{branch}` on `main`"));
    assert_eq!(show(&env, "main:src/c").as_deref(), Some("c\n"));
    let count = env.git(["log", "--oneline", "main", "--", "src/c"]);
    assert_eq!(count.lines().count(), 1, "{count}");
}

/// A rescue branch whose session had moved its task to done (its tests
/// then turned red) lands without moving the task: it stays pending.
#[test]
fn rescue_land_without_done_leaves_a_task_its_rescue_moved_to_done() {
    let env = gated();
    let pending = show(&env, "main:tasks/t.md").unwrap();
    env.git(["checkout", "-q", "-b", "farm/rescue/t/2b3c4d5e", "main"]);
    std::fs::write(env.hub.join("src/c"), "c\n").unwrap();
    std::fs::create_dir_all(env.hub.join("tasks/done")).unwrap();
    std::fs::rename(env.hub.join("tasks/t.md"), env.hub.join("tasks/done/t.md")).unwrap();
    env.git(["add", "-A"]);
    env.git(["commit", "-qm", "farm: `t` done"]);
    env.git(["checkout", "-q", "main"]);
    env.farm_git(["rescue", "apply", "t", "--land"])
        .run()
        .success();
    assert_eq!(show(&env, "main:src/c").as_deref(), Some("c\n"));
    assert!(show(&env, "main:tasks/done/t.md").is_none());
    let text = show(&env, "main:tasks/t.md").expect("still pending");
    assert!(text.starts_with(pending.trim_end()), "{text}");
}

/// Through a `git daemon` hub (claims on the hub's claims branch): landed
/// once, through the gate, the branch deleted; a second landing says so.
#[test]
fn rescue_land_works_through_a_git_daemon_hub() {
    let toml = "[tests]\ncommand = \"sh gate.sh\"\nformat = \"lines\"\nfailed = '^FAIL: (?P<name>\\S+): (?P<why>.*)$'\ntimeout = \"60s\"\n";
    let daemon = crate::daemon::Daemon::with_hub(&[
        ("gate.sh", GATE),
        ("tests/a.t", "1\n"),
        ("src/a", "1\n"),
        ("farm.toml", toml),
        ("tasks/t.md", "+++\ntitle = \"Task t\"\n+++\nDo it\n"),
    ]);
    let hub = daemon.hub();
    let scratch = daemon.base.path().join("rescuer");
    hub.git([
        "clone".as_ref(),
        "-q".as_ref(),
        hub.dir.as_os_str(),
        scratch.as_os_str(),
    ]);
    let work = crate::daemon::Repo {
        dir: scratch.clone(),
        home: daemon.base.path().to_owned(),
    };
    std::fs::write(scratch.join("src/c"), "c\n").unwrap();
    work.git(["add", "-A"]);
    work.git(["commit", "-qm", "half of t"]);
    let branch = "farm/rescue/t/4d5e6f7a";
    work.git(["push", "-q", "origin", &format!("HEAD:refs/heads/{branch}")]);

    let machine = daemon.machine("box-1");
    let doc = machine
        .farm(["rescue", "apply", "t", "--land", "--json"])
        .run()
        .success()
        .json();
    assert_eq!(
        (&doc["landed"], &doc["already"]),
        (&true.into(), &false.into()),
        "{doc:#}"
    );
    assert_eq!(doc["dropped"], "deleted", "{doc:#}");
    let commit = doc["commit"].as_str().unwrap();
    assert!(hub.is_ancestor(commit, "main"));
    assert_eq!(hub.show("main:src/c").as_deref(), Some("c\n"));
    let text = hub.show("main:tasks/t.md").expect("still pending");
    assert!(
        text.contains(&format!(
            "- landed branch `{branch}`: on `main` at {commit}"
        )),
        "{text}"
    );
    assert!(!hub.git_ok([
        "rev-parse",
        "--verify",
        "-q",
        &format!("refs/heads/{branch}")
    ]));
    assert_eq!(machine.locks()["claims"], serde_json::json!([]));

    let main = hub.git(["rev-parse", "main"]);
    machine
        .farm(["rescue", "apply", "t", "--land"])
        .run()
        .success()
        .stdout_has("already");
    assert_eq!(hub.git(["rev-parse", "main"]), main, "nothing pushed twice");
}
