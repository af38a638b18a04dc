//! `farm rescue list|show|apply|drop`: the work farm kept on rescue branches
//! (a failed attempt, an interrupted session, commits an earlier run left in
//! a clone) — what each holds and why it is there, handing one to a task's
//! next session, and dropping one with a record to bring it back from.
//!
//! Landing one on the branch by hand (`apply --land`) is [`land`]'s.
//!
//! Why a branch is there comes from where farm said it: the journal of the
//! runs in this state dir (when, which agent, why), else the attempt note
//! on the board that names the branch, else only its commit's date.

mod land;

use std::collections::BTreeMap;
use std::time::SystemTime;

use crate::age::Age;
use crate::board::edit::{self, Edit, Tx};
use crate::board::paths::Place;
use crate::claims::record::timestamp;
use crate::commands::branch::{self, HubBranch};
use crate::config::Ctx;
use crate::error::{Code, Error};
use crate::git::command::Pushed;
use crate::git::hub::Hub;
use crate::git::rescue::{self, Owner, View};
use crate::names::TaskId;
use crate::run::journal::{self, Event};

/// Look at, apply and drop the work farm kept on rescue branches.
#[derive(Debug, clap::Args)]
#[command(after_help = "\
Examples:
  farm rescue list                         what was kept, when, by whom, why
  farm rescue show parse-if                its commits and what they change
  farm rescue apply parse-if               the task's next session starts from it
  farm rescue apply parse-if --land        land it on the branch now (tested)
  farm rescue drop parse-if/0c1d2e3f       done with it (a record keeps it)

A rescue is named by its branch (farm/rescue/TASK/NONCE), by TASK/NONCE or a
prefix of it, or by its task alone when the task has one.")]
pub struct Args {
    #[command(subcommand)]
    command: RescueCommand,
}

#[derive(Debug, clap::Subcommand)]
enum RescueCommand {
    List(ListArgs),
    Show(ShowArgs),
    Apply(ApplyArgs),
    Drop(DropArgs),
}

/// List the rescue branches: task, when, agent, why, commits not on the branch.
#[derive(Debug, clap::Args)]
#[command(after_help = "\
Examples:
  farm rescue list
  farm rescue list --all          # dropped ones too
  farm rescue list --json | jq '.rescues[] | select(.ahead > 0) | .branch'")]
struct ListArgs {
    /// Print JSON: {branch, rescues: [{name, branch, task, agent, commit, when, why, ahead, dropped}]}.
    #[arg(long)]
    json: bool,

    /// Also the dropped ones (their records under refs/farm/dropped/).
    #[arg(long)]
    all: bool,

    /// The branch the work is measured against (default: the hub's HEAD branch).
    #[arg(long)]
    branch: Option<String>,
}

/// Show one rescue: why it is there, its commits and what they change.
#[derive(Debug, clap::Args)]
#[command(after_help = "\
Examples:
  farm rescue show parse-if
  farm rescue show farm/rescue/parse-if/0c1d2e3f --json")]
struct ShowArgs {
    /// The rescue: its branch, TASK/NONCE (a prefix will do), or its task.
    name: String,

    /// Print JSON: the fields of `list --json`, with log and diffstat.
    #[arg(long)]
    json: bool,

    /// The branch the work is measured against (default: the hub's HEAD branch).
    #[arg(long)]
    branch: Option<String>,
}

/// Hand a rescue to a task's next session: a note on the task says where
/// the work is, and the session's prompt offers it to start from. With
/// --land, land it on the branch now instead.
#[derive(Debug, clap::Args)]
#[command(after_help = "\
Examples:
  farm rescue apply parse-if
  farm rescue apply orphan/box-2-0c1d2e3f4a5b --task parse-if
  farm rescue apply parse-if --land                 # on the branch now
  farm rescue apply parse-if --land --done          # and the task is done
  farm rescue apply parse-if --land --json | jq -r .commit

Without --land the work does not land by itself: the session starts from
it (merging it into its clone), finishes the task, and farm integrates the
result as any session's — rebased or merged onto the branch, through the
test gate when one is configured, pushed under the task's claim.

--land integrates the rescue itself that way, now, holding the task's claim
(no session of it runs meanwhile; a task a live agent holds is refused,
exit 3). A conflict with the branch, or tests it turns red, land nothing
and keep the rescue (exit 1): give it to a session then. Once landed, the
rescue is dropped (as `farm rescue drop` does) and the task gets a note
naming the commit; it moves to done only with --done. Landing a rescue
that is on the branch already says so and exits 0.")]
struct ApplyArgs {
    /// The rescue: its branch, TASK/NONCE (a prefix will do), or its task.
    name: String,

