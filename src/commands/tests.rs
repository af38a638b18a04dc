//! `farm tests`: run the project's test suite (`[tests]` in farm.toml) on
//! the hub's branch, in a scratch clone, and say what it adds up to; with
//! `--tasks`, make the failures tasks ([`refresh`], which `farm run
//! --steer` calls too).

use serde::Serialize;

use std::collections::BTreeSet;
use std::path::Path;
use std::time::SystemTime;

use crate::board::edit::{self, Branch, Edit, Tx};
use crate::claims::ClaimStore;
use crate::commands::branch::HubBranch;
use crate::config::Ctx;
use crate::error::Error;
use crate::git::command::Repo;
use crate::git::hub::Hub;
use crate::names::TaskId;
use crate::output::{Style, table};
use crate::settings::Settings;
use crate::suite::Suite;
use crate::suite::report::{Counts, Outcome, Report};
use crate::suite::results::{self, Results, Store};
use crate::suite::run::Inside;
use crate::suite::tasks::{self, Applied, GroupBy, Seen};

/// Run the test suite on the hub's branch and print the aggregate.
///
/// The suite is `[tests]` in farm.toml: `command` (words, no shell),
/// `format` (junit, libtest-json, tap or lines), `report` (the file the
/// command writes, relative to the clone; default: its standard output),
/// `timeout`. Prints passed / failed / skipped / total, per group, then one
/// `ERROR: <test>: <why>` line per failing test. Failing tests are a result,
/// not an error: the exit code is 0 once the report was read.
///
/// With --tasks, each failing test (or group, --group-by) without a task
/// gets one, labelled `test`, its id made from the test's name; a pending
/// test task whose tests all pass is moved to tasks/done/. Running it again
/// on the same failures adds nothing.
#[derive(Debug, clap::Args)]
#[command(after_help = "\
Examples:
  farm tests
  farm tests --json | jq '.counts'
  farm tests | grep '^ERROR:'
  farm tests --tasks --group-by file

farm.toml:
  [tests]
  command = \"pytest -q --junitxml=report.xml\"
  format = \"junit\"
  report = \"report.xml\"
  timeout = \"10m\"
  run_one = \"pytest {file}::{name}\"   # named in each test task")]
pub struct Args {
    /// Print JSON: {branch, commit, command, format, exit, secs, counts, groups, errors, failures}.
    #[arg(long)]
    json: bool,

    /// The branch to test (default: the hub's HEAD branch).
    #[arg(long)]
    branch: Option<String>,

    /// Make a task of each failure without one; close test tasks that pass.
    #[arg(long)]
    tasks: bool,

    /// With --tasks: one task per failing test, or per file, suite or name
    /// prefix.
    #[arg(
        long,
        value_enum,
        value_name = "HOW",
        default_value = "test",
        requires = "tasks"
    )]
    group_by: GroupBy,

    /// The tests run the branch's code, which agents wrote: in the session
    /// sandbox, as the gate runs them (see farm run --help).
    #[command(flatten)]
    sandbox: crate::run::config::SandboxFlags,
}

#[derive(Serialize)]
struct Failure<'a> {
    test: String,
    group: Option<&'a str>,
    name: &'a str,
    message: &'a str,
    file: Option<&'a str>,
}

