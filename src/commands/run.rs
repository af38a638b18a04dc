//! `farm run`: the respawning autonomy loop — N agents, each claiming a task,
//! running one fresh session on it, integrating the result, and going again.

use std::time::Duration;

use signal_hook::consts::{SIGINT, SIGTERM};
use signal_hook::iterator::Signals;

use crate::board::{self, Status};
use crate::claims::host::Here;
use crate::claims::notice::{Kind, Target};
use crate::claims::record::Nonce;
use crate::commands::tests::{self, Tip};
use crate::config::Ctx;
use crate::error::{Code, Error};
use crate::git::hub::Hub;
use crate::output::{Style, count};
use crate::run::agent::run_loop;
use crate::run::config::{self, Flags};
use crate::run::event::Event;
use crate::run::session::which;
use crate::run::state::{Run, Summary};
use crate::settings::Settings;
use crate::suite::Suite;
use crate::suite::tasks::GroupBy;

/// Run agents on the board until it is settled.
///
/// Each agent loops: reap dead claims, reset its private clone to the hub's
/// branch, claim the best ready task, run one fresh session of the agent CLI
/// on it, integrate the result (rebase or merge, push), release, again.
/// Failed work goes to `farm/rescue/<task>/<nonce>` on the hub. The run ends
/// when nothing is ready, claimed, or blocked on something that can still
/// finish (or keeps waiting with --watch). SIGINT/SIGTERM: finish running
/// sessions, claim nothing new; a second one kills the sessions, rescues
/// their work and exits 130.
#[derive(Debug, clap::Args)]
#[command(after_help = "\
Examples:
  farm run --agent \"claude -p --dangerously-skip-permissions\" -j 8
  farm run --agent \"codex exec\" --prompt-via stdin --timeout 30m
  farm run --agent \"my-agent --task-file {prompt_file}\" --prompt-via file --once
  farm run --agent claude --steer          # failing tests become tasks; gated pushes
  farm run --agent claude                  # with [roles.*] in farm.toml: the roles' agents
  farm run --agent claude --sandbox-bind ~/.rustup --sandbox-bind ~/.cargo/bin

Each session runs in a sandbox (bubblewrap) where bwrap works: its clone
read-write, the system read-only, an empty home with the CLI's own config,
its own /tmp and processes; the start-up line says what it hides.
--no-sandbox runs sessions as you, with all your files.
The session sees FARM_TASK, FARM_AGENT, FARM_HUB, FARM_CLAIM, FARM_ATTEMPT.
Settings may also come from farm.toml, committed on the hub's branch
(--branch, else its HEAD branch): read from the branch, not a work tree, so
bare and URL hubs have settings too (see `farm init`).

Exit: 0 every task done; 5 settled with failed, stuck or invalid tasks; 6 work left
(drained by farm stop or a first signal, or --until, --max-sessions, --once); 130 stopped
now; 1 an agent loop failed; 2 bad usage, nothing started.")]
pub struct Args {
    #[command(flatten)]
    flags: Flags,

    /// Tests steer: make a task of each failing test ([tests] in farm.toml,
    /// as `farm tests --tasks` does) before the agents start, and again
    /// after integrations, at most once a minute; close those that pass.
    #[arg(long)]
    steer: bool,

    /// With --steer: one task per failing test, or per file, suite or name
    /// prefix.
    #[arg(
        long,
        value_enum,
        value_name = "HOW",
        default_value = "test",
        requires = "steer"
    )]
    group_by: GroupBy,
}

/// What `--steer` refreshes the board with.
struct Steer {
    suite: Suite,
    by: GroupBy,
}