    /// The task whose next session starts from it, or with --land the task
    /// it lands for (default: the rescue's own).
    #[arg(long, value_parser = TaskId::parse, add = clap_complete::ArgValueCandidates::new(crate::commands::completions::task_ids))]
    task: Option<TaskId>,

    /// The branch whose board to edit (default: the hub's HEAD branch).
    #[arg(long)]
    branch: Option<String>,

    /// Land the work on the branch now, as a session's is integrated
    /// (rebase or merge, the test gate, the push), under the task's claim.
    #[arg(long)]
    land: bool,

    /// With --land: the task moves to done with the work.
    #[arg(long, requires = "land")]
    done: bool,

    /// With --land, print JSON: {rescue, branch, task, landed, already,
    /// commit, done, dropped, why, errors, files}.
    #[arg(long, requires = "land")]
    json: bool,
}

/// Drop a rescue branch, keeping a record (refs/farm/dropped/…) to bring
/// it back from.
#[derive(Debug, clap::Args)]
#[command(after_help = "\
Examples:
  farm rescue drop parse-if/0c1d2e3f

A hub made by farm init refuses deletes by push (receive.denyDeletes): the
rescue is then dropped from farm's listings and prompts, and farm prints the
command that removes the branch on the hub's machine.")]
struct DropArgs {
    /// The rescue: its branch, TASK/NONCE (a prefix will do), or its task.
    name: String,

    /// The hub's branch (default: its HEAD branch).
    #[arg(long)]
    branch: Option<String>,
}

pub fn run(ctx: &Ctx, args: &Args) -> Result<(), Error> {
    match &args.command {
        RescueCommand::List(a) => list(ctx, a),
        RescueCommand::Show(a) => show(ctx, a),
        RescueCommand::Apply(a) => apply(ctx, a),
        RescueCommand::Drop(a) => drop(ctx, a),
    }
}

/// One rescue branch, and what farm knows of it.
#[derive(Debug, Clone, serde::Serialize)]
struct Rescue {
    /// `TASK/NONCE` or `orphan/AGENT-COMMIT`: the branch after `farm/rescue/`.
    name: String,
    branch: String,
    task: Option<String>,
    agent: Option<String>,
    commit: String,
    /// When it was kept (UTC), or its commit's date when farm did not say.
    when: String,
    why: Option<String>,
    /// Commits it has that the hub's branch lacks.
    ahead: usize,
    /// Dropped with `farm rescue drop` (the hub may keep the branch).
    dropped: bool,
    /// The branch is still on the hub (a dropped one's may be gone).
    on_hub: bool,
}

/// What farm said of a rescue branch when it kept it.
#[derive(Default)]
struct Said {
    at: Option<String>,
    agent: Option<String>,
    why: Option<String>,
}

/// What the runs of this state dir journaled of each rescue branch.
fn from_journal(ctx: &Ctx, hub: &crate::git::hub::HubSpec) -> BTreeMap<String, Said> {
    let text = journal::read(&ctx.state_dir(hub)).unwrap_or_default();
    let mut said = BTreeMap::new();
    for e in journal::entries(&text) {
        if let Event::Rescue { branch, why, .. } = &e.event {
            said.insert(
                branch.to_string(),
                Said {
                    at: Some(e.at.to_string()),
                    agent: e.agent.as_ref().map(ToString::to_string),
                    why: journal::given(why).map(str::to_owned),
                },
            );
        }
    }
    said
}

