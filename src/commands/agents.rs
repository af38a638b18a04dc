//! `farm agents`: the agent presets `farm run --agent NAME` knows.

use serde_json::json;

use crate::config::Ctx;
use crate::error::Error;
use crate::output::{Style, table};
use crate::run::presets;
use crate::run::session::which;

/// List the agent presets: `farm run --agent NAME` runs NAME's command.
///
/// VERIFIED is the CLI version farm's CI last drove for real, end to end,
/// against a scripted model server (see "Real agent CLIs" in docs/presets.md);
/// "unverified" presets come from their CLI's documentation only. SANDBOX
/// says whether that run was inside farm's session sandbox (CI runs every
/// verified CLI sandboxed).
///
/// Built in (presets/agents.toml in farm's source), and extended or
/// overridden by your own `~/.config/farm/agents.toml` (or
/// `$XDG_CONFIG_HOME/farm/agents.toml`), one table per preset:
/// `[name]`, `command = "…"`, `prompt_via = "arg"|"stdin"|"file"`,
/// optionally `unattended`, `about`, `source`.
#[derive(Debug, clap::Args)]
#[command(after_help = "\
Examples:
  farm agents
  farm run --agent claude -j 4
  farm agents --json | jq -r '.agents[] | select(.installed) | .name'")]
pub struct Args {
    /// Print JSON: {user_file, agents: [{name, command, prompt_via, unattended, about, source, origin, installed, verified, sandbox_tested}]}.
    #[arg(long)]
    json: bool,
}

pub fn run(ctx: &Ctx, args: &Args) -> Result<(), Error> {
    let all = presets::all()?;
    let installed = |command: &str| {
        shell_words::split(command)
            .ok()
            .and_then(|w| w.first().cloned())
            .is_some_and(|program| which(&program).is_some())
    };
    if args.json {
        let agents: Vec<_> = all
            .iter()
            .map(|(name, (p, origin))| {
                json!({
                    "name": name,
                    "command": p.command,
                    "prompt_via": p.prompt_via,
                    "unattended": p.unattended,
                    "about": p.about,
                    "source": p.source,
                    "origin": origin.as_str(),
                    "installed": installed(&p.command),
                    "verified": (!p.verified.is_empty()).then_some(&p.verified),
                    "sandbox_tested": !p.verified.is_empty(),
                })
            })
            .collect();
        let doc = json!({
            "user_file": presets::user_file().map(|p| p.display().to_string()),
            "agents": agents,
        });
        ctx.out.data(&format!("{doc:#}\n"))?;
        return Ok(());
    }
    let rows: Vec<_> = all
        .iter()
        .map(|(name, (p, origin))| {
            let (found, style) = if installed(&p.command) {
                ("yes", Style::Good)
            } else {
                ("no", Style::Warn)
            };
            vec![
                (name.clone(), None),
                (found.to_owned(), Some(style)),
                (p.prompt_via.as_str().to_owned(), None),
                if p.verified.is_empty() {
                    ("unverified".to_owned(), Some(Style::Dim))
                } else {
                    (p.verified.clone(), None)
                },
                if p.verified.is_empty() {
                    ("untested".to_owned(), Some(Style::Dim))
                } else {
                    ("tested".to_owned(), None)
                },
                (origin.as_str().to_owned(), None),
                (p.command.clone(), None),
            ]
        })
        .collect();
    let header = [
        "AGENT",
        "INSTALLED",
        "PROMPT",
        "VERIFIED",
        "SANDBOX",
        "FROM",
        "COMMAND",
    ];
    ctx.out.data(&table(&header, &rows, ctx.out.color_stdout))?;
    if let Some(path) = presets::user_file() {
        ctx.out
            .note(&format!("your own presets go in {}", path.display()));
    }
    Ok(())
}
