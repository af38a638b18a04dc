//! How fast gated changes land when several agents run. Run with `cargo
//! bench --bench queue` (every scenario, under 10 minutes today), or name
//! some: `cargo bench --bench queue -- local4 red`.
//!
//! Every push goes through the gate: the project's suite (`[tests]` in
//! farm.toml) run on the very tree about to be pushed. Each scenario runs
//! the real `farm` binary on a fresh hub (`common/process.rs`'s hub, then
//! `git clone --bare --no-local`) with a board of independent tasks `t01`…,
//! a trivial agent (sleeps [`SESSION_SECS`], then commits a file of its own,
//! `work-<task>.txt`) and `suite.sh`, which sleeps S seconds, prints two
//! passing tests in TAP, and appends a line (the task) to a counter file
//! outside the hub each time it runs. Printed per scenario:
//!
//! - **makespan**: from spawning the farm process(es) to the last one's exit,
//!   the median of the rounds;
//! - **bound**: N × (S + session) / agents, the makespan if every agent ran
//!   its share of sessions and gates side by side, no gate waiting for
//!   another; and makespan / bound;
//! - **suite runs**: lines in the counter, with the journal's `tests` events
//!   by kind (what farm says each run was for), and the tasks the counter
//!   names more than once;
//! - **CPU a landing**: user + system time of the bench's children (farm,
//!   everything it ran, and the git daemon), `getrusage(RUSAGE_CHILDREN)`
//!   over the round, divided by the landings;
//! - **landings**: tasks in `tasks/done/` on the hub's main.
//!
//! Scenarios: `local4` (-j 4, 12 tasks, 3 s suite, 3 rounds), `local8` (-j
//! 8, 48 tasks, 5 s), `daemon` (the hub bare behind `git daemon`, two farm
//! processes of -j 2 with a state dir and host name each: two machines; 12
//! tasks, 3 s), `red` (as `local4`, but the change of `t06`, allowed one
//! attempt, adds a file that makes test 2 fail: it must not land, and the
//! other 11 must), `nogate` (as `local4` without `[tests]`: the gate must
//! cost nothing when there is none). One round each but `local4` and
//! `nogate`; `FARM_BENCH_ROUNDS=N` sets every scenario's.
//!
//! The bench fails, whatever the timings, unless each round leaves every
//! task in `tasks/done/` (`red`: all but `t06`, which is in
//! `tasks/failed/`), one `done` commit and one work file each on main, no
//! claim held, every farm exiting 0 (`red`: 5, tasks failed), the suite run
//! at least once per task (none without a gate), and, in `red`, exactly one
//! failed attempt in the journals, that of `t06`, nothing of it on main, and
//! no more suite runs for it than ⌈log2 12⌉ + 1 = 5 beyond one a change and
//! the branch's baseline (issue 26's bound for a red change in a batch).

#[path = "common/daemon.rs"]
mod daemon;
#[path = "common/process.rs"]
mod process;
#[path = "common/report.rs"]
mod report;
#[path = "common/stats.rs"]
mod stats;

use daemon::Daemon;
use process::{Res, Workers, command, git, make_hub, output, tail, write_executable};
use report::{finish, load};
use stats::median;
use std::collections::BTreeMap;
use std::fs::{self, File};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

const FARM_BUILT: &str = env!("CARGO_BIN_EXE_farm");
const ROUNDS_ENV: &str = "FARM_BENCH_ROUNDS";
/// Another farm binary to measure (an older build, side by side in one
/// window: the figures move with the machine's load).
const FARM_ENV: &str = "FARM_BENCH_FARM";
/// A directory to keep each round's hub, logs and journals in.
const KEEP_ENV: &str = "FARM_BENCH_KEEP";
/// How long the agent works on a task.
const SESSION_SECS: f64 = 0.3;
/// The task whose change breaks a test, in `red`.
const BREAKER: &str = "t06";