/// What the attempt notes on the board say of each rescue branch: a note
/// `## Attempt N — WHY` with `- agent: A@HOST`, `- at: T` and
/// `- work: branch `B``.
fn from_board(dir: &std::path::Path) -> BTreeMap<String, Said> {
    let mut said = BTreeMap::new();
    for place in Place::ALL {
        let Ok(entries) = std::fs::read_dir(dir.join(place.dir())) else {
            continue;
        };
        for entry in entries.flatten() {
            let Ok(text) = std::fs::read_to_string(entry.path()) else {
                continue;
            };
            for section in text.split("\n## ").skip(1) {
                let mut lines = section.lines();
                let heading = lines.next().unwrap_or_default();
                let mut note = Said {
                    why: heading.split_once(" — ").map(|(_, w)| w.trim().to_owned()),
                    ..Said::default()
                };
                let mut branch = None;
                for line in lines {
                    if let Some(a) = line.strip_prefix("- agent: ") {
                        note.agent = Some(a.split('@').next().unwrap_or(a).to_owned());
                    } else if let Some(t) = line.strip_prefix("- at: ") {
                        note.at = Some(t.trim().to_owned());
                    } else if let Some(b) = line.strip_prefix("- work: branch `") {
                        branch = b.strip_suffix('`').map(str::to_owned);
                    }
                }
                if let Some(b) = branch {
                    said.insert(b, note);
                }
            }
        }
    }
    said
}

/// A time farm or git wrote (RFC 3339, any offset), in UTC as farm writes it.
fn utc(s: &str) -> String {
    s.parse::<jiff::Timestamp>()
        .map(|t| timestamp(SystemTime::from(t)))
        .unwrap_or_else(|_| s.to_owned())
}

/// Every rescue branch on the hub (and, `all`, every dropped one), oldest first.
fn gather(ctx: &Ctx, hub: &Hub, view: &View, all: bool) -> Result<Vec<Rescue>, Error> {
    let spec = ctx.hub_spec()?;
    let journaled = from_journal(ctx, &spec);
    let tmp = tempfile::tempdir()
        .map_err(|e| Error::failure(format!("cannot make a temp dir: {e}")).caused_by(e))?;
    let noted = from_board(&hub.extract_board(tmp.path())?);
    let dropped: BTreeMap<String, String> = view
        .dropped()?
        .into_iter()
        .map(|l| (l.name, l.commit))
        .collect();
    let mut listed: Vec<(rescue::Listed, bool)> =
        view.rescues()?.into_iter().map(|l| (l, true)).collect();
    if all {
        for l in view.dropped()? {
            if !listed.iter().any(|(b, _)| b.name == l.name) {
                listed.push((l, false));
            }
        }
    }
    let mut rescues = Vec::new();
    for (l, on_hub) in listed {
        let is_dropped = dropped.get(&l.name) == Some(&l.commit);
        if is_dropped && !all {
            continue;
        }
        let owner = rescue::owner(&l.name);
        let said = journaled.get(&l.name).or_else(|| noted.get(&l.name));
        let (task, agent) = match &owner {
            Some(Owner::Task { task, .. }) => (Some(task.clone()), None),
            Some(Owner::Orphan { agent, .. }) => (None, Some(agent.clone())),
            None => (None, None),
        };
        let why = said.and_then(|s| s.why.clone()).or_else(|| {
            matches!(owner, Some(Owner::Orphan { .. }))
                .then(|| "left in a clone by an earlier run".to_owned())
        });
        rescues.push(Rescue {
            name: l
                .name
                .strip_prefix(rescue::PREFIX)
                .unwrap_or(&l.name)
                .to_owned(),
            task,
            agent: said.and_then(|s| s.agent.clone()).or(agent),
            when: utc(said.and_then(|s| s.at.as_deref()).unwrap_or(&l.date)),
            why,
            ahead: view.ahead(&l.commit)?,
            dropped: is_dropped,
            on_hub,
            commit: l.commit,
            branch: l.name,
        });
    }
    rescues.sort_by(|a, b| a.when.cmp(&b.when));
    Ok(rescues)
}

/// The rescue `name` names: its branch, `TASK/NONCE` or a prefix of it, or
/// its task when the task has one. Bad usage when it names none or several.
fn resolve(rescues: &[Rescue], name: &str) -> Result<Rescue, Error> {
    let name = name.strip_prefix("refs/heads/").unwrap_or(name);
    let rest = name.strip_prefix(rescue::PREFIX).unwrap_or(name);
    let exact: Vec<&Rescue> = rescues.iter().filter(|r| r.name == rest).collect();
    let found: Vec<&Rescue> = if exact.is_empty() {
        rescues
            .iter()
            .filter(|r| {
                (rest.contains('/') && r.name.starts_with(rest)) || r.task.as_deref() == Some(rest)
            })
            .collect()
    } else {
        exact
    };
    match found.as_slice() {
        [one] => Ok((*one).clone()),
        [] => Err(
            Error::usage(format!("no rescue branch `{name}` on the hub"))
                .hint("list them: farm rescue list"),
        ),
        many => {
            let names: Vec<String> = many.iter().map(|r| format!("`{}`", r.name)).collect();
            Err(Error::usage(format!(
                "`{name}` names {} rescues: {}",
                many.len(),
                names.join(", ")
            ))
            .hint(format!("name one: farm rescue show {}", many[0].name)))
        }
    }
}