pub fn run(ctx: &Ctx, args: &Args) -> Result<(), Error> {
    let flags = &args.flags;
    // Every line of the run says when (a night's log is read back in order).
    let ctx = &ctx.with_out(ctx.out.stamped(flags.timestamps));
    let spec = ctx.hub_spec()?;
    let state = ctx.state_dir(&spec);
    wait_for_space(ctx, &state);
    // Reading farm.toml from a hub elsewhere is already a network git: the
    // flag's watchdog (or the default) until the file can say otherwise.
    crate::git::command::set_net_timeout(config::net_timeout(flags, &Settings::default())?);
    let on_branch = Settings::read(&spec, flags.branch.as_deref(), &state)?;
    let settings = Settings::parse(&on_branch)?;
    let host = Here::current().host.clone();
    let find = |agent: &str| crate::run::presets::find(agent);
    let mut config = config::resolve(
        flags,
        &settings,
        &config::World {
            host: &host,
            now: std::time::SystemTime::now(),
            runnable: &|program| which(program).is_some(),
            preset: &find,
            claims: ctx.claims_kind(&spec, &settings),
        },
    )?;
    crate::git::command::set_net_timeout(config.net_timeout);
    // A session runs in its clone, not here: an agent given by a path
    // relative to where farm was started (`./my-agent.sh`, found there by
    // the check above) is that directory's.
    if config.argv[0].contains('/')
        && let Ok(here) = std::env::current_dir()
    {
        config.argv[0] = here.join(&config.argv[0]).display().to_string();
    }
    // So is a notifier's (it runs in a directory of the state dir).
    if let Some(notify) = config.notify.as_mut()
        && notify.argv[0].contains('/')
        && let Ok(here) = std::env::current_dir()
    {
        notify.argv[0] = here.join(&notify.argv[0]).display().to_string();
    }
    let steer = if args.steer {
        let suite = Suite::from_raw(settings.tests.as_ref())
            .map_err(|e| Error::usage(format!("invalid [tests] in farm.toml: {e}")))?
            .ok_or_else(|| {
                Error::usage("--steer needs the tests: farm.toml has no [tests]")
                    .hint("add a [tests] table with `command` and `format` (see farm tests --help)")
            })?;
        Some(Steer {
            suite,
            by: args.group_by,
        })
    } else {
        None
    };
    if config.roles.is_empty() && !settings.roles.is_empty() {
        ctx.out.note(
            "farm run: -j given: the roles in farm.toml are not used (run without -j to start them)",
        );
    }
    // Neither the flag nor farm.toml naming one: the branch farm.toml was
    // read on, the hub's HEAD — not asked of a hub elsewhere twice.
    let hub = Hub::open(
        &spec,
        Some(config.branch.as_deref().unwrap_or(&on_branch.branch)),
    )?;
    std::fs::create_dir_all(&state).map_err(|e| {
        Error::failure(format!(
            "cannot create the state directory `{}`: {e}",
            state.display()
        ))
    })?;
    let store = ctx.store_of(&spec, &settings)?;
    let names = config.names.clone();
    let jobs = names.len();
    // What no session may see: the hub on this machine, the state directory.
    let private: Vec<std::path::PathBuf> = [
        hub.local.as_ref().map(|l| l.dir.clone()),
        hub.git_dir().map(|d| d.to_path_buf()),
        Some(state.clone()),
    ]
    .into_iter()
    .flatten()
    .collect();
    let (sandbox, said) =
        crate::run::sandbox::prepare(&config.sandbox, &config.argv, &private, &hub.url, &which)?;
    // Last of the checks, and the first write: nothing is written for a
    // run that was refused.
    crate::claims::protocol::join(&*store)?;
    let mut run = Run::new(hub, store, config, state, ctx.out);
    run.sandbox = sandbox;
    let run = run;
    ctx.out.note(&format!("farm run: {said}"));
    if let Some(limits) = run.config.quota.describe() {
        ctx.out.note(&format!("farm run: {limits}"));
    }
    ctx.out.note(&format!(
        "farm run: {jobs} agent(s) on `{}` of {} ({} claims)",
        run.hub.branch,
        run.hub.url,
        run.store.kind()
    ));
    let watcher = run.watch_hub();
    if watcher.is_none() {
        ctx.out
            .debug("cannot watch the hub for changes; idle agents poll it");
    }
    run.journal.record(
        "",
        &Event::RunStart {
            agents: names.clone(),
            cli: std::path::Path::new(&run.config.argv[0])
                .file_name()
                .map(|f| f.to_string_lossy()),
            roles: run
                .config
                .roles
                .iter()
                .map(|(a, r)| (a.clone(), r.name.clone()))
                .collect(),
            hub: run.hub.url.as_str().into(),
            store: run.store.kind().into(),
            host: Here::current().host.as_str().into(),
        },
    );
    // The schedules' occurrences due now are on the board before the first
    // claim. (None on the tip farm.toml was just read at, from a hub
    // elsewhere: not fetched again to be told so.)
    let mut loader = crate::schedule::fire::Loader::default();
    if on_branch.schedules != Some(false) || on_branch.branch != run.hub.branch {
        fire_schedules(&run, &mut loader);
    }
    // So are the tasks of the failing tests.
    if let Some(steer) = &steer {
        steer_board(&run, steer);
    }
    // A `farm stop` posted before this run began is not for it.
    let old_stop: Vec<Nonce> = run
        .store
        .notices(true)?
        .into_iter()
        .filter(|n| n.kind == Kind::Stop)
        .map(|n| n.nonce)
        .collect();
    let finished = Finished::default();
    let mut signals = Signals::new([SIGINT, SIGTERM])
        .map_err(|e| Error::failure(format!("cannot install signal handlers: {e}")).caused_by(e))?;
    let handle = signals.handle();
    let results: Vec<(String, Summary, Result<(), Error>)> = std::thread::scope(|s| {
        let run = &run;
        s.spawn(move || {
            for _ in signals.forever() {
                if run.stop.draining() {
                    run.stop.kill();
                    run.out.note("farm run: stopping now: killing sessions, rescuing their work");
                } else {
                    run.stop.drain();
                    run.out.note("farm run: draining: no new claims; running sessions finish (signal again to stop now)");
                }
            }
        });
        let finished = &finished;
        let old_stop = &old_stop;
        s.spawn(move || watch_for_stop(run, old_stop, finished));
        s.spawn(move || fire_every_minute(run, finished, loader));
        if let Some(steer) = &steer {
            s.spawn(move || steer_every_minute(run, finished, steer));
        }
        let loops: Vec<_> = names
            .iter()
            .map(|name| {
                let h = s.spawn(move || {
                    let mut summary = Summary::default();
                    let result = run_loop(run, name, &mut summary);
                    // A loop that failed ends the run (exit 1): the others
                    // claim nothing new, or a respawned run would find
                    // their claims and work them again.
                    if let Err(e) = &result
                        && !run.stop.draining()
                    {
                        run.stop.drain();
                        run.wake_all();
                        run.out.note(&format!(
                            "farm run: `{name}` failed ({}); draining: the other agents claim nothing new",
                            if e.message.is_empty() { "said above" } else { &e.message }
                        ));
                    }
                    (summary, result)
                });
                (name.clone(), h)
            })
            .collect();
        let results = loops
            .into_iter()
            .map(|(name, h)| {
                let (summary, result) = h.join().unwrap_or_else(|_| {
                    (
                        Summary::default(),
                        Err(Error::failure("the agent loop panicked")),
                    )
                });
                (name, summary, result)
            })
            .collect();
        handle.close();
        finished.set();
        results
    });

    let mut total = Summary::default();
    let mut failed = Vec::new();
    for (name, s, result) in results {
        // What a loop did counts even when it ended in an error.
        total.sessions += s.sessions;
        total.done += s.done;
        total.failed += s.failed;
        total.rescued += s.rescued;
        if let Err(e) = result {
            failed.push((vec![name], e));
        }
    }
    // Told after the summary, by main, each naming its loops: the same
    // error of several loops (a setup error meets every agent) once.
    let mut told: Vec<(Vec<String>, Error)> = Vec::new();
    for (names, e) in failed {
        match told
            .iter_mut()
            .find(|(_, t)| t.message == e.message && t.hints == e.hints)
        {
            Some((all, _)) => all.extend(names),
            None => told.push((names, e)),
        }
    }
    let failed: Vec<Error> = told
        .into_iter()
        .map(|(names, mut e)| {
            e.message = format!("{}: {}", names.join(", "), e.message);
            e
        })
        .collect();
    let spent = run.spent();
    let mut cost = String::new();
    if let Some(usd) = spent.cost_usd {
        cost.push_str(&format!(", ${usd:.2}"));
    }
    if let (Some(i), Some(o)) = (spent.input_tokens, spent.output_tokens) {
        cost.push_str(&format!(", {i} tokens in, {o} out"));
    }
    ctx.out.note(&format!(
        "farm run: {}: {} done, {}, {} rescued{cost}",
        count(total.sessions, "session", "sessions"),
        total.done,
        count(total.failed, "failed attempt", "failed attempts"),
        total.rescued
    ));
    run.journal.record(
        "",
        &Event::RunEnd {
            sessions: total.sessions,
            done: total.done,
            failed: total.failed,
            rescued: total.rescued,
            cost_usd: spent.cost_usd,
            input_tokens: spent.input_tokens,
            output_tokens: spent.output_tokens,
        },
    );
    // The run's end is the notice most wanted: it gets its chance to go
    // (within the notifier's timeout) before farm exits.
    run.notifier.finish();
    let mut failed = failed.into_iter();
    let mut end = match (run.stop.killing(), failed.next()) {
        (false, None) => return left_on_the_board(&run),
        (true, first) => {
            let mut end = Error::said(Code::Interrupted);
            end.also.extend(first);
            end
        }
        (false, Some(first)) => first,
    };
    // A loop's own kind does not decide the run's exit: a failure is 1 —
    // unless the run was refused before any session (its agents' names in
    // use by another run): bad usage, which running it again as it is
    // cannot mend (`loop.sh` respawns on 1).
    let refused = total.sessions == 0 && end.code == Code::Usage;
    if end.code != Code::Interrupted && !refused {
        end.code = Code::Failure;
    }
    end.also.extend(failed);
    Err(end)
}

