//! `farm completions SHELL` and `farm man`: the shell's completion script
//! and the manual pages (clap_mangen), both made from the very command line
//! farm parses, so they never drift from it.
//!
//! The completion script is a few lines that hand the line being completed
//! back to farm (`FARM_COMPLETE=SHELL farm -- WORDS…`, clap_complete's
//! dynamic completion): flags and subcommands come from the command line's
//! definition, and task ids and agent names from the board and the state
//! directory, as they are when TAB is pressed.

use std::ffi::OsString;
use std::io::Write;
use std::path::PathBuf;

use clap::{CommandFactory, Parser};
use clap_complete::CompletionCandidate;
use clap_complete::env::EnvCompleter;

use crate::cli::Cli;
use crate::config::Ctx;
use crate::error::Error;
use crate::git::hub::{Hub, HubSpec};

/// The variable that makes `farm` complete a line instead of running it.
/// Farm's own name, not clap's `COMPLETE`: a variable of that common a
/// name, set for something else, would turn every farm command into a
/// completion.
pub const VAR: &str = "FARM_COMPLETE";

/// Print the completion script for a shell: it asks farm for the words
/// (subcommands, flags, task ids, agent names) each time TAB is pressed, so
/// it needs `farm` on the PATH, and names the tasks of the hub that the
/// line's `--hub`, `FARM_HUB` or the current directory says (a hub on this
/// machine).
#[derive(Debug, clap::Args)]
#[command(after_help = "\
Examples:
  farm completions bash > ~/.local/share/bash-completion/completions/farm
  farm completions zsh > \"${fpath[1]}/_farm\"
  farm completions fish > ~/.config/fish/completions/farm.fish")]
pub struct Args {
    /// The shell.
    #[arg(value_enum)]
    shell: Shell,
}

/// The shells whose scripts farm writes.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
enum Shell {
    Bash,
    Zsh,
    Fish,
    Elvish,
    Powershell,
}

pub fn run(ctx: &Ctx, args: &Args) -> Result<(), Error> {
    let shell: &dyn EnvCompleter = match args.shell {
        Shell::Bash => &clap_complete::env::Bash,
        Shell::Zsh => &clap_complete::env::Zsh,
        Shell::Fish => &clap_complete::env::Fish,
        Shell::Elvish => &clap_complete::env::Elvish,
        Shell::Powershell => &clap_complete::env::Powershell,
    };
    let mut script = Vec::new();
    shell
        .write_registration(VAR, "farm", "farm", "farm", &mut script)
        .map_err(|e| Error::failure(format!("cannot write the script: {e}")))?;
    if let Shell::Zsh = args.shell {
        // Installed as `_farm` in $fpath, the script is the body of `_farm`,
        // run at the first TAB: it defines the completer and names it for
        // later TABs, and must also complete this one (the first TAB of
        // every shell offered nothing).
        script.extend_from_slice(
            b"\nif [[ \"${funcstack[1]}\" == _farm ]]; then\n    _clap_dynamic_completer_farm \"$@\"\nfi\n",
        );
    }
    ctx.out.data(&String::from_utf8_lossy(&script))?;
    Ok(())
}

/// Where the line being completed says the hub and the state directory
/// are: its own global flags, then the environment and the current
/// directory, as when the command runs. (The shell runs `farm -- WORDS…`;
/// a candidate is told none of the words, so they are read here.)
fn completing() -> Option<Ctx> {
    let words: Vec<OsString> = std::env::args_os()
        .skip_while(|a| a != "--")
        .skip(2)
        .collect();
    let mut args = vec![OsString::from("farm")];
    let mut words = words.iter();
    while let Some(w) = words.next() {
        let text = w.to_string_lossy();
        for flag in ["--hub", "--state-dir", "--claims"] {
            if text == flag {
                args.push(w.clone());
                args.extend(words.next().cloned());
            } else if text.starts_with(flag) && text[flag.len()..].starts_with('=') {
                args.push(w.clone());
            }
        }
    }
    args.push("tasks".into());
    let cli = Cli::try_parse_from(args).ok()?;
    Some(Ctx::new(&cli.global))
}

/// The ids of the tasks on the board (pending, done, failed), each with
/// its title or its state. A hub elsewhere offers none: reading its board
/// means a clone, too slow for a TAB.
pub fn task_ids() -> Vec<CompletionCandidate> {
    let Some(ctx) = completing() else {
        return Vec::new();
    };
    let Ok(dir) = ctx.hub() else {
        return Vec::new();
    };
    let Ok(hub) = Hub::open(&HubSpec::Local(dir), None) else {
        return Vec::new();
    };
    let Ok(snapshot) = super::tasks::read_board(&hub) else {
        return Vec::new();
    };
    let mut out: Vec<CompletionCandidate> = snapshot
        .pending
        .iter()
        .map(|t| CompletionCandidate::new(t.id.as_str()).help(Some(t.title.clone().into())))
        .collect();
    for (ids, state) in [(&snapshot.done, "done"), (&snapshot.failed, "failed")] {
        out.extend(
            ids.iter()
                .map(|id| CompletionCandidate::new(id.as_str()).help(Some(state.into()))),
        );
    }
    out
}

