//! `farm run`: the respawning autonomy loop — N agents, each claiming a task,
//! running one fresh session on it, integrating the result, and going again.

use std::time::Duration;

use signal_hook::consts::{SIGINT, SIGTERM};
use signal_hook::iterator::Signals;

use crate::age::parse_duration;
use crate::claims::host::Here;
use crate::config::Ctx;
use crate::error::{Code, Error};
use crate::git::hub::Hub;
use crate::run::agent::{AgentConfig, Run, Summary, run_loop};
use crate::run::session::{PromptVia, which};

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

The session sees FARM_TASK, FARM_AGENT, FARM_HUB, FARM_CLAIM, FARM_ATTEMPT.
Settings may also come from farm.toml, committed on the hub's branch
(--branch, else its HEAD branch): read from the branch, not a work tree, so
bare and URL hubs have settings too (see `farm init`).")]
pub struct Args {
    /// The agent CLI and its arguments, split into words (no shell).
    #[arg(long, value_name = "COMMAND")]
    agent: Option<String>,

    /// How many agents run at once.
    #[arg(short = 'j', long, value_name = "N")]
    jobs: Option<usize>,

    /// Agent name (with -j N: NAME-1 … NAME-N). Default: this host's name.
    #[arg(long, value_name = "NAME", value_parser = super::parse_agent)]
    name: Option<String>,

    /// How long one session may run before it is stopped (TERM, then KILL).
    #[arg(long, value_parser = parse_duration, value_name = "DURATION")]
    timeout: Option<Duration>,

    /// How the prompt reaches the agent.
    #[arg(long, value_enum, value_name = "HOW")]
    prompt_via: Option<PromptVia>,

    /// Reap claims with no live local holder whose heartbeat is older than this.
    #[arg(long, value_parser = parse_duration, value_name = "DURATION")]
    stale_after: Option<Duration>,

    /// How often a running session's claim is heartbeated (at most a
    /// quarter of --stale-after). Default: a quarter of --stale-after, and
    /// with the fs store at most 30s (a heartbeat there costs no push).
    #[arg(long, value_parser = parse_duration, value_name = "DURATION")]
    heartbeat: Option<Duration>,

    /// The branch to integrate into (default: the hub's HEAD branch).
    #[arg(long)]
    branch: Option<String>,

    /// Run each session inside this command (split into words, no shell),
    /// e.g. "bwrap --bind {clone} {clone} …" or "docker run -v {clone}:/w …";
    /// {clone} and {prompt_file} are replaced.
    #[arg(long, value_name = "PREFIX")]
    wrap: Option<String>,

    /// Claim nothing new after this: a duration from now (8h), a local time
    /// (07:30) or an RFC 3339 time. Running sessions finish.
    #[arg(long, value_name = "WHEN")]
    until: Option<String>,

    /// Circuit breaker: after this many failed sessions in a row with
    /// nothing done, an agent pauses (0: never).
    #[arg(long, value_name = "N", default_value_t = 5)]
    trip_after: u32,

    /// The circuit breaker's first pause; it doubles each time it trips
    /// again, up to 30m.
    #[arg(long, value_parser = parse_duration, value_name = "DURATION", default_value = "1m")]
    trip_pause: Duration,

    /// Give each agent's CLI a config directory of its own (STATE/config/
    /// AGENT), through the preset's variable (claude: CLAUDE_CONFIG_DIR,
    /// codex: CODEX_HOME) or VAR, seeded with copies of your config files:
    /// parallel starts then never rewrite one shared file.
    #[arg(long, value_name = "VAR", num_args = 0..=1, default_missing_value = "")]
    config_per_agent: Option<String>,

    /// At least this long between two session starts (CLIs that rewrite a
    /// shared config at start-up break when launched together). Default:
    /// 1s for the known agent CLIs, 0s for anything else.
    #[arg(long, value_parser = parse_duration, value_name = "DURATION")]
    stagger: Option<Duration>,

    /// Stop after this many sessions in all.
    #[arg(long, value_name = "N")]
    max_sessions: Option<usize>,

    /// Each agent runs one session, then stops.
    #[arg(long)]
    once: bool,

    /// Keep waiting for new tasks when the board is settled.
    #[arg(long)]
    watch: bool,
}

/// Agent CLIs known to rewrite a shared config file when they start.
const KNOWN_CLIS: [&str; 8] = [
    "claude",
    "codex",
    "gemini",
    "opencode",
    "aider",
    "cursor-agent",
    "goose",
    "amp",
];