/// Fire the schedules (see `farm fire`), journal what it made and skipped,
/// and wake idle agents when it made tasks. A failure is told and
/// journaled, never the run's end: the next minute tries again.
fn fire_schedules(run: &Run, loader: &mut crate::schedule::fire::Loader) {
    match crate::commands::fire::fire(&run.hub, &run.state, loader) {
        Ok(fired) => {
            crate::commands::fire::journal_skips(&run.journal, &fired);
            if !fired.created.is_empty() {
                run.tell(
                    "",
                    &Event::ScheduleFire {
                        tasks: fired.created.iter().map(|i| i.to_string()).collect(),
                    },
                );
                run.wake_all();
            }
            for invalid in &fired.invalid {
                run.out.debug(&format!(
                    "{} is not a valid schedule, skipped: {}",
                    invalid.path, invalid.why
                ));
            }
        }
        Err(e) => {
            run.tell(
                "",
                &Event::ScheduleError {
                    error: e.message.as_str().into(),
                },
            );
        }
    }
}

/// Wait, saying so once, until the state dir has room for a run (see
/// [`crate::disk::RUN_NEEDS`]): a full disk is a state a person mends, and
/// a run that failed at once would be respawned into it all night.
fn wait_for_space(ctx: &Ctx, state: &std::path::Path) {
    let mut said = false;
    while let Some(free) = crate::disk::free_bytes(state).filter(|f| *f < crate::disk::RUN_NEEDS) {
        if !said {
            said = true;
            ctx.out.note(&format!(
                "farm run: only {} free for the state dir `{}` (a run needs {}): \
                 waiting for space (free some, or pass --state-dir on a bigger disk)",
                crate::disk::size(free),
                state.display(),
                crate::disk::size(crate::disk::RUN_NEEDS)
            ));
        }
        std::thread::sleep(crate::disk::LOOK_EVERY);
    }
    if said {
        ctx.out
            .note("farm run: there is room in the state dir again; starting");
    }
}