pub fn run(ctx: &Ctx, args: &Args) -> Result<(), Error> {
    let spec = ctx.hub_spec()?;
    let hub = Hub::open(&spec, args.branch.as_deref())?;
    let state = ctx.state_dir(&spec);
    let settings = Settings::of_hub(&spec, Some(&hub.branch), &state)?;
    let suite = Suite::from_raw(settings.tests.as_ref())
        .map_err(|e| {
            Error::usage(format!(
                "invalid [tests] in farm.toml on `{}`: {e}",
                hub.branch
            ))
        })?
        .ok_or_else(|| {
            Error::usage(format!(
                "farm.toml on `{}` has no [tests]: farm does not know how to run the tests",
                hub.branch
            ))
            .hint("add a [tests] table with `command` and `format` (see farm tests --help)")
        })?;
    let progress = crate::run::config::progress_name(&settings)?;
    let plan = crate::run::config::sandbox_plan(&args.sandbox, &settings, None, false)?;
    let private = [
        hub.local.as_ref().map(|l| l.dir.clone()),
        Some(state.clone()),
    ];
    let private: Vec<_> = private.into_iter().flatten().collect();
    let (sandbox, said) = crate::run::sandbox::prepare(
        &plan,
        &suite.argv,
        &private,
        &hub.url,
        &crate::run::session::which,
    )?;
    // Said when it is not what was asked for; else for -v.
    if sandbox.is_none() && plan.mode != crate::run::sandbox::Mode::Off {
        ctx.out.note(&format!("farm tests: {said}"));
    } else {
        ctx.out.debug(&format!("farm tests: {said}"));
    }
    let tip = Tip::test(
        &hub,
        &suite,
        &state,
        progress.as_deref(),
        false,
        sandbox.as_ref(),
    )?;
    let applied = if args.tasks {
        let claimed = claimed(&*ctx.store_of(&spec, &settings)?)?;
        Some(refresh(&hub, &suite, &tip, args.group_by, &claimed)?)
    } else {
        None
    };
    let report = &tip.report;
    let counts = report.counts();
    let errors = report.error_lines();
    if args.json {
        let failures: Vec<Failure<'_>> = report
            .cases
            .iter()
            .filter(|c| c.outcome == Outcome::Failed)
            .map(|c| Failure {
                test: c.id(),
                group: c.group.as_deref(),
                name: &c.name,
                message: c.failure.as_deref().unwrap_or(""),
                file: c.file.as_deref(),
            })
            .collect();
        let mut doc = serde_json::json!({
            "branch": hub.branch,
            "commit": tip.commit,
            "command": suite.command_line(),
            "format": suite.format.name(),
            "exit": tip.exit,
            "secs": tip.secs,
            "counts": counts,
            "groups": report.by_group(),
            "errors": errors,
            "failures": failures,
        });
        if let Some(a) = &applied {
            let ids = |ids: &[TaskId]| {
                ids.iter()
                    .map(|i| i.as_str().to_owned())
                    .collect::<Vec<_>>()
            };
            doc["tasks"] = serde_json::json!({
                "added": ids(&a.added),
                "kept": ids(&a.kept),
                "closed": ids(&a.closed),
            });
        }
        let text = serde_json::to_string_pretty(&doc)
            .map_err(|e| Error::failure(format!("cannot write JSON: {e}")).caused_by(e))?;
        ctx.out.data(&format!("{text}\n"))?;
        return Ok(());
    }
    ctx.out.note(&format!(
        "tests on `{}` at {} (`{}`, {}): {} in {:.1}s",
        hub.branch,
        &tip.commit[..12.min(tip.commit.len())],
        suite.command_line(),
        suite.format.name(),
        summary(&counts),
        tip.secs
    ));
    let groups = report.by_group();
    let mut text = String::new();
    if groups.len() > 1 || groups.keys().any(|g| !g.is_empty()) {
        let rows: Vec<Vec<(String, Option<Style>)>> = groups
            .iter()
            .map(|(group, c)| {
                let failed = (c.failed.to_string(), (c.failed > 0).then_some(Style::Bad));
                vec![
                    (
                        if group.is_empty() {
                            "-".into()
                        } else {
                            group.clone()
                        },
                        None,
                    ),
                    (c.passed.to_string(), None),
                    failed,
                    (c.skipped.to_string(), None),
                    (c.total.to_string(), None),
                ]
            })
            .collect();
        let header = ["GROUP", "PASSED", "FAILED", "SKIPPED", "TOTAL"];
        text.push_str(&table(&header, &rows, ctx.out.color_stdout));
    }
    for line in &errors {
        text.push_str(line);
        text.push('\n');
    }
    text.push_str(&format!("{}\n", summary(&counts)));
    if let Some(a) = &applied {
        text.push_str(&format!(
            "tasks: {} added, {} closed, {} already on the board\n",
            a.added.len(),
            a.closed.len(),
            a.kept.len()
        ));
    }
    ctx.out.data(&text)?;
    Ok(())
}

