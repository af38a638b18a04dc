//! `farm rescue apply NAME --land`: a rescue's work landed on the branch
//! now, as a session's is integrated (see [`crate::run::land`]), under the
//! task's claim; then the rescue dropped and the task noted.
//!
//! Landing is made to be run again: each step after the push looks first
//! whether it was done. A rescue whose commits are on the branch (by
//! ancestry or by patch) is not landed again — only its note and its drop
//! are made good — so a landing killed after its push, or run twice, lands
//! once.

use std::time::SystemTime;

use serde_json::json;

use super::{ApplyArgs, Dropped, Rescue, drop_branch, open, resolve, task_of};
use crate::board::edit::{self, Edit, Tx};
use crate::board::paths::{self, Place};
use crate::claims::record::{Claim, Holder, timestamp};
use crate::claims::{Attempt, ClaimStore, Held, StoreError, host};
use crate::commands::branch::{self, HubBranch};
use crate::commands::{held_by, judge_now};
use crate::config::Ctx;
use crate::error::{Code, Error};
use crate::git::hub::Hub;
use crate::git::rescue::View;
use crate::names::TaskId;
use crate::run::land::Landed;
use crate::run::state::Run;
use crate::settings::Settings;

/// How a rescue's note on its task begins: this, its branch, a backtick.
const LANDED: &str = "- landed branch `";

pub(super) fn land(ctx: &Ctx, args: &ApplyArgs) -> Result<(), Error> {
    let spec = ctx.hub_spec()?;
    let state = ctx.state_dir(&spec);
    let (hub, view, rescues) = open(ctx, args.branch.as_deref(), true)?;
    // The rescues not dropped first: a task's earlier rescue, dropped,
    // does not make its name ambiguous.
    let live: Vec<Rescue> = rescues.iter().filter(|r| !r.dropped).cloned().collect();
    let r = resolve(&live, &args.name).or_else(|e| resolve(&rescues, &args.name).map_err(|_| e))?;
    let id = task_of(&r, args.task.as_ref(), " --land")?;
    if !view.has_work(&r.commit)? {
        return finish(ctx, args, &hub, &view, &r, &id, None);
    }
    if r.dropped {
        return Err(Error::usage(format!(
            "`{}` was dropped: it is not landed unless brought back",
            r.name
        ))
        .hint(format!(
            "bring it back, then land it: {}",
            bring_back(&hub, &r)
        )));
    }
    let task = task_on_board(&hub, &id, args.done, &r)?;
    std::fs::create_dir_all(&state).map_err(|e| {
        Error::failure(format!(
            "cannot create the state directory `{}`: {e}",
            state.display()
        ))
    })?;
    let settings = Settings::of_hub(&spec, Some(&hub.branch), &state)?;
    let store = ctx.store_of(&spec, &settings)?;
    crate::claims::protocol::join(&*store)?;
    let name = crate::commands::default_agent();
    let host = host::Here::current().host.clone();
    let config = crate::run::config::landing(
        &settings,
        &crate::run::config::World {
            host: &host,
            now: SystemTime::now(),
            runnable: &|program| crate::run::session::which(program).is_some(),
            preset: &|_| Ok(None),
            claims: ctx.claims_kind(&spec, &settings),
        },
        &name,
        Some(hub.branch.clone()),
        settings
            .net_timeout
            .as_deref()
            .and_then(|t| crate::age::parse_duration(t).ok())
            .unwrap_or(crate::git::command::NET_TIMEOUT),
    )?;
    crate::git::command::set_net_timeout(config.net_timeout);
    // Fencing: no session of the task runs while its rescue lands.
    let held = claim(ctx, &*store, &r, &id, &name, task.attempts.max(1))?;
    // Looked at again under the claim: a landing killed after its push, or
    // one that held the claim until a moment ago, may have landed it.
    let view = View::open(&hub, &state)?;
    if !view.has_work(&r.commit)? {
        match store.release_held(held) {
            Ok(()) | Err(StoreError::Lost { .. }) => {}
            Err(e) => return Err(e.into()),
        }
        return finish(ctx, args, &hub, &view, &r, &id, None);
    }
    let run = Run::new(hub.clone(), store, config, state, ctx.out);
    if !args.json {
        ctx.out.note(&format!(
            "landing `{}` on `{}` ({}{})",
            r.branch,
            hub.branch,
            crate::output::count(r.ahead, "commit", "commits"),
            if run.config.gate.is_some() {
                ", through the test gate"
            } else {
                ""
            }
        ));
    }
    let landed = crate::run::land::land(&run, &name, &task, &held, &r.branch, args.done);
    // Let go as a session's claim is, landed or not (a lost one is not ours).
    if !matches!(landed, Ok(Landed::Lost(_))) {
        match run.store.release_held(held) {
            Ok(()) | Err(StoreError::Lost { .. }) => {}
            Err(e) if landed.is_ok() => return Err(e.into()),
            Err(_) => {}
        }
    }
    let commit = match landed? {
        Landed::Pushed { commit } => commit,
        other => return not_landed(ctx, args, &hub, &r, &id, other),
    };
    if args.done {
        run.journal.record(
            &name,
            &crate::run::event::Event::Done {
                task: id.as_str().into(),
            },
        );
    }
    finish(ctx, args, &hub, &view, &r, &id, Some(&commit))
}