/// What the run leaves, said and turned into its exit: the board settled
/// and clean (0); settled with tasks failed, stuck or invalid, each named
/// with why and where to look (5); or not settled — drained, or ended by
/// `--until`, `--max-sessions`, `--once` — with the work left counted (6).
fn left_on_the_board(run: &Run) -> Result<(), Error> {
    let mut snapshot = match crate::commands::tasks::read_board(&run.hub) {
        Ok(s) => s,
        // Not knowing what is left is no success (exit 0 says the board
        // is settled with every task done).
        Err(e) => {
            return Err(Error::failure(format!(
                "cannot read the board at the end of the run, so what is left is unknown: {}",
                e.message
            ))
            .hint("farm status"));
        }
    };
    snapshot.claimed = run
        .store
        .list()
        .map(|l| crate::claims::holders(&l))
        .unwrap_or_default();
    let counts = board::counts(&snapshot);
    if board::settled(&snapshot) && counts.waiting > 0 {
        return waiting_for_answers(run, &snapshot);
    }
    if !board::settled(&snapshot) {
        run.out.note(&format!(
            "farm run: ended with work left: {} ready, {} claimed, {} blocked (exit 6; run again to go on)",
            counts.ready, counts.claimed, counts.blocked
        ));
        return Err(Error::said(Code::Drained));
    }
    let mut lines = Vec::new();
    for (id, status) in board::statuses(&snapshot) {
        match status {
            Status::Failed => {
                let why = failed_why(&run.hub, &id).unwrap_or_default();
                lines.push(format!("  failed  `{id}`{why}  (farm task show {id})"));
            }
            Status::Stuck { why } => lines.push(format!("  stuck   `{id}`: {why}")),
            _ => {}
        }
    }
    for i in &snapshot.invalid {
        lines.push(format!("  invalid {}: {}", i.name, i.error));
    }
    if lines.is_empty() {
        run.out.note(&format!(
            "farm run: the board is settled: {} done, nothing failed",
            counts.done
        ));
        return Ok(());
    }
    run.out.note_styled(
        Some(Style::Bad),
        &format!(
            "farm run: the board is settled with {} failed, {} stuck, {} invalid (exit 5):",
            counts.failed, counts.stuck, counts.invalid
        ),
    );
    for line in &lines {
        run.out.note(line);
    }
    Err(Error::said(Code::Unfinished))
}