/// The suite's report for the tip of the hub's branch.
pub struct Tip {
    pub commit: String,
    pub report: Report,
    /// The command's exit code and how long it ran (`None`, 0: the report
    /// was one kept for that tree).
    pub exit: Option<i32>,
    pub secs: f64,
}

impl Tip {
    /// Test the tip of `hub`'s branch in a scratch clone — or, when
    /// `kept_will_do`, take the results kept for its tree if there are
    /// some. Either way the results are kept (the gate's baseline).
    pub fn test(
        hub: &Hub,
        suite: &Suite,
        state: &Path,
        progress: Option<&str>,
        kept_will_do: bool,
        sandbox: Option<&crate::run::sandbox::Sandbox>,
    ) -> Result<Tip, Error> {
        let mut branch = HubBranch::new(hub, "the tests".into());
        let (dir, _keep) = branch.checkout(0)?;
        let commit = Repo::new(&dir)
            .run(["rev-parse", "HEAD"])
            .map_err(|e| Error::failure(e.to_string()).caused_by(e))?;
        let store = Store::new(state);
        let key = results::code_key(&dir, &commit, progress)
            .map_err(|e| Error::failure(format!("cannot read {commit}: {e}")).caused_by(e))?;
        if kept_will_do && let Some(kept) = store.get(&key) {
            return Ok(Tip {
                commit,
                report: kept.report,
                exit: None,
                secs: 0.0,
            });
        }
        let jail = sandbox.map(|s| s.confine(&dir, &[], &[]));
        let inside = jail.as_ref().map(|(prefix, env)| Inside { prefix, env });
        let ran = crate::suite::run::run_while(suite, &dir, &[], inside.as_ref(), &mut || true)?
            .ok_or_else(|| Error::failure("the test run was stopped"))?;
        store.put(&key, &Results::of(&commit, &ran.report));
        Ok(Tip {
            commit,
            report: ran.report,
            exit: ran.exit,
            secs: ran.took.as_secs_f64(),
        })
    }
}

/// The tasks claimed now (an agent is on them: not closed under it).
pub fn claimed(store: &dyn ClaimStore) -> Result<BTreeSet<TaskId>, Error> {
    Ok(store
        .list()?
        .into_iter()
        .filter_map(|l| TaskId::parse(&l.name).ok())
        .collect())
}

/// Bring the board on the hub's branch in line with the failures of `tip`
/// (see [`crate::suite::tasks::apply`]): one commit, pushed; none when
/// there is nothing to change.
pub fn refresh(
    hub: &Hub,
    suite: &Suite,
    tip: &Tip,
    by: GroupBy,
    claimed: &BTreeSet<TaskId>,
) -> Result<Applied, Error> {
    let command = suite.command_line();
    let seen = Seen {
        branch: &hub.branch,
        commit: &tip.commit,
        command: &command,
        run_one: suite.run_one.as_deref(),
    };
    let mut last = Applied::default();
    let mut branch = HubBranch::new(hub, "the test tasks".into());
    let tx = edit::transact(&mut branch, crate::commands::branch::ROUNDS, |dir| {
        let applied = tasks::apply(dir, &tip.report, by, &seen, claimed, SystemTime::now())
            .map_err(|e| Error::failure(format!("cannot edit the board: {e}")).caused_by(e))?;
        let message = format!(
            "farm: tasks from the tests at {}: {} added, {} closed",
            &tip.commit[..12.min(tip.commit.len())],
            applied.added.len(),
            applied.closed.len()
        );
        let changed = !applied.added.is_empty() || !applied.closed.is_empty();
        last = applied;
        Ok(if changed {
            Edit::Commit { message, value: () }
        } else {
            Edit::Gone
        })
    })?;
    match tx {
        Tx::Pushed(()) | Tx::Gone => Ok(last),
        Tx::Busy | Tx::Lost(()) => Err(Error::failure(format!(
            "could not edit the board: the hub's `{}` kept moving",
            hub.branch
        ))),
    }
}

/// `140 passed, 60 failed, 0 skipped, 200 total`.
fn summary(c: &Counts) -> String {
    format!(
        "{} passed, {} failed, {} skipped, {} total",
        c.passed, c.failed, c.skipped, c.total
    )
}
