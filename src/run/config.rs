//! `farm run`'s configuration, resolved once: its flags, the hub's
//! `farm.toml` and the agent's preset — in that order of precedence, over
//! farm's defaults — turned into one validated [`RunConfig`] before anything
//! is written. Every error names the flag or the farm.toml key, and the fix.
//!
//! [`resolve`] is a pure function: what it would otherwise ask the machine
//! (the host's name, the time, whether a program is on `PATH`, the presets,
//! the claim store) it is given in a [`World`], so that its tests need none.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, SystemTime};

use crate::age::parse_duration;
use crate::claims::ClaimsKind;
use crate::error::Error;
use crate::run::classify;
use crate::run::config_dir::AgentConfig;
use crate::run::presets::{self, Preset};
use crate::run::roles::Role;
use crate::run::session::PromptVia;
use crate::settings::Settings;

/// A claim's heartbeat older than this is stale, unless `--stale-after` or
/// farm.toml's `stale_after` say otherwise: `farm run` reaps such claims,
/// and `farm locks` calls them stale by the same measure.
pub const STALE_AFTER: &str = "30m";

/// The hub's staleness threshold: farm.toml's `stale_after`, else
/// [`STALE_AFTER`].
pub fn stale_after(settings: &Settings) -> Result<Duration, Error> {
    parse_duration(settings.stale_after.as_deref().unwrap_or(STALE_AFTER)).map_err(|e| {
        Error::usage(format!("farm.toml `stale_after`: {e}")).hint("a duration: 90s, 10m, 2h, 1d")
    })
}

/// How long a network git may stay silent: `--net-timeout` (or
/// `FARM_NET_TIMEOUT`), else farm.toml's `net_timeout`, else
/// [`crate::git::command::NET_TIMEOUT`]. (`farm run` sets it before it reads
/// farm.toml, from the flag alone, and again once it has.)
pub fn net_timeout(flags: &Flags, settings: &Settings) -> Result<Duration, Error> {
    let quiet = match (flags.net_timeout, settings.net_timeout.as_deref()) {
        (Some(d), _) => d,
        (None, Some(text)) => parse_duration(text).map_err(|e| {
            Error::usage(format!("farm.toml `net_timeout`: {e}")).hint("a duration: 30s, 2m, 10m")
        })?,
        (None, None) => crate::git::command::NET_TIMEOUT,
    };
    if quiet.is_zero() {
        return Err(Error::usage("--net-timeout must be longer than 0s")
            .hint("a duration: 30s, 2m, 10m (default 2m)"));
    }
    Ok(quiet)
}

/// `farm run`'s flags (flattened into its command's arguments).
#[derive(Debug, Clone, clap::Args)]
pub struct Flags {
    /// The agent CLI and its arguments, split into words (no shell).
    #[arg(long, value_name = "COMMAND")]
    pub agent: Option<String>,

    /// How many agents run at once [default: 1, or farm.toml's `jobs`; without
    /// either, the roles in farm.toml if it has any].
    #[arg(short = 'j', long, value_name = "N")]
    pub jobs: Option<usize>,

    /// Agent name (with -j N: NAME-1 … NAME-N). Default: this host's name.
    #[arg(long, value_name = "NAME", value_parser = crate::names::parse_agent_name)]
    pub name: Option<String>,

    /// How long one session may run before it is stopped (TERM, then KILL)
    /// [default: 60m, or farm.toml's `timeout`].
    #[arg(long, value_parser = parse_duration, value_name = "DURATION")]
    pub timeout: Option<Duration>,

    /// How the prompt reaches the agent.
    #[arg(long, value_enum, value_name = "HOW")]
    pub prompt_via: Option<PromptVia>,

    /// Reap claims with no live local holder whose heartbeat is older than
    /// this [default: 30m, or farm.toml's `stale_after`].
    #[arg(long, value_parser = parse_duration, value_name = "DURATION")]
    pub stale_after: Option<Duration>,

    /// Stop a git talking to a hub over the network when no byte came or
    /// went for this long (it is then tried again, as a hub that did not
    /// answer) [default: 2m, or farm.toml's `net_timeout`].
    #[arg(long, value_parser = parse_duration, value_name = "DURATION", env = "FARM_NET_TIMEOUT")]
    pub net_timeout: Option<Duration>,

    /// How often a running session's claim is heartbeated (at most a
    /// quarter of --stale-after). Default: a quarter of --stale-after, and
    /// with the fs store at most 30s (a heartbeat there costs no push).
    #[arg(long, value_parser = parse_duration, value_name = "DURATION")]
    pub heartbeat: Option<Duration>,