/// The ids of the tasks whose change waits for review (`farm approve`,
/// `farm reject`), each with its change's branch.
pub fn review_ids() -> Vec<CompletionCandidate> {
    let Some(ctx) = completing() else {
        return Vec::new();
    };
    let Ok(dir) = ctx.hub() else {
        return Vec::new();
    };
    let Ok(hub) = Hub::open(&HubSpec::Local(dir), None) else {
        return Vec::new();
    };
    let Ok(snapshot) = super::tasks::read_board(&hub) else {
        return Vec::new();
    };
    snapshot
        .pending
        .iter()
        .filter_map(|t| match (&t.change, t.approved) {
            (Some(change), None) => Some(
                CompletionCandidate::new(t.id.as_str())
                    .help(Some(format!("{} (on {change})", t.title).into())),
            ),
            _ => None,
        })
        .collect()
}

/// The agents that have session logs, then the tasks that have.
pub fn log_names() -> Vec<CompletionCandidate> {
    let (agents, tasks) = logged();
    agents
        .into_iter()
        .map(|a| CompletionCandidate::new(a).help(Some("agent".into())))
        .chain(
            tasks
                .into_iter()
                .map(|t| CompletionCandidate::new(t).help(Some("task".into()))),
        )
        .collect()
}

/// The agents that have session logs.
pub fn agent_names() -> Vec<CompletionCandidate> {
    logged()
        .0
        .into_iter()
        .map(CompletionCandidate::new)
        .collect()
}

/// The agents and the tasks in the state directory's `logs/`, each sorted.
fn logged() -> (Vec<String>, Vec<String>) {
    let Some(ctx) = completing() else {
        return Default::default();
    };
    let Ok(spec) = ctx.hub_spec() else {
        return Default::default();
    };
    let dir = ctx.state_dir(&spec).join("logs");
    let mut agents = Vec::new();
    let mut tasks = std::collections::BTreeSet::new();
    for agent in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        agents.push(agent.file_name().to_string_lossy().into_owned());
        for log in std::fs::read_dir(agent.path())
            .into_iter()
            .flatten()
            .flatten()
        {
            let name = log.file_name().to_string_lossy().into_owned();
            if let Some(task) = super::logs::task_of(&name) {
                tasks.insert(task.to_owned());
            }
        }
    }
    agents.sort();
    (agents, tasks.into_iter().collect())
}

/// Print the manual page (roff), or write one per command into a directory.
#[derive(Debug, clap::Args)]
#[command(after_help = "\
Examples:
  farm man | man -l -
  farm man --dir /usr/local/share/man/man1    # farm.1, farm-run.1, …")]
pub struct ManArgs {
    /// Write farm.1 and farm-<command>.1 for each command (and
    /// farm-<command>-<subcommand>.1 for each of its own) into this directory.
    #[arg(long, value_name = "DIR")]
    dir: Option<PathBuf>,
}

pub fn man(ctx: &Ctx, args: &ManArgs) -> Result<(), Error> {
    let cmd = Cli::command();
    let render = |cmd: clap::Command| -> Result<Vec<u8>, Error> {
        let mut page = Vec::new();
        clap_mangen::Man::new(cmd)
            .render(&mut page)
            .map_err(|e| Error::failure(format!("cannot render the manual: {e}")))?;
        Ok(page)
    };
    let Some(dir) = &args.dir else {
        ctx.out.data(&String::from_utf8_lossy(&render(cmd)?))?;
        return Ok(());
    };
    std::fs::create_dir_all(dir)
        .map_err(|e| Error::failure(format!("cannot create `{}`: {e}", dir.display())))?;
    // Built, so that clap's own `help` subcommands are there: each page
    // lists its subcommands as `farm-task-add(1)` and so on, and every page
    // a page refers to is written.
    let mut cmd = cmd;
    cmd.build();
    let mut pages = vec![("farm.1".to_owned(), render(cmd.clone())?)];
    let mut todo: Vec<(String, clap::Command)> = cmd
        .get_subcommands()
        .filter(|s| !s.is_hide_set())
        .map(|s| (format!("farm-{}", s.get_name()), s.clone()))
        .collect();
    while let Some((name, sub)) = todo.pop() {
        todo.extend(
            sub.get_subcommands()
                .filter(|s| !s.is_hide_set())
                .map(|s| (format!("{name}-{}", s.get_name()), s.clone())),
        );
        let page = render(sub.name(name.clone()))?;
        pages.push((format!("{name}.1"), page));
    }
    for (file, page) in &pages {
        let path = dir.join(file);
        std::fs::File::create(&path)
            .and_then(|mut f| f.write_all(page))
            .map_err(|e| Error::failure(format!("cannot write `{}`: {e}", path.display())))?;
    }
    ctx.out.note(&format!(
        "wrote {} manual page(s) to {}",
        pages.len(),
        dir.display()
    ));
    Ok(())
}
