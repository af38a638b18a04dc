//! `farm loop-script`: `loop.sh`, the overnight wrapper that respawns
//! `farm run` after a crash, printed from the binary — `cargo install`
//! brings the binary alone, and the README runs the script.

use crate::config::Ctx;
use crate::error::Error;

/// The script, as the source tree has it.
const LOOP_SH: &str = include_str!("../../loop.sh");

/// Print loop.sh, the overnight wrapper: it runs `farm run` with your
/// arguments and respawns it after a crash, with backoff; it stops on the
/// exits that mean every task done (0), settled with failures (5), drained
/// or a limit reached with work left (6), stopped (130) or bad usage (2).
#[derive(Debug, clap::Args)]
#[command(after_help = "\
Examples:
  farm loop-script > loop.sh && chmod +x loop.sh
  ./loop.sh --agent \"claude -p --dangerously-skip-permissions\" -j 8")]
pub struct Args {}

pub fn run(ctx: &Ctx, _args: &Args) -> Result<(), Error> {
    ctx.out.data(LOOP_SH)?;
    Ok(())
}
