//! One turn's session: reaping dead claims before a pick, running the
//! session in the clone while heartbeating its claim, and taking a removed
//! claim back.

use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime};

use crate::board::Task;
use crate::output::Style;
use crate::run::event::Event;

use crate::claims::host::{self, Here};
use crate::claims::liveness::Judge;
use crate::claims::record::{Claim, Holder};
use crate::claims::{Attempt, Held, Listed, Reap, StoreError};
use crate::error::Error;
use crate::run::classify::{self};
use crate::run::clone::{Earlier, PrivateClone};
use crate::run::interrupt::Heartbeat;
use crate::run::prompt;
use crate::run::session::{self, Outcome, Tick};
use crate::run::slot::Slot;
use crate::run::state::Run;
use crate::run::usage::{self};
use crate::run::watch::{LogWatch, Retry};

/// What one turn of an agent's loop carries: the run, the clone the task's
/// session runs in, the agent's name, the claimed task, its claim, and the
/// agent's session slot.
#[derive(Clone, Copy)]
pub(super) struct Turn<'a> {
    pub(super) run: &'a Run,
    pub(super) clone: &'a PrivateClone,
    pub(super) name: &'a str,
    pub(super) task: &'a Task,
    pub(super) held: &'a Held,
    pub(super) slot: &'a Slot,
}

/// Take back dead claims, and claims stale past the run's threshold; the
/// claims that remain, for choosing the next task (one listing, not two).
pub(super) fn reap(run: &Run, name: &str) -> Result<Vec<Listed>, Error> {
    let judge = Judge {
        here: Here::current(),
        now: SystemTime::now(),
        stale_after: Some(run.config.stale_after),
        probe: &host::process_start,
    };
    let mut kept = Vec::new();
    for entry in run.store.list()? {
        let judged = entry.judge(&judge);
        if judged.reapable
            && let Ok(Reap::Reaped { verdict, .. }) = run.store.reap(&entry, &judge)
        {
            run.tell(
                name,
                &Event::Reap {
                    task: entry.name.as_str().into(),
                    why: format!("{}: {}", verdict.state, verdict.reason).into(),
                },
            );
        } else {
            say_corrupt_once(run, name, &entry, &judged);
            kept.push(entry);
        }
    }
    Ok(kept)
}

/// Say once per run (per file) that a task waits on a corrupt claim, which
/// would otherwise keep it waiting in silence until the claim is old enough
/// to reap.
pub(super) fn say_corrupt_once(
    run: &Run,
    name: &str,
    entry: &Listed,
    verdict: &crate::claims::liveness::Verdict,
) {
    static SAID: Mutex<std::collections::BTreeSet<(String, u64)>> =
        Mutex::new(std::collections::BTreeSet::new());
    let Some(note) =
        crate::claims::liveness::waiting_on(&entry.name, verdict, run.config.stale_after)
    else {
        return;
    };
    let mut said = SAID.lock().unwrap_or_else(|e| e.into_inner());
    if said.insert((entry.name.clone(), entry.identity)) {
        run.say_tone(name, Style::Warn, &note);
    }
}

/// What a session left to settle.
pub(super) struct Ran {
    pub(super) attempt: u32,
    /// The commit the session started from.
    pub(super) base: String,
    pub(super) log: PathBuf,
    pub(super) outcome: Outcome,
    pub(super) class: classify::Class,
    /// The claim was taken away while it ran.
    pub(super) lost: bool,
    /// It did not start at all (see [`classify::did_not_start`]).
    pub(super) unstarted: bool,
}

impl Ran {
    /// The session did its task: what is left is integration alone, which
    /// needs the agent no more (it can go on to its next session).
    pub(super) fn succeeded(&self) -> bool {
        !self.lost
            && matches!(self.outcome, Outcome::Success)
            && self.class == classify::Class::Success
    }
}

