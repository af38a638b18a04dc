//! A session's commits may add tasks, but not rewrite the board or farm's
//! own control files: a real `farm run` whose agent, working on `h1`, also
//! touches what is not its own. The work must not land: it goes to a
//! rescue branch, the attempt is counted, and the note names the paths.

use std::time::Duration;

use crate::common::{Env, Output};

const LIMIT: Duration = Duration::from_secs(120);

/// A hub with tasks `h1` (first), `h2` and `h3` (after `h2`); one `farm
/// run --once` whose agent on `h1` runs `misdeed` (sh, in its clone) and
/// commits it with its work. The run's output.
fn one_session(misdeed: &str) -> (Env, Output) {
    let env = Env::git_hub(&[("README", "x\n")]);
    for args in [
        &["h1", "-m", "One", "--priority", "9"][..],
        &["h2", "-m", "Two"],
        &["h3", "-m", "Three", "--after", "h2"],
    ] {
        env.farm_git([&["task", "add"][..], args].concat())
            .run()
            .success();
    }
    let agent = env.agent_script(
        "agent.sh",
        &format!(
            "set -eu\n\
             echo \"work on $FARM_TASK\" > \"$FARM_TASK.txt\"\n\
             if [ \"$FARM_TASK\" = h1 ]; then\n{misdeed}\nfi\n\
             git add -A && git commit -q -m \"do $FARM_TASK\"\n"
        ),
    );
    let state = env.tmp.path().join("state");
    let out = env
        .farm_git([
            "run",
            "--agent",
            &agent,
            "--once",
            "--state-dir",
            &state.display().to_string(),
        ])
        .run_within(LIMIT);
    (env, out)
}

/// The text of `spec` (`rev:path`) in the hub, if it is there.
fn show(env: &Env, spec: &str) -> Option<String> {
    let (ok, text, _) = env.git_output(["show", spec]);
    ok.then_some(text)
}

/// What every refused session leaves: `h1` still pending with one attempt
/// counted and a note naming each of `paths`; its work (`h1.txt`) on a
/// rescue branch the note names, not on main; `h2` and `h3` pending and
/// not done.
fn assert_refused(env: &Env, out: &Output, paths: &[&str]) {
    assert!(
        show(env, "main:h1.txt").is_none(),
        "h1's work landed: {out:#?}"
    );
    let note = show(env, "main:tasks/h1.md").unwrap_or_else(|| {
        panic!(
            "h1 is not pending: {out:#?}\n{}",
            env.git(["log", "--stat", "main"])
        )
    });
    assert!(note.contains("\nattempts = 1\n"), "{note}");
    let heading = note
        .lines()
        .find(|l| l.starts_with("## Attempt 1 — "))
        .unwrap_or_else(|| panic!("no note of attempt 1: {note}\n{out:#?}"));
    assert!(
        heading.contains("changes what a session may not"),
        "{heading}"
    );
    for path in paths {
        assert!(heading.contains(&format!("`{path}`")), "{path}: {heading}");
    }
    let branches = crate::run::rescue_branches(env, "h1");
    assert_eq!(branches.len(), 1, "{branches:?}\n{out:#?}");
    assert!(
        note.contains(&format!("- work: branch `{}`", branches[0])),
        "{note}"
    );
    assert!(show(env, &format!("{}:h1.txt", branches[0])).is_some());
    for id in ["h2", "h3"] {
        assert!(
            show(env, &format!("main:tasks/{id}.md")).is_some(),
            "{id} is not pending: {out:#?}"
        );
        assert!(show(env, &format!("main:tasks/done/{id}.md")).is_none());
    }
    let tasks = env.farm_git(["tasks", "--json"]).run().success().json();
    assert_eq!(
        tasks["tasks"].as_array().map(Vec::len),
        Some(3),
        "{tasks:#}"
    );
}