const AGENT: &str = r#"#!/bin/sh
# The bench's agent: $1 is the task whose change breaks the suite's test 2.
set -e
sleep 0.3
echo "$FARM_TASK" > "work-$FARM_TASK.txt"
if [ "$FARM_TASK" = "$1" ]; then echo "$FARM_TASK" > broken; fi
git add -A
git commit -q -m "work on $FARM_TASK"
"#;

const SUITE: &str = r#"# The bench's suite: $1 seconds of testing, then two tests in TAP, the
# second failing once a change has added `broken`. Each run appends a line
# to the file $2.
echo "$FARM_TASK" >> "$2"
sleep "$1"
echo 1..2
echo 'ok 1 - builds'
if [ -e broken ]; then echo 'not ok 2 - works'; exit 1; fi
echo 'ok 2 - works'
"#;

/// One scenario: how many farm processes with how many agents each, on
/// how many tasks, with which suite.
struct Setup {
    name: &'static str,
    what: &'static str,
    tasks: usize,
    /// Farm processes, each a machine of its own (state dir, host name).
    machines: usize,
    jobs: usize,
    /// The hub reached through `git daemon`, not by its path.
    daemon: bool,
    /// The suite's seconds; `None`: no gate.
    suite: Option<f64>,
    /// Whether `BREAKER`'s change breaks a test.
    red: bool,
    /// Unless `FARM_BENCH_ROUNDS` says otherwise.
    rounds: usize,
}

impl Setup {
    fn agents(&self) -> usize {
        self.machines * self.jobs
    }

    fn ids(&self) -> Vec<String> {
        (1..=self.tasks).map(|i| format!("t{i:02}")).collect()
    }

    /// N × (S + session) / agents.
    fn bound(&self) -> f64 {
        self.tasks as f64 * (self.suite.unwrap_or(0.0) + SESSION_SECS) / self.agents() as f64
    }
}

/// What one round left.
struct Round {
    wall: f64,
    cpu: f64,
    /// The counter's lines: the task each suite run was for.
    suite_runs: Vec<String>,
    /// The journals' `tests` events, by kind.
    test_kinds: BTreeMap<String, usize>,
    /// Tasks as their `done` commits came on main, oldest first.
    landed: Vec<String>,
    /// The journals' `failed` events: task, attempt, why.
    failed: Vec<(String, u64, String)>,
}

/// The farm binary measured: `FARM_BENCH_FARM`, else this build's.
fn farm() -> String {
    std::env::var(FARM_ENV).unwrap_or_else(|_| FARM_BUILT.to_owned())
}

fn main() -> ExitCode {
    finish(run())
}

fn run() -> Res<()> {
    type Scenario = fn(&Path) -> Res<()>;
    let scenarios: [(&str, Scenario); 5] = [
        ("local4", local4),
        ("local8", local8),
        ("daemon", daemon),
        ("red", red),
        ("nogate", nogate),
    ];
    // The scenarios named on the command line (cargo adds `--bench`), else all.
    let named: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect();
    if let Some(unknown) = named
        .iter()
        .find(|n| !scenarios.iter().any(|(s, _)| s == n))
    {
        return Err(format!(
            "no scenario `{unknown}`: local4, local8, daemon, red or nogate"
        ));
    }
    let tmp = tempfile::Builder::new()
        .prefix("farm-bench-queue.")
        .tempdir()
        .map_err(|e| format!("temp dir: {e}"))?;
    println!("farm merge queue bench: {}", farm());
    println!(
        "under {}; {} core(s); load average {}",
        tmp.path().display(),
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        load()
    );
    for (name, scenario) in scenarios {
        if named.is_empty() || named.iter().any(|n| n == name) {
            println!();
            let dir = tmp.path().join(name);
            fs::create_dir(&dir).map_err(|e| format!("create {}: {e}", dir.display()))?;
            scenario(&dir)?;
        }
    }
    println!();
    println!("load average at the end: {}", load());
    Ok(())
}

