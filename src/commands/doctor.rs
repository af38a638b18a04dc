//! `farm doctor`: is everything a night of `farm run` needs in place?

use std::process::{Command, Stdio};
use std::time::Duration;

use crate::claims::Attempt;
use crate::claims::record::Claim;
use crate::config::Ctx;
use crate::error::{Code, Error};
use crate::git::hub::Hub;
use crate::git::hub::HubSpec;
use crate::names::TaskId;
use crate::output::Style;
use crate::run::session::which;
use crate::settings::Settings;

/// Check git, the hub (reachable, writable: a probe claimed and released),
/// the agent CLI (found, answers --version), the session sandbox (bwrap
/// found and working), the templates, the board (cycles, invalid files),
/// disk space and inotify limits. One line per
/// check; each failure comes with its fix. Exit 1 if any check failed.
#[derive(Debug, clap::Args)]
#[command(after_help = "\
Examples:
  farm doctor
  farm doctor --agent claude
  farm --hub ssh://host/srv/repo.git doctor")]
pub struct Args {
    /// The agent to check (a preset name or a command line); default:
    /// `agent` in farm.toml.
    #[arg(long, value_name = "COMMAND")]
    agent: Option<String>,
}

/// One check's result: fine, or what is wrong and how to fix it.
struct Check {
    name: &'static str,
    result: Result<String, (String, String)>,
}

pub fn run(ctx: &Ctx, args: &Args) -> Result<(), Error> {
    let mut checks = vec![git()];
    let spec = ctx.hub_spec();
    match &spec {
        Err(e) => {
            checks.push(Check {
                name: "hub",
                result: Err((e.message.clone(), e.hints_line())),
            });
            checks.push(agent_cli(args.agent.as_deref()));
            checks.push(sandbox(None));
        }
        Ok(spec) => {
            let (check, settings) = settings(spec, &ctx.state_dir(spec));
            checks.push(check);
            let hub = Hub::open(spec, settings.branch.as_deref());
            checks.push(Check {
                name: "hub",
                result: match &hub {
                    Ok(h) => Ok(format!("`{}` of {}", h.branch, h.url)),
                    Err(e) => Err((e.message.clone(), e.hints_line())),
                },
            });
            checks.push(claims(ctx, spec, &settings));
            checks.extend(clocks(ctx, spec, &settings));
            if let Ok(hub) = &hub {
                checks.extend(board(hub));
            }
            let agent = args.agent.clone().or(settings.agent.clone());
            checks.push(agent_cli(agent.as_deref()));
            checks.push(sandbox(settings.sandbox.map(|s| s.mode())));
            checks.push(disk(&ctx.state_dir(spec)));
        }
    }
    checks.push(inotify());
    let mut failed = 0;
    for c in &checks {
        let line = match &c.result {
            Ok(what) => format!("{} {:<9} {what}", ctx.out.paint(Style::Good, "ok"), c.name),
            Err((what, fix)) => {
                failed += 1;
                let mut l = format!("{} {:<9} {what}", ctx.out.paint(Style::Bad, "!!"), c.name);
                if !fix.is_empty() {
                    l.push_str(&format!("\n             fix: {fix}"));
                }
                l
            }
        };
        ctx.out.data(&format!("{line}\n"))?;
    }
    if failed == 0 {
        return Ok(());
    }
    ctx.out.note(&format!("{failed} check(s) failed"));
    Err(Error::said(Code::Failure))
}

