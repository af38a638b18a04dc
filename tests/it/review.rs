//! The review gate: a task with `review = true` whose session finishes does
//! not land; its change waits on the hub's branch `farm/review/<task>/<nonce>`
//! (nothing lost), the task waits on the board (no attempt counted, claim
//! released, `[notify]` told), a run left with only such tasks ends (exit
//! 6) naming the commands; `farm approve` lands the change at a farm's next
//! turn — no session, onto the branch as it is then, exactly once — and
//! `farm reject -m` counts an attempt whose note and rejected change the
//! next session's prompt holds.

use std::path::Path;
use std::time::Duration;

use crate::ask::{file_on_main, main_rev};
use crate::common::{Env, Farm, write_pid};
use crate::stop::{done, farm, git, hub};

/// The agent: saves its prompt as `logs/<TASK>.<n>.md`, notes in
/// `logs/rejected-work` the rejected change its prompt names if that is in
/// the clone, and commits `<TASK>.txt` ("work on <TASK>").
fn agent(env: &Env, logs: &Path) -> String {
    std::fs::create_dir_all(logs).unwrap();
    env.agent_script(
        "reviewed.sh",
        &format!(
            "set -e\nfor last; do :; done\nl='{l}'\n\
             n=$(ls \"$l\" | grep -c \"^$FARM_TASK\\.\" || true)\n\
             printf '%s\\n' \"$last\" > \"$l/$FARM_TASK.$n.md\"\n\
             b=$(printf '%s' \"$last\" | grep -o 'origin/farm/review/r/[0-9a-f]*' | head -1 || true)\n\
             if [ -n \"$b\" ] && git cat-file -e \"$b:r.txt\" 2>/dev/null; then echo \"$b\" > \"$l/rejected-work\"; fi\n\
             echo \"$FARM_TASK $n\" > \"$FARM_TASK.txt\"\ngit add -A\ngit commit -qm \"work on $FARM_TASK\"\n",
            l = logs.display()
        ),
    )
}

/// The hub's review branches of `task`.
fn review_branches(env: &Env, task: &str) -> Vec<String> {
    git(
        &env.hub,
        &[
            "for-each-ref",
            "--format=%(refname:short)",
            &format!("refs/heads/farm/review/{task}/"),
        ],
    )
    .lines()
    .map(str::to_owned)
    .collect()
}

/// How many commits on main say `work on <task>`.
fn landings(env: &Env, task: &str) -> usize {
    git(&env.hub, &["log", "main", "--format=%s"])
        .lines()
        .filter(|l| *l == format!("work on {task}"))
        .count()
}

/// A hub with `review = true` task `r`, task `other`, and `after-r` after
/// `r`; `[notify]` appends each notice to `notices`.
fn review_hub(env: &Env, notices: &Path) {
    hub(env, &["other"]);
    farm(env, ["task", "add", "r", "--review", "-m", "do r"])
        .run()
        .success();
    farm(
        env,
        ["task", "add", "after-r", "--after", "r", "-m", "then"],
    )
    .run()
    .success();
    let notifier = env.tmp.path().join("notify.sh");
    std::fs::write(
        &notifier,
        format!(
            "cat >> '{}'; echo >> '{}'\n",
            notices.display(),
            notices.display()
        ),
    )
    .unwrap();
    let path = env.hub.join("farm.toml");
    let text = std::fs::read_to_string(&path).unwrap();
    std::fs::write(
        &path,
        format!(
            "[notify]\ncommand = \"sh '{}'\"\n\n{text}",
            notifier.display()
        ),
    )
    .unwrap();
    env.git(["commit", "-qam", "notify"]);
}