/// Announce the claim, render the prompt and run the session in `clone`;
/// what it left, classified.
/// `messages` is the prompt's section of the messages the agent took.
pub(super) fn session(turn: Turn<'_>, messages: &str) -> Result<Ran, Error> {
    let Turn {
        run,
        clone,
        name,
        task,
        ..
    } = turn;
    // From the task file as it is now; the claim's record may be one behind
    // if an attempt was recorded between reading the board and claiming.
    let attempt = task.attempts + 1;
    let id = task.id.as_str();
    let base = clone.head()?;
    let (log, prompt_file) = run.session_files(name, id);
    run.say(
        name,
        &format!(
            "claimed `{id}` (attempt {attempt} of {})",
            task.max_attempts
        ),
    );
    let role = run.config.roles.get(name);
    run.journal.record(
        name,
        &Event::Claim {
            task: id.into(),
            attempt,
            role: role.map(|r| r.name.as_str().into()),
        },
    );

    let chosen = crate::git::rescue::chosen_in(&task.body);
    let earlier = clone.earlier_work(&run.hub, &task.id, &chosen);
    let text = render_prompt(turn, attempt, &earlier, messages);
    let timeout = task.timeout.unwrap_or(run.config.timeout);
    run.detail(
        name,
        &format!(
            "`{id}`: running `{}` in {} ({} bytes of prompt by {}, timeout {}); log {}",
            run.config.argv.join(" "),
            clone.dir().display(),
            text.len(),
            run.config.via.as_str(),
            crate::age::Age(timeout),
            log.display()
        ),
    );
    let Supervised {
        outcome,
        lost,
        ran,
        retrying,
    } = supervise(turn, &text, &log, &prompt_file, timeout)?;
    run.say_tone(
        name,
        matches!(outcome, Outcome::Failed { .. }).then_some(Style::Bad),
        &format!("`{id}`: session {outcome} after {:.1}s", ran.as_secs_f64()),
    );

    // What the session's end means, from its exit and its log's last lines.
    let text = session::agent_output(&std::fs::read_to_string(&log).unwrap_or_default());
    // A session that ended while its CLI retried (timed out, or stopped for
    // refused credentials) is the API's; one that got through is judged as
    // usual.
    let class = match retrying {
        Some(r) if outcome != Outcome::Success => classify::retrying(r, &text),
        _ => classify::classify(
            &run.config.patterns,
            &outcome,
            ran,
            &text,
            SystemTime::now(),
        ),
    };
    // A session that made a commit started, however soon it failed.
    let unstarted = classify::did_not_start(&outcome, ran, &text) && clone.head()? == base;
    let spent = usage::read(&text);
    run.spend(&spent);
    run.journal.record(
        name,
        &Event::SessionEnd {
            task: id.into(),
            attempt,
            outcome: outcome.to_string().into(),
            class: class.label().into(),
            secs: ran.as_secs_f64(),
            log: log.display().to_string().into(),
            cost_usd: spent.cost_usd,
            input_tokens: spent.input_tokens,
            output_tokens: spent.output_tokens,
        },
    );
    Ok(Ran {
        attempt,
        base,
        log,
        outcome,
        class,
        lost,
        unstarted,
    })
}

