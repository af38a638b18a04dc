//! The everyday edits of the board: `farm task edit`, `farm task note`,
//! `farm task add -m -` and `farm task add --from FILE`, each one commit on
//! the hub's branch — and bad input refused with exit 2, nothing written.

use std::time::Duration;

use crate::common::{Env, Output, record};
use crate::run::{add_task, farm_run, logs, show};

/// The hub's `main` commit.
fn head(env: &Env) -> String {
    env.git(["rev-parse", "main"])
}

/// Commit `text` as `path` on the hub's `main` (its work tree is `main`).
fn commit_file(env: &Env, path: &str, text: &str) {
    let file = env.hub.join(path);
    std::fs::create_dir_all(file.parent().unwrap()).unwrap();
    std::fs::write(file, text).unwrap();
    env.git(["add", "--", path]);
    env.git(["commit", "-q", "-m", "by hand", "--", path]);
}

/// Refused as bad usage, saying `says`, with nothing written to the hub.
#[track_caller]
fn refused(env: &Env, out: Output, says: &str, before: &str) {
    let out = out.code(2).stderr_has(says);
    assert!(out.stderr.contains("hint:"), "no hint: {out:#?}");
    assert_eq!(head(env), before, "something was written: {out:#?}");
}

#[test]
fn task_edit_changes_a_waiting_task_and_keeps_its_notes() {
    let env = Env::git_hub(&[]);
    add_task(&env, &["other", "-m", "Other"]);
    commit_file(
        &env,
        "tasks/t.md",
        "+++\ntitle = \"Old\"\nattempts = 1\n+++\nOld words.\n\n## Attempt 1 — failed with exit code 1\n\n- agent: a@h\n",
    );
    let before = head(&env);
    env.farm_git([
        "task",
        "edit",
        "t",
        "--title",
        "New",
        "-m",
        "New words.",
        "--priority",
        "4",
        "--after",
        "other",
        "--max-attempts",
        "5",
    ])
    .run()
    .success()
    .stdout_has("edited `t`: New");
    assert_eq!(
        env.git(["rev-list", "--count", &format!("{before}..main")]),
        "1"
    );
    let text = show(&env, "main:tasks/t.md").unwrap();
    for want in [
        "title = \"New\"",
        "after = [\"other\"]",
        "priority = 4",
        "max_attempts = 5",
        "attempts = 1",
        "\n+++\nNew words.\n\n## Attempt 1 — failed with exit code 1\n\n- agent: a@h\n",
    ] {
        assert!(text.contains(want), "{want:?} not in {text}");
    }
    assert!(!text.contains("Old words"), "{text}");
    env.farm_git(["task", "edit", "t", "--no-after"])
        .run()
        .success();
    assert!(!show(&env, "main:tasks/t.md").unwrap().contains("after"));
    // A description from stdin.
    env.farm_git(["task", "edit", "t", "-m", "-"])
        .run_with_stdin("From stdin.\n")
        .success();
    assert!(
        show(&env, "main:tasks/t.md")
            .unwrap()
            .contains("+++\nFrom stdin.\n\n## Attempt 1")
    );
}

#[test]
fn task_edit_refuses_bad_input_naming_the_fix_and_writes_nothing() {
    let env = Env::git_hub(&[]);
    commit_file(
        &env,
        "tasks/t.md",
        "+++\ntitle = \"T\"\nattempts = 2\n+++\nDo.\n",
    );
    add_task(&env, &["d", "-m", "D"]);
    let before = head(&env);
    let edit = |args: &[&str]| {
        let mut all = vec!["task", "edit"];
        all.extend(args);
        env.farm_git(all).run()
    };
    refused(
        &env,
        edit(&["nope", "--priority", "1"]),
        "no task `nope` on the board",
        &before,
    );
    refused(&env, edit(&["t"]), "nothing to change of `t`", &before);
    refused(
        &env,
        edit(&["t", "--after", "t"]),
        "invalid edit of `t`: `after` lists the task itself",
        &before,
    );
    refused(
        &env,
        edit(&["t", "--max-attempts", "2"]),
        "`t` has used 2 attempt(s): --max-attempts 2 would leave it none",
        &before,
    );
    refused(
        &env,
        edit(&["t", "--title", " "]),
        "invalid --title for `t`",
        &before,
    );
    // Only a waiting task: a failed one is put back first.
    commit_file(&env, "tasks/failed/f.md", "+++\ntitle = \"F\"\n+++\n");
    let before = head(&env);
    refused(
        &env,
        edit(&["f", "--priority", "1"]),
        "`f` has failed",
        &before,
    );
    let out = edit(&["f", "--priority", "1"]);
    assert!(out.stderr.contains("farm task retry f"), "{out:#?}");
}

/// Regression guard for the claim check: an edit while an agent holds the
/// task would not reach the session running, so it is refused, saying why,
/// unless --force.
#[test]
fn task_edit_of_a_claimed_task_is_refused_unless_forced() {
    let env = Env::git_hub(&[]);
    add_task(&env, &["t", "-m", "Do"]);
    env.plant(
        &record(
            "t",
            "alice",
            "box1",
            Duration::from_secs(60),
            Duration::ZERO,
        ),
        std::time::SystemTime::now(),
    );
    let before = head(&env);
    let out = env
        .farm_git(["task", "edit", "t", "--priority", "3"])
        .run()
        .code(3);
    assert!(
        out.stderr.contains("`t` is claimed by alice@box1")
            && out.stderr.contains("would not see the edit")
            && out.stderr.contains("--force"),
        "{out:#?}"
    );
    assert_eq!(head(&env), before);
    env.farm_git(["task", "edit", "t", "--priority", "3", "--force"])
        .run()
        .success()
        .stderr_has("the next one gets the edit");
    assert!(
        show(&env, "main:tasks/t.md")
            .unwrap()
            .contains("priority = 3")
    );
}