/// The whole gate on one machine: waits (shown, notified, exit 6), bad
/// input refused writing nothing, approved, landed without a session onto
/// the branch as it is then, exactly once.
#[test]
fn a_change_waits_for_review_and_lands_once_approved() {
    let env = Env::new();
    let notices = env.tmp.path().join("notices.jsonl");
    review_hub(&env, &notices);
    let logs = env.tmp.path().join("logs");
    let agent = agent(&env, &logs);
    let out = farm(&env, ["run", "--agent", &agent, "-j", "2"]).run_within(Duration::from_secs(90));
    assert_eq!(out.code, Some(6), "{out:#?}");
    assert!(
        out.stderr
            .contains("1 change is waiting for review, nothing else to do (exit 6")
            && out
                .stderr
                .contains("farm approve r    or    farm reject r -m 'WHY'")
            && out
                .stderr
                .contains("`r`: its change waits for review on `farm/review/r/"),
        "{out:#?}"
    );
    assert!(done(&env, "other") && !done(&env, "r") && !done(&env, "after-r"));
    // On the board: waiting, no attempt counted, claim released; the change
    // on its branch, not on main.
    let r = file_on_main(&env, "tasks/r.md");
    let branches = review_branches(&env, "r");
    assert_eq!(branches.len(), 1, "{branches:?}");
    let change = &branches[0];
    assert!(
        r.contains(&format!("change = \"{change}\"")) && r.contains("review = true"),
        "{r}"
    );
    assert!(!r.contains("attempts ="), "no attempt counted: {r}");
    assert!(!env.claim_path("r").exists(), "the claim was released");
    assert_eq!(
        git(&env.hub, &["show", &format!("{change}:r.txt")]).trim(),
        "r 0"
    );
    assert_eq!(landings(&env, "r"), 0, "not landed before approval");
    // Told.
    let told = std::fs::read_to_string(&notices).unwrap_or_default();
    let notice = told
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .find(|n| n["event"] == "review_waiting")
        .unwrap_or_else(|| panic!("no review_waiting notice: {told}"));
    assert_eq!(notice["task"], "r", "{notice:#}");
    assert_eq!(notice["change"], change.as_str(), "{notice:#}");
    assert_eq!(notice["approve_with"], "farm approve r", "{notice:#}");
    // Shown.
    let tasks = farm(&env, ["tasks"]).run().success();
    assert!(
        tasks
            .stdout
            .lines()
            .any(|l| l.starts_with("r ") && l.contains("review") && l.contains(change.as_str())),
        "{tasks:#?}"
    );
    let status = farm(&env, ["status", "--json"]).run().success().json();
    assert_eq!(status["review"][0]["task"], "r", "{status:#}");
    assert_eq!(status["review"][0]["change"], change.as_str(), "{status:#}");
    assert_eq!(status["board"]["review"], 1, "{status:#}");
    let text = farm(&env, ["status"]).run().success();
    assert!(
        text.stdout
            .contains("waiting for review: `r`'s change on `farm/review/r/")
            && text.stdout.contains("review   `r`: its change waits on"),
        "{text:#?}"
    );

    // TAB offers the tasks that wait for review, and only those.
    let script = env.tmp.path().join("farm.bash");
    let completions = farm(&env, ["completions", "bash"]).run().success();
    std::fs::write(&script, &completions.stdout).unwrap();
    if let Some(ids) =
        crate::completion::offered(&env, "bash", &script, &["farm", "approve", ""], true)
    {
        let tasks: Vec<&String> = ids.iter().filter(|w| !w.starts_with('-')).collect();
        assert_eq!(tasks, ["r"], "farm approve <TAB>: {ids:?}");
    }

    // Bad input: refused, exit 2, nothing written.
    let before = main_rev(&env);
    for (args, said) in [
        (
            vec!["approve", "other"],
            "`other` is done, not waiting for review",
        ),
        (
            vec!["approve", "after-r"],
            "`after-r` is not waiting for review",
        ),
        (vec!["approve", "nope"], "no task `nope` on the board"),
        (
            vec!["reject", "nope", "-m", "x"],
            "no task `nope` on the board",
        ),
        (
            vec!["reject", "after-r", "-m", "x"],
            "`after-r` is not waiting for review",
        ),
        (vec!["reject", "r", "-m", " "], "the note is empty"),
    ] {
        let out = farm(&env, args.clone()).run().code(2);
        assert!(out.stderr.contains(said), "{args:?}: {out:#?}");
        assert!(
            out.stderr.contains("hint:") || said.contains("empty"),
            "{args:?}: {out:#?}"
        );
    }
    farm(&env, ["reject", "r"]).run().code(2);
    assert_eq!(main_rev(&env), before, "nothing written");

    // The branch moves on meanwhile: the change lands on top of it.
    std::fs::write(env.hub.join("later.txt"), "later\n").unwrap();
    env.git(["add", "later.txt"]);
    env.git(["commit", "-qm", "later"]);
    farm(&env, ["approve", "r"])
        .run()
        .success()
        .stdout_has("approved `r`");
    let out = farm(&env, ["approve", "r"]).run().code(2);
    assert!(out.stderr.contains("`r` is approved already"), "{out:#?}");
    let out = farm(&env, ["reject", "r", "-m", "late"]).run().code(2);
    assert!(out.stderr.contains("`r` is approved already"), "{out:#?}");
    let tasks = farm(&env, ["tasks"]).run().success();
    assert!(
        tasks.stdout.contains("approved: its change on"),
        "{tasks:#?}"
    );

    let out = farm(&env, ["run", "--agent", &agent]).run_within(Duration::from_secs(90));
    assert_eq!(out.code, Some(0), "{out:#?}");
    assert!(
        out.stderr.contains("landing its approved change from"),
        "{out:#?}"
    );
    assert!(done(&env, "r") && done(&env, "after-r"), "{out:#?}");
    assert!(!logs.join("r.1.md").exists(), "no second session on `r`");
    assert_eq!(file_on_main(&env, "r.txt").trim(), "r 0");
    assert_eq!(landings(&env, "r"), 1, "landed exactly once");
    // On top of the branch as it was then.
    let landed = git(
        &env.hub,
        &["log", "main", "--format=%H", "--grep", "^work on r$"],
    );
    let later = git(
        &env.hub,
        &["log", "main", "--format=%H", "--grep", "^later$"],
    );
    git(
        &env.hub,
        &["merge-base", "--is-ancestor", later.trim(), landed.trim()],
    );
    // Kept on its branch, too.
    assert_eq!(review_branches(&env, "r"), branches);
}