/// Scenario 1, and what the others vary.
const LOCAL4: Setup = Setup {
    name: "local4",
    what: "local bare hub",
    tasks: 12,
    machines: 1,
    jobs: 4,
    daemon: false,
    suite: Some(3.0),
    red: false,
    rounds: 3,
};

fn local4(dir: &Path) -> Res<()> {
    measure(&LOCAL4, dir).map(drop)
}

fn local8(dir: &Path) -> Res<()> {
    let setup = Setup {
        name: "local8",
        tasks: 48,
        jobs: 8,
        suite: Some(5.0),
        rounds: 1,
        ..LOCAL4
    };
    measure(&setup, dir).map(drop)
}

fn daemon(dir: &Path) -> Res<()> {
    let setup = Setup {
        name: "daemon",
        what: "git daemon hub, 2 machines",
        machines: 2,
        jobs: 2,
        daemon: true,
        rounds: 1,
        ..LOCAL4
    };
    measure(&setup, dir).map(drop)
}

/// Scenario 4, which also says what landed and what failed.
fn red(dir: &Path) -> Res<()> {
    let setup = Setup {
        name: "red",
        what: "local bare hub, one change of 12 red",
        red: true,
        rounds: 1,
        ..LOCAL4
    };
    let rounds = measure(&setup, dir)?;
    for (i, round) in rounds.iter().enumerate() {
        println!("  round {}:", i + 1);
        println!("    landed, in order   {}", round.landed.join(" "));
        for (task, attempt, why) in &round.failed {
            println!(
                "    failed             `{task}` attempt {attempt}: {}",
                first_line(why)
            );
        }
        println!(
            "    suite runs beyond {}: {}",
            setup.tasks,
            round.suite_runs.len() as i64 - setup.tasks as i64
        );
        // What the red change cost: every run beyond one a change, but the
        // branch's baseline (which a green round pays as well).
        let baseline = round.test_kinds.get("baseline").copied().unwrap_or(0);
        let extra = round.suite_runs.len() as i64 - setup.tasks as i64 - baseline as i64;
        let bound = setup.tasks.next_power_of_two().trailing_zeros() as i64 + 1;
        println!(
            "    extra for the red change: {extra} (baseline aside; goal <= ceil(log2 {})+1 = {bound})",
            setup.tasks
        );
        if extra > bound {
            return Err(format!(
                "the red change cost {extra} suite runs more, beyond the goal of {bound}"
            ));
        }
    }
    Ok(())
}

fn nogate(dir: &Path) -> Res<()> {
    let setup = Setup {
        name: "nogate",
        suite: None,
        ..LOCAL4
    };
    measure(&setup, dir).map(drop)
}

// ---------------------------------------------------------------------------
// The shared runner
// ---------------------------------------------------------------------------