/// The hub, a view of its rescue branches, and every rescue (`all`: the
/// dropped ones too).
fn open(ctx: &Ctx, branch: Option<&str>, all: bool) -> Result<(Hub, View, Vec<Rescue>), Error> {
    let spec = ctx.hub_spec()?;
    let hub = Hub::open(&spec, branch)?;
    let view = View::open(&hub, &ctx.state_dir(&spec))?;
    let rescues = gather(ctx, &hub, &view, all)?;
    Ok((hub, view, rescues))
}

/// "3h ago" for a time farm wrote; the time itself when it cannot tell.
fn ago(when: &str, now: SystemTime) -> String {
    match when.parse::<jiff::Timestamp>() {
        Ok(t) => match now.duration_since(SystemTime::from(t)) {
            Ok(d) => format!("{} ago", Age(d)),
            Err(_) => "just now".to_owned(),
        },
        Err(_) => when.to_owned(),
    }
}

fn list(ctx: &Ctx, args: &ListArgs) -> Result<(), Error> {
    let (hub, _, rescues) = open(ctx, args.branch.as_deref(), args.all)?;
    if args.json {
        let doc = serde_json::json!({ "branch": hub.branch, "rescues": rescues });
        ctx.out.data(&format!("{doc:#}\n"))?;
        return Ok(());
    }
    if rescues.is_empty() {
        ctx.out.say("no rescued work on the hub")?;
        return Ok(());
    }
    let now = SystemTime::now();
    let rows: Vec<Vec<(String, Option<crate::output::Style>)>> = rescues
        .iter()
        .map(|r| {
            let state = if r.dropped { " (dropped)" } else { "" };
            vec![
                (short(&r.name), None),
                (ago(&r.when, now), None),
                (r.agent.clone().unwrap_or_else(|| "-".into()), None),
                (format!("{}{state}", r.ahead), None),
                (r.why.clone().unwrap_or_else(|| "-".into()), None),
            ]
        })
        .collect();
    let header = ["RESCUE", "WHEN", "AGENT", "AHEAD", "WHY"];
    ctx.out
        .data(&crate::output::table(&header, &rows, ctx.out.color_stdout))?;
    ctx.out.note(&format!(
        "AHEAD: commits not on `{}`; look at one: farm rescue show RESCUE",
        hub.branch
    ));
    Ok(())
}

/// A rescue's name as listings show it: a task's nonce cut to 8 characters
/// (a prefix names it as well).
fn short(name: &str) -> String {
    match name.split_once('/') {
        Some((task, nonce)) if task != "orphan" && nonce.len() > 8 => {
            format!("{task}/{}", &nonce[..8])
        }
        _ => name.to_owned(),
    }
}

fn show(ctx: &Ctx, args: &ShowArgs) -> Result<(), Error> {
    let (hub, view, rescues) = open(ctx, args.branch.as_deref(), true)?;
    let r = resolve(&rescues, &args.name)?;
    let log = view.log(&r.commit)?;
    let diffstat = view.diffstat(&r.commit)?;
    if args.json {
        let mut doc = serde_json::to_value(&r).unwrap_or_default();
        doc["log"] = serde_json::to_value(&log).unwrap_or_default();
        doc["diffstat"] = serde_json::Value::String(diffstat);
        ctx.out.data(&format!("{doc:#}\n"))?;
        return Ok(());
    }
    let now = SystemTime::now();
    let mut text = format!("rescue:  `{}`\n", r.branch);
    if let Some(task) = &r.task {
        text.push_str(&format!("task:    {task}\n"));
    }
    text.push_str(&format!("when:    {} ({})\n", r.when, ago(&r.when, now)));
    if let Some(agent) = &r.agent {
        text.push_str(&format!("agent:   {agent}\n"));
    }
    if let Some(why) = &r.why {
        text.push_str(&format!("why:     {why}\n"));
    }
    text.push_str(&format!(
        "ahead:   {} not on `{}`\n",
        crate::output::count(r.ahead, "commit", "commits"),
        hub.branch
    ));
    if r.dropped {
        text.push_str(&format!(
            "dropped: yes (record: {})\n",
            rescue::dropped_ref(&r.branch)
        ));
    }
    text.push('\n');
    for c in &log {
        text.push_str(&format!(
            "{} {} ({}, {})\n",
            &c.commit[..c.commit.len().min(12)],
            c.subject,
            c.author,
            c.date
        ));
    }
    if !diffstat.trim().is_empty() {
        text.push('\n');
        text.push_str(diffstat.trim_end());
        text.push('\n');
    }
    ctx.out.data(&text)?;
    Ok(())
}