/// The board is settled but for questions that wait for a person: each is
/// listed with the command that answers it (exit 6: work is left).
fn waiting_for_answers(run: &Run, snapshot: &board::Snapshot) -> Result<(), Error> {
    let counts = board::counts(snapshot);
    let asked = counts.waiting - counts.review;
    let what = match (asked, counts.review) {
        (_, 0) => format!(
            "{} waiting for an answer, nothing else to do (exit 6; answer, then run again)",
            crate::output::count(asked, "task is", "tasks are")
        ),
        (0, n) => format!(
            "{} waiting for review, nothing else to do (exit 6; approve or reject, then run again)",
            crate::output::count(n, "change is", "changes are")
        ),
        (a, n) => format!(
            "{} waiting for an answer and {} for review, nothing else to do (exit 6; answer, \
             approve or reject, then run again)",
            crate::output::count(a, "task is", "tasks are"),
            crate::output::count(n, "change", "changes")
        ),
    };
    run.out
        .note_styled(Some(Style::Warn), &format!("farm run: {what}:"));
    for (id, status) in board::statuses(snapshot) {
        match status {
            Status::Waiting { question } => {
                run.out.note(&format!("  `{id}` asks:"));
                for line in question.lines() {
                    run.out.note(&format!("    {line}"));
                }
                run.out.note(&format!("    farm answer {id} 'YOUR ANSWER'"));
            }
            Status::Review { change } => {
                run.out
                    .note(&format!("  `{id}` waits for review of `{change}`:"));
                run.out.note(&format!(
                    "    farm approve {id}    or    farm reject {id} -m 'WHY'"
                ));
            }
            Status::Failed => run
                .out
                .note(&format!("  failed  `{id}`  (farm task show {id})")),
            Status::Stuck { why } => run.out.note(&format!("  stuck   `{id}`: {why}")),
            _ => {}
        }
    }
    Err(Error::said(Code::Drained))
}

