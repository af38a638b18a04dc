//! `farm demo-agent` (hidden): the offline agent `farm demo` runs. It really
//! edits files and commits, by following its task's description literally:
//! lines `- write `PATH`: TEXT` and `- append `PATH`: TEXT`. Given the merge
//! prompt, it resolves conflicts by keeping both sides. No network, no key.

use std::path::Path;
use std::time::Duration;

use crate::config::Ctx;
use crate::error::{Code, Error};
use crate::git::command::Repo;

/// The demo's stand-in for a coding agent.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// How long to "think" before editing, so that sessions overlap.
    #[arg(long, default_value = "400ms", value_parser = crate::age::parse_duration)]
    think: Duration,

    /// The prompt (farm passes it as the last argument).
    prompt: String,
}

pub fn run(_ctx: &Ctx, args: &Args) -> Result<(), Error> {
    std::thread::sleep(args.think);
    let here = Path::new(".");
    if args.prompt.contains("resolving a merge conflict") {
        let files = git(&["diff", "--name-only", "--diff-filter=U"])?;
        for file in files.lines() {
            let text = std::fs::read_to_string(file).map_err(|e| fail(file, e))?;
            let kept: String = text
                .lines()
                .filter(|l| {
                    !(l.starts_with("<<<<<<< ")
                        || l.starts_with(">>>>>>> ")
                        || *l == "======="
                        || l.starts_with("||||||| "))
                })
                .map(|l| format!("{l}\n"))
                .collect();
            std::fs::write(file, kept).map_err(|e| fail(file, e))?;
            git(&["add", "--", file])?;
            println!("resolved {file}: kept both sides");
        }
        return Ok(());
    }
    let mut edits = 0;
    for line in args.prompt.lines() {
        let Some((verb, rest)) = line
            .trim()
            .strip_prefix("- ")
            .and_then(|l| l.split_once(' '))
        else {
            continue;
        };
        let Some((path, text)) = rest.strip_prefix('`').and_then(|r| r.split_once("`: ")) else {
            continue;
        };
        if path.contains("..") || path.starts_with('/') {
            continue;
        }
        let target = here.join(path);
        match verb {
            "write" => std::fs::write(&target, format!("{text}\n")).map_err(|e| fail(path, e))?,
            "append" => {
                let old = std::fs::read_to_string(&target).unwrap_or_default();
                std::fs::write(&target, format!("{old}{text}\n")).map_err(|e| fail(path, e))?;
            }
            _ => continue,
        }
        println!("{verb} {path}");
        edits += 1;
    }
    if edits == 0 {
        println!("nothing to do in this task's description");
        return Err(Error::said(Code::Failure));
    }
    let task = std::env::var("FARM_TASK").unwrap_or_else(|_| "task".into());
    git(&["add", "--all"])?;
    git(&[
        "commit",
        "--quiet",
        "-m",
        &format!("{task}: {edits} edit(s) by the demo agent"),
    ])?;
    Ok(())
}

/// git in the clone the agent runs in.
fn git(args: &[&str]) -> Result<String, Error> {
    Ok(Repo::new(".").run(args)?)
}

fn fail(path: &str, e: std::io::Error) -> Error {
    Error::failure(format!("cannot edit `{path}`: {e}"))
}
