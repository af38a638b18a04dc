//! `farm demo`: the claim / locks / reap cycle, run for real on a scratch hub.
//!
//! Each step runs this same `farm` binary as a separate process, exactly as
//! a user or an agent would, and shows its output and exit code.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use crate::config::Ctx;
use crate::error::Error;
use crate::output::Style;

/// Show farm working: claims won and refused, a holder killed with SIGKILL,
/// its dead claim reaped and the task claimed again — on a scratch hub.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Where to make the scratch hub (default: a new temporary directory).
    #[arg(long, value_name = "PATH")]
    dir: Option<PathBuf>,

    /// Keep the scratch hub afterwards, to look around in it.
    #[arg(long)]
    keep: bool,
}

pub fn run(ctx: &Ctx, args: &Args) -> Result<ExitCode, Error> {
    let hub = match &args.dir {
        Some(d) => {
            if d.exists() {
                return Err(Error::usage(format!("`{}` already exists", d.display()))
                    .hint("give --dir a path that does not exist yet; the demo creates it"));
            }
            d.clone()
        }
        None => {
            let unique = crate::claim::Nonce::random();
            std::env::temp_dir().join(format!("farm-demo-{}", unique.short()))
        }
    };
    std::fs::create_dir_all(&hub)
        .map_err(|e| Error::failure(format!("cannot create `{}`: {e}", hub.display())))?;
    let result = Demo { ctx, hub: &hub }.play();
    if args.keep || args.dir.is_some() {
        ctx.out
            .note(&format!("\nthe scratch hub is kept at {}", hub.display()));
    } else {
        let _ = std::fs::remove_dir_all(&hub);
    }
    result.map(|()| ExitCode::SUCCESS)
}

struct Demo<'a> {
    ctx: &'a Ctx,
    hub: &'a Path,
}

impl Demo<'_> {
    fn play(&self) -> Result<(), Error> {
        let git = Command::new("git")
            .args(["init", "--quiet", "--bare"])
            .arg(self.hub)
            .status()
            .is_ok_and(|s| s.success());
        self.say(&format!(
            "a scratch hub at {}{}",
            self.hub.display(),
            if git { " (a bare git repository)" } else { "" }
        ));

        self.say("alice claims a task; bob asks for the same one and is refused (exit 3):");
        self.farm(&["claim", "parse-if", "--agent", "alice"])?;
        self.farm(&["claim", "parse-if", "--agent", "bob"])?;

        self.say("carol holds `lexer` while a command runs; her farm process is the holder:");
        self.show(&[
            "claim", "lexer", "--agent", "carol", "--", "sleep", "600", "&",
        ]);
        let mut carol = self
            .command(&["claim", "lexer", "--agent", "carol", "--", "sleep", "600"])
            .spawn()
            .map_err(|e| Error::failure(format!("cannot start farm: {e}")))?;
        self.wait_for_claim("lexer", &mut carol)?;
        self.farm(&["locks"])?;

        self.say(&format!(
            "carol's farm (pid {}) is killed with SIGKILL: no clean-up code runs,\n\
             # yet her claim reads as dead at once, and `farm reap` takes it back:",
            carol.id()
        ));
        let _ = carol.kill();
        let _ = carol.wait();
        self.farm(&["locks"])?;
        self.farm(&["reap"])?;

        self.say("the task is free again; dave takes it. alice is done and releases hers:");
        self.farm(&["claim", "lexer", "--agent", "dave"])?;
        self.farm(&["release", "parse-if", "--agent", "alice"])?;
        self.farm(&["locks"])?;
        Ok(())
    }

    fn say(&self, text: &str) {
        self.ctx.out.note(&format!(
            "\n{}",
            self.ctx.out.paint_err(Style::Bold, &format!("# {text}"))
        ));
    }

    fn show(&self, args: &[&str]) {
        let line = format!("$ farm {}", args.join(" "));
        self.ctx
            .out
            .note(&self.ctx.out.paint_err(Style::Dim, &line));
    }

    fn command(&self, args: &[&str]) -> Command {
        let exe = std::env::current_exe().unwrap_or_else(|_| PathBuf::from("farm"));
        let mut cmd = Command::new(exe);
        cmd.args(args)
            .env("FARM_HUB", self.hub)
            .stdin(Stdio::null());
        cmd
    }

    fn farm(&self, args: &[&str]) -> Result<(), Error> {
        self.show(args);
        let status = self
            .command(args)
            .status()
            .map_err(|e| Error::failure(format!("cannot run farm: {e}")))?;
        if !status.success() {
            let code = status
                .code()
                .map_or("a signal".to_owned(), |c| c.to_string());
            self.ctx.out.note(
                &self
                    .ctx
                    .out
                    .paint_err(Style::Dim, &format!("(exit {code})")),
            );
        }
        Ok(())
    }

    fn wait_for_claim(&self, task: &str, child: &mut Child) -> Result<(), Error> {
        let path = self.hub.join("current_tasks").join(format!("{task}.txt"));
        let start = Instant::now();
        while !path.exists() {
            if start.elapsed() > Duration::from_secs(10)
                || child.try_wait().ok().flatten().is_some()
            {
                let _ = child.kill();
                return Err(Error::failure(format!(
                    "carol's claim on `{task}` did not appear"
                )));
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        Ok(())
    }
}