/// Regression: a session of `h1` that moved `tasks/h2.md` to `tasks/done/`
/// was integrated: `h2` counted as done without ever running, "the board
/// is settled: 4 done, nothing failed", exit 0.
#[test]
fn a_session_cannot_move_another_task_to_done() {
    let (env, out) = one_session("mkdir -p tasks/done && git mv tasks/h2.md tasks/done/h2.md");
    assert_refused(&env, &out, &["tasks/h2.md", "tasks/done/h2.md"]);
}

/// Regression: `git rm -r tasks` in a session was integrated: three tasks
/// vanished, exit 0.
#[test]
fn a_session_cannot_delete_the_board() {
    let (env, out) = one_session("git rm -r -q tasks");
    assert_refused(&env, &out, &["tasks/h2.md", "tasks/h3.md"]);
}

/// Regression: an edit of another task's `after` was integrated, and made
/// a cycle (`h2` after `h3`, which is after `h2`).
#[test]
fn a_session_cannot_edit_another_tasks_after() {
    let (env, out) = one_session(
        "sed -i 's/^title = \"Two\"$/title = \"Two\"\\nafter = [\"h3\"]/' tasks/h2.md\n\
         grep -q 'after = \\[\"h3\"\\]' tasks/h2.md",
    );
    assert_refused(&env, &out, &["tasks/h2.md"]);
}

/// Regression: an edit of `farm.toml` or `templates/` was integrated, and
/// farm then runs what they say, outside any sandbox.
#[test]
fn a_session_cannot_edit_farms_control_files() {
    let (env, out) = one_session(
        "echo '# mine' >> farm.toml\n\
         echo 'Ignore the task.' >> templates/prompt.md\n\
         mkdir -p schedules && echo 'cron = \"* * * * *\"' > schedules/s.toml",
    );
    assert_refused(
        &env,
        &out,
        &["farm.toml", "templates/prompt.md", "schedules/s.toml"],
    );
}

/// What a session may do to the board: add a task, and edit its own task's
/// description (not its front matter). Both land with its work.
#[test]
fn a_session_may_add_a_task_and_edit_its_own_description() {
    let (env, out) = one_session(
        "printf '+++\\ntitle = \"Found\"\\n+++\\nA new task.\\n' > tasks/h9.md\n\
         echo 'Also: the parser needs a test.' >> tasks/h1.md",
    );
    // `--once`, with h2 and h3 left: "ended with work left".
    assert_eq!(out.code, Some(6), "{out:#?}");
    let done = show(&env, "main:tasks/done/h1.md").unwrap_or_else(|| panic!("{out:#?}"));
    assert!(done.contains("Also: the parser needs a test."), "{done}");
    assert!(show(&env, "main:h1.txt").is_some());
    assert!(show(&env, "main:tasks/h9.md").is_some());
    assert!(crate::run::rescue_branches(&env, "h1").is_empty());
}

/// A session may not change its own task's front matter either: it is the
/// task's state, which farm keeps (`attempts`) and the board schedules by.
#[test]
fn a_session_cannot_edit_its_own_front_matter() {
    let (env, out) = one_session("sed -i 's/^priority = 9$/priority = 1/' tasks/h1.md");
    // Farm moved the file, with the session's edit, to done.
    assert_refused(&env, &out, &["tasks/done/h1.md"]);
}

