//! `farm rescue`: the work farm kept on rescue branches — listed with why,
//! shown, handed to a task's next session, dropped with a record — and the
//! next session of a task told where its earlier work is.

use crate::common::Env;
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