/// The task rescue `r` is applied to: `--task`, else its own.
fn task_of(r: &Rescue, task: Option<&TaskId>, land: &str) -> Result<TaskId, Error> {
    match (task, &r.task) {
        (Some(id), _) => Ok(id.clone()),
        (None, Some(task)) => TaskId::parse(task).map_err(|e| {
            Error::usage(format!("`{}` names no task farm knows: {e}", r.branch)).hint(format!(
                "name the task: farm rescue apply {}{land} --task ID",
                r.name
            ))
        }),
        (None, None) => Err(Error::usage(format!(
            "`{}` is not one task's work: name the task it is for",
            r.branch
        ))
        .hint(format!("farm rescue apply {}{land} --task ID", r.name))),
    }
}

fn apply(ctx: &Ctx, args: &ApplyArgs) -> Result<(), Error> {
    if args.land {
        return land::land(ctx, args);
    }
    let (hub, _, rescues) = open(ctx, args.branch.as_deref(), false)?;
    let r = resolve(&rescues, &args.name)?;
    let id = task_of(&r, args.task.as_ref(), "")?;
    if r.ahead == 0 {
        return Err(Error::usage(format!(
            "`{}` has no commit that `{}` lacks: there is nothing to start from",
            r.branch, hub.branch
        ))
        .hint(format!("drop it: farm rescue drop {}", r.name)));
    }
    let line = rescue::start_from_line(&r.branch);
    let note = format!(
        "\n## Start from earlier work\n\n{line}: {} not on `{}`, kept because: {}\n- chosen by {} with `farm rescue apply` at {}\n",
        crate::output::count(r.ahead, "commit", "commits"),
        hub.branch,
        r.why.as_deref().unwrap_or("(not said)"),
        crate::commands::default_agent(),
        timestamp(SystemTime::now()),
    );
    let mut board = HubBranch::new(&hub, format!("a note on `{id}`"));
    let tx = edit::transact(&mut board, branch::ROUNDS, |dir| {
        match crate::board::paths::find(dir, &id) {
            Some(Place::Pending) => {}
            Some(Place::Failed) => {
                return Err(Error::usage(format!(
                    "`{id}` has failed: no session of it is coming"
                ))
                .hint(format!(
                    "put it back first, then apply: farm task retry {id} && farm rescue apply {}",
                    r.name
                )));
            }
            Some(Place::Done) => {
                return Err(Error::usage(format!("`{id}` is done: no session of it is coming"))
                    .hint(format!(
                        "add a task to take the work on, and apply it there: farm task add ID -m TEXT && farm rescue apply {} --task ID",
                        r.name
                    )));
            }
            None => {
                return Err(Error::usage(format!("no task `{id}` on the board"))
                    .hint("list them: farm tasks"));
            }
        }
        let text = std::fs::read_to_string(dir.join(Place::Pending.file(&id))).unwrap_or_default();
        if text.contains(&line) {
            return Ok(Edit::Gone);
        }
        match edit::note(dir, &id, &note).map_err(|e| Error::failure(e.to_string()))? {
            Some(_) => Ok(Edit::Commit {
                message: format!("farm: `{id}` starts from `{}`", r.branch),
                value: (),
            }),
            None => Err(Error::failure(format!(
                "{} is not a valid task: fix it by hand",
                Place::Pending.file(&id)
            ))),
        }
    })?;
    match tx {
        Tx::Pushed(()) => ctx.out.say(&format!(
            "`{id}`'s next session starts from `{}` ({})",
            r.branch,
            crate::output::count(r.ahead, "commit", "commits")
        ))?,
        Tx::Gone => ctx.out.say(&format!(
            "`{id}`'s next session starts from `{}` already",
            r.branch
        ))?,
        Tx::Busy | Tx::Lost(()) => {
            return Err(Error::failure(format!(
                "could not note on `{id}`: the hub's `{}` kept moving",
                hub.branch
            )));
        }
    }
    if let Some(held) = ctx
        .store()?
        .list()?
        .into_iter()
        .find(|l| l.name == id.as_str())
    {
        ctx.out.note(&format!(
            "`{id}` is claimed by {}: the session running now works without it; the next one is offered it",
            held.who()
        ));
    }
    Ok(())
}

