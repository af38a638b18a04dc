//! Notifications (`[notify]` in farm.toml): a real run's events posted by
//! the real `curl` to an HTTP receiver on loopback, one each; a notifier
//! that hangs is cut off, whole, and the run goes on.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::{Env, running, wait_for};
use crate::daemon::{Daemon, Running};
use crate::run::{add_task, board, farm_run};

/// A few lines of Python: an HTTP server on a free loopback port that
/// appends each POST's body, one line each, to `bodies` (with its path and
/// content type), and writes its port to `port`.
const RECEIVER: &str = r#"
import http.server, json, sys
out = open(sys.argv[1], "a")
class Hook(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        out.write(json.dumps({"path": self.path,
                              "type": self.headers.get("Content-Type"),
                              "body": json.loads(body)}) + "\n")
        out.flush()
        self.send_response(204)
        self.end_headers()
    def log_message(self, *args):
        pass
server = http.server.HTTPServer(("127.0.0.1", 0), Hook)
with open(sys.argv[2] + ".tmp", "w") as f:
    f.write(str(server.server_address[1]))
import os; os.rename(sys.argv[2] + ".tmp", sys.argv[2])
server.serve_forever()
"#;

/// The receiver, running; killed when dropped.
struct Receiver {
    child: Child,
    port: u16,
}

impl Receiver {
    fn start(dir: &Path, bodies: &Path) -> Option<Receiver> {
        let python = ["python3", "python"].into_iter().find(|p| {
            Command::new(p)
                .arg("-c")
                .arg("")
                .status()
                .is_ok_and(|s| s.success())
        })?;
        let port_file = dir.join("port");
        let child = Command::new(python)
            .arg("-c")
            .arg(RECEIVER)
            .arg(bodies)
            .arg(&port_file)
            .stdin(Stdio::null())
            .spawn()
            .expect("python starts");
        wait_for(&port_file);
        let port = std::fs::read_to_string(&port_file)
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        Some(Receiver { child, port })
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Commit `toml` at the top of the hub's farm.toml.
fn settings(env: &Env, toml: &str) {
    let path = env.hub.join("farm.toml");
    let text = std::fs::read_to_string(&path).unwrap();
    std::fs::write(&path, format!("{toml}{text}")).unwrap();
    env.git(["commit", "-qam", "notify"]);
}

/// One run with a task that fails for good (and trips the breaker), a
/// usage-limit wait over the threshold and a spent budget, then its end:
/// each a POST of its own through `curl`, with the fields the docs name.
#[test]
fn each_event_is_posted_once_through_curl() {
    if Command::new("curl").arg("--version").output().is_err() {
        eprintln!("skipped: no curl on PATH");
        return;
    }
    let env = Env::git_hub(&[]);
    let bodies = env.tmp.path().join("bodies.jsonl");
    let Some(receiver) = Receiver::start(env.tmp.path(), &bodies) else {
        eprintln!("skipped: no python3 on PATH");
        return;
    };
    settings(
        &env,
        &format!(
            "[notify]\ncommand = \"curl -fsS -H 'Content-Type: application/json' \
             --data-binary @- http://127.0.0.1:{}/hook\"\nlimit_wait_over = \"1s\"\n\n",
            receiver.port
        ),
    );
    add_task(
        &env,
        &[
            "doomed",
            "--max-attempts",
            "1",
            "--priority",
            "9",
            "-m",
            "Fail",
        ],
    );
    add_task(&env, &["limited", "--priority", "8", "-m", "Wait"]);
    for id in ["c1", "c2", "c3", "c4"] {
        add_task(&env, &[id, "-m", "Cost"]);
    }
    let marker = env.tmp.path().join("limited-once");
    let agent = env.agent_script(
        "agent.sh",
        &format!(
            r#"case "$FARM_TASK" in
doomed) echo "I cannot do this"; exit 1;;
limited) if [ ! -e '{marker}' ]; then touch '{marker}'
  echo "Claude AI usage limit reached|$(( $(date +%s) + 3 ))"; exit 1; fi;;
esac
echo x > "$FARM_TASK.txt" && git add . && git commit -q -m "$FARM_TASK"
echo '{{"type":"result","subtype":"success","is_error":false,"total_cost_usd":0.4}}'
"#,
            marker = marker.display()
        ),
    );
    let out = farm_run(
        &env,
        &agent,
        &["--trip-after", "1", "--trip-pause", "1s", "--max-cost", "1"],
    );
    // The budget leaves work on the board.
    assert_eq!(out.code, Some(6), "{out:#?}");
    assert!(board(&env, "tasks/failed").contains("doomed"), "{out:#?}");
    assert!(!out.stderr.contains("notifier"), "{out:#?}");
    let posts: Vec<serde_json::Value> = std::fs::read_to_string(&bodies)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let kinds: Vec<&str> = posts
        .iter()
        .map(|p| p["body"]["event"].as_str().unwrap())
        .collect();
    let mut sorted = kinds.clone();
    sorted.sort_unstable();
    assert_eq!(
        sorted,
        [
            "breaker_tripped",
            "budget_spent",
            "limit_wait",
            "run_ended",
            "task_failed"
        ],
        "{posts:#?}\n{out:#?}"
    );
    assert_eq!(kinds.last(), Some(&"run_ended"), "{posts:#?}");
    let of = |kind: &str| &posts.iter().find(|p| p["body"]["event"] == kind).unwrap()["body"];
    for p in &posts {
        assert_eq!(p["path"], "/hook");
        assert_eq!(p["type"], "application/json");
        let body = &p["body"];
        for key in ["event", "task", "agent", "text", "at", "hub", "host"] {
            assert!(body.get(key).is_some(), "no `{key}` in {body}");
        }
    }
    let failed = of("task_failed");
    assert_eq!(failed["task"], "doomed");
    assert!(failed["agent"].is_string(), "{failed}");
    assert!(
        failed["text"]
            .as_str()
            .unwrap()
            .starts_with("`doomed` failed for good after 1 attempt (failed with exit code 1)"),
        "{failed}"
    );
    let limit = of("limit_wait");
    assert_eq!(limit["task"], "limited");
    assert_eq!(limit["why"], "usage limit");
    assert!(limit["until"].is_string(), "{limit}");
    assert_eq!(of("breaker_tripped")["agent"], failed["agent"]);
    assert_eq!(of("budget_spent")["max_usd"], 1.0);
    let end = of("run_ended");
    assert_eq!(end["summary"]["done"], 3, "{end}");
    assert_eq!(end["summary"]["failed"], 1, "{end}");
    assert_eq!(end["agent"], serde_json::Value::Null);
}

/// A notifier that hangs, and leaves a child behind: each is killed whole
/// at its timeout, the failure is said once, and the run does what it
/// would have done without it, in about the time.
#[test]
fn a_hanging_notifier_is_cut_off_and_the_run_goes_on() {
    let env = Env::git_hub(&[]);
    let pids = env.tmp.path().join("pids");
    let hang = env.tmp.path().join("hang.sh");
    std::fs::write(
        &hang,
        format!(
            "echo $$ >> '{pids}'\nsleep 1000 &\necho $! >> '{pids}'\nwait\n",
            pids = pids.display()
        ),
    )
    .unwrap();
    settings(
        &env,
        &format!(
            "[notify]\ncommand = \"sh '{}'\"\ntimeout = \"1s\"\n\n",
            hang.display()
        ),
    );
    add_task(&env, &["doomed", "--max-attempts", "1", "-m", "Fail"]);
    add_task(&env, &["fine", "-m", "Work"]);
    let agent = env.agent_script(
        "agent.sh",
        "[ \"$FARM_TASK\" = doomed ] && echo no && exit 1\n\
         echo x > \"$FARM_TASK.txt\" && git add . && git commit -q -m \"$FARM_TASK\"\n",
    );
    let start = Instant::now();
    let out = farm_run(&env, &agent, &[]);
    let took = start.elapsed();
    assert_eq!(
        board(&env, "tasks/done"),
        ["fine".to_owned()].into(),
        "{out:#?}"
    );
    assert_eq!(
        board(&env, "tasks/failed"),
        ["doomed".to_owned()].into(),
        "{out:#?}"
    );
    assert_eq!(out.code, Some(5), "{out:#?}");
    assert_eq!(
        out.stderr
            .matches("warning: the notifier `sh` failed")
            .count(),
        1,
        "{out:#?}"
    );
    assert!(
        out.stderr.contains("still running after 1s: killed"),
        "{out:#?}"
    );
    assert!(
        out.stderr.contains("2 of 2 notifications were not sent"),
        "{out:#?}"
    );
    // Both notices were tried (the run's end after the one that hung).
    assert!(out.stderr.contains("(2 failed, 0 dropped)"), "{out:#?}");
    // Two notices, each cut at 1s; the sessions take no time.
    assert!(took < Duration::from_secs(20), "{took:?}");
    let pids: Vec<u32> = std::fs::read_to_string(&pids)
        .unwrap()
        .lines()
        .map(|l| l.parse().unwrap())
        .collect();
    assert_eq!(pids.len(), 4, "{pids:?}");
    for pid in pids {
        assert!(!running(pid), "the notifier's process {pid} outlived it");
    }
}

/// Across two machines, through a `git daemon` hub (the git store): each
/// event is posted once, by the farm that saw it — a task failed for good
/// and a question asked on whichever machine ran them, and each farm's own
/// end — with that machine's host in the body.
#[test]
fn across_two_machines_each_event_is_posted_once_by_the_farm_that_saw_it() {
    if Command::new("curl").arg("--version").output().is_err() {
        eprintln!("skipped: no curl on PATH");
        return;
    }
    let scratch = tempfile::tempdir().unwrap();
    let bodies = scratch.path().join("bodies.jsonl");
    let Some(receiver) = Receiver::start(scratch.path(), &bodies) else {
        eprintln!("skipped: no python3 on PATH");
        return;
    };
    let toml = format!(
        "[notify]\ncommand = \"curl -fsS -H 'Content-Type: application/json' \
         --data-binary @- http://127.0.0.1:{}/hook\"\n",
        receiver.port
    );
    let mut files = vec![
        ("farm.toml".to_owned(), toml),
        (
            "tasks/doomed.md".to_owned(),
            "+++\ntitle = \"Doomed\"\nmax_attempts = 1\npriority = 9\n+++\nfail\n".to_owned(),
        ),
        (
            "tasks/asker.md".to_owned(),
            "+++\ntitle = \"Asker\"\npriority = 9\n+++\nask\n".to_owned(),
        ),
    ];
    for t in ["t1", "t2", "t3", "t4"] {
        files.push((
            format!("tasks/{t}.md"),
            format!("+++\ntitle = \"Task {t}\"\n+++\ndo it\n"),
        ));
    }
    let files: Vec<(&str, &str)> = files
        .iter()
        .map(|(p, t)| (p.as_str(), t.as_str()))
        .collect();
    let daemon = Daemon::with_hub(&files);
    let agent = daemon.base.path().join("agent.sh");
    std::fs::write(
        &agent,
        "case \"$FARM_TASK\" in\n\
         doomed) echo 'I cannot do this'; exit 1;;\n\
         asker) echo 'Tabs or spaces?' > \"$FARM_ASK\"; exit 0;;\n\
         esac\n\
         sleep 0.3\necho x > \"$FARM_TASK.txt\" && git add . && git commit -q -m \"$FARM_TASK\"\n",
    )
    .unwrap();
    let agent = format!("sh '{}'", agent.display());
    let machines = [daemon.machine("east"), daemon.machine("west")];
    let runs: Vec<Running> = machines
        .iter()
        .map(|m| Running::spawn(m.farm(["run", "--agent", &agent, "--name", &m.host])))
        .collect();
    let deadline = Instant::now() + Duration::from_secs(120);
    let outs: Vec<_> = runs.into_iter().map(|r| r.finish_by(deadline)).collect();
    for out in &outs {
        // A question waits: work is left (exit 6).
        assert_eq!(out.code, Some(6), "{out:#?}");
    }
    let posts: Vec<serde_json::Value> = std::fs::read_to_string(&bodies)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()["body"].clone())
        .collect();
    let of = |kind: &str| -> Vec<&serde_json::Value> {
        posts.iter().filter(|p| p["event"] == kind).collect()
    };
    let failed = of("task_failed");
    assert_eq!(failed.len(), 1, "{posts:#?}\n{outs:#?}");
    assert_eq!(failed[0]["task"], "doomed");
    let asked = of("question_asked");
    assert_eq!(asked.len(), 1, "{posts:#?}\n{outs:#?}");
    assert_eq!(asked[0]["task"], "asker");
    // Posted by the machine whose agent saw it.
    for p in failed.iter().chain(&asked) {
        let host = p["host"].as_str().unwrap();
        assert!(
            ["east", "west"].contains(&host) && p["agent"].as_str().unwrap().starts_with(host),
            "{p}"
        );
    }
    let mut ended: Vec<&str> = of("run_ended")
        .iter()
        .map(|p| p["host"].as_str().unwrap())
        .collect();
    ended.sort_unstable();
    assert_eq!(ended, ["east", "west"], "{posts:#?}");
    assert_eq!(posts.len(), 4, "{posts:#?}");
}
