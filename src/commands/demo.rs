//! `farm demo`: farm's main job, run for real on a scratch hub with an
//! offline demo agent — then the claim cycle up close.
//!
//! Each step runs this same `farm` binary (or git) as a separate process,
//! exactly as a user would, and shows its output.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::config::Ctx;
use crate::error::Error;
use crate::git::command::Repo;
use crate::output::Style;

/// Show farm working on a built-in example.
///
/// A small board with dependencies
/// and tasks that edit the same file, three agents running the bundled
/// offline demo agent (claims, a lost race, a merge, the finished board);
/// then a holder killed with SIGKILL, its dead claim reaped.
#[derive(Debug, clap::Args)]
#[command(after_help = "\
Examples:
  farm demo                        the whole cycle on a scratch hub
  farm demo --keep                 and keep the hub, to look around in it
  farm demo --dir /tmp/farm-demo --keep")]
pub struct Args {
    /// Where to make the scratch hub (default: a new temporary directory).
    #[arg(long, value_name = "PATH")]
    dir: Option<PathBuf>,

    /// Keep the scratch hub afterwards, to look around in it.
    #[arg(long)]
    keep: bool,
}

/// The demo board: id, title, after, description (the demo agent follows
/// its `- write`/`- append` lines). Three greetings append to one file at
/// once, so their integration conflicts and needs a merge.
const BOARD: &[(&str, &str, &[&str], &str)] = &[
    (
        "readme",
        "Write the README",
        &[],
        "- write `README.md`: # greeter — built by farm's demo agents",
    ),
    (
        "greeter",
        "Write the greeter",
        &[],
        "- write `greet.sh`: cat greetings.txt\n- write `greetings.txt`: # greetings",
    ),
    (
        "english",
        "Greet in English",
        &["greeter"],
        "- append `greetings.txt`: Hello, world",
    ),
    (
        "french",
        "Greet in French",
        &["greeter"],
        "- append `greetings.txt`: Bonjour, le monde",
    ),
    (
        "german",
        "Greet in German",
        &["greeter"],
        "- append `greetings.txt`: Hallo, Welt",
    ),
    (
        "changelog",
        "Write the changelog",
        &["english", "french", "german", "readme"],
        "- write `CHANGELOG.md`: - greetings in three languages",
    ),
];

pub fn run(ctx: &Ctx, args: &Args) -> Result<(), Error> {
    let root = match &args.dir {
        Some(d) => {
            if d.exists() {
                return Err(Error::usage(format!("`{}` already exists", d.display()))
                    .hint("give --dir a path that does not exist yet; the demo creates it"));
            }
            d.clone()
        }
        None => {
            let unique = crate::claims::record::Nonce::random();
            std::env::temp_dir().join(format!("farm-demo-{}", unique.short()))
        }
    };
    std::fs::create_dir_all(&root).map_err(|e| {
        Error::failure(format!("cannot create `{}`: {e}", root.display())).caused_by(e)
    })?;
    let hub = root.join("hub");
    let demo = Demo { ctx, hub: &hub };
    let result = demo.play();
    let kept = if args.keep || args.dir.is_some() {
        format!(
            "the scratch hub is kept at {}; its report is {}",
            hub.display(),
            hub.join(".farm/report.html").display()
        )
    } else {
        let _ = std::fs::remove_dir_all(&root);
        "the scratch hub and its report are removed: farm demo --keep keeps them".to_owned()
    };
    if result.is_ok() {
        demo.say(&format!(
            "next, in a repository of your own:\n\
             #   farm init\n\
             #   farm task add lexer -m \"Write the lexer in src/lex.c\"\n\
             #   farm run --agent \"claude -p --dangerously-skip-permissions\" -j 4\n\
             #   farm status (while it runs), farm report --open (in the morning)\n\
             # {kept}"
        ));
    } else {
        ctx.out.note(&format!("\n{kept}"));
    }
    result
}

struct Demo<'a> {
    ctx: &'a Ctx,
    hub: &'a Path,
}

