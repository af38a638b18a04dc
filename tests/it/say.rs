//! Messages (`farm say`, `farm messages`): with real runs of three agents,
//! a message to one agent and one to a role are each delivered exactly
//! once, to the agents they reach, in the prompt of the first session
//! each starts after it was said; the same through a `git daemon` hub with
//! two farms on two machines. Bad input is refused with nothing written.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant, SystemTime};

use crate::common::{Env, Farm, wait_for};
use crate::daemon::{Daemon, Machine, Running};
use crate::stop::{done, farm, hub};

/// The agent: saves its prompt (the last argument) as
/// `logs/prompts/<AGENT>.<TASK>.md`, touches `logs/AGENT`, takes `secs`,
/// then commits a file of its own.
fn agent(dir: &Path, logs: &Path, secs: &str) -> String {
    std::fs::create_dir_all(logs.join("prompts")).unwrap();
    let path = dir.join("agent.sh");
    std::fs::write(
        &path,
        format!(
            "#!/bin/sh\nset -e\nfor last; do :; done\n\
             printf '%s\\n' \"$last\" > \"{l}/prompts/$FARM_AGENT.$FARM_TASK.md\"\n\
             touch \"{l}/$FARM_AGENT\"\nsleep {secs}\n\
             echo \"$FARM_TASK\" > \"$FARM_TASK.txt\"\ngit add -A\ngit commit -qm \"work on $FARM_TASK\"\n",
            l = logs.display()
        ),
    )
    .unwrap();
    format!("sh '{}'", path.display())
}

/// Each session's prompt, with when it was written: (agent, task) → (mtime, text).
fn prompts(logs: &Path) -> BTreeMap<(String, String), (SystemTime, String)> {
    let mut out = BTreeMap::new();
    for e in std::fs::read_dir(logs.join("prompts")).unwrap().flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let stem = name.strip_suffix(".md").unwrap();
        let (agent, task) = stem.split_once('.').unwrap();
        let at = e.metadata().unwrap().modified().unwrap();
        let text = std::fs::read_to_string(e.path()).unwrap();
        out.insert((agent.to_owned(), task.to_owned()), (at, text));
    }
    out
}

/// `text` was in exactly one prompt, of `who`, the first `who` got after
/// `said` (each task runs once, so a prompt is a session).
#[track_caller]
fn delivered_once(
    logs: &Path,
    text: &str,
    who: &[&str],
    said: SystemTime,
    out: &impl std::fmt::Debug,
) {
    let all = prompts(logs);
    let holding: Vec<&(String, String)> = all
        .iter()
        .filter(|(_, (_, t))| t.contains(text))
        .map(|(k, _)| k)
        .collect();
    let mut agents: Vec<&str> = holding.iter().map(|(a, _)| a.as_str()).collect();
    agents.sort_unstable();
    assert_eq!(
        agents, who,
        "`{text}` was in the prompts of {holding:?}: {out:#?}"
    );
    for agent in who {
        let first_after = all
            .iter()
            .filter(|((a, _), (at, _))| a == agent && *at > said)
            .min_by_key(|(_, (at, _))| *at)
            .map(|(k, _)| k);
        let (_, task) = holding.iter().find(|(a, _)| a == agent).unwrap();
        assert_eq!(
            first_after.map(|(_, t)| t.as_str()),
            Some(task.as_str()),
            "`{text}` was not in {agent}'s first prompt after it was said: {out:#?}"
        );
    }
}

/// The farm.toml text with two roles: `docs` (one agent), `code` (two).
const ROLES: &str = "\n[roles.docs]\nagents = 1\n\n[roles.code]\nagents = 2\n";

