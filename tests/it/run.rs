//! `farm run` end to end: the real binary on a git hub made by `farm init`,
//! with fake agents — small `sh` scripts — that work, fail, hang, tamper with
//! claims, leave a mess or conflict, on cue. Each script logs what it did to
//! files outside the repository (`TMP/logs/`), so that the tests can check
//! what farm made of it against what really happened.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use crate::common::{Env, Output, read_pid, running, wait_for};

/// No run here takes more than a few seconds; a hung one fails the test.
pub(crate) const LIMIT: Duration = Duration::from_secs(120);

/// `farm run --agent AGENT --state-dir TMP/state ARGS...`, bounded by [`LIMIT`].
pub(crate) fn farm_run(env: &Env, agent: &str, args: &[&str]) -> Output {
    env.farm_git(run_args(env, agent, args)).run_within(LIMIT)
}

pub(crate) fn run_args(env: &Env, agent: &str, args: &[&str]) -> Vec<String> {
    let state = env.tmp.path().join("state");
    let mut all = vec![
        "run".to_owned(),
        "--agent".to_owned(),
        agent.to_owned(),
        "--state-dir".to_owned(),
        state.display().to_string(),
    ];
    all.extend(args.iter().map(|a| (*a).to_owned()));
    all
}

/// `farm status --json` on the state dir of [`run_args`].
pub(crate) fn status_json(env: &Env) -> serde_json::Value {
    let state = env.tmp.path().join("state");
    env.farm_git(["status", "--json", "--state-dir", state.to_str().unwrap()])
        .run()
        .success()
        .json()
}

/// `farm status` on the state dir of [`run_args`], as text.
pub(crate) fn status_text(env: &Env) -> String {
    let state = env.tmp.path().join("state");
    env.farm_git(["status", "--state-dir", state.to_str().unwrap()])
        .run()
        .success()
        .stdout
}

/// The directory the fake agents log to, outside the repository.
pub(crate) fn logs(env: &Env) -> PathBuf {
    let dir = env.tmp.path().join("logs");
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// The lines of one agent log (none if it was never written).
pub(crate) fn log_lines(env: &Env, name: &str) -> Vec<String> {
    std::fs::read_to_string(logs(env).join(name))
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect()
}

/// The task ids with a file in `dir` (`tasks`, `tasks/done`, `tasks/failed`) on main.
pub(crate) fn board(env: &Env, dir: &str) -> BTreeSet<String> {
    env.git(["ls-tree", "--name-only", "main", &format!("{dir}/")])
        .lines()
        .filter_map(|p| p.strip_prefix(&format!("{dir}/"))?.strip_suffix(".md"))
        .filter(|n| *n != "README")
        .map(str::to_owned)
        .collect()
}

/// A file's text at a revision (`main:path`), if it is there.
pub(crate) fn show(env: &Env, spec: &str) -> Option<String> {
    let (ok, text, _) = env.git_output(["show", spec]);
    ok.then_some(text)
}

/// The hub's `farm/rescue/<task>/*` branches.
pub(crate) fn rescue_branches(env: &Env, task: &str) -> Vec<String> {
    env.git([
        "for-each-ref",
        "--format=%(refname:short)",
        &format!("refs/heads/farm/rescue/{task}/"),
    ])
    .lines()
    .map(str::to_owned)
    .collect()
}

/// Is `commit` an ancestor of (or equal to) `rev` in the hub?
fn is_ancestor(env: &Env, commit: &str, rev: &str) -> bool {
    env.git_ok(["merge-base", "--is-ancestor", commit, rev])
}

/// The state every run must leave behind: no claim, a sound repository, a
/// clean work tree.
#[track_caller]
pub(crate) fn assert_hub_sound(env: &Env) {
    let locks = env.farm_git(["locks", "--json"]).run().success().json();
    assert_eq!(
        locks["claims"],
        serde_json::json!([]),
        "claims left: {locks:#}"
    );
    let (ok, out, err) = env.git_output(["fsck", "--no-dangling", "--no-progress"]);
    assert!(
        ok && !out.contains("error") && !err.contains("error"),
        "git fsck: {out}{err}"
    );
    assert_eq!(
        env.git(["status", "--porcelain", "--untracked-files=all"]),
        "",
        "the hub's work tree is not clean"
    );
}

/// `farm task add ARGS...`.
pub(crate) fn add_task(env: &Env, args: &[&str]) {
    let mut all = vec!["task", "add"];
    all.extend(args);
    env.farm_git(all).run().success();
}

/// The patch ids of every non-merge commit reachable from a hub ref.
fn hub_patch_ids(env: &Env) -> BTreeSet<String> {
    crate::common::patch_ids(&env.hub, &env.git(["log", "--all", "--no-merges", "-p"]))
}

/// Wait (bounded) until process `pid` is gone.
#[track_caller]
fn assert_gone(pid: u32, what: &str) {
    let start = Instant::now();
    while running(pid) {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "{what} (pid {pid}) outlived its session"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The merge-session half of a fake agent: on the merge prompt, log the
/// task, then (`resolve`) keep both sides of every conflict — drop the marker
/// lines, keep every other line — and stage; or give up with exit 1.
fn merge_part(logs: &std::path::Path, resolve: bool) -> String {
    let l = logs.display();
    let action = if resolve {
        r#"git diff --name-only --diff-filter=U > "$L/conflicts-$FARM_TASK"
    while read -r f; do
        grep -v -e '^<<<<<<< ' -e '^=======$' -e '^>>>>>>> ' "$f" > "$f.resolved"
        mv "$f.resolved" "$f"
        git add "$f"
    done < "$L/conflicts-$FARM_TASK"
    exit 0"#
    } else {
        r#"echo "cannot resolve this"; exit 1"#
    };
    format!(
        r#"set -eu
L='{l}'
case "$1" in
*"resolving a merge conflict"*)
    echo "$FARM_TASK $FARM_AGENT" >> "$L/merges.log"
    {action};;
esac
"#
    )
}

/// Four agents, forty tasks in four chains of ten with cross-chain
/// dependencies, twelve of them prepending a line to the same shared file:
/// every task is done exactly once, after its dependencies, every conflict
/// is merged keeping both sides, and nothing any agent committed is lost.
#[test]

fn forty_tasks_on_four_agents_end_to_end() {
    let env = Env::git_hub(&[("shared.txt", "base\n")]);
    let logs = logs(&env);

    let cross = [
        ("c1-5", "c0-3"),
        ("c2-7", "c1-2"),
        ("c3-4", "c2-1"),
        ("c0-6", "c3-2"),
    ];
    let mut after: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut tagged = BTreeSet::new();
    for k in 0..4 {
        for i in 0..10 {
            let id = format!("c{k}-{i}");
            let mut deps = Vec::new();
            if i > 0 {
                deps.push(format!("c{k}-{}", i - 1));
            }
            deps.extend(
                cross
                    .iter()
                    .filter(|(t, _)| *t == id)
                    .map(|(_, d)| (*d).to_owned()),
            );
            if i % 4 == 0 {
                tagged.insert(id.clone());
            }
            after.insert(id, deps);
        }
    }
    for (id, deps) in &after {
        let deps: Vec<String> = deps.iter().map(|d| format!("\"{d}\"")).collect();
        let tag = if tagged.contains(id) {
            "Also put the task's id on line 1 of shared.txt. EDIT-SHARED\n"
        } else {
            ""
        };
        std::fs::write(
            env.hub.join(format!("tasks/{id}.md")),
            format!(
                "+++\ntitle = \"Task {id}\"\nafter = [{}]\n+++\nWrite work/{id}.txt.\n{tag}",
                deps.join(", ")
            ),
        )
        .unwrap();
    }
    env.git(["add", "-A"]);
    env.git(["commit", "-q", "-m", "forty tasks"]);
    let counts = env.farm_git(["tasks", "--json"]).run().success().json();
    assert_eq!(counts["counts"]["ready"], 4, "{counts:#}");
    assert_eq!(counts["counts"]["blocked"], 36, "{counts:#}");

    // The first wave (c0-0 … c3-0, all tagged) waits until all four have
    // started, so that all four edit line 1 of shared.txt from the same
    // commit: three of them must go through a merge session.
    let agent = env.agent_script(
        "agent.sh",
        &format!(
            r#"{merge}echo "$FARM_TASK $(git rev-parse HEAD)" >> "$L/starts.log"
mkdir -p work
echo "$FARM_TASK $FARM_AGENT" >> "work/$FARM_TASK.txt"
case "$1" in
*EDIT-SHARED*)
    case "$FARM_TASK" in
    c?-0)
        touch "$L/wave-$FARM_TASK"
        n=0
        while [ "$(ls "$L" | grep -c '^wave-')" -lt 4 ] && [ $n -lt 300 ]; do
            sleep 0.05; n=$((n + 1))
        done;;
    esac
    {{ echo "$FARM_TASK"; cat shared.txt; }} > "$L/shared-$FARM_TASK"
    mv "$L/shared-$FARM_TASK" shared.txt;;
esac
git add -A
git commit -q -m "$FARM_TASK by $FARM_AGENT"
echo "$(git rev-parse HEAD) $(git show HEAD | git patch-id --stable | cut -d' ' -f1)" >> "$L/commits.log"
"#,
            merge = merge_part(&logs, true)
        ),
    );
    let started = Instant::now();
    let out = env
        .farm_git(["run", "--agent", &agent, "-j", "4", "--timeout", "60s"])
        .run_within(LIMIT)
        .success();
    eprintln!("40 tasks on 4 agents: {:?}", started.elapsed());

    // Every task done, exactly once; nothing pending or failed.
    let all: BTreeSet<String> = after.keys().cloned().collect();
    assert_eq!(board(&env, "tasks/done"), all, "{out:#?}");
    assert_eq!(board(&env, "tasks"), BTreeSet::new(), "{out:#?}");
    assert_eq!(board(&env, "tasks/failed"), BTreeSet::new(), "{out:#?}");
    let json = env.farm_git(["tasks", "--json"]).run().success().json();
    assert_eq!(json["counts"]["done"], 40, "{json:#}");
    for id in &all {
        let done = show(&env, &format!("main:tasks/done/{id}.md")).unwrap();
        assert!(done.contains("on attempt 1,"), "{id}: {done}");
    }

    // Each task's work was written exactly once, and it is on main.
    let work = env.git(["ls-tree", "--name-only", "main", "work/"]);
    assert_eq!(work.lines().count(), 40, "{work}");
    for id in &all {
        let text = show(&env, &format!("main:work/{id}.txt")).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 1, "work/{id}.txt: {text:?}");
        assert!(lines[0].starts_with(&format!("{id} ")), "{text:?}");
    }

    // Each session started once, from a commit that the done-marker commit
    // of every task it comes after is an ancestor of, and its own is not.
    let log = env.git([
        "log",
        "--format=commit %H",
        "--name-only",
        "--diff-filter=A",
        "main",
        "--",
        "tasks/done/",
    ]);
    let mut marker: BTreeMap<&str, &str> = BTreeMap::new();
    let mut commit = "";
    for line in log.lines() {
        if let Some(c) = line.strip_prefix("commit ") {
            commit = c;
        } else if let Some(id) = line
            .strip_prefix("tasks/done/")
            .and_then(|n| n.strip_suffix(".md"))
        {
            marker.insert(id, commit); // newest first: the oldest one stays
        }
    }
    let starts = log_lines(&env, "starts.log");
    assert_eq!(starts.len(), 40, "{starts:#?}");
    let mut seen = BTreeSet::new();
    for line in &starts {
        let (id, base) = line.split_once(' ').unwrap();
        assert!(seen.insert(id.to_owned()), "{id} started twice");
        for dep in &after[id] {
            assert!(
                is_ancestor(&env, marker[dep.as_str()], base),
                "{id} started at {base}, before {dep} was done"
            );
        }
        assert!(
            !is_ancestor(&env, marker[id], base),
            "{id} started after it was done"
        );
    }

    // Both sides of every conflict kept: each tagged id once on shared.txt,
    // the original line last.
    let shared = show(&env, "main:shared.txt").unwrap();
    let lines: Vec<&str> = shared.lines().collect();
    assert_eq!(lines.last(), Some(&"base"), "{shared}");
    let ids: Vec<&str> = lines[..lines.len() - 1].to_vec();
    let unique: BTreeSet<&str> = ids.iter().copied().collect();
    assert_eq!(ids.len(), unique.len(), "a line twice: {shared}");
    assert_eq!(
        unique,
        tagged.iter().map(String::as_str).collect(),
        "{shared}"
    );
    let merges = log_lines(&env, "merges.log");
    assert!(
        merges.len() >= 3,
        "the first wave must need at least 3 merge sessions: {merges:?}\n{out:#?}"
    );
    for m in &merges {
        let task = m.split(' ').next().unwrap();
        assert!(tagged.contains(task), "merge session for untagged {task}");
    }

    // Nothing committed is lost: each agent commit is reachable from a hub
    // ref, or (rebased) a commit with the same patch is.
    let reachable: BTreeSet<String> = env
        .git(["rev-list", "--all"])
        .lines()
        .map(str::to_owned)
        .collect();
    let patches = hub_patch_ids(&env);
    let commits = log_lines(&env, "commits.log");
    assert_eq!(commits.len(), 40, "{commits:#?}");
    let mut as_is = 0;
    for line in &commits {
        let (commit, patch) = line.split_once(' ').unwrap();
        if reachable.contains(commit) {
            as_is += 1;
        } else {
            assert!(
                patches.contains(patch),
                "agent commit {commit} (patch {patch}) is on no hub ref"
            );
        }
    }
    eprintln!("agent commits: {as_is} as made, {} rebased", 40 - as_is);
    assert_eq!(
        env.git(["for-each-ref", "refs/heads/farm/"]),
        "",
        "nothing failed, so nothing should be rescued"
    );
    assert_hub_sound(&env);
}