/// `: <why>` of failed task `id`'s last attempt note, as its file on the
/// branch says (`## Attempt 3 — failed with exit code 3`).
fn failed_why(hub: &Hub, id: &crate::names::TaskId) -> Option<String> {
    let path = board::paths::failed(id);
    let text = match &hub.local {
        Some(local) => crate::git::hub::local_file(&local.dir, Some(&hub.branch), &path)?.1?,
        None => return None,
    };
    let heading = text
        .lines()
        .rev()
        .find(|l| l.starts_with("## Attempt ") || l.starts_with("## Out of attempts"))?;
    let why = heading
        .split_once(" — ")
        .map_or(heading.trim_start_matches("## "), |(_, w)| w);
    Some(format!(": {why}"))
}

/// Make a task of each failing test on the branch, and close the test
/// tasks that pass (see `farm tests --tasks`): from the results the gate
/// kept for the branch's tree when it has some, else by a run of the
/// suite. A failure is told and journaled, never the run's end.
fn steer_board(run: &Run, steer: &Steer) {
    let progress = run.config.progress.as_deref();
    let refreshed = Tip::test(
        &run.hub,
        &steer.suite,
        &run.state,
        progress,
        true,
        run.sandbox.as_ref(),
    )
    .and_then(|tip| {
        let claimed = tests::claimed(&*run.store)?;
        let applied = tests::refresh(&run.hub, &steer.suite, &tip, steer.by, &claimed)?;
        Ok((tip, applied))
    });
    match refreshed {
        Ok((tip, applied)) => {
            let counts = tip.report.counts();
            let ids = |ids: &[crate::names::TaskId]| {
                ids.iter()
                    .map(|i| i.as_str().to_owned())
                    .collect::<Vec<_>>()
            };
            run.journal.record(
                "",
                &Event::Steer {
                    commit: tip.commit.as_str().into(),
                    counts,
                    ran: tip.exit.is_some() || tip.secs > 0.0,
                    added: ids(&applied.added),
                    closed: ids(&applied.closed),
                },
            );
            run.out.note(&format!(
                "farm run: tests on `{}`: {} passed, {} failed; tasks: {} added, {} closed",
                run.hub.branch,
                counts.passed,
                counts.failed,
                applied.added.len(),
                applied.closed.len()
            ));
            if !applied.added.is_empty() {
                run.wake_all();
            }
        }
        Err(e) => {
            run.tell(
                "",
                &Event::SteerError {
                    error: e.message.as_str().into(),
                },
            );
        }
    }
}

/// The loops are done: the run's side threads, which look at something now
/// and then, end at once rather than at their next look (their 200 ms
/// sleeps were most of an empty board's `farm run`: 0.22 s against 0.12 s).
#[derive(Default)]
struct Finished {
    done: std::sync::Mutex<bool>,
    wake: std::sync::Condvar,
}

impl Finished {
    fn set(&self) {
        *self.done.lock().unwrap_or_else(|e| e.into_inner()) = true;
        self.wake.notify_all();
    }

    /// Wait `at_most`, or until the loops are done; whether they are.
    fn after(&self, at_most: Duration) -> bool {
        let done = self.done.lock().unwrap_or_else(|e| e.into_inner());
        let (done, _) = self
            .wake
            .wait_timeout_while(done, at_most, |done| !*done)
            .unwrap_or_else(|e| e.into_inner());
        *done
    }
}