pub fn run(ctx: &Ctx, args: &Args) -> Result<(), Error> {
    let spec = ctx.hub_spec()?;
    let settings =
        crate::settings::Settings::of_hub(&spec, args.branch.as_deref(), &ctx.state_dir(&spec))?;
    let command = args.agent.clone().or(settings.agent.clone()).ok_or_else(|| {
        Error::usage("no agent: say which CLI to run")
            .hint("farm run --agent \"claude -p --dangerously-skip-permissions\" (or agent = \"...\" in farm.toml)")
    })?;
    // A preset's name stands for its command line (and its prompt passing).
    let preset = crate::run::presets::find(&command)?;
    let command = preset.as_ref().map_or(command, |p| p.command.clone());
    let argv = shell_words::split(&command).map_err(|e| {
        Error::usage(format!("cannot split --agent `{command}` into words: {e}")).caused_by(e)
    })?;
    let Some(program) = argv.first() else {
        return Err(Error::usage("--agent is empty"));
    };
    if which(program).is_none() {
        return Err(
            Error::usage(format!("agent `{program}` not found (looked on PATH)"))
                .hint("install it, or give its full path in --agent"),
        );
    }
    let jobs = args.jobs.or(settings.jobs).unwrap_or(1);
    if jobs == 0 || jobs > 256 {
        return Err(Error::usage(format!(
            "-j {jobs}: run between 1 and 256 agents"
        )));
    }
    // Checked before anything is written: names become directories.
    let names = agent_names(args.name.as_deref(), jobs)?;
    let duration = |flag: Option<Duration>, setting: Option<String>, key: &str, default: &str| {
        flag.map_or_else(
            || {
                parse_duration(setting.as_deref().unwrap_or(default))
                    .map_err(|e| Error::usage(format!("farm.toml `{key}`: {e}")).caused_by(e))
            },
            Ok,
        )
    };
    let timeout = duration(args.timeout, settings.timeout.clone(), "timeout", "60m")?;
    let stale_after = duration(
        args.stale_after,
        settings.stale_after.clone(),
        "stale_after",
        "30m",
    )?;
    if timeout.is_zero() || stale_after.is_zero() {
        return Err(Error::usage(
            "--timeout and --stale-after must be longer than 0s",
        ));
    }
    let via = args
        .prompt_via
        .or(settings.prompt_via)
        .or(preset.as_ref().map(|p| p.prompt_via))
        .unwrap_or(PromptVia::Arg);
    let hub = Hub::open(&spec, args.branch.as_deref().or(settings.branch.as_deref()))?;
    let state = ctx.state_dir(&spec);
    std::fs::create_dir_all(&state).map_err(|e| {
        Error::failure(format!(
            "cannot create the state directory `{}`: {e}",
            state.display()
        ))
    })?;

    let store = ctx.store_of(&spec, &settings)?;
    let heartbeat = match args.heartbeat {
        Some(h) if h.is_zero() || h > stale_after / 4 => {
            return Err(Error::usage(format!(
                "--heartbeat {}: heartbeat at least every quarter of --stale-after ({})",
                crate::age::Age(h),
                crate::age::Age(stale_after / 4)
            ))
            .hint("a claim whose heartbeats come further apart can look stale while it lives"));
        }
        Some(h) => h,
        None if store.kind() == "fs" => (stale_after / 4).min(Duration::from_secs(30)),
        None => stale_after / 4,
    };
    let wrap = match &args.wrap {
        None => Vec::new(),
        Some(text) => {
            let words = shell_words::split(text).map_err(|e| {
                Error::usage(format!("cannot split --wrap `{text}` into words: {e}"))
            })?;
            match words.first() {
                None => return Err(Error::usage("--wrap is empty")),
                Some(w) if which(w).is_none() => {
                    return Err(Error::usage(format!(
                        "--wrap program `{w}` not found (looked on PATH)"
                    ))
                    .hint("install it, or give its full path in --wrap"));
                }
                Some(_) => words,
            }
        }
    };
    let until = args
        .until
        .as_deref()
        .map(|w| crate::age::parse_when(w, std::time::SystemTime::now()))
        .transpose()
        .map_err(|e| Error::usage(format!("--until: {e}")).caused_by(e))?;
    let stagger = args.stagger.unwrap_or_else(|| {
        let program = std::path::Path::new(program)
            .file_name()
            .map(|f| f.to_string_lossy().into_owned())
            .unwrap_or_default();
        if KNOWN_CLIS.contains(&program.as_str()) {
            Duration::from_secs(1)
        } else {
            Duration::ZERO
        }
    });
    let agent_config = match args.config_per_agent.as_deref() {
        None => None,
        Some("") => {
            let Some(p) = preset.as_ref().filter(|p| !p.config_env.is_empty()) else {
                return Err(Error::usage(
                    "--config-per-agent: this agent names no config variable",
                )
                .hint("say which: --config-per-agent VAR (e.g. CLAUDE_CONFIG_DIR)"));
            };
            Some(AgentConfig {
                var: Box::leak(p.config_env.clone().into_boxed_str()),
                seed: p
                    .config_seed
                    .iter()
                    .map(|s| crate::run::presets::expand_home(s))
                    .collect(),
            })
        }
        Some(var) => Some(AgentConfig {
            var: Box::leak(var.to_owned().into_boxed_str()),
            seed: Vec::new(),
        }),
    };
    let mut run = Run::new(
        hub,
        store,
        argv,
        via,
        timeout,
        stale_after,
        heartbeat,
        state,
        args.max_sessions,
        args.once,
        args.watch,
        ctx.out,
    );
    run.wrap = wrap;
    run.until = until;
    run.trip_after = args.trip_after;
    run.trip_pause = args.trip_pause;
    run.stagger = stagger;
    run.agent_config = agent_config;
    run.patterns = preset.map(|p| p.patterns).unwrap_or_default();
    run.loops = names.len();
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
    run.journal.log(
        "",
        "run_start",
        serde_json::json!({
            "agents": names,
            "hub": run.hub.url,
            "store": run.store.kind(),
            "host": Here::current().host,
        }),
    );
    // A `farm stop` posted before this run began is not for it.
    let old_stop = run.store.stop_notice(true)?.map(|n| n.nonce);
    let finished = std::sync::atomic::AtomicBool::new(false);
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
        s.spawn(move || watch_for_stop(run, old_stop.as_ref(), finished));
        let loops: Vec<_> = names
            .iter()
            .map(|name| {
                let h = s.spawn(move || {
                    let mut summary = Summary::default();
                    let result = run_loop(run, name, &mut summary);
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
        finished.store(true, std::sync::atomic::Ordering::SeqCst);
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
        if let Err(mut e) = result {
            // Told after the summary, by main, each naming its loop.
            e.message = format!("{name}: {}", e.message);
            failed.push(e);
        }
    }
    let spent = run.spent();
    let mut cost = String::new();
    if let Some(usd) = spent.cost_usd {
        cost.push_str(&format!(", ${usd:.2}"));
    }
    if let (Some(i), Some(o)) = (spent.input_tokens, spent.output_tokens) {
        cost.push_str(&format!(", {i} tokens in, {o} out"));
    }
    ctx.out.note(&format!(
        "farm run: {} session(s): {} done, {} failed attempt(s), {} rescued{cost}",
        total.sessions, total.done, total.failed, total.rescued
    ));
    run.journal.log(
        "",
        "run_end",
        serde_json::json!({
            "sessions": total.sessions,
            "done": total.done,
            "failed": total.failed,
            "rescued": total.rescued,
            "cost_usd": spent.cost_usd,
            "input_tokens": spent.input_tokens,
            "output_tokens": spent.output_tokens,
        }),
    );
    let mut failed = failed.into_iter();
    let mut end = match (run.stop.killing(), failed.next()) {
        (false, None) => return Ok(()),
        (true, first) => {
            let mut end = Error::said(Code::Interrupted);
            end.also.extend(first);
            end
        }
        (false, Some(first)) => first,
    };
    // A loop's own kind does not decide the run's exit: a failure is 1.
    if end.code != Code::Interrupted {
        end.code = Code::Failure;
    }
    end.also.extend(failed);
    Err(end)
}

/// The agents' names: `--name` (default: this host's name), with `-j N`
/// NAME-1 … NAME-N. Each names a clone and a log directory, so each must be
/// a name by the task-id rule (design notes, protocol item 10), never a path.
fn agent_names(name: Option<&str>, jobs: usize) -> Result<Vec<String>, Error> {
    let base = name.map_or_else(|| Here::current().host.clone(), str::to_owned);
    let names: Vec<String> = if jobs == 1 {
        vec![base.clone()]
    } else {
        (1..=jobs).map(|i| format!("{base}-{i}")).collect()
    };
    for n in &names {
        if let Err(e) = crate::names::check_agent_name(n) {
            let hint = match (name, jobs) {
                (None, _) => "name the agents yourself: farm run --name NAME".to_owned(),
                (Some(_), 1) => "pick another --name".to_owned(),
                (Some(_), _) => format!(
                    "pick a shorter --name: with -j {jobs} the agents are NAME-1 … NAME-{jobs}"
                ),
            };
            let what = if name.is_none() {
                " (this host's name)"
            } else {
                ""
            };
            return Err(Error::usage(format!("{e}{what}")).hint(hint));
        }
    }
    Ok(names)
}

/// Look for a `farm stop` notice now and then (this process's loops, and
/// every other run on the hub, see the same one) until the loops are done.
fn watch_for_stop(
    run: &Run,
    old: Option<&crate::claims::record::Nonce>,
    finished: &std::sync::atomic::AtomicBool,
) {
    use std::sync::atomic::Ordering;
    // A notice costs a fetch with the git store; a file read with fs.
    let every = if run.store.kind() == "git" {
        Duration::from_secs(10)
    } else {
        Duration::from_secs(1)
    };
    let mut next = std::time::Instant::now() + every;
    while !finished.load(Ordering::SeqCst) {
        std::thread::sleep(Duration::from_millis(100));
        if std::time::Instant::now() < next || run.stop.killing() {
            continue;
        }
        next = std::time::Instant::now() + every;
        let Ok(Some(notice)) = run.store.stop_notice(true) else {
            continue;
        };
        if Some(&notice.nonce) == old {
            continue;
        }
        if notice.now {
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
        run.wake_all();
    }
}