/// An agent that commits and exits non-zero: retried up to `max_attempts`,
/// each attempt noted in the task, which ends in `tasks/failed/`; each
/// attempt's commit is on its own rescue branch, and none reached main.
/// Regression: a relative `--state-dir`, as a person types it, failed
/// every agent at its first task ("cannot open the clone
/// `st/clones/vm`"): the clone was made by a git run in another
/// directory, where the path named another place (`st/clones/st/…`).
/// It is taken from the directory farm started in.
#[test]
fn a_relative_state_dir_names_the_directory_farm_started_in() {
    let env = Env::git_hub(&[]);
    add_task(&env, &["one", "-m", "Write one"]);
    add_task(&env, &["two", "-m", "Write two"]);
    let agent = env.agent_script(
        "agent.sh",
        "set -eu\necho \"$FARM_TASK\" > \"$FARM_TASK.txt\"\ngit add -A\ngit commit -qm \"$FARM_TASK\"\n",
    );
    let out = env
        .farm_git(["run", "--agent", &agent, "--state-dir", "st"])
        .run_within(LIMIT)
        .success();
    assert_eq!(
        board(&env, "tasks/done"),
        BTreeSet::from(["one".to_owned(), "two".to_owned()]),
        "{out:#?}"
    );
    let state = env.tmp.path().join("st");
    assert!(state.join("journal.jsonl").is_file(), "{out:#?}");
    assert!(
        !state.join("clones/st").exists(),
        "a state dir inside its own clones"
    );
}

#[test]
fn failing_agent_is_retried_then_failed_with_notes_and_rescue_branches() {
    let env = Env::git_hub(&[]);
    let logs = logs(&env);
    add_task(&env, &["flaky", "--max-attempts", "2", "-m", "Try hard"]);
    let agent = env.agent_script(
        "agent.sh",
        &format!(
            r###"set -eu
L='{}'
notes=no
case "$1" in *"## Attempt 1 "*) notes=yes;; esac
echo "$FARM_TASK $FARM_ATTEMPT $notes" >> "$L/starts.log"
echo "attempt $FARM_ATTEMPT" >> work.txt
git add -A
git commit -q -m "attempt $FARM_ATTEMPT"
git rev-parse HEAD >> "$L/commits.log"
echo "cannot finish: attempt $FARM_ATTEMPT"
exit 3
"###,
            logs.display()
        ),
    );
    let out = farm_run(&env, &agent, &[]).code(5);
    // The summary names the task, why, and where to look.
    assert!(
        out.stderr
            .contains("farm run: the board is settled with 1 failed, 0 stuck, 0 invalid (exit 5):")
            && out
                .stderr
                .contains("  failed  `flaky`: failed with exit code 3  (farm task show flaky)"),
        "{out:#?}"
    );

    // `farm tasks` gives a failed task its title, attempts and last reason
    // (they were once blank and null).
    let tasks = env.farm_git(["tasks"]).run().success().stdout;
    assert!(
        tasks.lines().any(|l| l.starts_with("flaky")
            && l.contains("failed")
            && l.contains("Try hard")
            && l.contains("2 failed attempts, last: failed with exit code 3")),
        "{tasks}"
    );
    let doc = env.farm_git(["tasks", "--json"]).run().success().json();
    assert_eq!(doc["tasks"][0]["title"], "Try hard", "{doc:#}");
    assert_eq!(doc["tasks"][0]["attempts"], 2, "{doc:#}");
    assert_eq!(
        doc["tasks"][0]["last_reason"], "failed with exit code 3",
        "{doc:#}"
    );

    // Two sessions; the second saw the first one's note.
    assert_eq!(log_lines(&env, "starts.log"), ["flaky 1 no", "flaky 2 yes"]);
    assert_eq!(
        board(&env, "tasks/failed"),
        BTreeSet::from(["flaky".into()])
    );
    assert!(board(&env, "tasks").is_empty() && board(&env, "tasks/done").is_empty());
    let text = show(&env, "main:tasks/failed/flaky.md").unwrap();
    assert!(text.contains("\nattempts = 2\n"), "{text}");
    for n in [1, 2] {
        let heading = format!("## Attempt {n} — failed with exit code 3");
        assert_eq!(text.matches(&heading).count(), 1, "{heading}: {text}");
        let tail = format!("- last output: `cannot finish: attempt {n}`");
        assert_eq!(text.matches(&tail).count(), 1, "{tail}: {text}");
    }
    assert_eq!(text.matches("## Attempt ").count(), 2, "{text}");
    assert!(show(&env, "main:work.txt").is_none(), "failed work on main");

    // Each attempt's commit is on a rescue branch the note names.
    let branches = rescue_branches(&env, "flaky");
    assert_eq!(branches.len(), 2, "{branches:?}");
    for b in &branches {
        let nonce = b.strip_prefix("farm/rescue/flaky/").unwrap();
        assert!(
            nonce.len() == 32 && nonce.bytes().all(|c| c.is_ascii_hexdigit()),
            "{b}"
        );
        assert!(
            text.contains(&format!("- work: branch `{b}`")),
            "{b}: {text}"
        );
    }
    let commits = log_lines(&env, "commits.log");
    assert_eq!(commits.len(), 2);
    for c in &commits {
        let holders: Vec<_> = branches
            .iter()
            .filter(|b| is_ancestor(&env, c, b))
            .collect();
        assert_eq!(holders.len(), 1, "commit {c} on {holders:?}");
        assert!(!is_ancestor(&env, c, "main"));
    }
    assert_hub_sound(&env);
}

/// An agent that hangs is stopped at the timeout, with the child it
/// started (which ignores SIGTERM); the attempt is recorded as timed out and
/// what it had written is rescued.
#[test]
fn hanging_agent_is_killed_with_its_children_at_the_timeout() {
    let env = Env::git_hub(&[]);
    let logs = logs(&env);
    add_task(&env, &["hang", "--max-attempts", "1", "-m", "Never ends"]);
    let agent = env.agent_script(
        "agent.sh",
        &format!(
            r#"L='{}'
echo $$ > "$L/agent.pid"
echo "half done" > partial.txt
sh -c 'trap "" TERM; echo $$ > "$0/child.pid"; sleep 60' "$L" &
while [ ! -s "$L/child.pid" ]; do sleep 0.01; done
sleep 60
"#,
            logs.display()
        ),
    );
    let started = Instant::now();
    let out = farm_run(&env, &agent, &["--timeout", "1s"]).code(5);
    let took = started.elapsed();
    assert!(took < Duration::from_secs(30), "took {took:?}: {out:#?}");
    assert_gone(
        read_pid(&logs.join("agent.pid"), Duration::from_secs(20)),
        "the agent",
    );
    assert_gone(
        read_pid(&logs.join("child.pid"), Duration::from_secs(20)),
        "the agent's child",
    );

    assert_eq!(board(&env, "tasks/failed"), BTreeSet::from(["hang".into()]));
    let text = show(&env, "main:tasks/failed/hang.md").unwrap();
    assert!(text.contains("## Attempt 1 — timed out"), "{text}");
    let branches = rescue_branches(&env, "hang");
    assert_eq!(branches.len(), 1, "{branches:?}");
    assert_eq!(
        show(&env, &format!("{}:partial.txt", branches[0])).as_deref(),
        Some("half done\n")
    );
    assert!(show(&env, "main:partial.txt").is_none());
    assert_hub_sound(&env);
}

/// Agents that delete or edit `current_tasks/` in their clone: their work
/// lands, the claims directory on main stays as `farm init` made it.
#[test]
fn agent_changes_to_current_tasks_are_undone() {
    let env = Env::git_hub(&[]);
    let gitignore = show(&env, "main:current_tasks/.gitignore").unwrap();
    add_task(&env, &["wipe", "-m", "Delete the claims"]);
    add_task(&env, &["forge", "--after", "wipe", "-m", "Forge a claim"]);
    let agent = env.agent_script(
        "agent.sh",
        r#"set -eu
case "$FARM_TASK" in
wipe)
    git rm -r -q current_tasks
    echo wiped > wipe.txt;;
forge)
    echo '!forged.txt' >> current_tasks/.gitignore
    echo 'task = "forged"' > current_tasks/forged.txt
    git add -f current_tasks/forged.txt
    echo forged > forge.txt;;
esac
git add -A
git commit -q -m "$FARM_TASK"
"#,
    );
    farm_run(&env, &agent, &[]).success();

    assert_eq!(
        board(&env, "tasks/done"),
        BTreeSet::from(["forge".into(), "wipe".into()])
    );
    assert_eq!(show(&env, "main:wipe.txt").as_deref(), Some("wiped\n"));
    assert_eq!(show(&env, "main:forge.txt").as_deref(), Some("forged\n"));
    assert_eq!(
        env.git(["ls-tree", "-r", "--name-only", "main", "current_tasks/"]),
        "current_tasks/.gitignore"
    );
    assert_eq!(
        show(&env, "main:current_tasks/.gitignore").as_deref(),
        Some(gitignore.as_str())
    );
    assert_eq!(
        std::fs::read_to_string(env.claims().join(".gitignore")).unwrap(),
        gitignore
    );
    assert!(!env.claims().join("forged.txt").exists());
    assert_hub_sound(&env);
}

/// An agent that exits 0 without committing: farm commits what it left, and
/// that lands on main.
#[test]
fn uncommitted_work_is_committed_and_integrated() {
    let env = Env::git_hub(&[("README", "old\n")]);
    add_task(&env, &["messy", "-m", "Leave a mess"]);
    let agent = env.agent_script(
        "agent.sh",
        "set -eu\necho new > README\nmkdir -p notes\necho written > notes/left.txt\n",
    );
    farm_run(&env, &agent, &[]).success();

    assert_eq!(board(&env, "tasks/done"), BTreeSet::from(["messy".into()]));
    assert_eq!(show(&env, "main:README").as_deref(), Some("new\n"));
    assert_eq!(
        show(&env, "main:notes/left.txt").as_deref(),
        Some("written\n")
    );
    let subject = env.git(["log", "-1", "--format=%s", "main", "--", "notes/left.txt"]);
    assert!(
        subject.starts_with("farm: `messy` done") && subject.ends_with("left uncommitted"),
        "{subject}"
    );
    assert_hub_sound(&env);
}