/// Whether sessions can run sandboxed here (bwrap found, and able to make
/// its namespaces), and whether they will (`setting`: farm.toml's).
fn sandbox(setting: Option<crate::run::sandbox::Mode>) -> Check {
    use crate::run::sandbox::{Mode, probe};
    use clap::ValueEnum;
    // As `farm run` would: the environment over farm.toml.
    let from_env = std::env::var("FARM_SANDBOX")
        .ok()
        .and_then(|v| Mode::from_str(&v, true).ok());
    let result = match (from_env, setting, which("bwrap")) {
        (Some(Mode::Off), _, _) => {
            Ok("off (FARM_SANDBOX=off): sessions run as you, with all your files".into())
        }
        (None, Some(Mode::Off), _) => {
            Ok("off in farm.toml: sessions run as you, with all your files".into())
        }
        (_, _, None) => Err((
            "bwrap is not installed: sessions would run unsandboxed, as you".into(),
            "install the package `bubblewrap` (apt, dnf, pacman), or run with --no-sandbox to mean it".into(),
        )),
        (_, _, Some(bwrap)) => match probe(&bwrap) {
            Ok(()) => {
                let version = Command::new(&bwrap)
                    .arg("--version")
                    .output()
                    .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
                    .unwrap_or_default();
                Ok(format!("{version} works: each session runs in its own sandbox"))
            }
            Err(said) => Err((
                format!("bwrap cannot make a sandbox here: {said}"),
                "user namespaces may be off (sysctl kernel.unprivileged_userns_clone, an AppArmor policy); or run with --no-sandbox to mean it".into(),
            )),
        },
    };
    Check {
        name: "sandbox",
        result,
    }
}

fn git() -> Check {
    let out = Command::new("git").arg("--version").output();
    let result = match out {
        Ok(o) if o.status.success() => {
            let v = String::from_utf8_lossy(&o.stdout).trim().to_owned();
            let nums: Vec<u32> = v
                .split_whitespace()
                .nth(2)
                .unwrap_or("")
                .split('.')
                .filter_map(|n| n.parse().ok())
                .collect();
            if nums.as_slice() >= [2, 41].as_slice() {
                Ok(v)
            } else {
                Err((
                    format!("{v}: hubs reached by URL need git 2.41 or later"),
                    "install a newer git (a local hub works with older ones)".into(),
                ))
            }
        }
        _ => Err((
            "git not found".into(),
            "install git and put it on PATH".into(),
        )),
    };
    Check {
        name: "git",
        result,
    }
}

/// Claim and release a probe task: the store can be written.
fn claims(ctx: &Ctx, spec: &HubSpec, settings: &Settings) -> Check {
    let result = (|| -> Result<String, (String, String)> {
        let store = ctx
            .store_of(spec, settings)
            .map_err(|e| (e.message.clone(), e.hints_line()))?;
        let probe = TaskId::parse("farm-doctor-probe").expect("a valid id");
        let claim = Claim::new(probe, "farm-doctor", None, 1, std::time::SystemTime::now());
        let fail = |e: crate::claims::StoreError| {
            let e: Error = e.into();
            let hints = e.hints_line();
            (e.message, hints)
        };
        match store.try_claim(claim, false).map_err(fail)? {
            Attempt::Won(held) => {
                store.release_held(held).map_err(fail)?;
                use crate::claims::protocol::PROTOCOL;
                let spoken = match store.protocol().map_err(fail)? {
                    Some(v) if v > PROTOCOL => {
                        return Err((
                            format!(
                                "the hub's farms speak protocol {v}, this farm {PROTOCOL}: `farm run` will refuse it"
                            ),
                            "install a newer farm on this machine".into(),
                        ));
                    }
                    Some(v) => format!("protocol {v} (this farm speaks {PROTOCOL})"),
                    None => format!("no protocol yet (this farm speaks {PROTOCOL})"),
                };
                Ok(format!(
                    "{} store at {}: claimed and released a probe; {spoken}",
                    store.kind(),
                    store.location()
                ))
            }
            Attempt::Lost(_) => Err((
                "the probe task is held by another farm doctor".into(),
                "run farm doctor again in a moment".into(),
            )),
        }
    })();
    Check {
        name: "claims",
        result,
    }
}