/// The prompt of `turn`'s session: the role's template (or the clone's
/// `templates/prompt.md`, or farm's own) with the task, its attempt, the
/// notes of earlier attempts and where their work is (`earlier`), and the
/// messages the agent took (`messages`).
fn render_prompt(turn: Turn<'_>, attempt: u32, earlier: &[Earlier], messages: &str) -> String {
    let Turn {
        run,
        clone,
        name,
        task,
        ..
    } = turn;
    let id = task.id.as_str();
    let role = run.config.roles.get(name);
    let (description, notes) = prompt::split_notes(&task.body);
    let mut notes = if notes.is_empty() {
        String::new()
    } else if notes.contains(crate::board::question::QUESTION) {
        // Questions asked and answered, with where the asking session's
        // work is now.
        let offered: Vec<&str> = earlier.iter().map(|e| e.branch.as_str()).collect();
        let work = crate::run::question_file::earlier_work(clone, &task.body, &offered);
        format!("\n# Notes from earlier sessions\n\n{notes}{work}\n")
    } else {
        format!("\n# Notes from earlier attempts\n\n{notes}\n")
    };
    // In `notes`, not a placeholder of its own: a repository's own older
    // template shows it too.
    notes.push_str(&prompt::earlier_work(earlier, &run.hub.branch));
    notes.push_str(&crate::run::rejected::rejected_work(clone, &task.body));
    let progress = match &run.config.progress {
        Some(path) if clone.dir().join(path).is_file() => format!(
            "\nRead `{path}` first: the tests on `{}`, the latest `ERROR:` lines, and \
             what was integrated lately.\n",
            run.hub.branch
        ),
        _ => String::new(),
    };
    // A role's own template, when it has one and the clone has the file.
    let template = role
        .and_then(|r| r.prompt.as_deref())
        .and_then(|path| std::fs::read_to_string(clone.dir().join(path)).ok())
        .unwrap_or_else(|| prompt::template(clone.dir(), "prompt.md", prompt::PROMPT));
    // A template of the repository's own that has no place for messages
    // gets them first: words from a person are never dropped.
    let template = if messages.is_empty() || template.contains("{{messages}}") {
        template
    } else {
        format!("{{{{messages}}}}\n{template}")
    };
    prompt::render(
        &template,
        &[
            ("messages", messages),
            ("role", role.map_or("", |r| r.name.as_str())),
            ("progress", &progress),
            ("task", id),
            ("title", &task.title),
            ("description", description.trim()),
            ("attempt", &attempt.to_string()),
            ("max_attempts", &task.max_attempts.to_string()),
            ("notes", &notes),
            ("branch", &run.hub.branch),
        ],
    )
}

/// Run one session, heartbeating the claim and watching its log for the
/// CLI retrying its API (see [`Supervised`]).
pub(super) fn supervise(
    turn: Turn<'_>,
    prompt: &str,
    log: &Path,
    prompt_file: &Path,
    timeout: Duration,
) -> Result<Supervised, Error> {
    // Whatever the session does to the work tree, farm no longer knows it.
    turn.clone.dirty();
    let Turn {
        run, clone, held, ..
    } = turn;
    if let Some(dir) = prompt_file.parent() {
        std::fs::create_dir_all(dir)
            .map_err(|e| Error::failure(format!("cannot create `{}`: {e}", dir.display())))?;
    }
    let (env, jail) = session_env(turn, prompt_file)?;
    run.stagger_start();
    let started = Instant::now();
    let spec = session::Spec {
        argv: &run.config.argv,
        wrap: jail.as_ref().map_or(&run.config.wrap, |(w, _)| w),
        sandboxed: jail.is_some(),
        prompt,
        via: run.config.via,
        prompt_file,
        cwd: clone.dir(),
        env: &env,
        log,
        timeout,
        grace: run.grace,
        quota: run.config.quota,
        record: &clone.session_record(),
    };
    let mut lost = false;
    let mut beat = Heartbeat::new(run, held);
    // The CLI retrying its API: the other agents hold off while it does;
    // refused credentials end the session at once.
    let mut watch = LogWatch::new(log);
    let mut refused = None;
    let outcome = session::run(&spec, || {
        if run.stop.killing() {
            return Tick::Stop;
        }
        let was = watch.retrying.is_some_and(|r| !r.refused());
        if watch.poll() {
            match watch.retrying {
                Some(r) if r.refused() => {
                    if was {
                        run.limits.retrying(false);
                    }
                    refused = Some(r);
                    return Tick::Stop;
                }
                Some(_) if !was => run.limits.retrying(true),
                None if was => run.limits.retrying(false),
                _ => {}
            }
        }
        if beat.due().is_err() {
            lost = true;
            return Tick::Stop;
        }
        Tick::Continue
    });
    let outcome = match outcome {
        Ok(outcome) => outcome,
        // The agent could not be started for this task (its prompt too long
        // for an argument, say): a failed attempt like any other, noted in
        // the log — not an error that would stop the loop and, under
        // loop.sh, bring it back to the same task for ever.
        Err(e) => {
            let _ = std::fs::write(
                log,
                format!("farm: cannot start `{}`: {e}\n", run.config.argv[0]),
            );
            Outcome::Failed { code: 127 }
        }
    };
    let counted = refused.is_none() && watch.retrying.is_some();
    watch.finish();
    if counted {
        run.limits.retrying(false);
    }
    Ok(Supervised {
        outcome,
        lost,
        ran: started.elapsed(),
        retrying: refused.or(watch.retrying),
    })
}