/// The task `id` as the hub's branch has it. To finish it (`done`), it
/// must be pending there.
fn task_on_board(
    hub: &Hub,
    id: &TaskId,
    done: bool,
    r: &Rescue,
) -> Result<crate::board::Task, Error> {
    let tmp = tempfile::tempdir()
        .map_err(|e| Error::failure(format!("cannot make a temp dir: {e}")).caused_by(e))?;
    let board = hub.extract_board(tmp.path())?;
    let Some(place) = paths::find(&board, id) else {
        return Err(
            Error::usage(format!("no task `{id}` on the board")).hint(format!(
                "name the task it is for: farm rescue apply {} --land --task ID",
                r.name
            )),
        );
    };
    match (done, place) {
        (true, Place::Done) => {
            return Err(
                Error::usage(format!("`{id}` is done already")).hint(format!(
                    "land the work without --done: farm rescue apply {} --land",
                    r.name
                )),
            );
        }
        (true, Place::Failed) => {
            return Err(
                Error::usage(format!("`{id}` has failed: put it back first to finish it")).hint(
                    format!(
                        "farm task retry {id} && farm rescue apply {} --land --done",
                        r.name
                    ),
                ),
            );
        }
        _ => {}
    }
    let text = std::fs::read_to_string(board.join(place.file(id))).unwrap_or_default();
    crate::board::parse(id.clone(), &text).map_err(|e| {
        Error::failure(format!(
            "{} is not a valid task ({e}): fix it by hand",
            place.file(id)
        ))
    })
}

/// Claim `id` to land `r` under: a claim whose holder is dead (a landing
/// killed, say) is taken back first; one a live holder has is refused
/// (exit 3, as `farm claim`).
fn claim(
    ctx: &Ctx,
    store: &dyn ClaimStore,
    r: &Rescue,
    id: &TaskId,
    name: &str,
    attempt: u32,
) -> Result<Held, Error> {
    let holder = host::own_start().map(|start| Holder {
        pid: std::process::id(),
        start,
    });
    let mut reaped = false;
    loop {
        let claim = Claim::new(id.clone(), name, holder, attempt, SystemTime::now());
        let entry = match store.try_claim(claim, true)? {
            Attempt::Won(held) => return Ok(held),
            Attempt::Lost(entry) => entry,
        };
        let judge = judge_now(None);
        let verdict = entry.judge(&judge);
        if verdict.reapable && !reaped {
            reaped = true;
            store.reap(&entry, &judge)?;
            ctx.out.note(&format!(
                "took back `{id}`'s claim from {} ({}: {})",
                held_by(&entry, judge.now),
                verdict.state,
                verdict.reason
            ));
            continue;
        }
        return Err(Error::new(
            Code::Held,
            format!(
                "cannot land `{}`: `{id}` is held by {}",
                r.branch,
                held_by(&entry, judge.now)
            ),
        )
        .hint(format!(
            "a session of it is running: let it end, or give it the work instead: farm rescue apply {}",
            r.name
        )));
    }
}

