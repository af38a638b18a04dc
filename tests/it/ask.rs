//! Questions that wait for an answer: a session writes its question into
//! `FARM_ASK`; its task waits on the board (no attempt counted, claim
//! released, its work on a rescue branch); a run left with only waiting
//! tasks ends (exit 6) naming each question and the command that answers
//! it; `farm answer` makes the task ready, and the next session's prompt
//! holds the question, the answer and where the earlier work is.

use std::path::Path;
use std::time::Duration;

use crate::common::{Env, Farm, read_pid, running, write_pid};
use crate::stop::{done, farm, git, hub};

/// The agent: for task `q` with no answer in its prompt, commits some work,
/// asks "Tabs or spaces?" and exits 0; otherwise saves its prompt as
/// `logs/<TASK>.<n>.md`, notes whether the earlier work's branch it names
/// is in the clone, and does the task.
fn agent(env: &Env, logs: &Path) -> String {
    std::fs::create_dir_all(logs).unwrap();
    env.agent_script(
        "asker.sh",
        &format!(
            "set -e\nfor last; do :; done\nl='{l}'\n\
             n=$(ls \"$l\" | grep -c \"^$FARM_TASK\\.\" || true)\n\
             printf '%s\\n' \"$last\" > \"$l/$FARM_TASK.$n.md\"\n\
             if [ \"$FARM_TASK\" = q ] && ! printf '%s' \"$last\" | grep -q '### Answer'; then\n\
               echo half > half.txt; git add -A; git commit -qm 'half of q'\n\
               printf 'Tabs or spaces?\\nThe style guide says nothing.\\n' > \"$FARM_ASK\"\n\
               exit 0\n\
             fi\n\
             b=$(printf '%s' \"$last\" | grep -o 'origin/farm/rescue/q/[0-9a-f]*' | head -1 || true)\n\
             if [ -n \"$b\" ] && git cat-file -e \"$b\" 2>/dev/null; then echo \"$b\" > \"$l/earlier-work\"; fi\n\
             echo \"$FARM_TASK\" > \"$FARM_TASK.txt\"\ngit add -A\ngit commit -qm \"work on $FARM_TASK\"\n",
            l = logs.display()
        ),
    )
}

/// The hub's `main`, as a commit id.
pub(crate) fn main_rev(env: &Env) -> String {
    git(&env.hub, &["rev-parse", "main"]).trim().to_owned()
}

/// A file as `main` on the hub has it.
pub(crate) fn file_on_main(env: &Env, path: &str) -> String {
    git(&env.hub, &["show", &format!("main:{path}")])
}