/// [`steer_board`] once the branch moved, at most once a minute, until the
/// loops are done.
fn steer_every_minute(run: &Run, finished: &Finished, steer: &Steer) {
    let mut last = std::time::Instant::now();
    let mut seen = run.hub.branch_rev();
    while !finished.after(Duration::from_millis(200)) {
        if last.elapsed() < Duration::from_secs(60) || run.stop.draining() {
            continue;
        }
        // A hub elsewhere has no tip to read without a fetch: refresh.
        let now = run.hub.branch_rev();
        if now.is_some() && now == seen {
            continue;
        }
        last = std::time::Instant::now();
        seen = now;
        steer_board(run, steer);
    }
}

/// Fire the schedules at every minute boundary until the loops are done.
fn fire_every_minute(run: &Run, finished: &Finished, mut loader: crate::schedule::fire::Loader) {
    let minute = |t: std::time::SystemTime| {
        t.duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .as_secs()
            / 60
    };
    let mut last = minute(std::time::SystemTime::now());
    while !finished.after(Duration::from_millis(200)) {
        let now = minute(std::time::SystemTime::now());
        if now != last && !run.stop.draining() {
            last = now;
            fire_schedules(run, &mut loader);
        }
    }
}

/// Look for `farm stop` notices now and then (this process's loops, and
/// every other run on the hub, see the same ones) until the loops are done:
/// a stop of the run, or of some of its agents (by name or by role), which
/// drain while the others go on.
fn watch_for_stop(run: &Run, old: &[Nonce], finished: &Finished) {
    // A notice costs a fetch with the git store; a file read with fs.
    let every = if run.store.kind() == "git" {
        Duration::from_secs(10)
    } else {
        Duration::from_secs(1)
    };
    let mut next = std::time::Instant::now() + every;
    while !finished.after(Duration::from_millis(100)) {
        if std::time::Instant::now() < next || run.stop.killing() {
            continue;
        }
        next = std::time::Instant::now() + every;
        let Ok(notices) = run.store.notices(true) else {
            continue;
        };
        for notice in notices {
            if notice.kind != Kind::Stop || old.contains(&notice.nonce) {
                continue;
            }
            if notice.target != Target::All {
                stop_agents(run, &notice);
            } else if notice.now {
                run.stop.kill();
                run.out.note(&format!(
                    "farm run: stopped now by farm stop --now ({}): killing sessions, rescuing their work",
                    notice.by
                ));
            } else if !run.stop.draining() {
                run.stop.drain();
                run.out.note(&format!(
                    "farm run: draining, asked by farm stop ({}): no new claims; running sessions finish",
                    notice.by
                ));
            }
        }
        run.wake_all();
    }
}

/// Drain this run's agents that a stop of some agents reaches, said once each.
fn stop_agents(run: &Run, notice: &crate::claims::notice::Notice) {
    for name in &run.config.names {
        if notice.target.reaches(name, run.role_of(name)) && run.stop_agent(name) {
            run.out.note(&format!(
                "farm run: `{name}` draining, asked by farm stop for {} ({}): it claims \
                 nothing new; its running session finishes; the other agents go on",
                notice.target, notice.by
            ));
        }
    }
}

#[cfg(test)]
mod finished_tests {
    use super::Finished;
    use std::time::Duration;

    #[test]
    fn a_side_thread_ends_when_the_loops_do_not_at_its_next_look() {
        let finished = Finished::default();
        assert!(!finished.after(Duration::from_millis(1)));
        std::thread::scope(|s| {
            s.spawn(|| {
                std::thread::sleep(Duration::from_millis(20));
                finished.set();
            });
            // Woken by `set`, long before its minute is up.
            assert!(finished.after(Duration::from_secs(60)));
        });
        assert!(finished.after(Duration::ZERO));
    }
}