/// The clocks of the hosts whose claims this machine saw appear, against
/// its own (a store shared across hosts only: the git store).
fn clocks(ctx: &Ctx, spec: &HubSpec, settings: &Settings) -> Option<Check> {
    let store = ctx.store_of(spec, settings).ok()?;
    if store.kind() != "git" {
        return None;
    }
    let listed = store.list().ok()?;
    let off = crate::claims::clocks_off(&listed);
    let result = match off.iter().max_by_key(|(_, secs)| secs.unsigned_abs()) {
        None => Ok(format!(
            "no host's claims are stamped more than {} off when they appeared here",
            crate::age::Age(crate::claims::liveness::CLOCK_OFF)
        )),
        Some((host, secs)) => Err((
            crate::claims::clock_off_line(host, *secs),
            format!("set the clock of `{host}` right (timedatectl set-ntp true)"),
        )),
    };
    Some(Check {
        name: "clocks",
        result,
    })
}

fn board(hub: &Hub) -> Vec<Check> {
    let read = (|| {
        let tmp = tempfile::tempdir().map_err(|e| e.to_string())?;
        let dir = hub.extract_board(tmp.path()).map_err(|e| e.message)?;
        let templates = ["prompt.md", "merge.md"]
            .iter()
            .filter(|t| dir.join("templates").join(t).is_file())
            .count();
        let snapshot = crate::board::load(&dir).map_err(|e| e.to_string())?;
        Ok::<_, String>((snapshot, templates))
    })();
    match read {
        Err(e) => vec![Check {
            name: "board",
            result: Err((e, "look at the hub's tasks/ directory".into())),
        }],
        Ok((snapshot, templates)) => {
            let c = crate::board::counts(&snapshot);
            let board = if c.invalid > 0 || c.stuck > 0 {
                Err((
                    format!("{} invalid file(s), {} stuck task(s)", c.invalid, c.stuck),
                    "farm tasks names each, with the parse error or the cycle".into(),
                ))
            } else {
                Ok(format!(
                    "{} ready, {} blocked, {} done, {} failed",
                    c.ready, c.blocked, c.done, c.failed
                ))
            };
            vec![
                Check {
                    name: "board",
                    result: board,
                },
                Check {
                    name: "templates",
                    result: Ok(match templates {
                        0 => "farm's built-in prompt.md and merge.md".to_owned(),
                        n => format!("{n} of the hub's own (templates/), the rest built in"),
                    }),
                },
            ]
        }
    }
}

/// The hub's `farm.toml`, read from its HEAD branch as `farm run` reads
/// it; and whether a non-bare hub's work tree holds another one, which farm
/// does not read (the branch wins: every clone sees the branch's).
fn settings(spec: &HubSpec, state: &std::path::Path) -> (Check, Settings) {
    let fail = |e: Error| {
        let hints = e.hints_line();
        (e.message, hints)
    };
    let mut settings = Settings::default();
    let result = (|| {
        let file = Settings::read(spec, None, state).map_err(fail)?;
        settings = Settings::parse(&file).map_err(fail)?;
        crate::suite::Suite::from_raw(settings.tests.as_ref()).map_err(|e| {
            (
                format!("invalid [tests] in {}: {e}", file.what),
                "see farm tests --help".to_owned(),
            )
        })?;
        crate::run::roles::resolve(&settings.roles).map_err(|e| {
            (
                format!("invalid role in {}: {e}", file.what),
                "see docs/roles.md in farm's repository".to_owned(),
            )
        })?;
        crate::run::config::progress_name(&settings).map_err(|e| {
            let hints = e.hints_line();
            (format!("{} (in {})", e.message, file.what), hints)
        })?;
        if let Some(dir) = spec.local() {
            let here = std::fs::read_to_string(dir.join(crate::settings::FILE)).ok();
            if here.is_some()
                && here.as_deref().map(str::trim_end) != file.text.as_deref().map(str::trim_end)
            {
                return Err((
                    format!(
                        "the work tree's {} differs from {}, which is the one farm reads",
                        crate::settings::FILE,
                        file.what
                    ),
                    format!(
                        "commit it: git -C {} commit {}",
                        dir.display(),
                        crate::settings::FILE
                    ),
                ));
            }
        }
        Ok(match file.text {
            Some(_) => file.what,
            None => format!(
                "no {} on branch `{}`: flags and defaults",
                crate::settings::FILE,
                file.branch
            ),
        })
    })();
    let check = Check {
        name: "settings",
        result,
    };
    (check, settings)
}