/// Two tasks change the same line differently at the same time and the
/// merge session gives up: the loser's work is on a rescue branch, its
/// attempt failed with a note naming the conflict; the winner's is on main.
#[test]
fn unresolvable_conflict_is_rescued_and_noted() {
    let env = Env::git_hub(&[("shared.txt", "base\n")]);
    let logs = logs(&env);
    add_task(&env, &["left", "--max-attempts", "1", "-m", "Say left"]);
    add_task(&env, &["right", "--max-attempts", "1", "-m", "Say right"]);
    // Both wait until both have started: both start from the same commit.
    let agent = env.agent_script(
        "agent.sh",
        &format!(
            r#"{}touch "$L/started-$FARM_TASK"
n=0
while [ ! -e "$L/started-left" ] || [ ! -e "$L/started-right" ]; do
    [ $n -lt 300 ] || break
    sleep 0.05; n=$((n + 1))
done
echo "$FARM_TASK" > shared.txt
git commit -q -am "$FARM_TASK"
echo "$FARM_TASK $(git rev-parse HEAD)" >> "$L/commits.log"
"#,
            merge_part(&logs, false)
        ),
    );
    let out = farm_run(&env, &agent, &["-j", "2"]).code(5);

    let done = board(&env, "tasks/done");
    let failed = board(&env, "tasks/failed");
    assert_eq!(
        (done.len(), failed.len()),
        (1, 1),
        "{done:?} {failed:?}: {out:#?}"
    );
    let winner = done.first().unwrap();
    let loser = failed.first().unwrap();
    assert_eq!(
        show(&env, "main:shared.txt").unwrap(),
        format!("{winner}\n")
    );
    assert_eq!(log_lines(&env, "merges.log").len(), 1);
    assert!(log_lines(&env, "merges.log")[0].starts_with(&format!("{loser} ")));

    let text = show(&env, &format!("main:tasks/failed/{loser}.md")).unwrap();
    assert!(
        text.contains("## Attempt 1 — its work conflicts with `main` in shared.txt"),
        "{text}"
    );
    // The merge session is a session of its own, with what became of the
    // merge: its agent exited 1, and the merge is unresolved.
    let status = status_json(&env);
    let merges: Vec<&serde_json::Value> = status["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["kind"] == "merge")
        .collect();
    assert_eq!(merges.len(), 1, "{status:#}");
    assert_eq!(merges[0]["task"], loser.as_str(), "{status:#}");
    assert_eq!(merges[0]["result"], "unresolved", "{status:#}");
    assert_eq!(status["totals"]["merge sessions"], 1, "{status:#}");
    let text_status = status_text(&env);
    assert!(text_status.contains("merge unresolved"), "{text_status}");
    let branches = rescue_branches(&env, loser);
    assert_eq!(branches.len(), 1, "{branches:?}");
    assert!(
        text.contains(&format!("- work: branch `{}`", branches[0])),
        "{text}"
    );
    let commits: BTreeMap<String, String> = log_lines(&env, "commits.log")
        .iter()
        .map(|l| {
            let (t, c) = l.split_once(' ').unwrap();
            (t.to_owned(), c.to_owned())
        })
        .collect();
    assert!(is_ancestor(&env, &commits[loser], &branches[0]));
    assert!(!is_ancestor(&env, &commits[loser], "main"));
    assert_eq!(
        show(&env, &format!("{}:shared.txt", branches[0])).unwrap(),
        format!("{loser}\n")
    );
    assert_hub_sound(&env);
}

/// `farm run` killed with SIGKILL mid-session: its session dies with it, its
/// claim is dead at once, and the next `farm run` reaps it and does the task.
/// (The respawning wrapper, loop.sh, does not exist yet: the second run is
/// started by hand here, not respawned.)
#[test]
fn sigkilled_run_leaves_a_dead_claim_the_next_run_reaps() {
    let env = Env::git_hub(&[]);
    let logs = logs(&env);
    add_task(&env, &["slow", "-m", "Take your time"]);
    let sleeper = env.agent_script(
        "sleeper.sh",
        &format!("echo $$ > '{}/agent.pid'\nexec sleep 60\n", logs.display()),
    );
    let mut first = env
        .farm_git(run_args(&env, &sleeper, &["--timeout", "60s"]))
        .spawn();
    wait_for(&env.claim_path("slow"));
    let agent_pid = read_pid(&logs.join("agent.pid"), Duration::from_secs(20));
    first.kill().unwrap(); // SIGKILL
    first.wait().unwrap();

    let locks = env.farm_git(["locks", "--json"]).run().success().json();
    assert_eq!(locks["claims"].as_array().unwrap().len(), 1, "{locks:#}");
    assert_eq!(locks["claims"][0]["task"], "slow");
    assert_eq!(locks["claims"][0]["state"], "dead", "{locks:#}");
    assert_eq!(locks["claims"][0]["pid"], first.id(), "{locks:#}");
    assert_gone(agent_pid, "the session of the killed run");

    let quick = env.agent_script(
        "quick.sh",
        "set -eu\necho ok > slow.txt\ngit add -A\ngit commit -q -m slow\n",
    );
    let out = farm_run(&env, &quick, &[]).success();
    assert!(out.stderr.contains("reaped `slow`"), "{out:#?}");
    assert_eq!(board(&env, "tasks/done"), BTreeSet::from(["slow".into()]));
    assert_eq!(show(&env, "main:slow.txt").as_deref(), Some("ok\n"));
    let tombs = env.tombstones();
    assert_eq!(tombs.len(), 1, "{tombs:?}");
    assert!(tombs[0].contains("task = \"slow\""), "{tombs:?}");
    assert_hub_sound(&env);
}

/// A task file with bad front matter is listed as invalid, with why; the
/// run does the other tasks and exits 0.
#[test]
fn malformed_task_file_is_listed_invalid_and_the_rest_runs() {
    let env = Env::git_hub(&[]);
    add_task(&env, &["good1", "-m", "One"]);
    add_task(&env, &["good2", "-m", "Two"]);
    std::fs::write(
        env.hub.join("tasks/bad.md"),
        "+++\ntitel = \"typo\"\nafter = 7\n+++\nGarbage.\n",
    )
    .unwrap();
    env.git(["add", "tasks/bad.md"]);
    env.git(["commit", "-q", "-m", "a bad task"]);

    let json = env.farm_git(["tasks", "--json"]).run().success().json();
    let invalid = json["invalid"].as_array().unwrap();
    assert_eq!(invalid.len(), 1, "{json:#}");
    assert_eq!(invalid[0]["file"], "tasks/bad.md");
    let error = invalid[0]["error"].as_str().unwrap();
    assert!(error.contains("`titel`"), "{error}");

    let agent = env.agent_script(
        "agent.sh",
        "set -eu\necho \"$FARM_TASK\" > \"$FARM_TASK.txt\"\ngit add -A\ngit commit -q -m \"$FARM_TASK\"\n",
    );
    farm_run(&env, &agent, &[]).code(5);
    assert_eq!(
        board(&env, "tasks/done"),
        BTreeSet::from(["good1".into(), "good2".into()])
    );
    assert_eq!(board(&env, "tasks"), BTreeSet::from(["bad".into()]));
    assert_eq!(show(&env, "main:good2.txt").as_deref(), Some("good2\n"));
    assert_hub_sound(&env);
}

/// An agent CLI that does not exist: bad usage, named, and nothing claimed
/// or committed.
#[test]
fn missing_agent_binary_is_bad_usage_and_claims_nothing() {
    let env = Env::git_hub(&[]);
    add_task(&env, &["t", "-m", "Anything"]);
    let before = env.git(["rev-parse", "main"]);
    let out = farm_run(&env, "no-such-agent-xyz --flag", &[]).code(2);
    assert!(out.stderr.contains("no-such-agent-xyz"), "{out:#?}");
    let claims: Vec<_> = std::fs::read_dir(env.claims())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        // (`.protocol.txt` is the hub's protocol version, no claim.)
        .filter(|n| n.ends_with(".txt") && !n.starts_with('.'))
        .collect();
    assert!(claims.is_empty(), "{claims:?}");
    assert_eq!(env.git(["rev-parse", "main"]), before);
    assert_eq!(board(&env, "tasks"), BTreeSet::from(["t".into()]));
    assert_hub_sound(&env);
}

/// Regression: `--agent ./my-agent.sh` passed the start-up check (the file
/// is in the directory farm was started in) and then failed every session
/// with exit 127, because a session runs in its clone. A relative path is
/// the start directory's: the task lands.
#[test]
fn an_agent_given_by_a_relative_path_runs_from_its_clone() {
    use std::os::unix::fs::PermissionsExt;
    let env = Env::git_hub(&[]);
    add_task(&env, &["rel", "-m", "Anything"]);
    let script = env.tmp.path().join("my-agent.sh");
    std::fs::write(
        &script,
        "#!/bin/sh\necho x > rel.txt && git add . && git commit --quiet -m rel\n",
    )
    .unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    let out = farm_run(&env, "./my-agent.sh", &[]);
    assert_eq!(out.code, Some(0), "{out:#?}");
    assert_eq!(board(&env, "tasks/done"), BTreeSet::from(["rel".into()]));
}

/// A heartbeat slower than a quarter of the threshold would let a live claim
/// look stale: refused before anything starts, with both durations named.
#[test]
fn a_heartbeat_too_slow_for_the_threshold_is_bad_usage() {
    let env = Env::git_hub(&[]);
    add_task(&env, &["t", "-m", "Anything"]);
    let before = env.git(["rev-parse", "main"]);
    let out = farm_run(
        &env,
        "true",
        &["--stale-after", "30m", "--heartbeat", "20m"],
    )
    .code(2);
    assert!(out.stderr.contains("--heartbeat 20m"), "{out:#?}");
    assert!(out.stderr.contains("7m30s"), "{out:#?}");
    assert_eq!(env.git(["rev-parse", "main"]), before);
    assert_eq!(board(&env, "tasks"), BTreeSet::from(["t".into()]));
}

/// A dependency cycle is named by `farm tasks`; `farm run` does the task
/// outside it and ends (the board is settled), leaving the cycle pending.
#[test]
fn dependency_cycle_is_named_and_the_rest_finishes() {
    let env = Env::git_hub(&[]);
    let logs = logs(&env);
    add_task(&env, &["a", "--after", "b", "-m", "A"]);
    add_task(&env, &["b", "--after", "a", "-m", "B"]);
    add_task(&env, &["c", "-m", "C"]);

    let table = env.farm_git(["tasks"]).run().success();
    assert_eq!(
        table
            .stdout
            .matches("in a dependency cycle: a → b → a")
            .count(),
        2,
        "{table:#?}"
    );
    let json = env.farm_git(["tasks", "--json"]).run().success().json();
    assert_eq!(json["counts"]["stuck"], 2, "{json:#}");
    assert_eq!(json["counts"]["ready"], 1, "{json:#}");

    let agent = env.agent_script(
        "agent.sh",
        &format!(
            "set -eu\necho \"$FARM_TASK\" >> '{}/starts.log'\necho done > \"$FARM_TASK.txt\"\n",
            logs.display()
        ),
    );
    // One agent: with two, the idle one can take `c` again from a stale
    // board (finished_task_is_not_run_again_from_a_stale_board).
    let started = Instant::now();
    let out = farm_run(&env, &agent, &[]).code(5);
    assert!(started.elapsed() < Duration::from_secs(30), "{out:#?}");
    assert!(
        out.stderr.contains("  stuck   `"),
        "the summary names them: {out:#?}"
    );
    assert_eq!(log_lines(&env, "starts.log"), ["c"], "{out:#?}");
    assert_eq!(board(&env, "tasks/done"), BTreeSet::from(["c".into()]));
    assert_eq!(
        board(&env, "tasks"),
        BTreeSet::from(["a".into(), "b".into()])
    );
    for t in ["a", "b"] {
        let text = show(&env, &format!("main:tasks/{t}.md")).unwrap();
        assert!(!text.contains("attempts"), "{text}");
    }
    assert_hub_sound(&env);
}

/// A task one agent has finished is not run again by another agent of the
/// same run. The other agent is made to read the board (its clone's
/// checkout, held up by a post-checkout hook while someone else's claim
/// exists) before the finish is pushed, and the claims after the claim is
/// released: what a busy machine does by chance. The first session lasts
/// longer than an idle agent waits (2 s) before it looks again, so the other
/// agent is sure to look while the task is claimed.
#[test]

fn finished_task_is_not_run_again_from_a_stale_board() {
    let env = Env::git_hub(&[]);
    let logs = logs(&env);
    add_task(&env, &["once", "-m", "Do this once"]);
    let hooks = env.tmp.path().join("hooks");
    std::fs::create_dir(&hooks).unwrap();
    let hook = hooks.join("post-checkout");
    std::fs::write(
        &hook,
        format!(
            r#"#!/bin/sh
# Not for a clone's first checkout (from the null commit).
case "$1" in *[!0]*) ;; *) exit 0;; esac
me=$(basename "$PWD")
n=0
while [ $n -lt 400 ]; do
    other=no
    for f in '{claims}'/*.txt; do
        [ -e "$f" ] && ! grep -q "agent = \"$me\"" "$f" && other=yes
    done
    [ $other = no ] && break
    sleep 0.05; n=$((n + 1))
done
exit 0
"#,
            claims = env.claims().display()
        ),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&hook, std::fs::Permissions::from_mode(0o755)).unwrap();
    let agent = env.agent_script(
        "agent.sh",
        &format!(
            r#"{}echo "$FARM_TASK $FARM_AGENT" >> "$L/starts.log"
if mkdir "$L/first" 2>/dev/null; then sleep 3; fi
echo "$FARM_AGENT" >> once.txt
git add -A
git commit -q -m "$FARM_TASK by $FARM_AGENT"
"#,
            merge_part(&logs, false)
        ),
    );
    let out = env
        .farm_git(run_args(&env, &agent, &["-j", "2", "--name", "agent"]))
        .env("GIT_CONFIG_COUNT", "1")
        .env("GIT_CONFIG_KEY_0", "core.hooksPath")
        .env("GIT_CONFIG_VALUE_0", &hooks)
        .run_within(LIMIT)
        .success();

    assert_eq!(log_lines(&env, "starts.log").len(), 1, "{out:#?}");
    assert_eq!(board(&env, "tasks/done"), BTreeSet::from(["once".into()]));
    assert_eq!(show(&env, "main:once.txt").unwrap().lines().count(), 1);
    assert_eq!(env.git(["for-each-ref", "refs/heads/farm/"]), "");
    assert_hub_sound(&env);
}

/// The agent CLI answers "usage limit" (Claude's older form, with the reset
/// as epoch seconds) until three seconds after its first session started:
/// no attempt is burned, nobody starts a session before the reset, and the
/// run finishes after it. (The moment is the first session's, not the
/// test's: on a loaded machine the run once took longer than three seconds
/// to start its first session, and no session was limited at all.)
#[test]
fn a_usage_limit_burns_no_attempt_and_every_agent_waits_for_the_reset() {
    let env = Env::git_hub(&[]);
    for id in ["a", "b", "c", "d"] {
        add_task(&env, &[id, "-m", "Anything"]);
    }
    let starts = env.tmp.path().join("starts.log");
    let lifts_at = env.tmp.path().join("lifts");
    let agent = env.agent_script(
        "limited.sh",
        &format!(
            r#"now=$(date +%s)
# The first session to get here sets the reset: link(2) lets one win.
echo $((now + 3)) > '{lifts_at}.'$$ && ln '{lifts_at}.'$$ '{lifts_at}' 2>/dev/null
rm -f '{lifts_at}.'$$
lifts=$(cat '{lifts_at}')
echo "$now $FARM_AGENT $FARM_TASK" >> '{starts}'
if [ "$now" -lt "$lifts" ]; then
  echo "working on $FARM_TASK"
  echo "Claude AI usage limit reached|$lifts"
  exit 1
fi
echo "$FARM_TASK" > "work-$FARM_TASK.txt"
git add "work-$FARM_TASK.txt" && git commit --quiet -m "work on $FARM_TASK"
"#,
            starts = starts.display(),
            lifts_at = lifts_at.display()
        ),
    );
    let out = farm_run(&env, &agent, &["-j", "2"]).success();
    assert!(out.stderr.contains("no attempt counted"), "{out:#?}");
    assert!(
        out.stderr.contains("waiting for the agent CLI's limit"),
        "{out:#?}"
    );
    assert_eq!(
        board(&env, "tasks/done"),
        BTreeSet::from(["a", "b", "c", "d"].map(String::from))
    );
    for id in ["a", "b", "c", "d"] {
        let done = env.git(["show", &format!("main:tasks/done/{id}.md")]);
        assert!(done.contains("on attempt 1,"), "{id}: {done}");
        assert!(
            !done.contains("## Attempt"),
            "{id}: an attempt was noted: {done}"
        );
    }
    // Once the first session hit the limit, the next start of any agent
    // waited for the reset.
    let log = std::fs::read_to_string(&starts).unwrap();
    let times: Vec<u64> = log
        .lines()
        .map(|l| l.split(' ').next().unwrap().parse().unwrap())
        .collect();
    let lifts: u64 = std::fs::read_to_string(&lifts_at)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let limited = times.iter().filter(|t| **t < lifts).count();
    assert!(
        (1..=2).contains(&limited),
        "one limited session per agent at most: {log}"
    );
    assert_eq!(times.len(), limited + 4, "{log}");
    assert_hub_sound(&env);
}

/// A setup error (Claude's bad-key message) stops the run after the first
/// session, with one message naming it; the task is not charged an attempt
/// and its claim is released.
#[test]
fn an_auth_error_stops_the_run_after_one_session() {
    let env = Env::git_hub(&[]);
    for id in ["a", "b", "c"] {
        add_task(&env, &[id, "-m", "Anything"]);
    }
    let count = env.tmp.path().join("sessions.log");
    let agent = env.agent_script(
        "nokey.sh",
        &format!(
            "echo \"$FARM_TASK\" >> '{}'\necho 'Invalid API key · Please run /login'\nexit 1\n",
            count.display()
        ),
    );
    let out = farm_run(&env, &agent, &[]).code(1);
    assert_eq!(
        std::fs::read_to_string(&count).unwrap().lines().count(),
        1,
        "{out:#?}"
    );
    assert_eq!(out.stderr.matches("cannot work").count(), 1, "{out:#?}");
    assert!(out.stderr.contains("Please run /login"), "{out:#?}");
    assert_eq!(
        board(&env, "tasks"),
        BTreeSet::from(["a", "b", "c"].map(String::from))
    );
    for id in ["a", "b", "c"] {
        let text = env.git(["show", &format!("main:tasks/{id}.md")]);
        assert!(!text.contains("## Attempt"), "{id}: {text}");
    }
    let claims: Vec<_> = std::fs::read_dir(env.claims())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        // (`.protocol.txt` is the hub's protocol version, no claim.)
        .filter(|n| n.ends_with(".txt") && !n.starts_with('.'))
        .collect();
    assert!(claims.is_empty(), "{claims:?}");
}

/// A loop's error leaves through the one error path: main prints it after
/// the run's summary, naming its loop, with its hint, and the run exits 1
/// whatever the loop's own kind (a setup error is "usage").
#[test]
fn a_loops_error_is_printed_once_by_main_naming_the_loop() {
    let env = Env::git_hub(&[]);
    add_task(&env, &["a", "-m", "Anything"]);
    let agent = env.agent_script(
        "nokey.sh",
        "echo 'Invalid API key · Please run /login'\nexit 1\n",
    );
    let out = farm_run(&env, &agent, &["--name", "box"]).code(1);
    let lines: Vec<&str> = out.stderr.lines().collect();
    let error = lines
        .iter()
        .position(|l| l.starts_with("error: box: `") && l.contains("cannot work"))
        .unwrap_or_else(|| panic!("no loop error: {out:#?}"));
    let summary = lines
        .iter()
        .position(|l| l.contains("farm run: 1 session: "))
        .unwrap_or_else(|| panic!("no summary: {out:#?}"));
    assert!(summary < error, "{out:#?}");
    assert!(lines[error + 1].starts_with("hint: "), "{out:#?}");
    assert_eq!(out.stderr.matches("error:").count(), 1, "{out:#?}");
}

/// Regression: with `-j 3` a setup error (a bad key) was printed three
/// times, once per agent, word for word. It is printed once, naming the
/// agents it stopped.
#[test]
fn a_setup_error_of_every_agent_is_printed_once() {
    let env = Env::git_hub(&[]);
    for id in ["a", "b", "c", "d"] {
        add_task(&env, &[id, "-m", "Anything"]);
    }
    let started = env.tmp.path().join("started");
    std::fs::create_dir_all(&started).unwrap();
    // Each session waits for all three to start: every loop meets the error.
    let agent = env.agent_script(
        "nokey.sh",
        &format!(
            "touch '{s}/'$FARM_AGENT\nwhile [ $(ls '{s}' | wc -l) -lt 3 ]; do sleep 0.05; done\necho 'Invalid API key · Please run /login'\nexit 1\n",
            s = started.display()
        ),
    );
    let out = farm_run(&env, &agent, &["-j", "3", "--name", "box"]).code(1);
    assert_eq!(out.stderr.matches("error:").count(), 1, "{out:#?}");
    assert_eq!(out.stderr.matches("hint:").count(), 1, "{out:#?}");
    assert!(
        out.stderr.contains("error: box-1, box-2, box-3: `"),
        "{out:#?}"
    );
}

/// `--wrap` runs each session inside the given command, with `{clone}`
/// replaced by the agent's clone; the work still lands.
#[test]
fn sessions_run_inside_the_wrap_command() {
    let env = Env::git_hub(&[]);
    add_task(&env, &["w", "-m", "Anything"]);
    let mark = env.tmp.path().join("wrapped.txt");
    let wrapper = env.tmp.path().join("wrapper.sh");
    std::fs::write(
        &wrapper,
        format!("echo \"$1\" >> '{}'\nshift\nexec \"$@\"\n", mark.display()),
    )
    .unwrap();
    let agent = env.agent_script(
        "work.sh",
        "echo w > w.txt && git add w.txt && git commit --quiet -m 'work on w'\n",
    );
    let wrap = format!("sh '{}' {{clone}}", wrapper.display());
    farm_run(&env, &agent, &["--wrap", &wrap, "--name", "wrapped"]).success();
    let wrapped = std::fs::read_to_string(&mark).unwrap();
    assert!(wrapped.trim().ends_with("clones/wrapped"), "{wrapped}");
    assert_eq!(board(&env, "tasks/done"), BTreeSet::from(["w".to_owned()]));
    let out = farm_run(&env, &agent, &["--wrap", "no-such-wrapper-xyz {clone}"]).code(2);
    assert!(out.stderr.contains("no-such-wrapper-xyz"), "{out:#?}");
}

/// Past `--until`, nothing new is claimed.
#[test]
fn nothing_is_claimed_past_until() {
    let env = Env::git_hub(&[]);
    add_task(&env, &["u", "-m", "Anything"]);
    let agent = env.agent_script("fail.sh", "exit 1\n");
    let out = farm_run(&env, &agent, &["--until", "0s"]).code(6);
    assert!(out.stderr.contains("past --until"), "{out:#?}");
    assert_eq!(board(&env, "tasks"), BTreeSet::from(["u".to_owned()]));
    let out = farm_run(&env, &agent, &["--until", "soon"]).code(2);
    assert!(out.stderr.contains("--until"), "{out:#?}");
}

/// The circuit breaker: after two failed sessions in a row the agent says
/// it pauses, before its third session starts.
#[test]
fn failing_sessions_in_a_row_trip_the_circuit_breaker() {
    let env = Env::git_hub(&[]);
    for id in ["f1", "f2", "f3"] {
        add_task(&env, &[id, "-m", "Anything", "--max-attempts", "9"]);
    }
    let agent = env.agent_script("fail.sh", "echo failing\nexit 3\n");
    let out = farm_run(
        &env,
        &agent,
        &[
            "--trip-after",
            "2",
            "--trip-pause",
            "1s",
            "--max-sessions",
            "3",
        ],
    )
    .code(6);
    let lines: Vec<&str> = out.stderr.lines().collect();
    let claimed: Vec<usize> = (0..lines.len())
        .filter(|&i| lines[i].contains("claimed `"))
        .collect();
    let tripped = lines
        .iter()
        .position(|l| l.contains("circuit breaker"))
        .unwrap_or_else(|| panic!("never tripped: {out:#?}"));
    assert_eq!(claimed.len(), 3, "{out:#?}");
    assert!(
        out.stderr
            .contains("farm run: its agent tripped the circuit breaker: the run pauses"),
        "{out:#?}"
    );
    // Never shorter than asked (`--trip-pause 2s` once printed "pausing 1s").
    assert!(
        out.stderr
            .contains("2 failed sessions in a row and nothing done; pausing 1s (circuit breaker)"),
        "{out:#?}"
    );
    assert!(
        claimed[1] < tripped && tripped < claimed[2],
        "the pause comes after the second failure, before the third session: {out:#?}"
    );
}

/// `--stagger`: two agents ready at once start their sessions at least the
/// stagger apart (a lower bound, which a slow machine only lengthens); the
/// wait for its turn is not session time (the second session was once
/// journaled as lasting the stagger).
#[test]
fn session_starts_are_staggered() {
    let env = Env::git_hub(&[]);
    for id in ["s1", "s2"] {
        add_task(&env, &[id, "-m", "Anything"]);
    }
    let starts = env.tmp.path().join("starts.log");
    let agent = env.agent_script(
        "stamp.sh",
        &format!(
            "date +%s%N >> '{}'\necho x > \"$FARM_TASK.txt\" && git add . && git commit --quiet -m \"work on $FARM_TASK\"\n",
            starts.display()
        ),
    );
    farm_run(&env, &agent, &["-j", "2", "--stagger", "4s"]).success();
    let mut times: Vec<u128> = std::fs::read_to_string(&starts)
        .unwrap()
        .lines()
        .map(|l| l.trim().parse().unwrap())
        .collect();
    times.sort();
    assert_eq!(times.len(), 2);
    // farm spaces the spawns by 4 s; the scripts' own start-up shifts each
    // `date`: by milliseconds on an idle machine, by over 160 ms at a load
    // of 7 on 2 cores (seen: 3,836 ms apart). Unstaggered, they start
    // within milliseconds of each other, so 3.5 s still tells them apart.
    assert!(
        times[1] - times[0] >= 3_500_000_000,
        "started {} ms apart",
        (times[1] - times[0]) / 1_000_000
    );
    // Each session lasts what its (instant) agent took, far below the 4 s
    // the second one waited for its turn.
    let journal = std::fs::read_to_string(env.tmp.path().join("state/journal.jsonl")).unwrap();
    let secs: Vec<f64> = journal
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .filter(|e| e["event"] == "session_end")
        .map(|e| e["secs"].as_f64().unwrap())
        .collect();
    assert_eq!(secs.len(), 2);
    assert!(secs.iter().all(|s| *s < 3.5), "session times {secs:?}");
}

/// `--agent NAME` expands a preset, here one from the user's own presets
/// file (which `farm agents` then lists as the user's): its command runs,
/// with its prompt passing (stdin).
#[test]
fn an_agent_preset_from_the_users_file_is_expanded() {
    let env = Env::git_hub(&[]);
    add_task(&env, &["p", "-m", "Write the word preset"]);
    let config = env.tmp.path().join("config");
    std::fs::create_dir_all(config.join("farm")).unwrap();
    let agent = env.agent_script(
        "stdin.sh",
        "cat > prompt-seen.txt\ngit add prompt-seen.txt && git commit --quiet -m 'work on p'\n",
    );
    std::fs::write(
        config.join("farm/agents.toml"),
        format!(
            "[fake]\ncommand = \"{}\"\nprompt_via = \"stdin\"\n",
            agent.replace('"', "\\\"")
        ),
    )
    .unwrap();
    let state = env.tmp.path().join("state");
    env.farm_git([
        "run",
        "--agent",
        "fake",
        "--state-dir",
        state.to_str().unwrap(),
    ])
    .env("XDG_CONFIG_HOME", &config)
    .run_within(LIMIT)
    .success();
    let seen = env.git(["show", "main:prompt-seen.txt"]);
    assert!(seen.contains("Write the word preset"), "{seen}");
    let listed = env
        .farm(["agents", "--json"])
        .env("XDG_CONFIG_HOME", &config)
        .run()
        .success()
        .json();
    let fake = listed["agents"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["name"] == "fake")
        .expect("the user's preset is listed");
    assert_eq!(fake["origin"], "user");
    assert_eq!(fake["prompt_via"], "stdin");
    assert!(
        listed["agents"]
            .as_array()
            .unwrap()
            .iter()
            .any(|a| a["name"] == "claude"),
        "built-in presets are listed too"
    );
}

/// `farm status` mid-run says which agent works on what; after the run it
/// gives the board's counts, the last sessions and the totals.
#[test]
fn status_shows_the_run_while_it_goes_and_after() {
    let env = Env::git_hub(&[]);
    for id in ["s1", "s2"] {
        add_task(&env, &[id, "-m", "Anything"]);
    }
    let started = env.tmp.path().join("started");
    let go = env.tmp.path().join("go");
    let agent = env.agent_script(
        "gated.sh",
        &format!(
            "touch '{}'\nwhile [ ! -e '{}' ]; do sleep 0.05; done\necho x > \"$FARM_TASK.txt\" && git add . && git commit --quiet -m \"work on $FARM_TASK\"\n",
            started.display(),
            go.display()
        ),
    );
    let status = || status_json(&env);
    let child = env
        .farm_git(run_args(&env, &agent, &["--name", "solo"]))
        .spawn();
    wait_for(&started);
    let mid = status();
    assert_eq!(mid["runs"][0]["running"], true, "{mid:#}");
    assert_eq!(mid["agents"][0]["agent"], "solo", "{mid:#}");
    assert_eq!(mid["agents"][0]["state"], "working", "{mid:#}");
    assert_eq!(mid["board"]["claimed"], 1, "{mid:#}");
    assert_eq!(mid["claims"].as_array().unwrap().len(), 1, "{mid:#}");
    std::fs::write(&go, "").unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{out:?}");
    let after = status();
    assert_eq!(after["runs"][0]["running"], false, "{after:#}");
    assert_eq!(after["board"]["done"], 2, "{after:#}");
    assert_eq!(after["totals"]["sessions"], 2, "{after:#}");
    assert_eq!(after["totals"]["done"], 2, "{after:#}");
    assert_eq!(after["sessions"][1]["class"], "success", "{after:#}");
    // Not "idle": its run is over.
    assert_eq!(after["agents"][0]["state"], "ended", "{after:#}");
    let text = status_text(&env);
    assert!(text.contains("2 done") && text.contains("solo"), "{text}");
    assert!(text.lines().all(|l| l.chars().count() <= 80), "{text}");
}

/// Regression: during a gated night every agent showed `idle for 10s` while
/// it held a claim and ran a session. A successful session's integration
/// (here, a gate of 2 s) goes on beside the loop, which claims the next
/// task at once; the `done` of the first task, journaled after the second
/// claim, set the agent idle. Sampled mid-session, after that `done`:
/// working on the second task, in `--json` and in text.
#[test]
fn status_shows_an_agent_busy_while_its_last_task_integrates_beside() {
    let env = Env::git_hub(&[("gate.sh", "sleep 2\necho 'PASS: t'\n")]);
    let toml = env.hub.join("farm.toml");
    let text = std::fs::read_to_string(&toml).unwrap();
    std::fs::write(
        &toml,
        format!(
            "{text}\n[tests]\ncommand = \"sh gate.sh\"\nformat = \"lines\"\ntimeout = \"60s\"\n"
        ),
    )
    .unwrap();
    env.git(["commit", "-qam", "a slow gate"]);
    add_task(&env, &["b1", "-m", "First", "--priority", "9"]);
    add_task(&env, &["b2", "-m", "Second", "--priority", "1"]);
    let go = env.tmp.path().join("go");
    let agent = env.agent_script(
        "agent.sh",
        &format!(
            "set -eu\nif [ \"$FARM_TASK\" = b2 ]; then while [ ! -e '{}' ]; do sleep 0.05; done; fi\necho x > \"$FARM_TASK.txt\" && git add . && git commit --quiet -m \"work on $FARM_TASK\"\n",
            go.display()
        ),
    );
    let child = env
        .farm_git(run_args(&env, &agent, &["--name", "solo"]))
        .spawn();
    let start = Instant::now();
    // The first task's `done` comes after the second claim, while b2's
    // session waits for `go`.
    while !crate::steer::journal_events(&env, "done")
        .iter()
        .any(|e| e["task"] == "b1")
    {
        assert!(start.elapsed() < LIMIT, "b1 never landed");
        std::thread::sleep(Duration::from_millis(50));
    }
    let claims = crate::steer::journal_events(&env, "claim");
    assert!(claims.iter().any(|e| e["task"] == "b2"), "{claims:?}");
    let mid = status_json(&env);
    let text = status_text(&env);
    std::fs::write(&go, "").unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{out:?}");
    assert_eq!(mid["agents"][0]["state"], "working", "{mid:#}");
    assert_eq!(mid["agents"][0]["task"], "b2", "{mid:#}");
    assert!(text.contains("working on `b2` for "), "{text}");
}

/// Regression: when one agent's CLI hit its usage limit every agent waited,
/// but only that agent had a `limit` line: `farm status` called the other
/// idle, and the report left its lane's gap unexplained. Mid-wait, with the
/// other agent's session over: both agents are waiting, saying why, and the
/// journal has a wait for each.
#[test]
fn status_shows_every_agent_that_waits_for_a_limit_as_waiting() {
    let env = Env::git_hub(&[]);
    add_task(&env, &["hit", "-m", "Hits the limit", "--priority", "9"]);
    add_task(&env, &["slow", "-m", "Runs on", "--priority", "5"]);
    add_task(&env, &["later", "-m", "After the wait", "--priority", "1"]);
    let go = env.tmp.path().join("go");
    let agent = env.agent_script(
        "agent.sh",
        &format!(
            r#"set -eu
case "$FARM_TASK" in
hit) echo "Claude AI usage limit reached|$(( $(date +%s) + 90 ))"; exit 1;;
slow) while [ ! -e '{}' ]; do sleep 0.05; done;;
esac
echo x > "$FARM_TASK.txt" && git add . && git commit --quiet -m "work on $FARM_TASK"
"#,
            go.display()
        ),
    );
    let mut child = env
        .farm_git(run_args(&env, &agent, &["-j", "2", "--name", "w"]))
        .spawn();
    let start = Instant::now();
    while crate::steer::journal_events(&env, "limit").is_empty() {
        assert!(start.elapsed() < LIMIT, "no limit was hit");
        std::thread::sleep(Duration::from_millis(50));
    }
    std::fs::write(&go, "").unwrap();
    // `slow` lands; its agent then waits too. Well before the limit lifts.
    while !crate::steer::journal_events(&env, "done")
        .iter()
        .any(|e| e["task"] == "slow")
    {
        assert!(start.elapsed() < LIMIT, "`slow` never landed");
        std::thread::sleep(Duration::from_millis(50));
    }
    let settled = Instant::now();
    let json = loop {
        let json = status_json(&env);
        let agents = json["agents"].as_array().unwrap();
        if agents.iter().all(|a| a["state"] == "waiting")
            || settled.elapsed() > Duration::from_secs(10)
        {
            break json;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let text = status_text(&env);
    let waits = crate::steer::journal_events(&env, "wait");
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let _ = child.wait();
    let agents = json["agents"].as_array().unwrap();
    assert_eq!(agents.len(), 2, "{json:#}");
    for a in agents {
        assert_eq!(a["state"], "waiting", "{json:#}");
        assert!(
            a["why"].as_str().unwrap().contains("usage limit"),
            "{json:#}"
        );
    }
    for name in ["w-1", "w-2"] {
        assert!(
            waits.iter().any(|w| w["agent"] == name),
            "no wait journaled for {name}: {waits:?}"
        );
    }
    let doing: Vec<&str> = text.lines().filter(|l| l.starts_with("w-")).collect();
    assert_eq!(doing.len(), 2, "{text}");
    assert!(
        doing
            .iter()
            .all(|l| l.contains("waiting") && l.contains("usage limit")),
        "both agents say why they wait:\n{text}"
    );
}

/// Regression: a session stopped at its timeout was listed with OUTCOME
/// `task failed`, as a session that failed on its own is. It says `timed
/// out`.
#[test]
fn status_says_a_session_that_timed_out_timed_out() {
    let env = Env::git_hub(&[]);
    let state = env.tmp.path().join("state");
    std::fs::create_dir_all(&state).unwrap();
    let lines = [
        r#"{"at":"2026-12-01T00:00:00.000Z","pid":7,"event":"run_start","agents":["a"]}"#,
        r#"{"at":"2026-12-01T00:00:01.000Z","pid":7,"agent":"a","event":"claim","task":"slow","attempt":1}"#,
        r#"{"at":"2026-12-01T00:10:01.000Z","pid":7,"agent":"a","event":"session_end","task":"slow","attempt":1,"outcome":"timed out","class":"task failed","secs":600.0}"#,
        r#"{"at":"2026-12-01T00:10:02.000Z","pid":7,"agent":"a","event":"claim","task":"quick","attempt":1}"#,
        r#"{"at":"2026-12-01T00:10:03.000Z","pid":7,"agent":"a","event":"session_end","task":"quick","attempt":1,"outcome":"failed with exit code 1","class":"task failed","secs":1.0}"#,
        r#"{"at":"2026-12-01T00:10:04.000Z","pid":7,"event":"run_end"}"#,
    ];
    std::fs::write(state.join("journal.jsonl"), lines.join("\n") + "\n").unwrap();
    let text = status_text(&env);
    let row = |task: &str| {
        text.lines()
            .find(|l| l.contains(&format!(" {task} ")))
            .unwrap_or_else(|| panic!("no row of {task}:\n{text}"))
            .to_owned()
    };
    assert!(row("slow").trim_end().ends_with("timed out"), "{text}");
    assert!(row("quick").trim_end().ends_with("task failed"), "{text}");
}

/// Regression: an agent in a merge session showed as idle. The journal of a
/// live run (this test's own process stands for it) whose agent started a
/// merge session: `farm status` says it is merging, and for what.
#[test]
fn status_shows_an_agent_in_a_merge_session_as_merging() {
    let env = Env::git_hub(&[]);
    let state = env.tmp.path().join("state");
    std::fs::create_dir_all(&state).unwrap();
    let pid = std::process::id();
    let at = |secs_ago: u64| {
        farm::claims::record::timestamp(
            std::time::SystemTime::now() - Duration::from_secs(secs_ago),
        )
    };
    let lines = [
        format!(
            r#"{{"at":"{}","pid":{pid},"event":"run_start","agents":["m-1"]}}"#,
            at(60)
        ),
        format!(
            r#"{{"at":"{}","pid":{pid},"agent":"m-1","event":"claim","task":"t1","attempt":1}}"#,
            at(50)
        ),
        format!(
            r#"{{"at":"{}","pid":{pid},"agent":"m-1","event":"session_end","task":"t1","attempt":1,"outcome":"success","class":"success","secs":20.0}}"#,
            at(30)
        ),
        format!(
            r#"{{"at":"{}","pid":{pid},"agent":"m-1","event":"conflict","task":"t1","files":["a"]}}"#,
            at(29)
        ),
        format!(
            r#"{{"at":"{}","pid":{pid},"agent":"m-1","event":"merge_start","task":"t1","conflicts":1}}"#,
            at(28)
        ),
    ];
    std::fs::write(state.join("journal.jsonl"), lines.join("\n") + "\n").unwrap();
    let status = status_json(&env);
    assert_eq!(status["runs"][0]["running"], true, "{status:#}");
    assert_eq!(status["agents"][0]["state"], "merging", "{status:#}");
    assert_eq!(status["agents"][0]["task"], "t1", "{status:#}");
    let text = status_text(&env);
    assert!(text.contains("merging `t1` for "), "{text}");
}

/// Regression: a run whose only task is claimed on another machine said "idle
/// for 10m01s" without saying for what, showed nothing of that holder, and
/// its lines reached 109 columns with long names. It now says whose claim
/// it waits for, lists the holder as not this run's, and fits 80 columns.
#[test]
fn status_says_whose_claim_an_idle_agent_waits_for_within_80_columns() {
    let env = Env::git_hub(&[]);
    let task = "a-task-with-a-rather-long-identifier-for-the-status-table";
    add_task(&env, &[task, "-m", "Anything"]);
    env.plant(
        &crate::common::record(
            task,
            "a-colleague-with-a-long-agent-name",
            "box2",
            Duration::from_secs(60),
            Duration::ZERO,
        ),
        std::time::SystemTime::now(),
    );
    let agent = env.agent_script("agent.sh", "exit 1\n");
    let name = "an-agent-name-that-goes-on-and-on";
    let mut child = env
        .farm_git(run_args(&env, &agent, &["--name", name, "--watch"]))
        .spawn();
    let status = || status_json(&env);
    let start = Instant::now();
    let json = loop {
        let json = status();
        let idle = json["agents"]
            .as_array()
            .unwrap()
            .iter()
            .any(|a| a["state"] == "idle" && a["waiting_for"].is_string());
        if idle {
            break json;
        }
        assert!(start.elapsed() < LIMIT, "{json:#}");
        std::thread::sleep(Duration::from_millis(100));
    };
    let mine = json["agents"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["agent"] == name)
        .unwrap_or_else(|| panic!("{json:#}"));
    assert_eq!(
        mine["waiting_for"],
        format!("`{task}` (held by a-colleague-with-a-long-agent-name@box2)").as_str(),
        "{json:#}"
    );
    let theirs = json["agents"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["agent"] == "a-colleague-with-a-long-agent-name@box2")
        .unwrap_or_else(|| panic!("{json:#}"));
    assert_eq!(theirs["state"], "elsewhere", "{json:#}");
    assert_eq!(theirs["task"], task, "{json:#}");
    let text = status_text(&env);
    assert!(text.contains("waiting "), "{text}");
    assert!(text.contains("not this run"), "{text}");
    assert!(
        text.lines().all(|l| l.chars().count() <= 80),
        "a line over 80 columns:\n{text}"
    );
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let _ = child.wait();
}

/// `farm doctor` on a healthy setup: every check passes, the agent answers
/// --version; on a broken one (agent missing, an invalid task file) it
/// names each failure with its fix and exits 1.
#[test]
fn doctor_passes_a_healthy_setup_and_names_what_is_broken() {
    use std::os::unix::fs::PermissionsExt;
    let env = Env::git_hub(&[]);
    add_task(&env, &["d", "-m", "Anything"]);
    let agent = env.tmp.path().join("fake-agent");
    std::fs::write(
        &agent,
        "#!/bin/sh\n[ \"$1\" = --version ] && echo 'fake-agent 1.0' && exit 0\nexit 1\n",
    )
    .unwrap();
    std::fs::set_permissions(&agent, std::fs::Permissions::from_mode(0o755)).unwrap();
    let state = env.tmp.path().join("state");
    let doctor = |agent: &str| {
        env.farm_git([
            "doctor",
            "--agent",
            agent,
            "--state-dir",
            state.to_str().unwrap(),
        ])
        .run()
    };
    let ok = doctor(agent.to_str().unwrap()).success();
    for check in ["git", "hub", "claims", "board", "agent", "disk"] {
        assert!(
            ok.stdout
                .lines()
                .any(|l| l.starts_with(&format!("ok {check}"))),
            "{check}: {ok:#?}"
        );
    }
    assert!(ok.stdout.contains("fake-agent 1.0"), "{ok:#?}");
    assert!(
        ok.stdout.contains("claimed and released a probe"),
        "{ok:#?}"
    );
    assert!(
        env.farm(["locks", "--json"]).run().success().json()["claims"]
            .as_array()
            .unwrap()
            .is_empty()
    );

    // Broken: an invalid task file on the branch, and no such agent.
    let clone = env.tmp.path().join("breaker");
    let hub = env.hub.to_str().unwrap().to_owned();
    env.git(["clone", "--quiet", &hub, clone.to_str().unwrap()]);
    std::fs::write(clone.join("tasks/bad.md"), "no front matter\n").unwrap();
    for args in [
        vec!["add", "tasks/bad.md"],
        vec!["commit", "--quiet", "-m", "a bad task"],
        vec!["push", "--quiet", "origin", "HEAD:main"],
    ] {
        let mut full = vec!["-C", clone.to_str().unwrap()];
        full.extend(args);
        env.git(full);
    }
    let bad = doctor("no-such-agent-xyz").code(1);
    assert!(bad.stdout.contains("!! agent"), "{bad:#?}");
    assert!(
        bad.stdout.contains("`no-such-agent-xyz` not found"),
        "{bad:#?}"
    );
    assert!(bad.stdout.contains("!! board"), "{bad:#?}");
    assert!(bad.stdout.contains("fix: farm tasks"), "{bad:#?}");
    assert!(bad.stderr.contains("2 check(s) failed"), "{bad:#?}");
}

/// `farm logs TASK` prints the latest session log of that task.
#[test]
fn logs_prints_a_tasks_latest_session_log() {
    let env = Env::git_hub(&[]);
    add_task(&env, &["l1", "-m", "Anything"]);
    let agent = env.agent_script(
        "talk.sh",
        "echo \"hello from $FARM_TASK\"\necho x > \"$FARM_TASK.txt\" && git add . && git commit --quiet -m \"work on $FARM_TASK\"\n",
    );
    farm_run(&env, &agent, &["--name", "talker"]).success();
    let state = env.tmp.path().join("state");
    let state = state.to_str().unwrap();
    for what in ["l1", "talker"] {
        let out = env
            .farm(["logs", what, "--state-dir", state])
            .run()
            .success();
        assert!(out.stdout.contains("hello from l1"), "{what}: {out:#?}");
        assert!(out.stderr.contains("logs/talker/l1-"), "{what}: {out:#?}");
        // A header and a footer.
        assert!(
            out.stdout
                .starts_with("[farm] session: task l1, attempt 1, agent talker, started "),
            "{out:#?}"
        );
        assert!(
            out.stdout
                .lines()
                .last()
                .unwrap()
                .starts_with("[farm] ended: success after "),
            "{out:#?}"
        );
    }
    // --list: one aligned row per log, under a header.
    add_task(&env, &["l2", "-m", "Anything"]);
    farm_run(&env, &agent, &["--name", "talker"]).success();
    let list = env
        .farm(["logs", "--list", "--state-dir", state])
        .run()
        .success()
        .stdout;
    let lines: Vec<&str> = list.lines().collect();
    assert_eq!(lines.len(), 3, "{list}");
    assert!(lines[0].starts_with("AGE"), "{list}");
    let at = |l: &str| l.find("/logs/talker/").unwrap();
    assert_eq!(at(lines[1]), at(lines[2]), "the paths line up: {list}");
    let none = env
        .farm(["logs", "nothing", "--state-dir", state])
        .run()
        .code(2);
    assert!(
        none.stderr.contains("no session logs of `nothing`"),
        "{none:#?}"
    );
}

/// `-v` once added almost nothing to a run. It now says each session's
/// command, clone, prompt size and log, what the work was rebased onto, and
/// how long each push took; without `-v` none of it.
#[test]
fn verbose_run_says_the_steps_between() {
    let env = Env::git_hub(&[]);
    add_task(&env, &["v1", "-m", "Anything"]);
    let agent = env.agent_script(
        "agent.sh",
        "echo x > \"$FARM_TASK.txt\" && git add . && git commit --quiet -m \"work on $FARM_TASK\"\n",
    );
    let quiet = farm_run(&env, &agent, &["--name", "box"]).success();
    assert!(!quiet.stderr.contains("bytes of prompt"), "{quiet:#?}");
    add_task(&env, &["v2", "-m", "Anything"]);
    let loud = farm_run(&env, &agent, &["--name", "box", "-v"]).success();
    for want in [
        "box: `v2`: running `sh ",
        "bytes of prompt by arg",
        "box: `v2`: pushed to `main` in ",
    ] {
        assert!(loud.stderr.contains(want), "{want}: {loud:#?}");
    }
}

/// `farm logs --pretty`: a session that printed Claude Code's stream-json
/// reads as turns — its text, one line per tool call and result, the
/// result — with farm's header and footer kept.
#[test]
fn logs_pretty_renders_stream_json_as_turns() {
    let env = Env::git_hub(&[]);
    add_task(&env, &["p1", "-m", "Anything"]);
    let agent = env.agent_script(
        "stream.sh",
        r#"cat <<'EOF'
{"type":"system","subtype":"init","model":"m1","tools":["Bash"]}
{"type":"assistant","message":{"content":[{"type":"text","text":"Writing it."},{"type":"tool_use","id":"u1","name":"Bash","input":{"command":"echo x > p1.txt"}}]}}
{"type":"user","message":{"content":[{"type":"tool_result","tool_use_id":"u1","content":""}]}}
{"type":"result","subtype":"success","is_error":false,"num_turns":2,"duration_ms":1500,"total_cost_usd":0.5,"result":"Done."}
EOF
echo x > "$FARM_TASK.txt" && git add . && git commit --quiet -m "work on $FARM_TASK"
"#,
    );
    farm_run(&env, &agent, &["--name", "streamer"]).success();
    let state = env.tmp.path().join("state");
    let out = env
        .farm([
            "logs",
            "p1",
            "--pretty",
            "--state-dir",
            state.to_str().unwrap(),
        ])
        .run()
        .success();
    let lines: Vec<&str> = out.stdout.lines().collect();
    assert!(lines[0].starts_with("[farm] session: task p1"), "{out:#?}");
    assert!(lines[1].starts_with("[farm] "), "the command: {out:#?}");
    assert_eq!(
        lines[2..lines.len() - 1],
        [
            "── session: m1 (1 tools)",
            "agent: Writing it.",
            "→ Bash echo x > p1.txt",
            "← (no output)",
            "── result: success, 2 turns, 1.5s, $0.50",
            "agent: Done.",
        ],
        "{out:#?}"
    );
    assert!(lines.last().unwrap().starts_with("[farm] ended: success"));
    assert!(!out.stdout.contains("{\"type\""), "{out:#?}");
}

/// Where the CLI reports its cost (Claude's `result` event), the journal
/// keeps it per session, and `farm status` and the run's last line sum it.
#[test]
fn session_costs_are_summed_for_the_run() {
    let env = Env::git_hub(&[]);
    for id in ["c1", "c2"] {
        add_task(&env, &[id, "-m", "Anything"]);
    }
    let agent = env.agent_script(
        "costly.sh",
        r#"echo x > "$FARM_TASK.txt" && git add . && git commit --quiet -m "work on $FARM_TASK"
echo '{"type":"result","subtype":"success","is_error":false,"total_cost_usd":0.25,"usage":{"input_tokens":1000,"output_tokens":200}}'
"#,
    );
    let out = farm_run(&env, &agent, &["--name", "box"]).success();
    assert!(
        out.stderr.contains("$0.50, 2000 tokens in, 400 out"),
        "{out:#?}"
    );
    let status = status_json(&env);
    assert_eq!(status["cost_usd"], 0.5, "{status:#}");
    assert_eq!(status["input_tokens"], 2000, "{status:#}");
    assert_eq!(status["sessions"][0]["cost_usd"], 0.25, "{status:#}");
    // Rolled up per agent and per task.
    let by_agent = &status["by_agent"]["box"];
    assert_eq!(
        [
            &by_agent["sessions"],
            &by_agent["cost_usd"],
            &by_agent["input_tokens"],
            &by_agent["output_tokens"]
        ],
        [
            &serde_json::json!(2),
            &serde_json::json!(0.5),
            &serde_json::json!(2000),
            &serde_json::json!(400)
        ],
        "{status:#}"
    );
    assert!(by_agent["secs"].as_f64().unwrap() > 0.0, "{status:#}");
    // And per agent CLI (the program of --agent: `sh` runs the script).
    assert_eq!(status["by_cli"]["sh"]["cost_usd"], 0.5, "{status:#}");
    assert_eq!(status["by_task"]["c2"]["cost_usd"], 0.25, "{status:#}");
    // The run is over: its agent is not "idle".
    assert_eq!(status["agents"][0]["state"], "ended", "{status:#}");
    assert_eq!(status["agents"][0]["last_task"], "c2", "{status:#}");
    let text = status_text(&env);
    assert!(text.contains("box    run ended "), "{text}");
    assert!(!text.contains("idle for"), "{text}");
    assert!(
        text.lines()
            .any(|l| l.split_whitespace().collect::<Vec<_>>()
                == ["box", "2", "$0.50", "2000", "400"]),
        "{text}"
    );
}

/// A cost budget. No new claim once the reported cost reaches `--max-cost`
/// (or `max_cost` in farm.toml); a session running when it is crossed
/// finishes: the overrun is at most one session per agent.
#[test]
fn no_new_claims_once_the_cost_budget_is_spent() {
    for (agents, args, toml) in [
        ("1", vec!["--max-cost", "1"], ""),
        ("2", vec![], "max_cost = 1.0\n"),
    ] {
        let env = Env::git_hub(&[]);
        if !toml.is_empty() {
            let path = env.hub.join("farm.toml");
            let text = std::fs::read_to_string(&path).unwrap();
            std::fs::write(&path, format!("{toml}{text}")).unwrap();
            env.git(["commit", "-qam", "a budget"]);
        }
        for i in 0..10 {
            add_task(&env, &[&format!("c{i}"), "-m", "Anything"]);
        }
        let agent = env.agent_script(
            "costly.sh",
            r#"sleep 0.2; echo x > "$FARM_TASK.txt" && git add . && git commit --quiet -m "work on $FARM_TASK"
echo '{"type":"result","subtype":"success","is_error":false,"total_cost_usd":0.3}'
"#,
        );
        let mut all = vec!["-j", agents];
        all.extend(args.iter().copied());
        let out = farm_run(&env, &agent, &all).code(6);
        let done = board(&env, "tasks/done").len();
        // 4 sessions reach $1.20; each other agent may finish one more.
        let most = 4 + agents.parse::<usize>().unwrap() - 1;
        assert!(
            (4..=most).contains(&done),
            "{done} done with -j {agents}: {out:#?}"
        );
        assert!(
            out.stderr
                .contains("the cost budget is spent ($1.20 of $1.00): no new claims")
                || out
                    .stderr
                    .contains("the cost budget is spent ($1.50 of $1.00): no new claims"),
            "{out:#?}"
        );
        assert!(
            out.stderr.contains("farm run: ended with work left: "),
            "{out:#?}"
        );
    }
    let env = Env::git_hub(&[]);
    let out = farm_run(&env, "sh", &["--max-cost=-3"]).code(2);
    assert!(
        out.stderr.contains("not an amount of dollars above 0"),
        "{out:#?}"
    );
}

/// `--config-per-agent`: each agent's CLI gets a config directory of its own
/// through the preset's variable, seeded with a copy of the user's file.
#[test]
fn each_agent_gets_a_config_directory_of_its_own() {
    let env = Env::git_hub(&[]);
    for id in ["k1", "k2", "k3", "k4"] {
        add_task(&env, &[id, "-m", "Anything"]);
    }
    let config = env.tmp.path().join("config");
    std::fs::create_dir_all(config.join("farm")).unwrap();
    let seed = env.tmp.path().join("seed.json");
    std::fs::write(&seed, "{\"theme\": \"dark\"}\n").unwrap();
    let agent = env.agent_script(
        "conf.sh",
        r#"test -f "$MYCONF/seed.json" || exit 9
echo "$FARM_AGENT" >> "$MYCONF/who"
echo x > "$FARM_TASK.txt" && git add . && git commit --quiet -m "work on $FARM_TASK"
"#,
    );
    std::fs::write(
        config.join("farm/agents.toml"),
        format!(
            "[conf]\ncommand = \"{}\"\nprompt_via = \"stdin\"\nconfig_env = \"MYCONF\"\nconfig_seed = [\"{}\"]\n",
            agent.replace('"', "\\\""),
            seed.display()
        ),
    )
    .unwrap();
    let state = env.tmp.path().join("state");
    env.farm_git([
        "run",
        "--agent",
        "conf",
        "-j",
        "2",
        "--name",
        "cfg",
        "--config-per-agent",
        "--state-dir",
        state.to_str().unwrap(),
    ])
    .env("XDG_CONFIG_HOME", &config)
    .run_within(LIMIT)
    .success();
    assert_eq!(board(&env, "tasks/done").len(), 4);
    let mut seen = 0;
    for agent in ["cfg-1", "cfg-2"] {
        let dir = state.join("config").join(agent);
        let Ok(who) = std::fs::read_to_string(dir.join("who")) else {
            continue; // this agent may not have won any claim
        };
        assert!(who.lines().all(|l| l == agent), "{agent}: {who}");
        assert_eq!(
            std::fs::read_to_string(dir.join("seed.json")).unwrap(),
            "{\"theme\": \"dark\"}\n"
        );
        seen += who.lines().count();
    }
    assert_eq!(
        seen, 4,
        "every session wrote into its agent's own directory"
    );
}

/// An agent goes on to its next task while its last one is still being
/// pushed: the hub's pre-receive hook holds the first push for 2 s, and the
/// second session starts (in the agent's other clone) before it lets go.
/// Both tasks still land, once each, and no claim is left.
#[test]
fn the_next_session_starts_while_the_last_push_is_received() {
    let env = Env::git_hub(&[("README", "x\n")]);
    let l = logs(&env);
    add_task(&env, &["first", "-m", "One", "--priority", "2"]);
    add_task(&env, &["second", "-m", "Two", "--priority", "1"]);
    let hook = env.hub.join(".git/hooks/pre-receive");
    std::fs::write(
        &hook,
        format!(
            "#!/bin/sh\n\
             # Hold only the push that brings `first` to main.\n\
             cat > /dev/null\n\
             if [ ! -e '{l}/held' ]; then touch '{l}/held'; sleep 2; touch '{l}/released'; fi\n",
            l = l.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&hook, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let agent = env.agent_script(
        "agent.sh",
        &format!(
            r#"L='{}'
if [ -e "$L/released" ]; then echo "$FARM_TASK after" >> "$L/starts.log"; else echo "$FARM_TASK before" >> "$L/starts.log"; fi
echo "$FARM_TASK" > "$FARM_TASK.txt"
git add "$FARM_TASK.txt" && git commit --quiet -m "work on $FARM_TASK"
"#,
            l.display()
        ),
    );
    farm_run(&env, &agent, &["-j", "1"]).success();

    assert_eq!(
        log_lines(&env, "starts.log"),
        ["first before", "second before"],
        "the second session waited for the first push"
    );
    assert!(l.join("released").exists(), "the hook held a push");
    assert_eq!(
        board(&env, "tasks/done"),
        BTreeSet::from(["first".into(), "second".into()])
    );
    assert_eq!(show(&env, "main:second.txt").as_deref(), Some("second\n"));
    assert!(
        env.tmp
            .path()
            .join("state/clones")
            .read_dir()
            .unwrap()
            .count()
            >= 2,
        "two clones"
    );
    assert_hub_sound(&env);
}

/// One task looked at, a failed one put back, one taken away — without
/// editing files by hand.
#[test]
fn task_show_retry_and_rm() {
    let env = Env::git_hub(&[]);
    add_task(
        &env,
        &[
            "flaky",
            "--max-attempts",
            "1",
            "--label",
            "code",
            "-m",
            "Try hard",
        ],
    );
    add_task(&env, &["next", "--after", "flaky", "-m", "After it"]);
    let gate = env.tmp.path().join("works");
    let agent = env.agent_script(
        "agent.sh",
        &format!(
            "[ -e '{}' ] || {{ echo 'cannot finish'; exit 3; }}\necho $FARM_TASK > $FARM_TASK.txt\ngit add -A\ngit commit -qm $FARM_TASK\n",
            gate.display()
        ),
    );
    farm_run(&env, &agent, &[]).code(5);
    assert_eq!(
        board(&env, "tasks/failed"),
        BTreeSet::from(["flaky".into()])
    );

    let out = env.farm_git(["task", "show", "flaky"]).run().success();
    for want in [
        "`flaky`: Try hard\n",
        "state:    failed; 1 of 1 attempts used\n",
        "labels:   code\n",
        "file:     tasks/failed/flaky.md on `main`\n",
        "## Attempt 1 — failed with exit code 3",
        "- last output: `cannot finish`",
    ] {
        assert!(out.stdout.contains(want), "{want:?}: {}", out.stdout);
    }
    let doc = env
        .farm_git(["task", "show", "next", "--json"])
        .run()
        .success()
        .json();
    assert_eq!(doc["status"], "stuck", "{doc:#}");
    assert_eq!(doc["place"], "pending");
    assert_eq!(doc["after"], serde_json::json!(["flaky"]));

    // Retry: back on the board, attempts reset, the note kept; it runs again.
    let failed = show(&env, "main:tasks/failed/flaky.md").unwrap();
    assert!(failed.contains("\nattempts = 1"), "{failed}");
    let out = env.farm_git(["task", "retry", "flaky"]).run().success();
    assert!(
        out.stdout.contains("`flaky` is back on the board"),
        "{out:#?}"
    );
    let text = show(&env, "main:tasks/flaky.md").unwrap();
    assert!(!text.contains("\nattempts = 1"), "attempts reset: {text}");
    assert!(
        text.contains("## Attempt 1 — failed") && text.contains("## Retried"),
        "{text}"
    );
    let out = env.farm_git(["task", "retry", "flaky"]).run().code(2);
    assert!(
        out.stderr
            .contains("`flaky` is on the board already, not failed"),
        "{out:#?}"
    );
    std::fs::write(&gate, "").unwrap();
    farm_run(&env, &agent, &[]).success();
    assert_eq!(
        board(&env, "tasks/done"),
        BTreeSet::from(["flaky".into(), "next".into()])
    );
    // Done tasks keep their titles in `farm tasks`.
    let tasks = env.farm_git(["tasks"]).run().success().stdout;
    assert!(
        tasks
            .lines()
            .any(|l| l.starts_with("next") && l.contains("done") && l.contains("After it")),
        "{tasks}"
    );
    let out = env.farm_git(["task", "retry", "next"]).run().code(2);
    assert!(
        out.stderr.contains("`next` is done, not failed"),
        "{out:#?}"
    );

    // Rm: a task others come after needs --force; a claimed one is refused.
    add_task(&env, &["base", "-m", "Base"]);
    add_task(&env, &["top", "--after", "base", "-m", "Top"]);
    let out = env.farm_git(["task", "rm", "base"]).run().code(2);
    assert!(
        out.stderr.contains("`top` come(s) after `base`"),
        "{out:#?}"
    );
    env.farm_git(["claim", "top"]).run().success();
    let out = env.farm_git(["task", "rm", "top"]).run().code(3);
    assert!(out.stderr.contains("`top` is claimed"), "{out:#?}");
    env.farm_git(["release", "top"]).run().success();
    let out = env.farm_git(["task", "rm", "top"]).run().success();
    assert!(
        out.stdout.contains("removed `top` (it was pending)"),
        "{out:#?}"
    );
    env.farm_git(["task", "rm", "base"]).run().success();
    env.farm_git(["task", "rm", "flaky"]).run().success();
    assert_eq!(board(&env, "tasks"), BTreeSet::new());
    assert_eq!(board(&env, "tasks/done"), BTreeSet::from(["next".into()]));
    let out = env.farm_git(["task", "rm", "nope"]).run().code(2);
    assert!(
        out.stderr.contains("no task `nope` on the board"),
        "{out:#?}"
    );
    let out = env.farm_git(["task", "show", "nope"]).run().code(2);
    assert!(
        out.stderr.contains("no task `nope` on the board"),
        "{out:#?}"
    );
    assert_hub_sound(&env);
}

/// Every line of a run says when (local time by default,
/// `--timestamps utc|none`), and takes colour on a terminal or with
/// `--color always`: a task done in green, a failure in red.
#[test]
fn run_lines_say_when_and_take_colour_when_asked() {
    let run = |args: &[&str]| {
        let env = Env::git_hub(&[]);
        add_task(&env, &["good", "-m", "Works"]);
        add_task(&env, &["bad", "--max-attempts", "1", "-m", "Fails"]);
        let agent = env.agent_script(
            "agent.sh",
            "[ \"$FARM_TASK\" = bad ] && { echo nope; exit 3; }\necho x > x.txt\ngit add -A\ngit commit -qm x\n",
        );
        let mut args = args.to_vec();
        args.extend(["--name", "box"]);
        farm_run(&env, &agent, &args).code(5).stderr
    };
    let check = |stderr: &str, pattern: &str| {
        let re = regex::Regex::new(pattern).unwrap();
        let lines: Vec<&str> = stderr.lines().collect();
        assert!(lines.len() >= 4, "{stderr}");
        for line in &lines {
            assert!(
                re.is_match(line),
                "{line:?} does not match {pattern}: {stderr}"
            );
        }
    };
    check(
        &run(&[]),
        r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d (farm run: |box: |  failed  )",
    );
    check(
        &run(&["--timestamps", "utc"]),
        r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ (farm run: |box: |  failed  )",
    );
    check(
        &run(&["--timestamps", "none"]),
        r"^(farm run: |box: |  failed  )",
    );
    let colour = run(&["--color", "always", "--timestamps", "utc"]);
    let line = |needle: &str| {
        colour
            .lines()
            .find(|l| l.contains(needle))
            .unwrap_or_else(|| panic!("no line with {needle:?}: {colour}"))
            .to_owned()
    };
    assert!(
        line("`good` done").contains("\x1b[32mbox: `good` done"),
        "{colour}"
    );
    assert!(
        line("`bad`: attempt 1 failed").contains("\x1b[31m"),
        "{colour}"
    );
    assert!(
        line("`good` done").starts_with("\x1b[2m"),
        "the time is dim: {colour}"
    );
}

/// A session that committed its work and then failed within a second,
/// saying nothing, was classed "did not start; no attempt counted" — and a
/// second such session a setup error — though its commit shows it ran. It
/// is the task's failure: an attempt counted, its work rescued.
#[test]
fn a_session_that_committed_before_failing_fast_started() {
    let env = Env::git_hub(&[]);
    add_task(&env, &["c1", "-m", "Anything", "--max-attempts", "1"]);
    let agent = env.agent_script(
        "commit-then-fail.sh",
        "echo w > w.txt\ngit add w.txt && git commit --quiet -m 'half the work'\nexit 1\n",
    );
    let out = farm_run(&env, &agent, &[]);
    assert!(!out.stderr.contains("did not start"), "{out:#?}");
    assert_eq!(
        board(&env, "tasks/failed"),
        BTreeSet::from(["c1".to_owned()]),
        "{out:#?}"
    );
    let failed = env.git(["show", "main:tasks/failed/c1.md"]);
    assert!(failed.contains("## Attempt 1"), "{failed}");
}

/// `--max-sessions 3` with an agent CLI that got a 429 on every try never
/// ended (an outside timeout cut it after 10 minutes): sessions cut short
/// by a limit were not counted toward `--max-sessions`, and each was
/// followed by a longer wait for the limit to lift. They count, and the run
/// ends (exit 6: work left) without waiting for a limit it will not use.
#[test]
fn sessions_cut_short_by_a_limit_count_toward_max_sessions() {
    let env = Env::git_hub(&[]);
    add_task(&env, &["l1", "-m", "Anything"]);
    let agent = env.agent_script(
        "always-429.sh",
        "echo 'API Error: 429 {\"type\":\"error\",\"error\":{\"type\":\"rate_limit_error\",\"message\":\"Rate limited\"}}'\nexit 1\n",
    );
    let out = env
        .farm_git(run_args(&env, &agent, &["--max-sessions", "1"]))
        .run_within(Duration::from_secs(40))
        .code(6);
    assert!(out.stderr.contains("--max-sessions 1 reached"), "{out:#?}");
    assert!(
        !out.stderr.contains("waiting for the agent CLI's limit"),
        "{out:#?}"
    );
}

/// A farm that finds the hub's farms speaking a newer protocol than its own
/// (one it does not know, such as a merge queue it would go around) claims
/// nothing: `farm run` and `farm claim` exit 2 naming both versions, and
/// `farm doctor` says so. A farm that runs raises the hub's version to its
/// own.
#[test]
fn a_hub_whose_farms_speak_a_newer_protocol_is_refused() {
    let env = Env::git_hub(&[]);
    add_task(&env, &["p", "-m", "Anything"]);
    let agent = env.agent_script("agent.sh", "git commit -q --allow-empty -m done\n");
    env.farm_git(run_args(&env, &agent, &[])).run().success();
    let file = env.hub.join("current_tasks/.protocol.txt");
    let text = std::fs::read_to_string(&file).unwrap();
    let ours = farm::claims::protocol::PROTOCOL;
    assert!(text.starts_with(&format!("version = {ours}\n")), "{text}");

    add_task(&env, &["q", "-m", "Anything"]);
    std::fs::write(&file, "version = 99\nby = \"farm 9 on elsewhere\"\n").unwrap();
    let refused = env.farm_git(run_args(&env, &agent, &[])).run().code(2);
    assert!(
        refused.stderr.contains("speak protocol 99, this farm")
            && refused.stderr.contains(&format!("speaks {ours}")),
        "{refused:#?}"
    );
    assert!(board(&env, "tasks").contains("q"), "q was worked");
    env.farm(["claim", "q"]).run().code(2);
    assert!(
        env.farm(["locks", "--json"]).run().success().json()["claims"]
            .as_array()
            .unwrap()
            .is_empty()
    );
    let doctor = env.farm_git(["doctor"]).run();
    assert!(doctor.stdout.contains("speak protocol 99"), "{doctor:#?}");
}