/// The whole loop: asked, waiting (shown, listed at the end, exit 6),
/// refused answers that write nothing, answered, done — with the question,
/// the answer and the earlier work in the next prompt.
#[test]
fn a_question_waits_on_the_board_until_answered_then_the_next_prompt_holds_it() {
    let env = Env::new();
    hub(&env, &["q", "other"]);
    farm(
        &env,
        ["task", "add", "after-q", "--after", "q", "-m", "then this"],
    )
    .run()
    .success();
    let logs = env.tmp.path().join("logs");
    let agent = agent(&env, &logs);
    let out = farm(&env, ["run", "--agent", &agent, "-j", "2"]).run_within(Duration::from_secs(90));
    assert_eq!(out.code, Some(6), "{out:#?}");
    assert!(
        out.stderr
            .contains("`q`: asked a question (Tabs or spaces?)")
            && out.stderr.contains("no attempt counted"),
        "{out:#?}"
    );
    assert!(
        out.stderr
            .contains("1 task is waiting for an answer, nothing else to do (exit 6")
            && out.stderr.contains("  `q` asks:\n")
            && out.stderr.contains("    Tabs or spaces?\n")
            && out.stderr.contains("    The style guide says nothing.\n")
            && out.stderr.contains("    farm answer q 'YOUR ANSWER'"),
        "{out:#?}"
    );
    assert!(done(&env, "other"), "{out:#?}");
    assert!(!done(&env, "after-q"), "{out:#?}");
    // Durable on the board: waiting, no attempt counted, claim released,
    // the work on a rescue branch the note names.
    let q = file_on_main(&env, "tasks/q.md");
    assert!(q.contains("\nasked = \"20"), "{q}");
    assert!(!q.contains("attempts ="), "no attempt counted: {q}");
    assert!(q.contains("## Question — asked by "), "{q}");
    assert!(!env.claim_path("q").exists(), "the claim was released");
    let rescue = git(
        &env.hub,
        &[
            "for-each-ref",
            "--format=%(refname:short)",
            "refs/heads/farm/rescue/q/",
        ],
    );
    let rescue = rescue.trim();
    assert!(
        !rescue.is_empty() && q.contains(&format!("- work: branch `{rescue}`")),
        "{rescue} {q}"
    );
    assert!(git(&env.hub, &["show", &format!("{rescue}:half.txt")]).contains("half"));
    let tasks = farm(&env, ["tasks"]).run().success();
    assert!(
        tasks.stdout.contains("waiting") && tasks.stdout.contains("asked: Tabs or spaces?"),
        "{tasks:#?}"
    );
    let status = farm(&env, ["status", "--json"]).run().success().json();
    assert_eq!(status["waiting"][0]["task"], "q", "{status:#}");
    assert_eq!(status["board"]["waiting"], 1, "{status:#}");
    let text = farm(&env, ["status"]).run().success();
    assert!(
        text.stdout
            .contains("waiting for an answer: `q` asks: Tabs or spaces?; farm answer q TEXT")
            && text
                .stdout
                .contains("asks     `q`: Tabs or spaces?  (farm answer q TEXT)"),
        "{text:#?}"
    );

    // Answers to what does not wait: refused, nothing written.
    let before = main_rev(&env);
    let out = farm(&env, ["answer", "other", "x"]).run().code(2);
    assert!(
        out.stderr
            .contains("`other` is done, not waiting for an answer"),
        "{out:#?}"
    );
    let out = farm(&env, ["answer", "after-q", "x"]).run().code(2);
    assert!(
        out.stderr
            .contains("`after-q` is not waiting for an answer"),
        "{out:#?}"
    );
    let out = farm(&env, ["answer", "nope", "x"]).run().code(2);
    assert!(
        out.stderr.contains("no task `nope` on the board"),
        "{out:#?}"
    );
    let out = farm(&env, ["answer", "q", " "]).run().code(2);
    assert!(out.stderr.contains("the answer is empty"), "{out:#?}");
    assert_eq!(main_rev(&env), before, "nothing written");

    farm(&env, ["answer", "q", "Spaces, four of them."])
        .run()
        .success()
        .stdout_has("answered `q`");
    let q = file_on_main(&env, "tasks/q.md");
    assert!(!q.contains("\nasked ="), "{q}");
    let out = farm(&env, ["run", "--agent", &agent]).run_within(Duration::from_secs(90));
    assert_eq!(out.code, Some(0), "{out:#?}");
    assert!(done(&env, "q") && done(&env, "after-q"), "{out:#?}");
    let prompt = std::fs::read_to_string(logs.join("q.1.md")).unwrap();
    assert!(
        prompt.contains("# Notes from earlier sessions")
            && prompt.contains("Tabs or spaces?\nThe style guide says nothing.")
            && prompt.contains("### Answer — by tester@")
            && prompt.contains("Spaces, four of them.")
            && prompt.contains(&format!("`origin/{rescue}`")),
        "{prompt}"
    );
    let seen = std::fs::read_to_string(logs.join("earlier-work")).unwrap();
    assert_eq!(
        seen.trim(),
        format!("origin/{rescue}"),
        "the earlier work is in the clone"
    );
}