fn agent_cli(agent: Option<&str>) -> Check {
    let result = (|| {
        let Some(agent) = agent else {
            return Err((
                "no agent to check".into(),
                "pass --agent NAME, or set agent = \"...\" in farm.toml".into(),
            ));
        };
        let command = crate::run::presets::find(agent)
            .ok()
            .flatten()
            .map_or(agent.to_owned(), |p| p.command);
        let words = shell_words::split(&command)
            .map_err(|e| (format!("cannot split `{command}`: {e}"), String::new()))?;
        let program = words.first().cloned().unwrap_or_default();
        let Some(path) = which(&program) else {
            return Err((
                format!("`{program}` not found on PATH"),
                format!("install it, or give its full path in --agent (`{command}`)"),
            ));
        };
        let version = version_of(&path);
        Ok(format!(
            "{} ({})",
            path.display(),
            version.unwrap_or_else(|| "it did not say its version".into())
        ))
    })();
    Check {
        name: "agent",
        result,
    }
}

/// The first line `PROGRAM --version` prints, waiting at most 10 s. It
/// runs in an empty scratch directory: a script that ignores `--version`
/// must not touch anything.
fn version_of(path: &std::path::Path) -> Option<String> {
    let scratch = tempfile::tempdir().ok()?;
    let mut child = Command::new(path)
        .arg("--version")
        .current_dir(scratch.path())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .ok()?;
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while std::time::Instant::now() < deadline {
        if let Ok(Some(_)) = child.try_wait() {
            let out = child.wait_with_output().ok()?;
            let text = String::from_utf8_lossy(&out.stdout);
            return text.lines().next().map(|l| l.trim().to_owned());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = child.kill();
    let _ = child.wait();
    None
}

/// At least 1 GiB free where the clones and logs go.
fn disk(state: &std::path::Path) -> Check {
    let probe = state
        .ancestors()
        .find(|p| p.exists())
        .unwrap_or(std::path::Path::new("/"));
    let result = match crate::disk::free_bytes(probe) {
        Some(free) if free >= 1 << 30 => Ok(format!(
            "{} free at {}",
            crate::disk::size(free),
            probe.display()
        )),
        Some(free) => Err((
            format!("only {} MiB free at {}", free >> 20, probe.display()),
            "free some space, or pass --state-dir on a bigger disk".into(),
        )),
        None => Err((
            format!("cannot read the free space at {}", probe.display()),
            String::new(),
        )),
    };
    Check {
        name: "disk",
        result,
    }
}

/// Idle agents wait on inotify; without it they poll (and say so).
fn inotify() -> Check {
    let read = |f: &str| {
        std::fs::read_to_string(format!("/proc/sys/fs/inotify/{f}"))
            .ok()
            .and_then(|s| s.trim().parse::<u64>().ok())
    };
    let result = match (read("max_user_watches"), read("max_user_instances")) {
        (Some(w), Some(i)) if w >= 1024 && i >= 16 => {
            Ok(format!("{w} watches, {i} instances per user"))
        }
        (Some(w), Some(i)) => Err((
            format!("{w} watches, {i} instances per user: idle agents will poll"),
            "sysctl fs.inotify.max_user_watches=65536 fs.inotify.max_user_instances=256".into(),
        )),
        _ => Err((
            "no inotify here: idle agents will poll".into(),
            String::new(),
        )),
    };
    Check {
        name: "inotify",
        result,
    }
}
