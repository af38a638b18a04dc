//! `farm init`: make a repository a farm hub — settings, board, templates,
//! git-ignores — and let pushes update its checked-out branch.

use std::path::Path;

use crate::config::Ctx;
use crate::error::Error;
use crate::git::command::Repo;
use crate::run::prompt;
use crate::settings;

/// Set up a repository for farm.
///
/// Writes farm.toml, tasks/, templates/, current_tasks/.gitignore and
/// ignores .farm/; commits them; sets
/// receive.denyCurrentBranch=updateInstead so agents can push, and
/// receive.denyNonFastForwards and receive.denyDeletes so that no push
/// rewrites or deletes a branch. Existing files are kept.
#[derive(Debug, clap::Args)]
#[command(after_help = "\
Examples:
  cd my-repo && farm init
  farm task add lexer -m \"Write the lexer\"
  farm run --agent \"claude -p --dangerously-skip-permissions\" -j 4")]
pub struct Args {
    /// Write the files but do not commit them.
    #[arg(long)]
    no_commit: bool,
}

const TASKS_README: &str = "\
# tasks/ — the board

One file per task: `tasks/<id>.md`, TOML front matter between `+++` lines,
then a markdown description. Add one with `farm task add ID -m TEXT`.

    +++
    title = \"Parse if statements\"
    after = [\"lexer\"]     # ids that must be done first
    labels = [\"parser\"]   # what kind of work (optional)
    priority = 1          # higher runs first (default 0)
    max_attempts = 3      # default 3
    timeout = \"30m\"       # optional, per session
    +++
    What to do, in markdown.

farm moves finished tasks to `tasks/done/` and given-up ones to
`tasks/failed/`, with the notes of each attempt. `farm tasks` shows the board.
";

const CLAIMS_GITIGNORE: &str = "\
# Claims are live coordination state, never committed.
*
!README.md
!.gitignore
";

pub fn run(ctx: &Ctx, args: &Args) -> Result<(), Error> {
    let hub = ctx.hub()?;
    let repo = Repo::new(&hub);
    if repo.is_bare().map_err(|e| {
        Error::usage(format!(
            "`{}` is not a git repository: {}",
            hub.display(),
            e.said
        ))
    })? {
        return Err(Error::usage(format!("`{}` is a bare repository", hub.display()))
            .hint("run farm init in a clone of it and push, then point farm run --hub at the bare one"));
    }
    let mut written = Vec::new();
    let mut write = |rel: &str, text: &str| -> Result<(), Error> {
        let path = hub.join(rel);
        if path.exists() {
            return Ok(());
        }
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(|e| io(&path, e))?;
        }
        std::fs::write(&path, text).map_err(|e| io(&path, e))?;
        written.push(rel.to_owned());
        Ok(())
    };
    write(settings::FILE, settings::TEMPLATE)?;
    write("tasks/README.md", TASKS_README)?;
    write("templates/prompt.md", prompt::PROMPT)?;
    write("templates/merge.md", prompt::MERGE)?;
    write("current_tasks/.gitignore", CLAIMS_GITIGNORE)?;
    let gitignore = hub.join(".gitignore");
    let ignores = std::fs::read_to_string(&gitignore).unwrap_or_default();
    if !ignores
        .lines()
        .any(|l| l.trim() == "/.farm/" || l.trim() == ".farm/")
    {
        let sep = if ignores.is_empty() || ignores.ends_with('\n') {
            ""
        } else {
            "\n"
        };
        std::fs::write(
            &gitignore,
            format!("{ignores}{sep}# farm's clones, logs and prompts\n/.farm/\n"),
        )
        .map_err(|e| io(&gitignore, e))?;
        written.push(".gitignore".to_owned());
    }
    for w in &written {
        ctx.out.say(&format!("wrote {w}"))?;
    }
    let git = |args: &[&str]| {
        repo.run(args)
            .map_err(|e| Error::failure(e.to_string()).caused_by(e))
    };
    if repo
        .config_get("receive.denyCurrentBranch")
        .ok()
        .flatten()
        .as_deref()
        != Some("updateInstead")
    {
        git(&["config", "receive.denyCurrentBranch", "updateInstead"])?;
        ctx.out.say(
            "set receive.denyCurrentBranch=updateInstead: agents' pushes update this work tree",
        )?;
    }
    // Agents push to this hub with their own git: nothing but these settings
    // stops one from force-pushing `main` away or deleting a branch (farm
    // itself never does either: it only fast-forwards and adds refs).
    for (key, what) in [
        ("receive.denyNonFastForwards", "rewrite"),
        ("receive.denyDeletes", "delete"),
    ] {
        if repo.config_get(key).ok().flatten().as_deref() != Some("true") {
            git(&["config", key, "true"])?;
            ctx.out
                .say(&format!("set {key}=true: no push may {what} a branch here"))?;
        }
    }
    if written.is_empty() {
        ctx.out.say("already set up; nothing written")?;
    } else if !args.no_commit {
        let mut add = vec!["add", "--"];
        add.extend(written.iter().map(String::as_str));
        git(&add)?;
        let mut commit = vec!["commit", "--quiet", "-m", "farm init", "--"];
        commit.extend(written.iter().map(String::as_str));
        git(&commit)?;
        ctx.out.say("committed them: \"farm init\"")?;
    }
    Ok(())
}

fn io(path: &Path, e: std::io::Error) -> Error {
    Error::failure(format!("cannot write `{}`: {e}", path.display()))
}