/// A template hub for `setup`, then its rounds (`FARM_BENCH_ROUNDS`, else
/// its own), each checked; their summary printed.
fn measure(setup: &Setup, dir: &Path) -> Res<Vec<Round>> {
    let count = std::env::var(ROUNDS_ENV)
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|&n| n > 0)
        .unwrap_or(setup.rounds);
    let counter = dir.join("suite-runs");
    let agent = dir.join("agent.sh");
    write_executable(&agent, AGENT)?;
    let mut files: Vec<(String, String)> = setup
        .ids()
        .iter()
        .map(|id| {
            let limit = if setup.red && id == BREAKER {
                "max_attempts = 1\n"
            } else {
                ""
            };
            let text = format!("+++\ntitle = \"{id}\"\n{limit}+++\nCommit a file.\n");
            (format!("tasks/{id}.md"), text)
        })
        .collect();
    if let Some(secs) = setup.suite {
        files.push(("suite.sh".into(), SUITE.into()));
        files.push((
            "farm.toml".into(),
            format!(
                "[tests]\ncommand = \"sh suite.sh {secs} {}\"\nformat = \"tap\"\ntimeout = \"5m\"\n",
                counter.display()
            ),
        ));
    }
    let template = dir.join("template");
    make_hub(&farm(), &template, &files)?;
    let breaker = if setup.red { BREAKER } else { "none" };
    let agent = format!("sh '{}' {breaker}", agent.display());
    let mut rounds = Vec::with_capacity(count);
    for i in 1..=count {
        let round = dir.join(format!("round-{i}"));
        let _ = fs::remove_file(&counter);
        let result = once(setup, &template, &round, &agent, &counter)
            .map_err(|e| format!("{} round {i}: {e}", setup.name))?;
        rounds.push(result);
        match std::env::var_os(KEEP_ENV) {
            Some(keep) => {
                let to = Path::new(&keep).join(format!("{}-round-{i}", setup.name));
                let _ = fs::remove_dir_all(&to);
                fs::rename(&round, &to).map_err(|e| format!("keep {}: {e}", to.display()))?;
            }
            None => {
                let _ = fs::remove_dir_all(&round);
            }
        }
    }
    summary(setup, &rounds);
    Ok(rounds)
}

/// One round on a fresh bare copy of `template` in `dir`.
fn once(setup: &Setup, template: &Path, dir: &Path, agent: &str, counter: &Path) -> Res<Round> {
    let hub = dir.join("hub.git");
    fs::create_dir_all(dir).map_err(|e| format!("create {}: {e}", dir.display()))?;
    output(
        command("git")
            .args(["clone", "-q", "--bare", "--no-local"])
            .arg(template)
            .arg(&hub),
        "git clone --bare",
    )?;
    let cpu_before = children_cpu();
    let served = if setup.daemon {
        Some(Daemon::start(dir)?)
    } else {
        None
    };
    let url = served
        .as_ref()
        .map_or_else(|| hub.display().to_string(), |d| d.url("hub"));
    let logs: Vec<PathBuf> = (1..=setup.machines)
        .map(|m| dir.join(format!("farm-m{m}.log")))
        .collect();
    let start = Instant::now();
    let mut farms = Workers(Vec::new());
    for (m, log) in (1..=setup.machines).zip(&logs) {
        let file = File::create(log).map_err(|e| format!("create {}: {e}", log.display()))?;
        let err = file.try_clone().map_err(|e| format!("{e}"))?;
        let child = command(farm())
            .args(["run", "--agent", agent, "-j", &setup.jobs.to_string()])
            .args(["--name", &format!("m{m}"), "--hub", &url, "--state-dir"])
            .arg(dir.join(format!("state-m{m}")))
            .env("FARM_HOST", format!("m{m}"))
            .current_dir(dir)
            .stdout(file)
            .stderr(err)
            .spawn()
            .map_err(|e| format!("spawn farm: {e}"))?;
        farms.0.push(child);
    }
    let mut exits = Vec::with_capacity(setup.machines);
    for child in &mut farms.0 {
        exits.push(child.wait().map_err(|e| format!("wait for farm: {e}"))?);
    }
    let wall = start.elapsed().as_secs_f64();
    // Its children's time counts once it is reaped.
    drop(served);
    let cpu = children_cpu() - cpu_before;
    let logs_tail = || {
        logs.iter()
            .map(|l| tail(l, 15))
            .collect::<Vec<_>>()
            .join("\n")
    };

    let want = if setup.red { 5 } else { 0 };
    if let Some(bad) = exits.iter().find(|s| s.code() != Some(want)) {
        return Err(format!(
            "farm run exited {bad}, not {want}\n{}",
            logs_tail()
        ));
    }
    let suite_runs: Vec<String> = fs::read_to_string(counter)
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect();
    let (test_kinds, failed) = journals(dir, setup.machines)?;
    let landed = check_hub(setup, &hub, dir).map_err(|e| format!("{e}\n{}", logs_tail()))?;
    let runs_ok = match setup.suite {
        Some(_) => suite_runs.len() >= setup.tasks,
        None => suite_runs.is_empty(),
    };
    if !runs_ok {
        return Err(format!(
            "the suite ran {} time(s) for {} tasks",
            suite_runs.len(),
            setup.tasks
        ));
    }
    let failed_ok = if setup.red {
        failed.len() == 1 && failed[0].0 == BREAKER
    } else {
        failed.is_empty()
    };
    if !failed_ok {
        return Err(format!("failed attempts in the journals: {failed:?}"));
    }
    Ok(Round {
        wall,
        cpu,
        suite_runs,
        test_kinds,
        landed,
        failed,
    })
}