/// Three agents (`box-docs-1`, `box-code-1`, `box-code-2`) at work: a
/// message to `box-code-1` and one to the role `docs` are each delivered
/// once, in the prompt of that agent's next session; `farm messages`
/// names who read each; the journal has a line for each.
#[test]
fn a_message_to_an_agent_and_one_to_a_role_reach_each_once_in_the_next_prompt() {
    let env = Env::new();
    let tasks: Vec<String> = (1..=12).map(|i| format!("t{i:02}")).collect();
    let ids: Vec<&str> = tasks.iter().map(String::as_str).collect();
    hub(&env, &ids);
    let toml = env.hub.join("farm.toml");
    let text = std::fs::read_to_string(&toml).unwrap();
    std::fs::write(&toml, format!("{text}{ROLES}")).unwrap();
    crate::stop::git(&env.hub, &["commit", "-qam", "roles"]);
    let logs = env.tmp.path().join("logs");
    let agent = agent(env.tmp.path(), &logs, "1");
    let run = farm(&env, ["run", "--agent", &agent, "--name", "box"]).spawn();
    for name in ["box-docs-1", "box-code-1", "box-code-2"] {
        wait_for(&logs.join(name));
    }
    let out = farm(
        &env,
        ["say", "--to", "box-code-1", "leave the parser alone"],
    )
    .run()
    .success()
    .stdout_has("to agent `box-code-1`");
    assert!(
        out.stderr
            .contains("busy now, so for their next session: box-code-1"),
        "{out:#?}"
    );
    let to_agent = SystemTime::now();
    let note = env.tmp.path().join("note.md");
    std::fs::write(&note, "British spelling from now on\n").unwrap();
    let said = farm(&env, ["say", "--to", "docs", "--for", "1h", "--json", "-F"])
        .arg(&note)
        .run()
        .success()
        .json();
    let to_role = SystemTime::now();
    assert_eq!(said["to"], "role", "{said:#}");
    let out = Farm::wait_within(run, Duration::from_secs(120));
    assert_eq!(out.code, Some(0), "{out:#?}");
    assert!(tasks.iter().all(|t| done(&env, t)), "{out:#?}");
    delivered_once(
        &logs,
        "leave the parser alone",
        &["box-code-1"],
        to_agent,
        &out,
    );
    delivered_once(
        &logs,
        "British spelling from now on",
        &["box-docs-1"],
        to_role,
        &out,
    );
    // Who said it and when, in the prompt's own section.
    let (_, prompt) = prompts(&logs)
        .into_values()
        .find(|(_, t)| t.contains("leave the parser alone"))
        .unwrap();
    assert!(
        prompt.contains("# Messages from the people running farm")
            && prompt.contains("## From tester@")
            && prompt.contains(", to agent `box-code-1`, at 20"),
        "{prompt}"
    );
    assert!(
        out.stderr.contains("took message `")
            && out.stderr.contains("its next session's prompt holds it"),
        "{out:#?}"
    );
    let listed = farm(&env, ["messages", "--json"]).run().success().json();
    let messages = listed["messages"].as_array().unwrap();
    assert_eq!(messages.len(), 2, "{listed:#}");
    let readers = |i: usize| -> Vec<String> {
        messages[i]["read"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["agent"].as_str().unwrap().to_owned())
            .collect()
    };
    assert_eq!(readers(0), ["box-code-1"], "{listed:#}");
    assert_eq!(readers(1), ["box-docs-1"], "{listed:#}");
    let table = farm(&env, ["messages"]).run().success();
    assert!(
        table.stdout.contains("READ BY") && table.stdout.contains("box-docs-1 ("),
        "{table:#?}"
    );
    let journal = std::fs::read_to_string(env.hub.join(".farm/journal.jsonl")).unwrap();
    assert_eq!(
        journal.matches("\"event\":\"message\"").count(),
        2,
        "{journal}"
    );
    // Withdrawn: gone with its receipts.
    let id = messages[0]["id"].as_str().unwrap();
    farm(&env, ["say", "--withdraw", id])
        .run()
        .success()
        .stdout_has("taken already by box-code-1");
    let left = farm(&env, ["messages", "--json"]).run().success().json();
    assert_eq!(left["messages"].as_array().unwrap().len(), 1, "{left:#}");
    let files: Vec<String> = std::fs::read_dir(env.claims())
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains(id))
        .collect();
    assert!(files.is_empty(), "{files:?}");
}

