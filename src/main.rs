//! The `farm` binary: parse, run, print the error, exit. This is the one
//! place that prints an error and turns its kind into the exit code.

use std::error::Error as _;
use std::io::IsTerminal;
use std::process::ExitCode;

use clap::{CommandFactory, Parser};
use farm::error::Error;
use farm::output::{Style, paint};

fn main() -> ExitCode {
    farm::git::cache_trees();
    // Asked by the shell's completion script for the words at a TAB: answer and exit.
    clap_complete::CompleteEnv::with_factory(farm::cli::Cli::command)
        .var(farm::commands::completions::VAR)
        .complete();
    let cli = farm::cli::Cli::parse();
    let e = match farm::run(&cli) {
        Ok(()) => return ExitCode::SUCCESS,
        Err(e) if e.code == farm::error::Code::BrokenPipe => return ExitCode::SUCCESS,
        Err(e) => e,
    };
    let color = cli.global.color != farm::output::ColorWhen::Never
        && std::io::stderr().is_terminal()
        && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty());
    let verbose = cli.global.verbose > 0;
    for e in std::iter::once(&e).chain(&e.also) {
        print(e, color, verbose);
    }
    ExitCode::from(e.code.exit_code())
}

/// `error:` and the message, at `-v` the causes not already quoted, then each hint on its own
/// line. An error without a message was told already: nothing is printed.
fn print(e: &Error, color: bool, verbose: bool) {
    if e.message.is_empty() {
        return;
    }
    eprintln!("{} {}", paint(color, Style::Bad, "error:"), e.message);
    if verbose {
        // Messages often quote their cause already: only say what is new.
        let mut said = e.message.clone();
        let mut cause = e.source();
        while let Some(c) = cause {
            let text = c.to_string();
            if !said.contains(&text) {
                eprintln!("{} {text}", paint(color, Style::Dim, "caused by:"));
            }
            said = text;
            cause = c.source();
        }
    }
    for hint in &e.hints {
        eprintln!("{} {hint}", paint(color, Style::Warn, "hint:"));
    }
}