/// The board on the hub's main, judged: every task done once (`red`: all
/// but the breaker, which failed and left nothing on main), and no claim
/// held. The tasks in the order their `done` commits came.
fn check_hub(setup: &Setup, hub: &Path, dir: &Path) -> Res<Vec<String>> {
    let listing = git(hub, &["ls-tree", "-r", "--name-only", "main"])?;
    let (mut done, mut failed, mut pending, mut work) = (vec![], vec![], vec![], vec![]);
    for path in listing.lines() {
        let id = |p: &str| p.trim_end_matches(".md").to_owned();
        if let Some(name) = path.strip_prefix("tasks/done/") {
            done.push(id(name));
        } else if let Some(name) = path.strip_prefix("tasks/failed/") {
            failed.push(id(name));
        } else if let Some(name) = path.strip_prefix("tasks/") {
            if name != "README.md" {
                pending.push(id(name));
            }
        } else if let Some(name) = path.strip_prefix("work-") {
            work.push(name.trim_end_matches(".txt").to_owned());
        } else if path == "broken" {
            return Err("`broken` is on main: a red change landed".into());
        }
    }
    let mut landed = Vec::new();
    let log = git(hub, &["log", "--reverse", "--format=%s", "main"])?;
    for subject in log.lines() {
        if let Some(id) = subject
            .strip_prefix("farm: `")
            .and_then(|r| r.strip_suffix("` done"))
        {
            landed.push(id.to_owned());
        }
    }
    let mut want: Vec<String> = setup.ids();
    want.retain(|id| !(setup.red && id == BREAKER));
    let mut sorted = landed.clone();
    sorted.sort();
    let want_failed: Vec<String> = if setup.red {
        vec![BREAKER.to_owned()]
    } else {
        vec![]
    };
    if done != want
        || sorted != want
        || work != want
        || failed != want_failed
        || !pending.is_empty()
    {
        return Err(format!(
            "main is wrong: done {done:?}, done commits {sorted:?}, work files {work:?}, \
             failed {failed:?}, pending {pending:?}; wanted {want:?} done once each, \
             failed {want_failed:?}"
        ));
    }
    // The bare hub itself, the daemon gone: a URL hub's claims are on its
    // branch `farm/claims`.
    let store = if setup.daemon { "git" } else { "fs" };
    let locks = output(
        command(farm())
            .args(["locks", "--json", "--claims", store, "--hub"])
            .arg(hub)
            .arg("--state-dir")
            .arg(dir.join("state-locks")),
        "farm locks --json",
    )?;
    let locks: serde_json::Value =
        serde_json::from_str(&locks).map_err(|e| format!("farm locks --json: {e}"))?;
    match locks["claims"].as_array() {
        Some(claims) if claims.is_empty() => Ok(landed),
        _ => Err(format!("claims left: {}", locks["claims"])),
    }
}

/// The `tests` events by kind, and the `failed` events, of every machine's
/// journal.
type Journals = (BTreeMap<String, usize>, Vec<(String, u64, String)>);