impl Demo<'_> {
    fn play(&self) -> Result<(), Error> {
        self.say(&format!(
            "a scratch hub: a new git repository at {}",
            self.hub.display()
        ));
        let hub = self.hub.display().to_string();
        Repo::new(self.hub.parent().unwrap_or(self.hub))
            .run(["init", "--quiet", "-b", "main", &hub])?;
        for (k, v) in [
            ("user.name", "farm demo"),
            ("user.email", "demo@farm.invalid"),
        ] {
            self.git(&["config", k, v])?;
        }
        self.git(&[
            "commit",
            "--quiet",
            "--allow-empty",
            "-m",
            "an empty project",
        ])?;
        self.farm(&["init"], true)?;

        self.say("a small board: two independent tasks, three that append to the same file, one after all");
        for (id, title, after, description) in BOARD {
            // `=`: the description starts with `-`, which must not read as a flag.
            let message = format!("--message={description}");
            let mut args = vec!["task", "add", id, "--title", title, &message];
            if !after.is_empty() {
                args.push("--after");
                args.extend(after.iter().copied());
            }
            self.setup(&args)?;
        }
        self.farm(&["tasks"], true)?;

        self.say(
            "a schedule, as if added an hour ago: hourly; `farm run` makes its latest occurrence\n\
             # a task as it starts (catch-up), and would fire again at every minute boundary:",
        );
        let an_hour_ago = jiff::Timestamp::now() - jiff::SignedDuration::from_hours(1);
        let schedule = format!(
            "cron = \"0 * * * *\"\ntitle = \"Hourly status\"\n\
             description = \"- write `STATUS.md`: checked on schedule\"\ncreated = \"{an_hour_ago}\"\n"
        );
        let path = self.hub.join("schedules/status.toml");
        std::fs::create_dir_all(self.hub.join("schedules"))
            .and_then(|()| std::fs::write(&path, schedule))
            .map_err(|e| Error::failure(format!("cannot write `{}`: {e}", path.display())))?;
        self.git(&["add", "schedules/status.toml"])?;
        self.git(&["commit", "--quiet", "-m", "an hourly schedule"])?;
        self.farm(&["schedules"], true)?;

        self.say("three agents run the bundled offline demo agent until the board is settled:");
        let exe = std::env::current_exe().unwrap_or_else(|_| PathBuf::from("farm"));
        let agent = format!(
            "{} demo-agent",
            shell_words::quote(&exe.display().to_string())
        );
        self.show(&["run", "--agent", "\"farm demo-agent\"", "-j", "3"]);
        self.run_quietly(&["run", "--agent", &agent, "-j", "3"])?;

        self.say("the finished board, the history (note the merge), and the merged file:");
        self.farm(&["tasks"], true)?;
        self.show_git(&["log", "--oneline", "--graph", "--format=%s"])?;
        self.show_file("greetings.txt")?;
        self.farm(&["schedules"], true)?;
        self.farm(&["locks"], true)?;

        self.say(
            "the night as one page: a lane per agent, a bar per session (the merge session\n\
             # in blue), the tasks-done curve, the critical path (the page is kept with --keep):",
        );
        self.farm(&["report"], true)?;

        self.say(
            "claims up close: carol holds `lexer` while a command runs; her farm is the holder",
        );
        self.show(&[
            "claim", "lexer", "--agent", "carol", "--", "sleep", "600", "&",
        ]);
        let mut carol = self
            .command(&["claim", "lexer", "--agent", "carol", "--", "sleep", "600"])
            .spawn()
            .map_err(|e| Error::failure(format!("cannot start farm: {e}")).caused_by(e))?;
        self.wait_for_claim("lexer", &mut carol)?;
        self.farm(&["claim", "lexer", "--agent", "dave"], true)?;
        self.say(&format!(
            "carol's farm (pid {}) is killed with SIGKILL: no clean-up code runs,\n\
             # yet her claim reads as dead at once, and `farm reap` takes it back:",
            carol.id()
        ));
        let _ = carol.kill();
        let _ = carol.wait();
        self.farm(&["locks"], true)?;
        self.farm(&["reap"], true)?;
        self.farm(&["claim", "lexer", "--agent", "dave"], true)?;
        Ok(())
    }

    fn say(&self, text: &str) {
        let out = &self.ctx.out;
        out.note(&format!(
            "\n{}",
            out.paint_err(Style::Bold, &format!("# {text}"))
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
            .current_dir(self.hub)
            .stdin(Stdio::null());
        cmd
    }

    /// Run `farm ARGS`, showing the command when `echo` is set.
    fn farm(&self, args: &[&str], echo: bool) -> Result<(), Error> {
        if echo {
            self.show(args);
        }
        let mut cmd = self.command(args);
        if !echo {
            cmd.stdout(Stdio::null());
        }
        let status = cmd
            .status()
            .map_err(|e| Error::failure(format!("cannot run farm: {e}")).caused_by(e))?;
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

    /// A setup step that must work, its output hidden.
    fn setup(&self, args: &[&str]) -> Result<(), Error> {
        let out = self
            .command(args)
            .output()
            .map_err(|e| Error::failure(format!("cannot run farm: {e}")).caused_by(e))?;
        if !out.status.success() {
            return Err(Error::failure(format!(
                "`farm {}` failed: {}",
                args.join(" "),
                String::from_utf8_lossy(&out.stderr).trim()
            )));
        }
        Ok(())
    }

    /// `farm run`, its story on stderr as it happens.
    fn run_quietly(&self, args: &[&str]) -> Result<(), Error> {
        let status = self
            .command(args)
            .status()
            .map_err(|e| Error::failure(format!("cannot run farm: {e}")).caused_by(e))?;
        if status.success() {
            Ok(())
        } else {
            Err(Error::failure(format!("the demo run failed ({status})")))
        }
    }

    /// git in the scratch hub.
    fn git(&self, args: &[&str]) -> Result<String, Error> {
        Ok(Repo::new(self.hub).run(args)?)
    }

    fn show_git(&self, args: &[&str]) -> Result<(), Error> {
        self.ctx.out.note(
            &self
                .ctx
                .out
                .paint_err(Style::Dim, &format!("$ git {}", args.join(" "))),
        );
        self.ctx.out.data(&format!("{}\n", self.git(args)?))?;
        Ok(())
    }

    fn show_file(&self, name: &str) -> Result<(), Error> {
        self.ctx
            .out
            .note(&self.ctx.out.paint_err(Style::Dim, &format!("$ cat {name}")));
        let text = std::fs::read_to_string(self.hub.join(name)).unwrap_or_default();
        self.ctx.out.data(&text)?;
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