    /// The branch to integrate into (default: the hub's HEAD branch).
    #[arg(long)]
    pub branch: Option<String>,

    /// Run each session inside this command (split into words, no shell),
    /// e.g. "bwrap --bind {clone} {clone} …" or "docker run -v {clone}:/w …";
    /// {clone} and {prompt_file} are replaced.
    #[arg(long, value_name = "PREFIX")]
    pub wrap: Option<String>,

    #[command(flatten)]
    pub sandbox: SandboxFlags,

    /// The most memory each process of a session may map (its address
    /// space, RLIMIT_AS): 4G, 512M [farm.toml: session_memory]. A process
    /// past it fails to allocate; the attempt fails.
    #[arg(long, value_name = "SIZE", env = "FARM_SESSION_MEMORY")]
    pub session_memory: Option<String>,

    /// The most CPU time each process of a session may use (RLIMIT_CPU):
    /// 30m, 2h [farm.toml: session_cpu]. A process past it is stopped
    /// (SIGXCPU, then SIGKILL 5s later); the attempt fails.
    #[arg(long, value_name = "DURATION", env = "FARM_SESSION_CPU")]
    pub session_cpu: Option<String>,

    /// Claim nothing new after this: a duration from now (8h), a local time
    /// (07:30) or an RFC 3339 time. Running sessions finish.
    #[arg(long, value_name = "WHEN")]
    pub until: Option<String>,

    /// Circuit breaker: after this many failed sessions in a row with
    /// nothing done, an agent pauses (0: never).
    #[arg(long, value_name = "N", default_value_t = 5)]
    pub trip_after: u32,

    /// The circuit breaker's first pause; it doubles each time it trips
    /// again, up to 30m.
    #[arg(long, value_parser = parse_duration, value_name = "DURATION", default_value = "1m")]
    pub trip_pause: Duration,

    /// Give each agent's CLI a config directory of its own (STATE/config/
    /// AGENT), through the preset's variable (claude: CLAUDE_CONFIG_DIR,
    /// codex: CODEX_HOME) or VAR, seeded with copies of your config files:
    /// parallel starts then never rewrite one shared file.
    #[arg(long, value_name = "VAR", num_args = 0..=1, default_missing_value = "")]
    pub config_per_agent: Option<String>,

    /// At least this long between two session starts (CLIs that rewrite a
    /// shared config at start-up break when launched together). Default:
    /// 1s for the known agent CLIs, 0s for anything else.
    #[arg(long, value_parser = parse_duration, value_name = "DURATION")]
    pub stagger: Option<Duration>,

    /// Stop after this many sessions in all (those cut short by a usage limit count).
    #[arg(long, value_name = "N")]
    pub max_sessions: Option<usize>,

    /// A cost budget in US dollars: no new claims once the sessions' cost,
    /// as the agent CLI reports it, reaches it (running sessions finish).
    #[arg(long, value_name = "USD", value_parser = parse_usd)]
    pub max_cost: Option<f64>,

    /// Each agent runs one session, then stops.
    #[arg(long)]
    pub once: bool,

    /// Keep waiting for new tasks when the board is settled.
    #[arg(long)]
    pub watch: bool,

    /// What each line of the run begins with: the local time, UTC, or none.
    #[arg(long, value_enum, value_name = "WHEN", default_value = "local")]
    pub timestamps: crate::output::Timestamps,

    /// Push without running the test gate (`[tests]` in farm.toml), which
    /// otherwise keeps every change that turns a passing test red off the
    /// branch.
    #[arg(long)]
    pub no_gate: bool,
}

/// The sandbox's flags, shared by `farm run` and `farm tests` (which runs
/// the branch's tests: code an agent wrote).
#[derive(Debug, Clone, Default, clap::Args)]
pub struct SandboxFlags {
    /// Run each session in a sandbox (bubblewrap): its clone read-write,
    /// the system read-only, a private home and /tmp, a process namespace
    /// of its own [default: auto: on where bwrap works, unless --wrap; or
    /// farm.toml's `sandbox`].
    #[arg(
        long = "sandbox",
        value_enum,
        value_name = "WHEN",
        num_args = 0..=1,
        default_missing_value = "on",
        env = "FARM_SANDBOX"
    )]
    pub mode: Option<crate::run::sandbox::Mode>,

    /// Run sessions unsandboxed: as you, with all your files (--sandbox off).
    #[arg(long = "no-sandbox")]
    pub off: bool,

    /// A path sandboxed sessions may see, read-only unless PATH:rw
    /// (repeatable; FARM_SANDBOX_BIND takes a comma-separated list).
    #[arg(
        long = "sandbox-bind",
        value_name = "PATH[:rw]",
        env = "FARM_SANDBOX_BIND",
        value_delimiter = ','
    )]
    pub bind: Vec<String>,

    /// A variable of farm's environment that sandboxed sessions keep
    /// (repeatable; the preset's own are kept already).
    #[arg(long = "sandbox-env", value_name = "NAME")]
    pub env: Vec<String>,
}