#[test]
fn task_note_reaches_the_next_sessions_prompt() {
    let env = Env::git_hub(&[]);
    add_task(&env, &["t", "-m", "Do it"]);
    env.farm_git(["task", "note", "t", "-m", "Look in src/lex.c first"])
        .run()
        .success()
        .stdout_has("noted on `t`");
    env.farm_git(["task", "note", "t", "-m", "-"])
        .run_with_stdin("And keep the AST types.\n")
        .success();
    let text = show(&env, "main:tasks/t.md").unwrap();
    assert!(
        text.contains("## Note from tester (") && text.contains("Look in src/lex.c first\n"),
        "{text}"
    );
    let logs = logs(&env);
    let agent = env.agent_script(
        "agent.sh",
        &format!("printf '%s' \"$1\" > '{}/prompt.txt'\n", logs.display()),
    );
    farm_run(&env, &agent, &[]).success();
    let prompt = std::fs::read_to_string(logs.join("prompt.txt")).unwrap();
    assert!(
        prompt.contains("Look in src/lex.c first") && prompt.contains("And keep the AST types."),
        "{prompt}"
    );
    // Bad input: an empty note, a task that is done; nothing written.
    let before = head(&env);
    refused(
        &env,
        env.farm_git(["task", "note", "t", "-m", " "]).run(),
        "the note for `t` is empty",
        &before,
    );
    refused(
        &env,
        env.farm_git(["task", "note", "t", "-m", "x"]).run(),
        "`t` is done",
        &before,
    );
}

#[test]
fn task_add_reads_its_description_from_stdin() {
    let env = Env::git_hub(&[]);
    env.farm_git(["task", "add", "t", "-m", "-"])
        .run_with_stdin("# Parse if\n\nThe grammar is in docs/.\n")
        .success()
        .stdout_has("added `t`: Parse if");
    let text = show(&env, "main:tasks/t.md").unwrap();
    assert!(
        text.ends_with("+++\n# Parse if\n\nThe grammar is in docs/.\n"),
        "{text}"
    );
}

#[test]
fn task_add_from_a_file_adds_every_task_in_one_commit_or_none() {
    let env = Env::git_hub(&[]);
    add_task(&env, &["old", "-m", "Old"]);
    let file = env.tmp.path().join("backlog.toml");
    std::fs::write(
        &file,
        "[[task]]\nid = \"lexer\"\ndescription = \"Write the lexer\"\n\n\
         [[task]]\nid = \"parse-if\"\ntitle = \"Parse if/else\"\nafter = [\"lexer\"]\npriority = 2\n\
         labels = [\"parser\"]\nmax_attempts = 4\ntimeout = \"20m\"\n",
    )
    .unwrap();
    let before = head(&env);
    env.farm_git(["task", "add", "--from", file.to_str().unwrap()])
        .run()
        .success()
        .stdout_has("added `lexer`: Write the lexer")
        .stdout_has("added `parse-if`: Parse if/else");
    assert_eq!(
        env.git(["rev-list", "--count", &format!("{before}..main")]),
        "1"
    );
    let text = show(&env, "main:tasks/parse-if.md").unwrap();
    for want in [
        "after = [\"lexer\"]",
        "priority = 2",
        "labels = [\"parser\"]",
        "max_attempts = 4",
        "timeout = \"20m\"",
    ] {
        assert!(text.contains(want), "{want} not in {text}");
    }
    // The same from stdin.
    env.farm_git(["task", "add", "--from", "-"])
        .run_with_stdin("[[task]]\nid = \"s\"\n")
        .success()
        .stdout_has("added `s`: s");

    // One bad task adds none; an id taken adds none.
    let before = head(&env);
    std::fs::write(
        &file,
        "[[task]]\nid = \"fine\"\n[[task]]\nid = \"bad/id\"\n",
    )
    .unwrap();
    let out = env
        .farm_git(["task", "add", "--from", file.to_str().unwrap()])
        .run();
    refused(&env, out, "task 2 (`bad/id`)", &before);
    std::fs::write(&file, "[[task]]\nid = \"fine\"\n[[task]]\nid = \"old\"\n").unwrap();
    let out = env
        .farm_git(["task", "add", "--from", file.to_str().unwrap()])
        .run();
    refused(
        &env,
        out,
        "task `old` already exists (on the board); no task was added",
        &before,
    );
    std::fs::write(&file, "[[task]]\nid = \"x\"\ntitel = \"typo\"\n").unwrap();
    let out = env
        .farm_git(["task", "add", "--from", file.to_str().unwrap()])
        .run();
    refused(&env, out, "is not a task file", &before);
    let out = env
        .farm_git(["task", "add", "--from", "/nonexistent/b.toml"])
        .run();
    refused(&env, out, "cannot read `/nonexistent/b.toml`", &before);
    assert!(show(&env, "main:tasks/fine.md").is_none());
}