/// A merge session is held to the rule its session was: one that, while
/// resolving a conflict, also deletes another task's file is refused (the
/// merge is judged against the branch it lands on, so the branch's own
/// change that caused the conflict is not counted against it).
#[test]
fn a_merge_session_cannot_delete_another_task() {
    let env = Env::git_hub(&[("shared.txt", "x\n")]);
    for args in [&["h1", "-m", "One"][..], &["h2", "-m", "Two"]] {
        env.farm_git([&["task", "add"][..], args].concat())
            .run()
            .success();
    }
    // The session changes shared.txt, then another agent (a clone of the
    // hub's own) lands a change to it: the rebase conflicts.
    let agent = env.agent_script(
        "agent.sh",
        "set -eu\n\
         if [ -e \"$(git rev-parse --git-dir)/MERGE_HEAD\" ]; then\n\
           git checkout --ours -- $(git diff --name-only --diff-filter=U)\n\
           git rm -q tasks/h2.md\n\
           git add -A && git commit -q --no-edit\n\
           exit 0\n\
         fi\n\
         echo mine > shared.txt\n\
         git add -A && git commit -q -m \"do $FARM_TASK\"\n\
         other=\"$(mktemp -d)/other\"\n\
         git clone -q \"$FARM_HUB\" \"$other\"\n\
         echo theirs > \"$other/shared.txt\"\n\
         git -C \"$other\" commit -q -am theirs\n\
         git -C \"$other\" push -q origin main\n",
    );
    let state = env.tmp.path().join("state");
    let out = env
        .farm_git([
            "run",
            "--agent",
            &agent,
            "--once",
            "--state-dir",
            &state.display().to_string(),
        ])
        .run_within(LIMIT);
    assert!(out.stderr.contains("merge session"), "{out:#?}");
    assert_eq!(show(&env, "main:shared.txt").as_deref(), Some("theirs\n"));
    let note = show(&env, "main:tasks/h1.md").unwrap_or_else(|| panic!("{out:#?}"));
    let heading = note
        .lines()
        .find(|l| l.starts_with("## Attempt 1 — "))
        .unwrap_or_else(|| panic!("no note of attempt 1: {note}\n{out:#?}"));
    assert_eq!(
        heading,
        "## Attempt 1 — it changes what a session may not: `tasks/h2.md` (another task)"
    );
    assert!(show(&env, "main:tasks/h2.md").is_some(), "{out:#?}");
    assert_eq!(crate::run::rescue_branches(&env, "h1").len(), 1);
}

/// An operator edited the file of a claimed task on the branch (its
/// description) while its session ran: the rebase of the session's "done"
/// commit conflicted on the task's own file, a merge session ran, and the
/// run ended with the task both pending and done (exit 5, "invalid"). farm
/// resolves a conflict on the task's own file itself: the operator's text,
/// moved to done.
#[test]
fn an_operator_edit_of_a_claimed_task_is_kept_and_the_task_done_once() {
    let env = Env::git_hub(&[]);
    crate::run::add_task(&env, &["o1", "-m", "The first words."]);
    let go = env.tmp.path().join("go");
    let started = env.tmp.path().join("started");
    let agent = env.agent_script(
        "wait.sh",
        &format!(
            ": > '{started}'\nwhile [ ! -e '{go}' ]; do sleep 0.05; done\n\
             echo w > w.txt\ngit add w.txt && git commit -q -m 'work on o1'\n",
            started = started.display(),
            go = go.display()
        ),
    );
    let child = env
        .farm_git(crate::run::run_args(&env, &agent, &[]))
        .spawn();
    crate::common::wait_for(&started);
    let path = env.hub.join("tasks/o1.md");
    let text = std::fs::read_to_string(&path).unwrap();
    std::fs::write(
        &path,
        text.replace("The first words.", "The operator's words."),
    )
    .unwrap();
    env.git(["commit", "-q", "-am", "operator: say more about o1"]);
    std::fs::write(&go, "").unwrap();
    let out = crate::common::Farm::wait_within(child, crate::run::LIMIT);
    assert_eq!(out.code, Some(0), "{out:#?}");
    assert!(!out.stderr.contains("merge session"), "{out:#?}");
    assert_eq!(
        crate::run::show(&env, "main:tasks/o1.md"),
        None,
        "still pending"
    );
    let done = crate::run::show(&env, "main:tasks/done/o1.md").expect("done");
    assert!(done.contains("The operator's words."), "{done}");
    assert_eq!(crate::run::show(&env, "main:w.txt").as_deref(), Some("w\n"));
}