fn journals(dir: &Path, machines: usize) -> Res<Journals> {
    let (mut kinds, mut failed) = (BTreeMap::new(), Vec::new());
    for m in 1..=machines {
        let path = dir.join(format!("state-m{m}/journal.jsonl"));
        let text = fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        for line in text.lines() {
            let v: serde_json::Value =
                serde_json::from_str(line).map_err(|e| format!("{}: {e}", path.display()))?;
            let s = |key: &str| v[key].as_str().unwrap_or_default().to_owned();
            match v["event"].as_str() {
                Some("tests") => *kinds.entry(s("kind")).or_default() += 1,
                Some("failed") => {
                    failed.push((s("task"), v["attempt"].as_u64().unwrap_or(0), s("why")))
                }
                _ => {}
            }
        }
    }
    Ok((kinds, failed))
}

/// User + system seconds of this process's reaped children so far.
fn children_cpu() -> f64 {
    // SAFETY: getrusage(2) writes the struct it is given, zeroed here.
    let usage = unsafe {
        let mut usage: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_CHILDREN, &mut usage);
        usage
    };
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    secs(usage.ru_utime) + secs(usage.ru_stime)
}

fn summary(setup: &Setup, rounds: &[Round]) {
    let suite = setup
        .suite
        .map_or("no gate".to_owned(), |s| format!("a {s} s suite"));
    let machines = if setup.machines > 1 {
        format!("{} farms x ", setup.machines)
    } else {
        String::new()
    };
    println!(
        "{}: {}, {machines}-j {}, {} tasks, {suite}; {} round(s)",
        setup.name,
        setup.what,
        setup.jobs,
        setup.tasks,
        rounds.len()
    );
    let walls: Vec<f64> = rounds.iter().map(|r| r.wall).collect();
    let span = median(&walls);
    let each: Vec<String> = walls.iter().map(|w| format!("{w:.1}")).collect();
    println!(
        "  makespan       {span:>7.1} s   median of {}",
        each.join(", ")
    );
    println!(
        "  bound          {:>7.1} s   {} x ({} s suite + {SESSION_SECS} s session) / {} agents",
        setup.bound(),
        setup.tasks,
        setup.suite.unwrap_or(0.0),
        setup.agents()
    );
    println!("  ratio          {:>7.2}", span / setup.bound());
    let kinds: Vec<String> = rounds[0]
        .test_kinds
        .iter()
        .map(|(k, n)| format!("{k} {n}"))
        .collect();
    println!(
        "  suite runs     {:>7}     journal, round 1: {}",
        each_round(rounds, |r| r.suite_runs.len()),
        if kinds.is_empty() {
            "none".to_owned()
        } else {
            kinds.join(", ")
        }
    );
    let mut per: BTreeMap<&str, usize> = BTreeMap::new();
    for task in &rounds[0].suite_runs {
        *per.entry(task).or_default() += 1;
    }
    let again: Vec<String> = per
        .iter()
        .filter(|&(_, &n)| n > 1)
        .map(|(t, n)| format!("{t} x{n}"))
        .collect();
    println!(
        "  tested again   round 1: {} (a baseline counts for the task whose turn ran it)",
        if again.is_empty() {
            "none".to_owned()
        } else {
            again.join(", ")
        }
    );
    let cpu: Vec<f64> = rounds
        .iter()
        .map(|r| r.cpu / r.landed.len().max(1) as f64)
        .collect();
    println!(
        "  CPU a landing  {:>7.2} s   median; children's user + system",
        median(&cpu)
    );
    println!(
        "  landings       {:>7}",
        each_round(rounds, |r| r.landed.len())
    );
}

/// A count of each round: once if they agree.
fn each_round(rounds: &[Round], count: impl Fn(&Round) -> usize) -> String {
    let counts: Vec<String> = rounds.iter().map(|r| count(r).to_string()).collect();
    if counts.iter().all(|c| *c == counts[0]) {
        counts[0].clone()
    } else {
        counts.join(", ")
    }
}

fn first_line(s: &str) -> &str {
    s.lines().next().unwrap_or_default()
}
