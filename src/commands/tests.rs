//! `farm tests`: run the project's test suite (`[tests]` in farm.toml) on
//! the hub's branch, in a scratch clone, and say what it adds up to.

use serde::Serialize;

use crate::board::edit::Branch;
use crate::commands::branch::HubBranch;
use crate::config::Ctx;
use crate::error::Error;
use crate::git::command::Repo;
use crate::git::hub::Hub;
use crate::output::{Style, table};
use crate::settings::Settings;
use crate::suite::Suite;
use crate::suite::report::{Counts, Outcome};

/// Run the test suite on the hub's branch and print the aggregate.
///
/// The suite is `[tests]` in farm.toml: `command` (words, no shell),
/// `format` (junit, libtest-json, tap or lines), `report` (the file the
/// command writes, relative to the clone; default: its standard output),
/// `timeout`. Prints passed / failed / skipped / total, per group, then one
/// `ERROR: <test>: <why>` line per failing test. Failing tests are a result,
/// not an error: the exit code is 0 once the report was read.
#[derive(Debug, clap::Args)]
#[command(after_help = "\
Examples:
  farm tests
  farm tests --json | jq '.counts'
  farm tests | grep '^ERROR:'

farm.toml:
  [tests]
  command = \"pytest -q --junitxml=report.xml\"
  format = \"junit\"
  report = \"report.xml\"
  timeout = \"10m\"")]
pub struct Args {
    /// Print JSON: {branch, commit, command, format, exit, secs, counts, groups, errors, failures}.
    #[arg(long)]
    json: bool,

    /// The branch to test (default: the hub's HEAD branch).
    #[arg(long)]
    branch: Option<String>,
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
    let settings = Settings::of_hub(&spec, Some(&hub.branch), &ctx.state_dir(&spec))?;
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
    let mut branch = HubBranch::new(&hub, "the tests".into());
    let (dir, _keep) = branch.checkout(0)?;
    let commit = Repo::new(&dir)
        .run(["rev-parse", "HEAD"])
        .map_err(|e| Error::failure(e.to_string()).caused_by(e))?;
    let ran = crate::suite::run::run(&suite, &dir)?;
    let report = &ran.report;
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
        let doc = serde_json::json!({
            "branch": hub.branch,
            "commit": commit,
            "command": suite.command_line(),
            "format": suite.format.name(),
            "exit": ran.exit,
            "secs": ran.took.as_secs_f64(),
            "counts": counts,
            "groups": report.by_group(),
            "errors": errors,
            "failures": failures,
        });
        let text = serde_json::to_string_pretty(&doc)
            .map_err(|e| Error::failure(format!("cannot write JSON: {e}")).caused_by(e))?;
        ctx.out.data(&format!("{text}\n"))?;
        return Ok(());
    }
    ctx.out.note(&format!(
        "tests on `{}` at {} (`{}`, {}): {} in {:.1}s",
        hub.branch,
        &commit[..12.min(commit.len())],
        suite.command_line(),
        suite.format.name(),
        summary(&counts),
        ran.took.as_secs_f64()
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
    ctx.out.data(&text)?;
    Ok(())
}

/// `140 passed, 60 failed, 0 skipped, 200 total`.
fn summary(c: &Counts) -> String {
    format!(
        "{} passed, {} failed, {} skipped, {} total",
        c.passed, c.failed, c.skipped, c.total
    )
}