/// `--watch` does not end on a board of waiting tasks: it waits, and an
/// answer given meanwhile brings the task back to an agent.
#[test]
fn a_watching_run_waits_for_the_answer() {
    let env = Env::new();
    hub(&env, &["q"]);
    let logs = env.tmp.path().join("logs");
    let agent = agent(&env, &logs);
    let run = farm(&env, ["run", "--agent", &agent, "--watch"]).spawn();
    let start = std::time::Instant::now();
    while !file_on_main(&env, "tasks/q.md").contains("\nasked =") {
        assert!(start.elapsed() < Duration::from_secs(60), "never asked");
        std::thread::sleep(Duration::from_millis(100));
    }
    farm(&env, ["answer", "q", "Spaces."]).run().success();
    while !done(&env, "q") {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "never done after the answer"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    crate::stop::signal(run.id(), libc::SIGTERM);
    let out = Farm::wait_within(run, Duration::from_secs(60));
    assert!(out.stderr.contains("asked a question"), "{out:#?}");
}

/// The agent of the kill tests: for `q` unanswered, commits some work and
/// asks; the first time, `kill` (a shell line) runs then, with `$l` the
/// logs. Else it saves its prompt as `logs/<TASK>.<n>.md` and does the
/// task.
fn killing_agent(env: &Env, logs: &Path, kill: &str) -> String {
    std::fs::create_dir_all(logs).unwrap();
    env.agent_script(
        "killer.sh",
        &format!(
            "set -e\nfor last; do :; done\nl='{l}'\n\
             n=$(ls \"$l\" | grep -c \"^$FARM_TASK\\.\" || true)\n\
             printf '%s\\n' \"$last\" > \"$l/$FARM_TASK.$n.md\"\n\
             if [ \"$FARM_TASK\" = q ] && ! printf '%s' \"$last\" | grep -q '### Answer'; then\n\
               echo half > half.txt; git add -A; git commit -qm 'half of q'\n\
               printf 'Tabs or spaces?\\n' > \"$FARM_ASK\"\n\
               {kill}\n\
               exit 0\n\
             fi\n\
             echo \"$FARM_TASK\" > \"$FARM_TASK.txt\"\ngit add -A\ngit commit -qm \"work on $FARM_TASK\"\n",
            l = logs.display()
        ),
    )
}

/// Start `farm run` and write its pid where the agent and the hooks read it.
fn run_noting_pid(env: &Env, agent: &str, logs: &Path) -> std::process::Child {
    let child = farm(env, ["run", "--agent", agent]).spawn();
    write_pid(&logs.join("farm.pid"), child.id());
    child
}

/// After a kill, farm started again: the task waits with its question (no
/// attempt counted, no second session on it), the run ends with exit 6;
/// answered, it is done.
#[track_caller]
fn waits_after_restart(env: &Env, agent: &str, logs: &Path, killed: &impl std::fmt::Debug) {
    let out = farm(env, ["run", "--agent", agent]).run_within(Duration::from_secs(90));
    assert_eq!(out.code, Some(6), "{killed:#?} {out:#?}");
    let q = file_on_main(env, "tasks/q.md");
    assert!(
        q.contains("\nasked = \"20") && q.contains("~~~~text\nTabs or spaces?\n~~~~"),
        "the question survived the kill: {q} {out:#?}"
    );
    assert!(!q.contains("attempts ="), "no attempt counted: {q}");
    assert!(
        !logs.join("q.1.md").exists(),
        "q ran again before its answer"
    );
    assert!(!env.claim_path("q").exists(), "{out:#?}");
    let work = q
        .lines()
        .find_map(|l| l.strip_prefix("- work: branch `")?.strip_suffix('`'))
        .unwrap_or_else(|| panic!("the work is named: {q}"));
    assert!(git(&env.hub, &["show", &format!("{work}:half.txt")]).contains("half"));
    farm(env, ["answer", "q", "Spaces."]).run().success();
    let out = farm(env, ["run", "--agent", agent]).run_within(Duration::from_secs(90));
    assert_eq!(out.code, Some(0), "{out:#?}");
    assert!(done(env, "q"), "{out:#?}");
    let prompt = std::fs::read_to_string(logs.join("q.1.md")).unwrap();
    assert!(
        prompt.contains("Tabs or spaces?") && prompt.contains("Spaces."),
        "{prompt}"
    );
}

/// `farm run` (with `more` arguments) on a board with task `q`, SIGKILLed
/// by its session on `q` once that wrote its question: the agent, and the
/// killed run's output.
fn killed_after_asking(env: &Env, logs: &Path, more: &[&str]) -> (String, crate::common::Output) {
    let kill = "if [ ! -e \"$l/killed\" ]; then touch \"$l/killed\"; \
                while [ ! -s \"$l/farm.pid\" ]; do sleep 0.05; done; \
                kill -9 $(cat \"$l/farm.pid\"); sleep 5; fi";
    let agent = killing_agent(env, logs, kill);
    let mut args = vec!["run", "--agent", &agent];
    args.extend(more);
    let child = farm(env, args).spawn();
    write_pid(&logs.join("farm.pid"), child.id());
    let killed = Farm::wait_within(child, Duration::from_secs(60));
    assert!(logs.join("killed").exists(), "{killed:#?}");
    (agent, killed)
}

/// Chaos moment: farm SIGKILLed after the session wrote its question and
/// before the board had it. Started again, farm puts the question the
/// clone kept on the board rather than running the task afresh.
#[test]
fn a_farm_killed_before_the_board_has_the_question_puts_it_there_when_started_again() {
    let env = Env::new();
    hub(&env, &["q"]);
    let logs = env.tmp.path().join("logs");
    let (agent, killed) = killed_after_asking(&env, &logs, &[]);
    assert!(
        !file_on_main(&env, "tasks/q.md").contains("\nasked ="),
        "killed before the board edit"
    );
    waits_after_restart(&env, &agent, &logs, &killed);
}

/// Chaos moment (seed 1796467559999764749 of the chaos suite over http):
/// farm SIGKILLed after agent `a`'s session asked, before the board had
/// the question. Started again, another agent of the farm reaped `a`'s
/// dead claim and claimed the task before `a` put its clone's question on
/// the board, and worked it: the question never reached the board. Here
/// `b` runs alone in the state dir: it must put the question `a`'s clone
/// keeps on the board and run no session on the task; `a`, run later,
/// rescues the work its clone holds.
#[test]
fn a_question_kept_in_another_agents_clone_goes_on_the_board_before_the_task_is_worked() {
    let env = Env::new();
    hub(&env, &["q"]);
    let logs = env.tmp.path().join("logs");
    let (agent, killed) = killed_after_asking(&env, &logs, &["--name", "a"]);
    let out =
        farm(&env, ["run", "--agent", &agent, "--name", "b"]).run_within(Duration::from_secs(90));
    assert_eq!(out.code, Some(6), "{killed:#?} {out:#?}");
    assert!(
        !logs.join("q.1.md").exists(),
        "b worked q, whose question a's clone kept: {out:#?}"
    );
    let q = file_on_main(&env, "tasks/q.md");
    assert!(
        q.contains("\nasked = \"20") && q.contains("~~~~text\nTabs or spaces?\n~~~~"),
        "the question a's clone kept is on the board: {q} {out:#?}"
    );
    assert!(!q.contains("attempts ="), "no attempt counted: {q}");
    assert!(!env.claim_path("q").exists(), "{out:#?}");
    farm(&env, ["answer", "q", "Spaces."]).run().success();
    let out =
        farm(&env, ["run", "--agent", &agent, "--name", "a"]).run_within(Duration::from_secs(90));
    assert_eq!(out.code, Some(0), "{out:#?}");
    assert!(done(&env, "q"), "{out:#?}");
    let rescued = git(
        &env.hub,
        &[
            "for-each-ref",
            "--format=%(refname)",
            "refs/heads/farm/rescue/",
        ],
    );
    let half = rescued
        .lines()
        .any(|r| git(&env.hub, &["log", "--format=%s", r]).contains("half of q"));
    assert!(
        half,
        "a's clone's work on q is on a rescue branch: {rescued} {out:#?}"
    );
}

/// Chaos moment: farm SIGKILLed once the board has the question (the
/// hub's post-receive hook kills it), before it released the claim.
/// Started again: the dead claim is reaped, the task waits.
#[test]
fn a_farm_killed_after_the_board_has_the_question_leaves_the_task_waiting() {
    let env = Env::new();
    hub(&env, &["q"]);
    let logs = env.tmp.path().join("logs");
    let hook = env.hub.join(".git/hooks/post-receive");
    std::fs::write(
        &hook,
        format!(
            "#!/bin/sh\nl='{l}'\nwhile read old new ref; do\n\
             if [ ! -e \"$l/killed\" ] && git log -1 --format=%s \"$new\" | grep -q 'asks a question'; then\n\
               touch \"$l/killed\"; kill -9 $(cat \"$l/farm.pid\")\n\
             fi\ndone\n",
            l = logs.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&hook, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let agent = killing_agent(&env, &logs, ":");
    let child = run_noting_pid(&env, &agent, &logs);
    let killed = Farm::wait_within(child, Duration::from_secs(60));
    assert!(logs.join("killed").exists(), "{killed:#?}");
    assert_ne!(killed.code, Some(6), "killed, not ended: {killed:#?}");
    waits_after_restart(&env, &agent, &logs, &killed);
}

/// Chaos moment: the publish that puts the question on the board is cut
/// between its refs (the claim released, `main` put back), and before
/// farm tries again a person claims the task (`farm claim … -- sleep`:
/// another agent would, the task being free and ready). The question was
/// lost: farm found its claim gone and dropped it; the next session, no
/// attempt counted, asked afresh. Now the clone keeps the question and
/// farm puts it on the board once it can claim the task again: one
/// session, its question waiting.
#[test]
fn a_question_whose_publish_is_cut_between_its_refs_still_reaches_the_board() {
    let env = Env::git_hub(&[]);
    crate::run::add_task(&env, &["q", "-m", "Indent the code"]);
    let bare = env.tmp.path().join("hub.git");
    env.git(["clone", "--quiet", "--bare", ".", bare.to_str().unwrap()]);
    let go = env.tmp.path().join("go");
    let mark = crate::contract::cut_between_refs_once(
        env.tmp.path(),
        &format!("while [ ! -e '{}' ]; do sleep 0.05; done", go.display()),
    );
    let sessions = env.tmp.path().join("sessions");
    let agent = env.agent_script(
        "asks.sh",
        &format!(
            "n=$(cat '{s}' 2>/dev/null || echo 0); echo $((n + 1)) > '{s}'\n\
             for last; do :; done\n\
             if ! printf '%s' \"$last\" | grep -q '### Answer'; then\n\
               echo half > half.txt; git add -A; git commit -qm 'half of q'\n\
               echo \"Tabs or spaces? (session $n)\" > \"$FARM_ASK\"\n\
               exit 0\n\
             fi\n\
             echo q > q.txt; git add -A; git commit -qm 'q'\n",
            s = sessions.display()
        ),
    );
    let hub = ["--hub", bare.to_str().unwrap(), "--claims", "git"];
    let farm = env
        .farm_git(crate::run::run_args(&env, &agent, &hub))
        .spawn();
    // The cut made, the person claims the task for a few seconds; then the
    // hook lets the hub's end of the push die.
    crate::common::wait_for(&mark);
    let mut claim = vec!["claim", "q", "--agent", "person"];
    claim.extend(hub);
    claim.extend(["--", "sh", "-c"]);
    let hold = format!("touch '{}'; sleep 4", go.display());
    claim.push(&hold);
    let person = env.farm_git(claim).run_within(crate::run::LIMIT);
    assert_eq!(person.code, Some(0), "{person:#?}");
    let out = Farm::wait_within(farm, crate::run::LIMIT);
    assert_eq!(out.code, Some(6), "only a waiting task is left: {out:#?}");
    let (_, task, _) = crate::common::git_in(&bare, env.tmp.path(), ["show", "main:tasks/q.md"]);
    assert!(
        task.contains("Tabs or spaces? (session 0)"),
        "the first session's question is on the board: {task}\n{out:#?}"
    );
    assert_eq!(
        std::fs::read_to_string(&sessions).unwrap().trim(),
        "1",
        "no second session: {task}\n{out:#?}"
    );
}

/// `farm ask` writes the question where `FARM_ASK` says; outside a
/// session it says how to answer instead.
#[test]
fn farm_ask_writes_the_question_where_farm_ask_says() {
    let env = Env::new();
    let out = env.farm(["ask", "Tabs?"]).run().code(2);
    assert!(
        out.stderr.contains("FARM_ASK is not set") && out.stderr.contains("farm answer"),
        "{out:#?}"
    );
    let file = env.tmp.path().join("q.md");
    env.farm(["ask", "Tabs or spaces?"])
        .env("FARM_ASK", &file)
        .run()
        .success()
        .stdout_has("end the session now");
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "Tabs or spaces?\n");
}

/// Across machines, through a `git daemon` hub (the git store): `east`'s
/// session asks; a third machine sees the task waiting and answers it;
/// `west` then does the task, its prompt holding the question, the answer
/// and the earlier work, fetched from the hub.
#[test]
fn a_question_asked_on_one_machine_is_answered_from_another_and_done_on_a_third() {
    use crate::daemon::{Daemon, Machine};
    let files = [
        ("tasks/q.md", "+++\ntitle = \"Q\"\n+++\ndo q\n"),
        ("tasks/other.md", "+++\ntitle = \"Other\"\n+++\ndo other\n"),
    ];
    let daemon = Daemon::with_hub(&files);
    let logs = daemon.base.path().join("logs");
    std::fs::create_dir_all(&logs).unwrap();
    let script = daemon.base.path().join("asker.sh");
    std::fs::write(
        &script,
        format!(
            "#!/bin/sh\nset -e\nfor last; do :; done\nl='{l}'\n\
             n=$(ls \"$l\" | grep -c \"^$FARM_TASK\\.\" || true)\n\
             printf '%s\\n' \"$last\" > \"$l/$FARM_TASK.$n.md\"\n\
             if [ \"$FARM_TASK\" = q ] && ! printf '%s' \"$last\" | grep -q '### Answer'; then\n\
               echo half > half.txt; git add -A; git commit -qm 'half of q'\n\
               printf 'Tabs or spaces?\\n' > \"$FARM_ASK\"; exit 0\n\
             fi\n\
             b=$(printf '%s' \"$last\" | grep -o 'origin/farm/rescue/q/[0-9a-f]*' | head -1 || true)\n\
             if [ -n \"$b\" ] && git cat-file -e \"$b:half.txt\" 2>/dev/null; then echo \"$b\" > \"$l/earlier-work\"; fi\n\
             echo \"$FARM_TASK\" > \"$FARM_TASK.txt\"\ngit add -A\ngit commit -qm \"work on $FARM_TASK\"\n",
            l = logs.display()
        ),
    )
    .unwrap();
    let agent = format!("sh '{}'", script.display());
    let (east, west) = (daemon.machine("east"), daemon.machine("west"));
    let admin = Machine::new("admin", &daemon.url());
    let out = east
        .farm(["run", "--agent", &agent, "--name", "east"])
        .run_within(Duration::from_secs(120));
    assert_eq!(out.code, Some(6), "{out:#?}");
    assert!(
        out.stderr.contains("farm answer q 'YOUR ANSWER'"),
        "{out:#?}"
    );
    let tasks = admin.farm(["tasks", "--json"]).run().success().json();
    let q = tasks["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["id"] == "q")
        .cloned()
        .unwrap();
    assert_eq!(q["status"], "waiting", "{tasks:#}");
    assert!(
        admin.locks()["claims"].as_array().unwrap().is_empty(),
        "claim released"
    );
    let out = admin.farm(["answer", "other", "x"]).run().code(2);
    assert!(out.stderr.contains("not waiting"), "{out:#?}");
    admin.farm(["answer", "q", "Spaces."]).run().success();
    let out = west
        .farm(["run", "--agent", &agent, "--name", "west"])
        .run_within(Duration::from_secs(120));
    assert_eq!(out.code, Some(0), "{out:#?}");
    let prompt = std::fs::read_to_string(logs.join("q.1.md")).unwrap();
    assert!(
        prompt.contains("Tabs or spaces?")
            && prompt.contains("Spaces.")
            && prompt.contains("asked by east@east"),
        "{prompt}"
    );
    assert!(
        std::fs::read_to_string(logs.join("earlier-work")).is_ok(),
        "west's clone has east's work: {prompt}"
    );
}

/// The hub's pre-receive hook holds the first push of a `farm answer`
/// commit to main (writing its receive-pack's pid to `marks/in-hook`)
/// until the test writes `marks/go`; every other push passes.
fn hold_first_answer(env: &Env, marks: &Path) {
    std::fs::create_dir_all(marks).unwrap();
    let hook = env.hub.join(".git/hooks/pre-receive");
    std::fs::write(
        &hook,
        format!(
            "#!/bin/sh\nm='{m}'\nwhile read old new ref; do\n\
             if [ \"$ref\" = refs/heads/main ] && git log -1 --format=%s \"$new\" | grep -q '^farm: answer' \
             && mkdir \"$m/held\" 2>/dev/null; then\n\
               echo $PPID > \"$m/in-hook.tmp\"; mv \"$m/in-hook.tmp\" \"$m/in-hook\"\n\
               i=0; while [ ! -e \"$m/go\" ] && [ $i -lt 600 ]; do sleep 0.1; i=$((i+1)); done\n\
             fi\ndone\n",
            m = marks.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&hook, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
}

/// A run on a `farm init` hub, ended with `q` asked; then `more` tasks
/// added and `farm answer q` SIGKILLed while the hub holds its push in
/// `pre-receive`: the marks directory.
fn answer_killed_with_its_push_held(env: &Env, agent: &str, more: &[&str]) -> std::path::PathBuf {
    let out = farm(env, ["run", "--agent", agent]).run_within(Duration::from_secs(90));
    assert_eq!(out.code, Some(6), "{out:#?}");
    for t in more {
        farm(env, ["task", "add", t, "-m", "do it"]).run().success();
    }
    let marks = env.tmp.path().join("marks");
    hold_first_answer(env, &marks);
    let mut answer = farm(env, ["answer", "q", "Spaces."]).spawn();
    crate::common::wait_for(&marks.join("in-hook"));
    answer.kill().unwrap(); // SIGKILL: its git push and the hub's receive-pack go on
    answer.wait().unwrap();
    marks
}

/// Let the held answer's push go once `landed` holds, or after 8 s (long
/// enough for a push that does not wait for the held one to land); then
/// wait for its receive-pack to end.
fn release_after(marks: &Path, landed: impl Fn() -> bool) {
    let receive_pack = read_pid(&marks.join("in-hook"), Duration::from_secs(5));
    let start = std::time::Instant::now();
    while !landed() && start.elapsed() < Duration::from_secs(8) {
        std::thread::sleep(Duration::from_millis(50));
    }
    std::fs::write(marks.join("go"), "").unwrap();
    while running(receive_pack) {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "the held receive-pack never ended"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The hub's work tree holds its main, as pushed.
#[track_caller]
fn assert_work_tree_at_main(env: &Env, out: &impl std::fmt::Debug) {
    assert_eq!(
        git(&env.hub, &["status", "--porcelain", "--untracked-files=no"]),
        "",
        "the hub's work tree matches main: {out:#?}"
    );
}

/// Chaos moment (answer/operator, on a `farm init` hub): `farm answer`
/// SIGKILLed while its push is held, and a run pushing meanwhile. The
/// answer lands, the run's work too, and the hub's work tree is its main.
///
/// Regression: the answer's push let the hub's push lock go with the
/// killed farm, so the run's push went through the hub's work tree while
/// the answer's was in flight; `updateInstead` then wrote the answer's
/// files and the ref update failed, leaving the work tree behind main
/// (every push refused, farm waiting for a person) and the answer lost.
#[test]
fn an_answer_killed_with_its_push_held_lands_and_a_run_meanwhile_waits_for_it() {
    let env = Env::new();
    hub(&env, &["q"]);
    let logs = env.tmp.path().join("logs");
    let agent = agent(&env, &logs);
    let marks = answer_killed_with_its_push_held(&env, &agent, &["later"]);
    let run = farm(&env, ["run", "--agent", &agent]).spawn();
    release_after(&marks, || done(&env, "later"));
    let out = Farm::wait_within(run, Duration::from_secs(90));
    assert_work_tree_at_main(&env, &out);
    assert_eq!(out.code, Some(0), "{out:#?}");
    assert!(done(&env, "later") && done(&env, "q"), "{out:#?}");
    let prompt = std::fs::read_to_string(logs.join("q.1.md")).unwrap();
    assert!(
        prompt.contains("Tabs or spaces?") && prompt.contains("Spaces."),
        "the answer reached q's next session: {prompt}"
    );
}

/// `farm answer` SIGKILLed while its push is held, and answered again at
/// once (as a person whose command died would): the second waits for the
/// first's push, which lands, and says `q` was answered already.
#[test]
fn an_answer_given_again_after_a_kill_says_the_first_landed() {
    let env = Env::new();
    hub(&env, &["q"]);
    let logs = env.tmp.path().join("logs");
    let agent = agent(&env, &logs);
    let marks = answer_killed_with_its_push_held(&env, &agent, &[]);
    let again = farm(&env, ["answer", "q", "Spaces, really."]).spawn();
    let asked = || file_on_main(&env, "tasks/q.md").contains("\nasked =");
    release_after(&marks, || !asked());
    let out = Farm::wait_within(again, Duration::from_secs(90));
    assert_work_tree_at_main(&env, &out);
    assert_eq!(out.code, Some(2), "{out:#?}");
    assert!(
        out.stderr
            .contains("error: `q` was answered already (by tester@")
            && out
                .stderr
                .contains("hint: the question and its answer: farm task show q"),
        "{out:#?}"
    );
    let q = file_on_main(&env, "tasks/q.md");
    assert!(
        !q.contains("\nasked =") && q.contains("Spaces.") && !q.contains("Spaces, really."),
        "{q}"
    );
}