/// What [`resolve`] needs to know of the machine and the hub.
pub struct World<'a> {
    /// This host's name: the agents' name unless `--name` gives one.
    pub host: &'a str,
    /// Now, for `--until 07:30`.
    pub now: SystemTime,
    /// Whether a program can be run: a path to an executable, or a name
    /// found on `PATH`.
    pub runnable: &'a dyn Fn(&str) -> bool,
    /// The agent preset an `--agent` names, if it names one (see
    /// [`presets::find`]).
    pub preset: &'a dyn Fn(&str) -> Result<Option<Preset>, Error>,
    /// The claim store the run uses (the heartbeat's default depends on it).
    pub claims: ClaimsKind,
}

/// Everything `farm run` was told, validated: what the loops read and never
/// change. (Run state — the journal, shared counters, the hub and the claim
/// store — is [`crate::run::state::Run`]'s.)
#[derive(Debug, Clone)]
pub struct RunConfig {
    /// The agent's command line, split into words; never empty for a run
    /// (empty for a landing by hand, which runs no session: see [`landing`]).
    pub argv: Vec<String>,
    pub via: PromptVia,
    pub timeout: Duration,
    pub stale_after: Duration,
    pub heartbeat: Duration,
    /// How long a git talking to the hub over the network may stay silent.
    pub net_timeout: Duration,
    /// The agents' names, one per loop.
    pub names: Vec<String>,
    /// The role of each agent that has one (`[roles]`, without `-j`).
    pub roles: BTreeMap<String, crate::run::roles::Role>,
    /// The branch to integrate into (`None`: the hub's HEAD branch).
    pub branch: Option<String>,
    pub max_sessions: Option<usize>,
    pub once: bool,
    pub watch: bool,
    /// `--wrap`: the words every session runs inside; empty for none.
    pub wrap: Vec<String>,
    /// What the sandbox is to be (made at start-up, where bwrap is known).
    pub sandbox: crate::run::sandbox::Plan,
    /// What each process of a session may use.
    pub quota: crate::run::quota::Quota,
    /// `--until`: no new claims after this.
    pub until: Option<SystemTime>,
    /// `--max-cost`: no new claims once the run's reported cost reaches it.
    pub max_cost: Option<f64>,
    /// The circuit breaker: failed sessions in a row (0: never) before an
    /// agent pauses, and its first pause (doubling on each trip).
    pub trip_after: u32,
    pub trip_pause: Duration,
    /// At least this long between two session starts of this run.
    pub stagger: Duration,
    /// A config directory of its own for each agent (`--config-per-agent`).
    pub agent_config: Option<AgentConfig>,
    /// The agent CLI's own words for limits and errors (its preset's).
    pub patterns: classify::Patterns,
    /// The test gate every push goes through (`[tests]`, as `verify` runs
    /// it); `None` without `[tests]`, or with `--no-gate`.
    pub gate: Option<crate::suite::Suite>,
    /// The progress document's name (see [`crate::run::progress`]): by
    /// default `PROGRESS.md` when there are `[tests]`; `None`: none.
    pub progress: Option<String>,
    /// `[notify]`: the command told of what needs a person.
    pub notify: Option<crate::run::notify::Config>,
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

/// The run's configuration: each value from its flag, else `farm.toml`,
/// else the agent's preset, else farm's default; checked.
pub fn resolve(flags: &Flags, settings: &Settings, world: &World) -> Result<RunConfig, Error> {
    let command = flags.agent.clone().or(settings.agent.clone()).ok_or_else(|| {
        Error::usage("no agent: say which CLI to run")
            .hint("farm run --agent \"claude -p --dangerously-skip-permissions\" (or agent = \"...\" in farm.toml)")
    })?;
    // A preset's name stands for its command line (and its prompt passing).
    let preset = (world.preset)(&command)?;
    let command = preset.as_ref().map_or(command, |p| p.command.clone());
    let argv = shell_words::split(&command).map_err(|e| {
        Error::usage(format!("cannot split --agent `{command}` into words: {e}")).caused_by(e)
    })?;
    let Some(program) = argv.first() else {
        return Err(Error::usage("--agent is empty"));
    };
    if !(world.runnable)(program) {
        return Err(
            Error::usage(format!("agent `{program}` not found (looked on PATH)"))
                .hint("install it, or give its full path in --agent"),
        );
    }
    let jobs = flags.jobs.or(settings.jobs).unwrap_or(1);
    if jobs == 0 || jobs > 256 {
        return Err(Error::usage(format!(
            "-j {jobs}: run between 1 and 256 agents"
        )));
    }
    let (names, roles) = agents(flags, settings, world, jobs)?;
    let duration = |flag: Option<Duration>, setting: Option<&str>, key: &str, default: &str| {
        flag.map_or_else(
            || {
                parse_duration(setting.unwrap_or(default))
                    .map_err(|e| Error::usage(format!("farm.toml `{key}`: {e}")).caused_by(e))
            },
            Ok,
        )
    };
    let timeout = duration(flags.timeout, settings.timeout.as_deref(), "timeout", "60m")?;
    let stale_after = duration(
        flags.stale_after,
        settings.stale_after.as_deref(),
        "stale_after",
        STALE_AFTER,
    )?;
    if timeout.is_zero() || stale_after.is_zero() {
        return Err(Error::usage(
            "--timeout and --stale-after must be longer than 0s",
        ));
    }
    let net_timeout = net_timeout(flags, settings)?;
    let via = flags
        .prompt_via
        .or(settings.prompt_via)
        .or(preset.as_ref().map(|p| p.prompt_via))
        .unwrap_or(PromptVia::Arg);
    let heartbeat = heartbeat(flags.heartbeat, stale_after, world.claims)?;
    let wrap = wrap(flags.wrap.as_deref(), world)?;
    let sandbox = sandbox_plan(&flags.sandbox, settings, preset.as_ref(), !wrap.is_empty())?;
    let quota = quota(flags, settings)?;
    let until = flags
        .until
        .as_deref()
        .map(|w| crate::age::parse_when(w, world.now))
        .transpose()
        .map_err(|e| Error::usage(format!("--until: {e}")).caused_by(e))?;
    let stagger = flags.stagger.unwrap_or_else(|| {
        let program = Path::new(program)
            .file_name()
            .map(|f| f.to_string_lossy().into_owned())
            .unwrap_or_default();
        if KNOWN_CLIS.contains(&program.as_str()) {
            Duration::from_secs(1)
        } else {
            Duration::ZERO
        }
    });
    let agent_config = agent_config(flags.config_per_agent.as_deref(), preset.as_ref())?;
    let gate = gate(flags.no_gate, settings, world)?;
    let progress = progress_name(settings)?;
    let notify = crate::run::notify::resolve(settings.notify.as_ref(), world.runnable)?;
    Ok(RunConfig {
        argv,
        via,
        timeout,
        stale_after,
        net_timeout,
        heartbeat,
        names,
        roles,
        branch: flags.branch.clone().or(settings.branch.clone()),
        max_sessions: flags.max_sessions,
        once: flags.once,
        watch: flags.watch,
        wrap,
        sandbox,
        quota,
        until,
        max_cost: flags.max_cost.or(settings.max_cost),
        trip_after: flags.trip_after,
        trip_pause: flags.trip_pause,
        stagger,
        agent_config,
        patterns: preset.map(|p| p.patterns).unwrap_or_default(),
        gate,
        progress,
        notify,
    })
}

/// `--session-memory`, `--session-cpu` over farm.toml's `session_*`.
fn quota(flags: &Flags, settings: &Settings) -> Result<crate::run::quota::Quota, Error> {
    crate::run::quota::Quota::resolve(
        [
            (flags.session_memory.as_deref(), "--session-memory"),
            (
                settings.session_memory.as_deref(),
                "farm.toml `session_memory`",
            ),
        ],
        [
            (flags.session_cpu.as_deref(), "--session-cpu"),
            (settings.session_cpu.as_deref(), "farm.toml `session_cpu`"),
        ],
    )
}

/// The configuration of a landing by hand (`farm rescue apply --land`),
/// which runs no session: the hub's settings for what integrating reads —
/// the test gate, the progress document, the claims' liveness — and agent
/// `name`'s alone; no agent command (`argv` is empty: there is no session
/// to run, and a conflict goes to no merge session).
pub fn landing(
    settings: &Settings,
    world: &World,
    name: &str,
    branch: Option<String>,
    net_timeout: Duration,
) -> Result<RunConfig, Error> {
    let stale_after = parse_duration(settings.stale_after.as_deref().unwrap_or(STALE_AFTER))
        .map_err(|e| Error::usage(format!("farm.toml `stale_after`: {e}")).caused_by(e))?;
    Ok(RunConfig {
        argv: Vec::new(),
        via: PromptVia::Arg,
        timeout: Duration::from_secs(60 * 60),
        stale_after,
        heartbeat: heartbeat(None, stale_after, world.claims)?,
        net_timeout,
        names: vec![name.to_owned()],
        roles: BTreeMap::new(),
        branch: branch.or(settings.branch.clone()),
        max_sessions: Some(0),
        once: true,
        watch: false,
        wrap: Vec::new(),
        sandbox: crate::run::sandbox::Plan {
            mode: crate::run::sandbox::Mode::Off,
            why: "a landing runs no session",
            binds: Vec::new(),
            network: false,
            env: Vec::new(),
            home: Vec::new(),
        },
        quota: crate::run::quota::Quota::default(),
        until: None,
        max_cost: None,
        trip_after: 0,
        trip_pause: Duration::ZERO,
        stagger: Duration::ZERO,
        agent_config: None,
        patterns: classify::Patterns::default(),
        gate: gate(false, settings, world)?,
        progress: progress_name(settings)?,
        notify: None,
    })
}

/// The agents' names, and the role of each: without -j, the roles (if any)
/// say how many agents run, and which (over farm.toml's `jobs`). Checked
/// before anything is written: names become directories.
fn agents(
    flags: &Flags,
    settings: &Settings,
    world: &World,
    jobs: usize,
) -> Result<(Vec<String>, BTreeMap<String, Role>), Error> {
    let roles = crate::run::roles::resolve(&settings.roles)
        .map_err(|e| Error::usage(format!("invalid role in farm.toml: {e}")))?;
    Ok(if flags.jobs.is_none() && !roles.is_empty() {
        let base = flags.name.as_deref().unwrap_or(world.host);
        let mut names = Vec::new();
        let mut of = BTreeMap::new();
        for role in roles {
            for i in 1..=role.agents {
                let name = format!("{base}-{}-{i}", role.name);
                crate::names::check_agent_name(&name).map_err(|e| {
                    Error::usage(e.to_string()).hint("pick a shorter --name, or shorter role names")
                })?;
                of.insert(name.clone(), role.clone());
                names.push(name);
            }
        }
        if names.len() > 256 {
            return Err(Error::usage(format!(
                "the roles in farm.toml add up to {} agents: at most 256",
                names.len()
            )));
        }
        (names, of)
    } else {
        (
            agent_names(flags.name.as_deref(), world.host, jobs)?,
            BTreeMap::new(),
        )
    })
}

/// `--heartbeat`, checked against `stale_after`; by default a quarter of
/// it (at most 30 s for claims on a filesystem, where a beat is cheap).
fn heartbeat(
    flag: Option<Duration>,
    stale_after: Duration,
    claims: ClaimsKind,
) -> Result<Duration, Error> {
    Ok(match flag {
        Some(h) if h.is_zero() || h > stale_after / 4 => {
            return Err(Error::usage(format!(
                "--heartbeat {}: heartbeat at least every quarter of --stale-after ({})",
                crate::age::Age(h),
                crate::age::Age(stale_after / 4)
            ))
            .hint("a claim whose heartbeats come further apart can look stale while it lives"));
        }
        Some(h) => h,
        None if claims == ClaimsKind::Fs => (stale_after / 4).min(Duration::from_secs(30)),
        None => stale_after / 4,
    })
}

/// `--wrap`, split into words, its program found.
fn wrap(flag: Option<&str>, world: &World) -> Result<Vec<String>, Error> {
    Ok(match flag {
        None => Vec::new(),
        Some(text) => {
            let words = shell_words::split(text).map_err(|e| {
                Error::usage(format!("cannot split --wrap `{text}` into words: {e}"))
            })?;
            match words.first() {
                None => return Err(Error::usage("--wrap is empty")),
                Some(w) if !(world.runnable)(w) => {
                    return Err(Error::usage(format!(
                        "--wrap program `{w}` not found (looked on PATH)"
                    ))
                    .hint("install it, or give its full path in --wrap"));
                }
                Some(_) => words,
            }
        }
    })
}

/// `--sandbox`, `--no-sandbox`, `FARM_SANDBOX`, farm.toml's `sandbox*` and
/// the preset's `sandbox_*`, checked. With `--wrap` the sessions already
/// run inside something of the user's: the sandbox is then off unless asked
/// for.
pub fn sandbox_plan(
    flags: &SandboxFlags,
    settings: &Settings,
    preset: Option<&Preset>,
    wrapped: bool,
) -> Result<crate::run::sandbox::Plan, Error> {
    use crate::run::sandbox::{Bind, Mode};
    let (mode, why) = match (flags.off, flags.mode, settings.sandbox) {
        (true, _, _) => (Mode::Off, "--no-sandbox"),
        (false, Some(m), _) => (m, "--sandbox or FARM_SANDBOX"),
        (false, None, Some(s)) => (s.mode(), "farm.toml's `sandbox`"),
        (false, None, None) if wrapped => (Mode::Off, "--wrap runs the sessions"),
        (false, None, None) => (Mode::Auto, "the default"),
    };
    let mut binds = Vec::new();
    for (text, whose) in flags.bind.iter().map(|b| (b, "--sandbox-bind")).chain(
        settings
            .sandbox_bind
            .iter()
            .map(|b| (b, "farm.toml `sandbox_bind`")),
    ) {
        binds.push(Bind::parse(text).map_err(|e| Error::usage(format!("{whose} {e}")))?);
    }
    let mut env: Vec<String> = preset.map(|p| p.sandbox_env.clone()).unwrap_or_default();
    for name in flags.env.iter().chain(&settings.sandbox_env) {
        if name.is_empty() || name.contains(['=', '\0']) {
            return Err(Error::usage(format!(
                "--sandbox-env `{name}`: give a variable's name"
            )));
        }
        env.push(name.clone());
    }
    if let Some(p) = preset.filter(|p| !p.config_env.is_empty()) {
        env.push(p.config_env.clone());
    }
    Ok(crate::run::sandbox::Plan {
        mode,
        why,
        binds,
        network: settings.sandbox_network.unwrap_or(true),
        env,
        home: preset
            .map(|p| {
                p.sandbox_home
                    .iter()
                    .map(|h| presets::expand_home(h))
                    .collect()
            })
            .unwrap_or_default(),
    })
}

/// `--config-per-agent [VAR]`: the variable named, or the preset's.
fn agent_config(flag: Option<&str>, preset: Option<&Preset>) -> Result<Option<AgentConfig>, Error> {
    Ok(match flag {
        None => None,
        Some("") => {
            let Some(p) = preset.filter(|p| !p.config_env.is_empty()) else {
                return Err(Error::usage(
                    "--config-per-agent: this agent names no config variable",
                )
                .hint("say which: --config-per-agent VAR (e.g. CLAUDE_CONFIG_DIR)"));
            };
            Some(AgentConfig {
                var: p.config_env.clone(),
                seed: p
                    .config_seed
                    .iter()
                    .map(|s| presets::expand_home(s))
                    .collect(),
            })
        }
        Some(var) => Some(AgentConfig {
            var: var.to_owned(),
            seed: Vec::new(),
        }),
    })
}

/// The test gate: `[tests]` in farm.toml, unless `--no-gate`.
fn gate(
    no_gate: bool,
    settings: &Settings,
    world: &World,
) -> Result<Option<crate::suite::Suite>, Error> {
    let gate = crate::suite::Suite::from_raw(settings.tests.as_ref())
        .map_err(|e| {
            Error::usage(format!("invalid [tests] in farm.toml: {e}"))
                .hint("see farm tests --help; or run without the gate: --no-gate")
        })?
        .filter(|_| !no_gate)
        .map(|suite| suite.for_gate());
    // A program named without a path must be on PATH now; one with a path
    // may be a script of the branch's, found only in the clone.
    if let Some(program) = gate.as_ref().map(|g| g.argv[0].as_str())
        && !program.contains('/')
        && !(world.runnable)(program)
    {
        return Err(Error::usage(format!(
            "the test command `{program}` ([tests] in farm.toml) not found (looked on PATH)"
        ))
        .hint(
            "install it, fix `command` or `verify` in [tests], or run without the gate: --no-gate",
        ));
    }
    Ok(gate)
}

/// `progress` in farm.toml: a file at the root of the repository, `""` for
/// none; by default `PROGRESS.md` when the tests steer (`[tests]`).
pub fn progress_name(settings: &Settings) -> Result<Option<String>, Error> {
    match settings.progress.as_deref() {
        None => Ok(settings
            .tests
            .as_ref()
            .map(|_| crate::run::progress::DEFAULT.to_owned())),
        Some("") => Ok(None),
        Some(name) => {
            let reserved = ["tasks", crate::names::CLAIMS_DIR, ".git", "farm.toml"];
            if name.contains('/') || name == "." || name == ".." || reserved.contains(&name) {
                return Err(Error::usage(format!(
                    "farm.toml `progress` = {name:?}: name a file at the root of the repository"
                ))
                .hint("progress = \"PROGRESS.md\", or \"\" for none"));
            }
            Ok(Some(name.to_owned()))
        }
    }
}

/// `--max-cost 20` or `20.50` or `$20`: a positive number of dollars.
fn parse_usd(text: &str) -> Result<f64, String> {
    text.trim()
        .trim_start_matches('$')
        .parse::<f64>()
        .ok()
        .filter(|usd| usd.is_finite() && *usd > 0.0)
        .ok_or_else(|| format!("{text:?} is not an amount of dollars above 0, such as 20 or 7.50"))
}

/// The agents' names: `--name` (default: this host's name), with `-j N`
/// NAME-1 … NAME-N. Each names a clone and a log directory, so each must be
/// a name by the task-id rule (`crate::names`), never a path.
fn agent_names(name: Option<&str>, host: &str, jobs: usize) -> Result<Vec<String>, Error> {
    let base = name.unwrap_or(host);
    let names: Vec<String> = if jobs == 1 {
        vec![base.to_owned()]
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

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;
    use std::collections::BTreeMap;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        flags: Flags,
    }

    fn flags(args: &[&str]) -> Flags {
        Cli::try_parse_from(std::iter::once("run").chain(args.iter().copied()))
            .unwrap()
            .flags
    }

    fn settings(toml: &str) -> Settings {
        toml::from_str(toml).unwrap()
    }

    /// One preset, `claude`.
    fn preset(agent: &str) -> Result<Option<Preset>, Error> {
        let table: BTreeMap<String, Preset> = toml::from_str(
            r#"
            [claude]
            command = "claude -p --yes"
            prompt_via = "stdin"
            config_env = "CLAUDE_CONFIG_DIR"
            "#,
        )
        .unwrap();
        Ok(table.get(agent).cloned())
    }

    fn resolve_with(flags: &Flags, settings: &Settings) -> Result<RunConfig, Error> {
        let runnable = |p: &str| p != "missing";
        let world = World {
            host: "box",
            now: SystemTime::UNIX_EPOCH,
            runnable: &runnable,
            preset: &preset,
            claims: ClaimsKind::Fs,
        };
        resolve(flags, settings, &world)
    }

    /// Without -j the roles say which agents run (over farm.toml's `jobs`);
    /// -j runs plain agents.
    #[test]
    fn roles_name_the_agents_unless_j_is_given() {
        let toml = "agent = \"sh\"\njobs = 5\n[roles.docs]\n[roles.default]\nagents = 2\n";
        let c = resolve_with(&flags(&[]), &settings(toml)).unwrap();
        assert_eq!(c.names, ["box-default-1", "box-default-2", "box-docs-1"]);
        assert_eq!(c.roles["box-docs-1"].name, "docs");
        let c = resolve_with(&flags(&["--name", "n"]), &settings(toml)).unwrap();
        assert_eq!(c.names[2], "n-docs-1");
        let c = resolve_with(&flags(&["-j", "2"]), &settings(toml)).unwrap();
        assert_eq!(c.names, ["box-1", "box-2"]);
        assert!(c.roles.is_empty());
        let long = format!("agent = \"sh\"\n[roles.{}]\n", "r".repeat(99));
        let e = resolve_with(&flags(&[]), &settings(&long)).unwrap_err();
        assert!(e.to_string().contains("invalid agent name"), "{e}");
    }

    fn message(flags: &Flags, settings: &Settings) -> String {
        let e = resolve_with(flags, settings).unwrap_err();
        format!("{} | {}", e.message, e.hints_line())
    }

    #[test]
    fn a_flag_beats_farm_toml_beats_the_preset_beats_the_default() {
        let none = settings("");
        let file = settings(
            "agent = \"claude\"\nprompt_via = \"file\"\njobs = 3\ntimeout = \"5m\"\nbranch = \"dev\"\n",
        );

        // Default: prompt as an argument, one agent, an hour.
        let c = resolve_with(&flags(&["--agent", "my-agent"]), &none).unwrap();
        assert_eq!(c.argv, ["my-agent"]);
        assert_eq!(
            (c.via, c.names.clone()),
            (PromptVia::Arg, vec!["box".to_owned()])
        );
        assert_eq!(c.timeout, Duration::from_secs(3600));
        assert_eq!(c.branch, None);

        // The preset: its command and its prompt passing.
        let c = resolve_with(&flags(&["--agent", "claude"]), &none).unwrap();
        assert_eq!(c.argv, ["claude", "-p", "--yes"]);
        assert_eq!(c.via, PromptVia::Stdin);
        assert_eq!(
            c.stagger,
            Duration::from_secs(1),
            "a known CLI is staggered"
        );

        // farm.toml over the preset.
        let c = resolve_with(&flags(&[]), &file).unwrap();
        assert_eq!(c.argv, ["claude", "-p", "--yes"]);
        assert_eq!((c.via, c.names.len()), (PromptVia::File, 3));
        assert_eq!(c.timeout, Duration::from_secs(300));
        assert_eq!(c.branch.as_deref(), Some("dev"));

        // Flags over farm.toml.
        let c = resolve_with(
            &flags(&[
                "--agent",
                "other",
                "--prompt-via",
                "arg",
                "-j",
                "2",
                "--timeout",
                "1m",
                "--branch",
                "main",
                "--name",
                "n",
            ]),
            &file,
        )
        .unwrap();
        assert_eq!(c.argv, ["other"]);
        assert_eq!(c.via, PromptVia::Arg);
        assert_eq!(c.names, ["n-1", "n-2"]);
        assert_eq!(c.timeout, Duration::from_secs(60));
        assert_eq!(c.branch.as_deref(), Some("main"));
        assert_eq!(c.stagger, Duration::ZERO);
    }

    #[test]
    fn the_heartbeat_defaults_by_store_and_is_bounded() {
        let none = settings("");
        let c = resolve_with(&flags(&["--agent", "a", "--stale-after", "10m"]), &none).unwrap();
        assert_eq!(c.heartbeat, Duration::from_secs(30), "fs: at most 30s");
        let m = message(
            &flags(&["--agent", "a", "--stale-after", "1m", "--heartbeat", "20s"]),
            &none,
        );
        assert!(m.contains("--heartbeat 20s"), "{m}");
    }

    #[test]
    fn each_invalid_value_is_named_with_its_fix() {
        let none = settings("");
        let cases: &[(&[&str], &str, &str)] = &[
            (&[], "", "no agent: say which CLI to run"),
            (
                &["--agent", "missing --flag"],
                "",
                "agent `missing` not found",
            ),
            (&["--agent", ""], "", "--agent is empty"),
            (&["--agent", "a 'open"], "", "cannot split --agent"),
            (
                &["--agent", "a", "-j", "0"],
                "",
                "-j 0: run between 1 and 256",
            ),
            (&["--agent", "a", "-j", "257"], "", "-j 257"),
            (&["--agent", "a"], "jobs = 0", "-j 0"),
            (
                &["--agent", "a"],
                "timeout = \"soon\"",
                "farm.toml `timeout`",
            ),
            (
                &["--agent", "a"],
                "stale_after = \"x\"",
                "farm.toml `stale_after`",
            ),
            (
                &["--agent", "a", "--timeout", "0s"],
                "",
                "must be longer than 0s",
            ),
            (&["--agent", "a", "--wrap", ""], "", "--wrap is empty"),
            (
                &["--agent", "a", "--wrap", "missing x"],
                "",
                "--wrap program `missing`",
            ),
            (&["--agent", "a", "--until", "never"], "", "--until:"),
            (
                &["--agent", "a", "--config-per-agent"],
                "",
                "--config-per-agent: this agent names no config variable",
            ),
            (&["--agent", "a", "--name", "n", "-j", "2"], "", ""),
        ];
        for (args, toml, want) in cases {
            let result = resolve_with(&flags(args), &settings(toml));
            match (want.is_empty(), result) {
                (true, Ok(_)) => {}
                (false, Err(e)) => assert!(
                    e.message.contains(want),
                    "{args:?} {toml:?}: {} (wanted {want})",
                    e.message
                ),
                (_, r) => panic!(
                    "{args:?} {toml:?}: {:?}",
                    r.map(|_| ()).map_err(|e| e.message)
                ),
            }
        }
        // A host name that is no agent name: named, and how to pick one.
        let world = World {
            host: "bad/host",
            now: SystemTime::UNIX_EPOCH,
            runnable: &|_| true,
            preset: &preset,
            claims: ClaimsKind::Git,
        };
        let e = resolve(&flags(&["--agent", "a"]), &none, &world).unwrap_err();
        assert!(e.message.contains("(this host's name)"), "{}", e.message);
        assert!(e.hints_line().contains("--name"), "{}", e.hints_line());
    }

    #[test]
    fn config_per_agent_owns_its_variable() {
        let none = settings("");
        let c = resolve_with(&flags(&["--agent", "claude", "--config-per-agent"]), &none).unwrap();
        assert_eq!(c.agent_config.unwrap().var, "CLAUDE_CONFIG_DIR");
        let c = resolve_with(
            &flags(&["--agent", "a", "--config-per-agent", "MY_DIR"]),
            &none,
        )
        .unwrap();
        assert_eq!(c.agent_config.unwrap().var, "MY_DIR");
    }

    #[test]
    fn an_unknown_agent_is_a_command_line_that_must_be_runnable() {
        // One word that names no preset is a program, looked up as such.
        let m = message(&flags(&["--agent", "missing"]), &settings(""));
        assert!(
            m.contains("agent `missing` not found (looked on PATH)"),
            "{m}"
        );
        assert!(m.contains("give its full path in --agent"), "{m}");
    }
}
