//! What every real-CLI test needs: the CLI installed (once, into a cache
//! directory), the scripted model server, a hub whose tasks carry scripts.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub use crate::common::{Env, Output};

/// Where CLIs are installed, kept between runs (CI's second run downloads
/// nothing): `$FARM_CLI_CACHE`, else `~/.cache/farm/clis`.
pub fn cache() -> PathBuf {
    std::env::var_os("FARM_CLI_CACHE")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var_os("HOME").unwrap_or_else(|| "/tmp".into()))
                .join(".cache/farm/clis")
        })
}

/// The bin directory of npm package `package@version` installed in the
/// cache (installed now if it is not), or `None` when the registry cannot
/// be reached — said, and a failure where `FARM_REQUIRE_CLIS=1`.
///
/// Tests run in parallel and several want the same CLI: one installs while
/// the others wait on a lock, and the install goes into a staging prefix
/// renamed into place when whole, so no test ever runs a half-installed
/// CLI (npm writes the bin link before the package's files and its
/// postinstall are done).
pub fn npm(package: &str, version: &str, bin: &str) -> Option<PathBuf> {
    let root = cache().join("npm");
    let name = format!(
        "{}@{version}",
        package.trim_start_matches('@').replace('/', "+")
    );
    let prefix = root.join(&name);
    let dir = prefix.join("node_modules/.bin");
    std::fs::create_dir_all(&root).unwrap();
    let lock = std::fs::File::create(root.join(format!("{name}.lock"))).unwrap();
    lock.lock().unwrap();
    if dir.join(bin).exists() {
        return Some(dir);
    }
    let staging = root.join(format!("{name}.installing"));
    let _ = std::fs::remove_dir_all(&staging);
    let _ = std::fs::remove_dir_all(&prefix);
    std::fs::create_dir_all(&staging).unwrap();
    let out = Command::new("npm")
        .args(["install", "--no-audit", "--no-fund", "--prefix"])
        .arg(&staging)
        .arg(format!("{package}@{version}"))
        .output();
    match out {
        Ok(o) if o.status.success() && staging.join("node_modules/.bin").join(bin).exists() => {
            std::fs::rename(&staging, &prefix).unwrap();
            Some(dir)
        }
        other => {
            let why = match other {
                Ok(o) => String::from_utf8_lossy(&o.stderr).into_owned(),
                Err(e) => format!("cannot run npm: {e}"),
            };
            assert!(
                std::env::var("FARM_REQUIRE_CLIS").as_deref() != Ok("1"),
                "cannot install {package}@{version} and FARM_REQUIRE_CLIS=1: {why}"
            );
            eprintln!("skipped: cannot install {package}@{version} from the npm registry: {why}");
            None
        }
    }
}

/// The scripted model server, on a port of its own; killed when dropped.
pub struct Server {
    child: Child,
    pub url: String,
    pub log: PathBuf,
}

impl Server {
    pub fn start(dir: &Path) -> Server {
        let port_file = dir.join("model.port");
        let log = dir.join("model.log");
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/clis/model_server.py");
        let child = Command::new("python3")
            .arg(script)
            .arg("--port-file")
            .arg(&port_file)
            .arg("--log")
            .arg(&log)
            .stdin(Stdio::null())
            .spawn()
            .expect("python3 runs the model server");
        let start = Instant::now();
        while !port_file.exists() {
            assert!(start.elapsed() < Duration::from_secs(10), "no model server");
            std::thread::sleep(Duration::from_millis(20));
        }
        let port = std::fs::read_to_string(&port_file).unwrap();
        Server {
            child,
            url: format!("http://127.0.0.1:{}", port.trim()),
            log,
        }
    }