/// The command that brings back dropped rescue `r`.
fn bring_back(hub: &Hub, r: &Rescue) -> String {
    let record = crate::git::rescue::dropped_ref(&r.branch);
    match &hub.local {
        Some(local) => format!(
            "git -C {} branch {} {record}",
            local.dir.display(),
            r.branch
        ),
        None => format!(
            "git fetch {url} {record} && git push {url} FETCH_HEAD:refs/heads/{}",
            r.branch,
            url = hub.url
        ),
    }
}

/// `r` did not land: said (with `--json`, also printed), the rescue kept.
fn not_landed(
    ctx: &Ctx,
    args: &ApplyArgs,
    hub: &Hub,
    r: &Rescue,
    id: &TaskId,
    landed: Landed,
) -> Result<(), Error> {
    let branch = &hub.branch;
    let session = format!(
        "give it to `{id}`'s next session instead: farm rescue apply {}",
        r.name
    );
    let kept = format!("nothing was pushed; `{}` is kept", r.branch);
    let (why, files, errors, error) = match landed {
        Landed::Pushed { .. } => unreachable!("a landing that pushed is finished"),
        Landed::Conflict(files) => {
            let e = Error::failure(format!(
                "cannot land `{}`: it conflicts with `{branch}` in {}; {kept}",
                r.branch,
                files.join(", ")
            ))
            .hint(format!("a session merges it: {session}"));
            ("conflict", files, Vec::new(), e)
        }
        Landed::Red { why, errors } => {
            let mut text = format!("cannot land `{}`: the tests: {why}; {kept}", r.branch);
            for line in &errors {
                text.push('\n');
                text.push_str(line);
            }
            let e = Error::failure(text).hint(format!("look: farm tests; or {session}"));
            ("red", Vec::new(), errors, e)
        }
        Landed::Untested(why) => (
            "untested",
            Vec::new(),
            Vec::new(),
            Error::failure(format!(
                "cannot land `{}`: its tests could not be read: {why}; {kept}",
                r.branch
            ))
            .hint("check the [tests] of farm.toml: farm tests"),
        ),
        Landed::Refused(what) => (
            "refused",
            Vec::new(),
            Vec::new(),
            Error::failure(format!(
                "cannot land `{}`: it changes what a session may not: {what}; {kept}",
                r.branch
            ))
            .hint(format!("land what may land through a session: {session}")),
        ),
        Landed::Elsewhere(place) => (
            "elsewhere",
            Vec::new(),
            Vec::new(),
            Error::failure(format!(
                "cannot land `{}`: `{id}` went to `{}` on `{branch}` meanwhile; {kept}",
                r.branch,
                place.file(id)
            ))
            .hint(format!(
                "land it without --done: farm rescue apply {} --land",
                r.name
            )),
        ),
        Landed::Busy => (
            "busy",
            Vec::new(),
            Vec::new(),
            Error::failure(format!(
                "cannot land `{}`: `{branch}` kept moving; {kept}",
                r.branch
            ))
            .hint(format!("try again: farm rescue apply {} --land", r.name)),
        ),
        Landed::Lost(lost) => (
            "lost",
            Vec::new(),
            Vec::new(),
            Error::failure(format!(
                "cannot land `{}`: the claim of `{id}` was taken away ({lost}); {kept}",
                r.branch
            ))
            .hint("see who holds it: farm locks"),
        ),
    };
    if args.json {
        let doc = json!({
            "rescue": r.name,
            "branch": r.branch,
            "task": id.as_str(),
            "landed": false,
            "already": false,
            "why": why,
            "files": files,
            "errors": errors,
        });
        ctx.out.data(&format!("{doc:#}\n"))?;
    }
    Err(error)
}