/// Rejected: an attempt counted with the reviewer's words, which the next
/// session's prompt holds with the rejected change (fetched into its
/// clone); the new change waits for review in turn.
#[test]
fn a_rejected_change_is_an_attempt_whose_note_and_change_the_next_prompt_holds() {
    let env = Env::new();
    let notices = env.tmp.path().join("notices.jsonl");
    review_hub(&env, &notices);
    let logs = env.tmp.path().join("logs");
    let agent = agent(&env, &logs);
    let out = farm(&env, ["run", "--agent", &agent]).run_within(Duration::from_secs(90));
    assert_eq!(out.code, Some(6), "{out:#?}");
    let first = review_branches(&env, "r");
    assert_eq!(first.len(), 1, "{first:?}");
    farm(&env, ["reject", "r", "-m", "Use tabs, not spaces."])
        .run()
        .success()
        .stdout_has("rejected `r`");
    let r = file_on_main(&env, "tasks/r.md");
    assert!(r.contains("attempts = 1") && !r.contains("change ="), "{r}");
    assert!(r.contains("## Attempt 1 — rejected in review by "), "{r}");
    let out = farm(&env, ["run", "--agent", &agent]).run_within(Duration::from_secs(90));
    assert_eq!(out.code, Some(6), "waits for review again: {out:#?}");
    let prompt = std::fs::read_to_string(logs.join("r.1.md")).unwrap();
    assert!(
        prompt.contains("Use tabs, not spaces.")
            && prompt.contains(&format!("`origin/{}`", first[0])),
        "{prompt}"
    );
    assert_eq!(
        std::fs::read_to_string(logs.join("rejected-work"))
            .unwrap()
            .trim(),
        format!("origin/{}", first[0]),
        "the rejected change is in the clone"
    );
    let second = review_branches(&env, "r");
    assert_eq!(second.len(), 2, "both changes kept: {second:?}");
    farm(&env, ["approve", "r"]).run().success();
    let out = farm(&env, ["run", "--agent", &agent]).run_within(Duration::from_secs(90));
    assert_eq!(out.code, Some(0), "{out:#?}");
    assert_eq!(
        file_on_main(&env, "r.txt").trim(),
        "r 1",
        "the approved one"
    );
    assert_eq!(landings(&env, "r"), 1);
}