    /// The requests it answered, one JSON object each.
    pub fn requests(&self) -> Vec<serde_json::Value> {
        std::fs::read_to_string(&self.log)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A task's description with its script for the model server.
pub fn scripted(say: &str, steps: &serde_json::Value) -> String {
    format!("{say}\n\n<!-- farm-model-script {steps} -->\n")
}

/// Add task `id` whose model does `steps`.
pub fn add_task(env: &Env, id: &str, steps: &serde_json::Value) {
    env.farm_git([
        "task",
        "add",
        id,
        &format!("--message={}", scripted("Do what the script says.", steps)),
    ])
    .run()
    .success();
}

/// The model's steps for a task done by one commit of the CLI's shell tool.
pub fn commit_steps(id: &str) -> serde_json::Value {
    serde_json::json!([
        {"bash": format!("echo {id} > {id}.txt && git add {id}.txt && git commit -q -m '{id}: by the agent CLI'")},
        {"say": format!("Committed {id}.")}
    ])
}

/// [`commit_steps`] after a first shell call that sleeps `secs`: a
/// session that is surely still at work a while after it began.
pub fn slow_commit_steps(id: &str, secs: u32) -> serde_json::Value {
    let mut steps = vec![serde_json::json!({"bash": format!("sleep {secs}")})];
    steps.extend(commit_steps(id).as_array().unwrap().iter().cloned());
    serde_json::Value::Array(steps)
}

/// The subjects of the commits on the hub's `main`, first parent first.
pub fn subjects(env: &Env) -> Vec<String> {
    env.git(["log", "--format=%s", "main"])
        .lines()
        .map(str::to_owned)
        .collect()
}

/// Tasks in `<dir>` on `main` (none when it does not exist).
pub fn board(env: &Env, dir: &str) -> Vec<String> {
    let (_, listed, _) = env.git_output(["ls-tree", "--name-only", &format!("main:{dir}")]);
    listed
        .lines()
        .filter(|l| l.ends_with(".md") && *l != "README.md")
        .map(|l| l.trim_end_matches(".md").to_owned())
        .collect()
}

/// `farm run ARGS` with the CLI's bin directory first on PATH and its
/// environment `vars`, within `limit`.
pub fn farm_run(
    env: &Env,
    bin: &Path,
    vars: &[(&str, String)],
    args: &[&str],
    limit: Duration,
) -> Output {
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let state = env.tmp.path().join("state");
    let mut all = vec!["run", "--state-dir", state.to_str().unwrap()];
    all.extend(args);
    // The sessions run sandboxed, as a user's would by default: the CLI
    // finds its install, its config and the model server from inside.
    let mut farm = env
        .farm_git(all)
        .env("PATH", path)
        .env("FARM_SANDBOX", "on");
    for (k, v) in vars {
        farm = farm.env(k, v);
    }
    farm.run_within(limit)
}

/// The journal's lines of `event`.
pub fn journal(env: &Env, event: &str) -> Vec<serde_json::Value> {
    std::fs::read_to_string(env.tmp.path().join("state/journal.jsonl"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|e| e["event"] == event)
        .collect()
}

/// The version `farm agents --json` says preset `name` was verified with.
pub fn verified(name: &str) -> Option<String> {
    let env = Env::new();
    let doc = env.farm(["agents", "--json"]).run().success().json();
    doc["agents"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["name"] == name)
        .and_then(|a| a["verified"].as_str().map(str::to_owned))
}

/// One agent CLI under test: farm's preset for it, where it is installed,
/// and how it is pointed at the model server.
pub struct Cli {
    pub preset: &'static str,
    pub bin: PathBuf,
    /// Its environment against a server; files it needs are written under
    /// the test's HOME (`env.tmp`).
    pub setup: fn(&Env, &Server) -> Vec<(&'static str, String)>,
}

/// How long a run of these tests may take.
pub const LIMIT: Duration = Duration::from_secs(240);

/// A hub, the server, and `farm run --agent PRESET ARGS` on `tasks` (id,
/// steps) with the CLI set up; the run's output.
pub fn run(cli: &Cli, tasks: &[(&str, serde_json::Value)], args: &[&str]) -> (Env, Server, Output) {
    let env = Env::git_hub(&[]);
    let server = Server::start(env.tmp.path());
    for (id, steps) in tasks {
        add_task(&env, id, steps);
    }
    let vars = (cli.setup)(&env, &server);
    let mut all = vec!["--agent", cli.preset];
    all.extend(args);
    let out = farm_run(&env, &cli.bin, &vars, &all, LIMIT);
    (env, server, out)
}

/// Whether the task file on `main` records an attempt.
fn attempted(env: &Env, path: &str) -> bool {
    env.git(["show", &format!("main:{path}")])
        .contains("## Attempt")
}

/// Case 1: `-j 2` does four tasks, each a commit on main made by the CLI's
/// own shell tool call.
pub fn four_tasks(cli: &Cli, ids: [&str; 4]) -> (Env, Server, Output) {
    let tasks: Vec<_> = ids.iter().map(|id| (*id, commit_steps(id))).collect();
    let (env, server, out) = run(cli, &tasks, &["-j", "2"]);
    assert_eq!(out.code, Some(0), "{out:#?}");
    let mut done = board(&env, "tasks/done");
    done.sort();
    assert_eq!(done, ids, "{out:#?}");
    let subjects = subjects(&env);
    for id in ids {
        assert!(
            subjects.contains(&format!("{id}: by the agent CLI")),
            "{id}: {subjects:?}"
        );
    }
    let ends = journal(&env, "session_end");
    assert_eq!(ends.len(), 4, "{ends:?}");
    assert!(ends.iter().all(|e| e["class"] == "success"), "{ends:?}");
    (env, server, out)
}

/// Case 2: the API answers 429 `times` times before the task's steps; the
/// run finishes with the task done and no attempt burned.
pub fn limited_for_a_while(
    cli: &Cli,
    id: &str,
    times: u32,
    extra: &[(&str, serde_json::Value)],
    args: &[&str],
) -> (Env, Server, Output) {
    failing_for_a_while(
        cli,
        id,
        serde_json::json!({"fail": 429, "times": times}),
        extra,
        args,
    )
}

/// Case 2 with live detection, `-j 2`: `id` gets `times` 429s, which the
/// CLI retries, saying so in its log; the second agent does `quick`, then
/// must not start `next` while the first retries. `id` is claimed once.
pub fn limited_holds_the_other_agent(
    cli: &Cli,
    id: &str,
    times: u32,
    quick: (&str, serde_json::Value),
    next: &str,
) {
    let others = [quick, (next, commit_steps(next))];
    let (env, _server, out) = limited_for_a_while(cli, id, times, &others, &["-j", "2"]);
    let claims: Vec<_> = journal(&env, "claim")
        .into_iter()
        .filter(|c| c["task"] == id)
        .collect();
    assert_eq!(claims.len(), 1, "{claims:?}");
    assert!(
        out.stderr
            .contains("waiting: the agent CLI is retrying its API in another session"),
        "{out:#?}"
    );
}

/// Case 2 with another failure first (`{"fail": 529, "times": 2}`, a 429
/// with a `retry_after`, …): the same outcome.
pub fn failing_for_a_while(
    cli: &Cli,
    id: &str,
    fail: serde_json::Value,
    extra: &[(&str, serde_json::Value)],
    args: &[&str],
) -> (Env, Server, Output) {
    let mut steps = vec![fail];
    steps.extend(commit_steps(id).as_array().unwrap().iter().cloned());
    let mut tasks = vec![(id, serde_json::json!(steps))];
    tasks.extend(extra.iter().cloned());
    let (env, server, out) = run(cli, &tasks, args);
    assert_eq!(out.code, Some(0), "{out:#?}");
    assert!(
        board(&env, "tasks/done").contains(&id.to_owned()),
        "{out:#?}"
    );
    assert!(!attempted(&env, &format!("tasks/done/{id}.md")), "{out:#?}");
    (env, server, out)
}

/// Case 3: the API answers 401 every time: the run stops (exit 1, as for
/// every setup error) with one message naming the fix; no task failed and
/// no attempt counted.
pub fn refused(cli: &Cli, id: &str) -> Output {
    let steps = serde_json::json!([{"fail": 401, "times": 1000}, {"say": "never"}]);
    let (env, _server, out) = run(cli, &[(id, steps)], &[]);
    assert_eq!(out.code, Some(1), "{out:#?}");
    let errors: Vec<&str> = out
        .stderr
        .lines()
        .filter(|l| l.starts_with("error:"))
        .collect();
    assert_eq!(errors.len(), 1, "{out:#?}");
    assert!(errors[0].contains("HTTP 401"), "{out:#?}");
    assert!(out.stderr.contains("hint: "), "{out:#?}");
    assert_eq!(board(&env, "tasks/failed"), Vec::<String>::new());
    assert!(!attempted(&env, &format!("tasks/{id}.md")), "{out:#?}");
    out
}

/// [`failing_for_a_while`] for a failure the CLI itself retries through
/// (an overload, a 429 with `retry-after`, …): the task is claimed once.
pub fn retried_by_the_cli(cli: &Cli, id: &str, fail: serde_json::Value) {
    let (env, _server, out) = failing_for_a_while(cli, id, fail, &[], &[]);
    assert_eq!(journal(&env, "claim").len(), 1, "{out:#?}");
}

/// Case 4: a stalled API and a short `--timeout` (longer than the CLI
/// takes to send its first request): the session is killed, and it is the
/// API's trouble, not a failed attempt.
pub fn stalled(cli: &Cli, id: &str, timeout: &str) {
    let steps = serde_json::json!([{"stall": 120}]);
    let (env, _server, out) = run(cli, &[(id, steps)], &["--timeout", timeout, "--once"]);
    let ends = journal(&env, "session_end");
    assert_eq!(ends.len(), 1, "{out:#?}");
    assert_eq!(ends[0]["outcome"], "timed out", "{ends:?}");
    assert_eq!(ends[0]["class"], "api error", "{ends:?}");
    assert!(!attempted(&env, &format!("tasks/{id}.md")), "{out:#?}");
}