/// After `r`'s work is on the branch (`commit`: pushed now; `None`: found
/// there): the task noted, the rescue dropped — each unless done already.
fn finish(
    ctx: &Ctx,
    args: &ApplyArgs,
    hub: &Hub,
    view: &View,
    r: &Rescue,
    id: &TaskId,
    commit: Option<&str>,
) -> Result<(), Error> {
    let at = match commit {
        Some(c) => c.to_owned(),
        None => view.tip()?,
    };
    let noted = note(hub, r, id, &at)?;
    let dropped = drop_branch(hub, view, r)?;
    let short = &at[..at.len().min(12)];
    if args.json {
        let doc = json!({
            "rescue": r.name,
            "branch": r.branch,
            "task": id.as_str(),
            "landed": true,
            "already": commit.is_none(),
            "commit": at,
            "done": args.done && commit.is_some(),
            "noted": noted,
            "dropped": dropped.word(),
        });
        ctx.out.data(&format!("{doc:#}\n"))?;
        if let Dropped::Kept { remove, .. } = &dropped {
            ctx.out.warn(&format!(
                "the branch itself stays (the hub refuses deletes by push); to remove it: {remove}"
            ));
        }
        return Ok(());
    }
    match commit {
        Some(_) => ctx.out.say(&format!(
            "landed `{}` on `{}` at {short}{}",
            r.branch,
            hub.branch,
            if args.done {
                format!("; `{id}` is done")
            } else {
                String::new()
            }
        ))?,
        None => ctx.out.say(&format!(
            "`{}` is on `{}` already (at {short}): nothing landed again",
            r.branch, hub.branch
        ))?,
    }
    if !matches!(dropped, Dropped::Already { .. }) {
        dropped.say(ctx, r)?;
    }
    Ok(())
}

/// Note on task `id` that `r`'s work is on the branch at `at`; whether a
/// note was written now (false: it was there already, or the task is gone).
fn note(hub: &Hub, r: &Rescue, id: &TaskId, at: &str) -> Result<bool, Error> {
    let line = format!("{LANDED}{}`", r.branch);
    let note = format!(
        "\n## Earlier work landed\n\n{line}: on `{}` at {at}, landed by {} with `farm rescue apply --land` at {}\n",
        hub.branch,
        crate::commands::default_agent(),
        timestamp(SystemTime::now()),
    );
    let mut board = HubBranch::new(hub, format!("a note on `{id}`"));
    let tx = edit::transact(&mut board, branch::ROUNDS, |dir| {
        let Some(place) = paths::find(dir, id) else {
            return Ok(Edit::Gone);
        };
        let text = std::fs::read_to_string(dir.join(place.file(id))).unwrap_or_default();
        if text.contains(&line) {
            return Ok(Edit::Gone);
        }
        match edit::note_anywhere(dir, id, &note).map_err(|e| Error::failure(e.to_string()))? {
            Some(_) => Ok(Edit::Commit {
                message: format!("farm: `{}` landed for `{id}`", r.branch),
                value: (),
            }),
            None => Ok(Edit::Gone),
        }
    })?;
    match tx {
        Tx::Pushed(()) => Ok(true),
        Tx::Gone => Ok(false),
        Tx::Busy | Tx::Lost(()) => Err(Error::failure(format!(
            "`{}` landed, but the note on `{id}` could not be pushed: `{}` kept moving",
            r.branch, hub.branch
        ))
        .hint(format!(
            "run it again to finish (nothing lands twice): farm rescue apply {} --land",
            r.name
        ))),
    }
}