/// Start `farm run` and write its pid where the hooks read it.
fn run_noting_pid(env: &Env, agent: &str, logs: &Path) -> std::process::Child {
    let child = farm(env, ["run", "--agent", agent]).spawn();
    write_pid(&logs.join("farm.pid"), child.id());
    child
}

/// The hub's post-receive hook SIGKILLs farm, once, when a pushed ref
/// matches `ref_glob` (a `case` pattern) and, if given, its new commit's
/// subject matches `subject` (grep).
fn kill_on_push(env: &Env, logs: &Path, ref_glob: &str, subject: &str) {
    let hook = env.hub.join(".git/hooks/post-receive");
    std::fs::write(
        &hook,
        format!(
            "#!/bin/sh\nl='{l}'\nwhile read old new ref; do\n\
             case \"$ref\" in {ref_glob})\n\
             if [ ! -e \"$l/killed\" ] && git log -1 --format=%s \"$new\" | grep -q '{subject}'; then\n\
               touch \"$l/killed\"; kill -9 $(cat \"$l/farm.pid\")\n\
             fi;;\nesac\ndone\n",
            l = logs.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&hook, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
}

/// Chaos moment: farm SIGKILLed once the change is on its review branch
/// and before the board says the task waits. Nothing is lost (the branch
/// keeps it), nothing lands: started again, farm runs the task afresh and
/// its new change waits for review; approved, it lands once.
#[test]
fn a_farm_killed_between_the_review_branch_and_the_board_loses_and_lands_nothing() {
    let env = Env::new();
    let notices = env.tmp.path().join("notices.jsonl");
    review_hub(&env, &notices);
    let logs = env.tmp.path().join("logs");
    let agent = agent(&env, &logs);
    kill_on_push(&env, &logs, "refs/heads/farm/review/*", ".");
    let killed = Farm::wait_within(run_noting_pid(&env, &agent, &logs), Duration::from_secs(60));
    assert!(logs.join("killed").exists(), "{killed:#?}");
    let r = file_on_main(&env, "tasks/r.md");
    assert!(!r.contains("change ="), "killed before the board edit: {r}");
    let kept = review_branches(&env, "r");
    assert_eq!(kept.len(), 1, "{kept:?}");
    assert_eq!(landings(&env, "r"), 0);
    let out = farm(&env, ["run", "--agent", &agent]).run_within(Duration::from_secs(90));
    assert_eq!(out.code, Some(6), "{killed:#?} {out:#?}");
    let r = file_on_main(&env, "tasks/r.md");
    assert!(
        r.contains("change = \"farm/review/r/") && !r.contains("attempts ="),
        "{r}"
    );
    let now = review_branches(&env, "r");
    assert!(
        now.contains(&kept[0]) && now.len() == 2,
        "nothing lost: {now:?}"
    );
    assert!(!env.claim_path("r").exists(), "{out:#?}");
    farm(&env, ["approve", "r"]).run().success();
    let out = farm(&env, ["run", "--agent", &agent]).run_within(Duration::from_secs(90));
    assert_eq!(out.code, Some(0), "{out:#?}");
    assert!(done(&env, "r") && done(&env, "after-r"), "{out:#?}");
    assert_eq!(landings(&env, "r"), 1, "landed exactly once");
}

/// Chaos moments: farm SIGKILLed once the board says the task waits (its
/// claim not released yet), and later once the approved change landed (the
/// claim not released either). Started again each time: the dead claim is
/// reaped; the task waits, no second session; then it is done, once.
#[test]
fn a_farm_killed_after_the_board_edit_or_after_landing_leaves_it_waiting_or_done_once() {
    let env = Env::new();
    let notices = env.tmp.path().join("notices.jsonl");
    review_hub(&env, &notices);
    let logs = env.tmp.path().join("logs");
    let agent = agent(&env, &logs);
    kill_on_push(&env, &logs, "refs/heads/main", "waits for review");
    let killed = Farm::wait_within(run_noting_pid(&env, &agent, &logs), Duration::from_secs(60));
    assert!(logs.join("killed").exists(), "{killed:#?}");
    let out = farm(&env, ["run", "--agent", &agent]).run_within(Duration::from_secs(90));
    assert_eq!(out.code, Some(6), "{killed:#?} {out:#?}");
    assert!(!logs.join("r.1.md").exists(), "no second session on `r`");
    assert_eq!(review_branches(&env, "r").len(), 1);
    farm(&env, ["approve", "r"]).run().success();
    std::fs::remove_file(logs.join("killed")).unwrap();
    kill_on_push(&env, &logs, "refs/heads/main", "`r` done");
    let killed = Farm::wait_within(run_noting_pid(&env, &agent, &logs), Duration::from_secs(60));
    assert!(logs.join("killed").exists(), "{killed:#?}");
    assert!(done(&env, "r"), "{killed:#?}");
    let out = farm(&env, ["run", "--agent", &agent]).run_within(Duration::from_secs(90));
    assert_eq!(out.code, Some(0), "{out:#?}");
    assert!(done(&env, "after-r"), "{out:#?}");
    assert_eq!(landings(&env, "r"), 1, "landed exactly once");
    assert!(!logs.join("r.1.md").exists(), "no second session on `r`");
}

/// Across machines, through a `git daemon` hub (the git store): `east`'s
/// session's change waits; a third machine sees it, refuses what does not
/// wait, approves it; `west` lands it.
#[test]
fn a_change_made_on_one_machine_is_approved_from_another_and_landed_on_a_third() {
    use crate::daemon::{Daemon, Machine};
    let files = [
        (
            "tasks/r.md",
            "+++\ntitle = \"R\"\nreview = true\n+++\ndo r\n",
        ),
        ("tasks/other.md", "+++\ntitle = \"Other\"\n+++\ndo other\n"),
    ];
    let daemon = Daemon::with_hub(&files);
    let script = daemon.base.path().join("agent.sh");
    std::fs::write(
        &script,
        "#!/bin/sh\nset -e\necho \"$FARM_TASK\" > \"$FARM_TASK.txt\"\ngit add -A\n\
         git commit -qm \"work on $FARM_TASK\"\n",
    )
    .unwrap();
    let agent = format!("sh '{}'", script.display());
    let (east, west) = (daemon.machine("east"), daemon.machine("west"));
    let admin = Machine::new("admin", &daemon.url());
    let out = east
        .farm(["run", "--agent", &agent, "--name", "east"])
        .run_within(Duration::from_secs(120));
    assert_eq!(out.code, Some(6), "{out:#?}");
    assert!(out.stderr.contains("farm approve r"), "{out:#?}");
    let tasks = admin.farm(["tasks", "--json"]).run().success().json();
    let r = tasks["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["id"] == "r")
        .cloned()
        .unwrap();
    assert_eq!(r["status"], "review", "{tasks:#}");
    let change = r["change"].as_str().unwrap().to_owned();
    assert!(change.starts_with("farm/review/r/"), "{r:#}");
    assert!(
        admin.locks()["claims"].as_array().unwrap().is_empty(),
        "claim released"
    );
    let out = admin.farm(["approve", "other"]).run().code(2);
    assert!(out.stderr.contains("not waiting for review"), "{out:#?}");
    admin.farm(["approve", "r"]).run().success();
    let out = west
        .farm(["run", "--agent", &agent, "--name", "west"])
        .run_within(Duration::from_secs(120));
    assert_eq!(out.code, Some(0), "{out:#?}");
    assert!(
        out.stderr.contains("landing its approved change"),
        "{out:#?}"
    );
    let hub = daemon.hub_dir();
    assert_eq!(git(&hub, &["show", "main:r.txt"]).trim(), "r");
    let landed = git(&hub, &["log", "main", "--format=%s"])
        .lines()
        .filter(|l| *l == "work on r")
        .count();
    assert_eq!(landed, 1, "landed exactly once");
    git(
        &hub,
        &["rev-parse", "--verify", &format!("refs/heads/{change}")],
    );
}

/// Approved is not landed whatever the tests say: an approved change that
/// turns a green test red is kept off the branch by the gate, a failed
/// attempt (here the last: to `tasks/failed/`), the change kept.
#[test]
fn an_approved_change_the_gate_finds_red_does_not_land() {
    use crate::run::{add_task, board, farm_run, show};
    let env = crate::steer::checked_project("");
    add_task(
        &env,
        &["breaks", "--review", "--max-attempts", "1", "-m", "Break a"],
    );
    let agent = env.agent_script(
        "breaker.sh",
        "echo 9 > src/a && git add -A && git commit -qm 'work on breaks'\n",
    );
    let out = farm_run(&env, &agent, &[]).code(6);
    assert!(out.stderr.contains("farm approve breaks"), "{out:#?}");
    env.farm_git(["approve", "breaks"]).run().success();
    let out = farm_run(&env, &agent, &[]).code(5);
    assert!(
        out.stderr.contains("landing its approved change"),
        "{out:#?}"
    );
    assert_eq!(board(&env, "tasks/failed"), ["breaks".to_owned()].into());
    assert_eq!(
        show(&env, "main:src/a").as_deref(),
        Some("1\n"),
        "not landed"
    );
    let note = show(&env, "main:tasks/failed/breaks.md").unwrap();
    assert!(
        note.contains("the tests:") && !note.contains("\nchange ="),
        "{note}"
    );
    let kept = env.git([
        "for-each-ref",
        "--format=%(refname:short)",
        "refs/heads/farm/review/breaks/",
    ]);
    assert_eq!(
        show(&env, &format!("{}:src/a", kept.trim())).as_deref(),
        Some("9\n"),
        "the change is kept"
    );
}

/// `--watch` does not end on a board of changes waiting for review: it
/// waits, and an approval given meanwhile brings the task back to an agent,
/// which lands it.
#[test]
fn a_watching_run_lands_a_change_approved_meanwhile() {
    let env = Env::new();
    let notices = env.tmp.path().join("notices.jsonl");
    review_hub(&env, &notices);
    let logs = env.tmp.path().join("logs");
    let agent = agent(&env, &logs);
    let run = farm(&env, ["run", "--agent", &agent, "--watch"]).spawn();
    let start = std::time::Instant::now();
    while !file_on_main(&env, "tasks/r.md").contains("\nchange =") {
        assert!(start.elapsed() < Duration::from_secs(60), "never waited");
        std::thread::sleep(Duration::from_millis(100));
    }
    farm(&env, ["approve", "r"]).run().success();
    while !(done(&env, "r") && done(&env, "after-r")) {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "never landed after the approval"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    crate::stop::signal(run.id(), libc::SIGTERM);
    let out = Farm::wait_within(run, Duration::from_secs(60));
    assert!(
        out.stderr.contains("landing its approved change"),
        "{out:#?}"
    );
    assert_eq!(landings(&env, "r"), 1);
}

/// An approved change that no longer applies onto the branch as it is
/// then is not resolved by a merge session (that would land unreviewed
/// work): a failed attempt, the review over, and a new session whose
/// change waits for review in turn.
#[test]
fn an_approved_change_that_conflicts_is_done_again_and_reviewed_again() {
    let env = Env::new();
    let notices = env.tmp.path().join("notices.jsonl");
    review_hub(&env, &notices);
    let logs = env.tmp.path().join("logs");
    let agent = agent(&env, &logs);
    let out = farm(&env, ["run", "--agent", &agent]).run_within(Duration::from_secs(90));
    assert_eq!(out.code, Some(6), "{out:#?}");
    std::fs::write(env.hub.join("r.txt"), "theirs\n").unwrap();
    env.git(["add", "r.txt"]);
    env.git(["commit", "-qm", "theirs"]);
    farm(&env, ["approve", "r"]).run().success();
    let out = farm(&env, ["run", "--agent", &agent]).run_within(Duration::from_secs(90));
    assert_eq!(out.code, Some(6), "reviewed again: {out:#?}");
    let r = file_on_main(&env, "tasks/r.md");
    assert!(
        r.contains("attempts = 1") && r.contains("no longer applies onto `main`"),
        "{r}"
    );
    assert!(
        r.contains("change = \"farm/review/r/") && !r.contains("approved ="),
        "{r}"
    );
    assert!(logs.join("r.1.md").exists(), "a new session");
    assert_eq!(file_on_main(&env, "r.txt"), "theirs\n", "nothing landed");
    assert_eq!(review_branches(&env, "r").len(), 2, "both changes kept");
}
