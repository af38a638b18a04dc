//! The `farm` binary: parse, run, print the error, exit.

use std::io::IsTerminal;
use std::process::ExitCode;

use clap::Parser;
use farm::output::{Style, paint};

fn main() -> ExitCode {
    let cli = farm::cli::Cli::parse();
    match farm::run(&cli) {
        Ok(code) => code,
        Err(e) if e.broken_pipe => ExitCode::SUCCESS,
        Err(e) => {
            let color = cli.global.color != farm::output::ColorWhen::Never
                && std::io::stderr().is_terminal()
                && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty());
            eprintln!("{} {}", paint(color, Style::Bad, "error:"), e.message);
            if let Some(hint) = &e.hint {
                eprintln!("{} {hint}", paint(color, Style::Warn, "hint:"));
            }
            ExitCode::from(e.code as u8)
        }
    }
}