/// The words that wrap a sandboxed session, and the variables of the
/// user's environment the sandbox keeps.
type Jail = (Vec<String>, Env);

/// Environment variables, in the order they are set.
type Env = Vec<(String, String)>;

/// The environment `turn`'s session starts with and, with a sandbox, its
/// jail. farm's own variables come last: a kept one of the same name loses.
fn session_env(turn: Turn<'_>, prompt_file: &Path) -> Result<(Env, Option<Jail>), Error> {
    let Turn {
        run,
        clone,
        name,
        held,
        ..
    } = turn;
    let ask = crate::run::question_file::prepare(clone.dir(), &held.claim().task)?;
    let mut env = vec![
        ("FARM_ASK".to_owned(), ask.display().to_string()),
        ("FARM_TASK".to_owned(), held.claim().task.to_string()),
        ("FARM_AGENT".to_owned(), name.to_owned()),
        ("FARM_HUB".to_owned(), run.hub.url.clone()),
        (
            "FARM_CLAIM".to_owned(),
            run.store.claim_location(&held.claim().task),
        ),
        ("FARM_ATTEMPT".to_owned(), held.claim().attempt.to_string()),
    ];
    let mut config_dir = None;
    if let Some(config) = &run.config.agent_config {
        let dir = config.dir_for(&run.state, name)?;
        env.push((config.var.clone(), dir.display().to_string()));
        config_dir = Some(dir);
    }
    let jail = run.sandbox.as_ref().map(|sandbox| {
        let mut read = clone.borrowed_objects();
        read.push(prompt_file.to_path_buf());
        let (mut words, env) = sandbox.confine(clone.dir(), &read, config_dir.as_slice());
        words.extend(run.config.wrap.iter().cloned());
        (words, env)
    });
    if let Some((_, kept)) = &jail {
        let ours = std::mem::replace(&mut env, kept.clone());
        env.extend(ours);
    }
    Ok((env, jail))
}

/// How a supervised session ended.
pub(super) struct Supervised {
    pub(super) outcome: Outcome,
    /// The claim was lost while it ran (it was then stopped).
    pub(super) lost: bool,
    /// How long the session itself ran, from its start after its
    /// `--stagger` turn (a wait for the turn was counted as session time).
    pub(super) ran: Duration,
    /// The CLI was retrying its API when the session ended (or was stopped
    /// for refused credentials): what its end means, whatever its exit.
    pub(super) retrying: Option<Retry>,
}

/// Claim task `id` for agent `name` as attempt `attempt`, with this process
/// as holder; `None` when another holder has it (a lost race, or a task
/// whose claim kept changing under us while other agents claimed around
/// it). Also how a task whose claim was removed is claimed again, to count
/// the failed attempt under (see [`settle`](crate::run::settle)).
pub(super) fn claim(
    run: &Run,
    name: &str,
    id: &crate::names::TaskId,
    attempt: u32,
) -> Result<Option<Held>, Error> {
    let holder = host::own_start().map(|start| Holder {
        pid: std::process::id(),
        start,
    });
    let claim = Claim::new(id.clone(), name, holder, attempt, SystemTime::now());
    match run.store.try_claim(claim, true) {
        Ok(Attempt::Won(held)) => Ok(Some(held)),
        Ok(Attempt::Lost(_)) | Err(StoreError::Busy { .. }) => Ok(None),
        Err(e) => Err(e.into()),
    }
}
