//! `farm completions SHELL` and `farm man`: the shell's completion script
//! (clap_complete) and the manual pages (clap_mangen), both made from the
//! very command line farm parses, so they never drift from it.

use std::io::Write;
use std::path::PathBuf;

use clap::CommandFactory;

use crate::cli::Cli;
use crate::config::Ctx;
use crate::error::Error;

/// Print the completion script for a shell.
#[derive(Debug, clap::Args)]
#[command(after_help = "\
Examples:
  farm completions bash > ~/.local/share/bash-completion/completions/farm
  farm completions zsh > \"${fpath[1]}/_farm\"
  farm completions fish > ~/.config/fish/completions/farm.fish")]
pub struct Args {
    /// The shell.
    #[arg(value_enum)]
    shell: clap_complete::Shell,
}

pub fn run(ctx: &Ctx, args: &Args) -> Result<(), Error> {
    let mut script = Vec::new();
    clap_complete::generate(args.shell, &mut Cli::command(), "farm", &mut script);
    ctx.out.data(&String::from_utf8_lossy(&script))?;
    Ok(())
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