/// An idle agent (`--watch`, nothing left to claim) reads a message said
/// to it at once, without a task to wake it: the journal has it taken
/// while the board is still empty, and the prompt of the session a task
/// added later leads to holds it.
#[test]
fn an_idle_agent_reads_a_message_at_once_and_its_next_prompt_holds_it() {
    let env = Env::new();
    hub(&env, &["a"]);
    let logs = env.tmp.path().join("logs");
    let agent = agent(env.tmp.path(), &logs, "0");
    let run = farm(&env, ["run", "--agent", &agent, "--name", "box", "--watch"]).spawn();
    let start = Instant::now();
    while !done(&env, "a") {
        assert!(start.elapsed() < Duration::from_secs(60), "`a` never done");
        std::thread::sleep(Duration::from_millis(50));
    }
    farm(&env, ["say", "--to", "box", "the API changed"])
        .run()
        .success();
    let journal = env.hub.join(".farm/journal.jsonl");
    let taken = || {
        std::fs::read_to_string(&journal)
            .unwrap_or_default()
            .contains("\"event\":\"message\"")
    };
    let start = Instant::now();
    while !taken() {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "the idle agent never took the message: {}",
            std::fs::read_to_string(&journal).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(
        prompts(&logs).len(),
        1,
        "no session ran between the message and its taking"
    );
    farm(&env, ["task", "add", "b", "--title", "Task b"])
        .run()
        .success();
    let start = Instant::now();
    while !done(&env, "b") {
        assert!(start.elapsed() < Duration::from_secs(60), "`b` never done");
        std::thread::sleep(Duration::from_millis(50));
    }
    crate::stop::signal(run.id(), libc::SIGTERM);
    let out = Farm::wait_within(run, Duration::from_secs(60));
    let all = prompts(&logs);
    let (_, b) = &all[&("box".to_owned(), "b".to_owned())];
    assert!(b.contains("the API changed"), "{b}\n{out:#?}");
    let (_, a) = &all[&("box".to_owned(), "a".to_owned())];
    assert!(!a.contains("the API changed"), "{a}");
    assert!(out.stderr.contains("took message `"), "{out:#?}");
}

/// Unknown or ambiguous names, too much text, nothing to say: refused with
/// a clear error, and nothing written beside the claims.
#[test]
fn bad_input_is_refused_and_nothing_is_written() {
    let env = Env::new();
    hub(&env, &["a"]);
    let toml = env.hub.join("farm.toml");
    let text = std::fs::read_to_string(&toml).unwrap();
    std::fs::write(&toml, format!("{text}{ROLES}")).unwrap();
    crate::stop::git(&env.hub, &["commit", "-qam", "roles"]);
    let side = || -> Vec<String> {
        std::fs::read_dir(env.claims())
            .map(|d| {
                d.flatten()
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .filter(|n| n.starts_with(".msg."))
                    .collect()
            })
            .unwrap_or_default()
    };
    let out = farm(&env, ["say", "--to", "nobody", "hi"]).run().code(2);
    assert!(
        out.stderr
            .contains("cannot say to `nobody`: no agent or role of that name is known here"),
        "{out:#?}"
    );
    let out = farm(&env, ["say", "--to", "role:ops", "hi"]).run().code(2);
    assert!(
        out.stderr
            .contains("farm.toml has no such role (its roles: code, docs)"),
        "{out:#?}"
    );
    let out = farm(&env, ["say", "--to", "a/b", "hi"]).run().code(2);
    assert!(out.stderr.contains("cannot say to `a/b`"), "{out:#?}");
    let big = "x".repeat(16 * 1024 + 1);
    let out = farm(&env, ["say", &big]).run().code(2);
    assert!(
        out.stderr
            .contains("is 16385 bytes; a message is at most 16384"),
        "{out:#?}"
    );
    let out = farm(&env, ["say", "-F", "/nonexistent/notes.md"])
        .run()
        .code(2);
    assert!(
        out.stderr
            .contains("cannot read the message from `/nonexistent/notes.md`"),
        "{out:#?}"
    );
    let out = farm(&env, ["say", "  \n"]).run().code(2);
    assert!(out.stderr.contains("is empty"), "{out:#?}");
    let out = farm(&env, ["say", "--for", "soon", "hi"]).run().code(2);
    assert!(out.stderr.contains("soon"), "{out:#?}");
    let out = farm(&env, ["say", "--withdraw", "0badc0de"]).run().code(2);
    assert!(out.stderr.contains("no message `0badc0de`"), "{out:#?}");
    assert_eq!(side(), Vec::<String>::new());
    // An agent that has run is known; so is a role: a name that is both is
    // ambiguous, and `agent:`/`role:` say which.
    let journal = env.hub.join(".farm");
    std::fs::create_dir_all(&journal).unwrap();
    std::fs::write(
        journal.join("journal.jsonl"),
        "{\"at\":\"2026-12-01T00:00:00.000Z\",\"pid\":1,\"event\":\"run_start\",\"agents\":[\"docs\"]}\n",
    )
    .unwrap();
    let out = farm(&env, ["say", "--to", "docs", "hi"]).run().code(2);
    assert!(
        out.stderr
            .contains("both a role (farm.toml) and an agent's name"),
        "{out:#?}"
    );
    assert!(
        out.stderr.contains("--to agent:docs or --to role:docs"),
        "{out:#?}"
    );
    assert_eq!(side(), Vec::<String>::new());
    farm(&env, ["say", "--to", "role:docs", "hi"])
        .run()
        .success();
    assert_eq!(side().len(), 1, "{:?}", side());
}

/// Across machines, through a `git daemon` hub: two farms (`east`, `west`,
/// with a `docs` and a `code` agent each); from a third machine, a message
/// to `west-code-1` and one to the role `docs`. Each reaches its agents
/// once (the role's: one on each machine), in their next prompts.
#[test]
fn messages_reach_agents_once_across_two_machines() {
    let tasks: Vec<String> = (1..=20).map(|i| format!("t{i:02}")).collect();
    let mut files: Vec<(String, String)> = tasks
        .iter()
        .map(|t| {
            (
                format!("tasks/{t}.md"),
                format!("+++\ntitle = \"Task {t}\"\n+++\ndo it\n"),
            )
        })
        .collect();
    files.push((
        "farm.toml".into(),
        "[roles.docs]\nagents = 1\n\n[roles.code]\nagents = 1\n".into(),
    ));
    let files: Vec<(&str, &str)> = files
        .iter()
        .map(|(p, t)| (p.as_str(), t.as_str()))
        .collect();
    let daemon = Daemon::with_hub(&files);
    let admin = Machine::new("admin", &daemon.url());
    let logs = daemon.base.path().join("logs");
    let agent = agent(daemon.base.path(), &logs, "2");
    let machines = [daemon.machine("east"), daemon.machine("west")];
    let runs: Vec<Running> = machines
        .iter()
        .map(|m| Running::spawn(m.farm(["run", "--agent", &agent, "--name", &m.host])))
        .collect();
    for name in ["east-docs-1", "east-code-1", "west-docs-1", "west-code-1"] {
        wait_for(&logs.join(name));
    }
    admin
        .farm([
            "say",
            "--to",
            "agent:west-code-1",
            "west code: mind the API",
        ])
        .run()
        .success();
    let to_agent = SystemTime::now();
    admin
        .farm(["say", "--to", "docs", "docs: British spelling"])
        .run()
        .success();
    let to_role = SystemTime::now();
    let deadline = Instant::now() + Duration::from_secs(180);
    let outs: Vec<_> = runs.into_iter().map(|r| r.finish_by(deadline)).collect();
    for out in &outs {
        assert_eq!(out.code, Some(0), "{out:#?}");
    }
    delivered_once(
        &logs,
        "west code: mind the API",
        &["west-code-1"],
        to_agent,
        &outs,
    );
    delivered_once(
        &logs,
        "docs: British spelling",
        &["east-docs-1", "west-docs-1"],
        to_role,
        &outs,
    );
    let listed = admin.farm(["messages", "--json"]).run().success().json();
    let read: Vec<usize> = listed["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["read"].as_array().unwrap().len())
        .collect();
    assert_eq!(read, [1, 2], "{listed:#}");
}
