//! `farm ask`: from inside a session, ask a question instead of guessing —
//! what writing into the file `FARM_ASK` names does, as a command.

use std::path::PathBuf;

use crate::board::question::MAX_TEXT;
use crate::config::Ctx;
use crate::error::Error;

/// Ask the person running farm a question, from inside a session: the
/// text goes into the file `FARM_ASK` names (any CLI can write it
/// itself: `printf '%s\n' "…" > "$FARM_ASK"`). End the session then: its
/// task waits on the board with the question — no attempt counted, the
/// work kept — until `farm answer`; the next session's prompt holds the
/// question and the answer.
#[derive(Debug, clap::Args)]
#[command(after_help = "\
Examples:
  farm ask 'Should the parser accept trailing commas? The spec is silent.'
  farm ask -F question.md")]
pub struct Args {
    /// The question.
    #[arg(value_name = "TEXT", required_unless_present = "file")]
    text: Option<String>,

    /// Read the question from FILE.
    #[arg(short = 'F', long, value_name = "FILE", conflicts_with = "text")]
    file: Option<PathBuf>,
}

pub fn run(ctx: &Ctx, args: &Args) -> Result<(), Error> {
    let Some(target) = std::env::var_os("FARM_ASK").filter(|v| !v.is_empty()) else {
        return Err(
            Error::usage("farm ask works inside a farm session: FARM_ASK is not set")
                .hint("to answer a question a session asked: farm answer TASK TEXT"),
        );
    };
    let text = match (&args.text, &args.file) {
        (Some(t), _) => t.clone(),
        (None, Some(f)) => std::fs::read_to_string(f).map_err(|e| {
            Error::usage(format!(
                "cannot read the question from `{}`: {e}",
                f.display()
            ))
        })?,
        (None, None) => return Err(Error::usage("ask what? give TEXT, or -F FILE")),
    };
    if text.trim().is_empty() {
        return Err(Error::usage("the question is empty"));
    }
    if text.len() > MAX_TEXT {
        return Err(Error::usage(format!(
            "the question is {} bytes; a question is at most {MAX_TEXT} (16 KiB)",
            text.len()
        )));
    }
    let target = PathBuf::from(target);
    std::fs::write(&target, format!("{}\n", text.trim_end())).map_err(|e| {
        Error::failure(format!(
            "cannot write the question to `{}`: {e}",
            target.display()
        ))
    })?;
    ctx.out.say(
        "asked: end the session now; the task waits for the answer (no attempt counted), \
         and the next session's prompt holds the question and the answer",
    )?;
    Ok(())
}