fn drop(ctx: &Ctx, args: &DropArgs) -> Result<(), Error> {
    let (hub, view, rescues) = open(ctx, args.branch.as_deref(), true)?;
    let r = resolve(&rescues, &args.name)?;
    let dropped = drop_branch(&hub, &view, &r)?;
    dropped.say(ctx, &r)
}

/// What dropping a rescue branch came to; its record is pushed in any case.
enum Dropped {
    /// Deleted from the hub.
    Deleted { record: String, back: String },
    /// Gone from the hub before.
    Already { back: String },
    /// The hub refuses deletes by push: the branch stays, farm lists it no
    /// more; `remove` is the command that removes it on the hub's machine.
    Kept { record: String, remove: String },
}

impl Dropped {
    /// For `--json`: how the branch went.
    fn word(&self) -> &'static str {
        match self {
            Dropped::Deleted { .. } => "deleted",
            Dropped::Already { .. } => "already",
            Dropped::Kept { .. } => "recorded",
        }
    }

    fn say(&self, ctx: &Ctx, r: &Rescue) -> Result<(), Error> {
        match self {
            Dropped::Deleted { record, back } => ctx.out.say(&format!(
                "dropped `{}`; its commits are kept under {record} (bring it back: {back})",
                r.branch
            ))?,
            Dropped::Already { back } => ctx.out.say(&format!(
                "`{}` was dropped already; bring it back: {back}",
                r.name
            ))?,
            Dropped::Kept { record, remove } => {
                ctx.out.say(&format!(
                    "dropped `{}`: farm lists and offers it no more; its commits are kept under {record}",
                    r.branch
                ))?;
                ctx.out.warn(&format!(
                    "the branch itself stays: the hub refuses deletes by push (receive.denyDeletes, \
                     which farm init sets so that no agent's push can delete a branch). To remove it: {remove}"
                ));
            }
        }
        Ok(())
    }
}

/// Drop rescue `r`: its record pushed (refs/farm/dropped/…), then its
/// branch deleted where the hub allows it.
fn drop_branch(hub: &Hub, view: &View, r: &Rescue) -> Result<Dropped, Error> {
    let record = rescue::dropped_ref(&r.branch);
    let push = |specs: &[String]| {
        view.repo()
            .push(&hub.url, specs)
            .map_err(|e| Error::failure(e.to_string()).caused_by(e))
    };
    if let Pushed::Rejected(why) = push(&[format!("{}:{record}", r.commit)])? {
        return Err(Error::failure(format!(
            "the hub refused the record of the drop ({record}): {why:?}; nothing was dropped"
        ))
        .hint("check the hub's hooks and access: git push HUB COMMIT:refs/farm/dropped/…"));
    }
    let local = hub.local.as_ref().map(|l| l.dir.display().to_string());
    let back = match &local {
        Some(dir) => format!("git -C {dir} branch {} {record}", r.branch),
        None => format!(
            "git fetch {url} {record} && git push {url} FETCH_HEAD:refs/heads/{}",
            r.branch,
            url = hub.url
        ),
    };
    if !r.on_hub {
        return Ok(Dropped::Already { back });
    }
    match push(&[format!(":refs/heads/{}", r.branch)])? {
        Pushed::Ok => Ok(Dropped::Deleted { record, back }),
        Pushed::Rejected(why) if why.iter().any(|(_, w)| w.contains("deletion prohibited")) => {
            let remove = match &local {
                Some(dir) => format!(
                    "git -C {dir} update-ref -d refs/heads/{} {}",
                    r.branch, r.commit
                ),
                None => format!(
                    "in the hub's repository, on its machine: git update-ref -d refs/heads/{} {}",
                    r.branch, r.commit
                ),
            };
            Ok(Dropped::Kept { record, remove })
        }
        Pushed::Rejected(why) => Err(Error::new(
            Code::Failure,
            format!(
                "the hub refused to delete `{}`: {why:?}; it is recorded as dropped ({record})",
                r.branch
            ),
        )
        .hint("check the hub's hooks and access")),
    }
}
