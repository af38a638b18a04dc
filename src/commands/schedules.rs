//! `farm schedules`: every schedule on the hub's branch, when it fires
//! next, and its last occurrence's state.

use serde_json::json;

use crate::board::edit::Branch;
use crate::board::paths::Place;
use crate::commands::branch::HubBranch;
use crate::commands::schedule::shown;
use crate::config::Ctx;
use crate::error::Error;
use crate::git::hub::Hub;
use crate::output::{Style, table};
use crate::schedule::fire;

/// List the schedules: rule, zone, next firing, last occurrence and its state.
///
/// States of the last occurrence: pending, claimed, done, failed.
#[derive(Debug, clap::Args)]
#[command(after_help = "\
Examples:
  farm schedules
  farm schedules --json | jq -r '.schedules[] | select(.last.state == \"failed\") | .id'")]
pub struct Args {
    /// Print JSON: {schedules: [{id, rule, once, timezone, next, next_utc, catchup, overlap, last: {id, state}}], invalid: [{path, why}]}.
    #[arg(long)]
    json: bool,

    /// The branch whose schedules to list (default: the hub's HEAD branch).
    #[arg(long)]
    branch: Option<String>,
}

pub fn run(ctx: &Ctx, args: &Args) -> Result<(), Error> {
    let spec = ctx.hub_spec()?;
    let hub = Hub::open(&spec, args.branch.as_deref())?;
    let now = crate::schedule::now().map_err(Error::usage)?;
    let mut branch = HubBranch::new(&hub, "the schedules".into());
    let (dir, _keep) = branch.checkout(0)?;
    let (schedules, invalid) = fire::load(&dir);
    let claimed: Vec<String> = match ctx.store_for(&spec) {
        Ok(store) => store
            .list()
            .map(|l| l.into_iter().map(|c| c.name).collect())
            .unwrap_or_default(),
        Err(_) => Vec::new(),
    };
    let mut rows = Vec::new();
    let mut docs = Vec::new();
    for s in &schedules {
        let next = s.when.next_after(now);
        // The latest occurrence on the board: ids sort by their UTC stamp.
        let last = Place::ALL
            .iter()
            .flat_map(|place| {
                std::fs::read_dir(dir.join(place.dir()))
                    .into_iter()
                    .flatten()
                    .flatten()
                    .filter_map(move |e| {
                        let name = e.file_name().into_string().ok()?;
                        let id = name.strip_suffix(".md")?.to_owned();
                        s.owns(&id).then_some((id, *place))
                    })
            })
            .max_by(|a, b| a.0.cmp(&b.0));
        let last = last.map(|(id, place)| {
            let state = match place {
                Place::Pending if claimed.contains(&id) => "claimed",
                Place::Pending => "pending",
                Place::Done => "done",
                Place::Failed => "failed",
            };
            (id, state)
        });
        docs.push(json!({
            "id": s.id.as_str(),
            "rule": s.rule,
            "once": s.when.is_once(),
            "timezone": s.timezone,
            "next": next.map(|t| t.to_zoned(s.when.zone().clone()).to_string()),
            "next_utc": next.map(|t| t.to_string()),
            "catchup": s.catchup,
            "overlap": s.overlap,
            "last": last.as_ref().map(|(id, state)| json!({"id": id, "state": state})),
        }));
        let plain = |t: String| (t, None);
        rows.push(vec![
            plain(s.id.to_string()),
            plain(if s.when.is_once() {
                format!("at {}", s.rule)
            } else {
                s.rule.clone()
            }),
            plain(s.timezone.clone()),
            plain(next.map_or("never".into(), |t| shown(s, t))),
            match &last {
                Some((id, state)) => {
                    let style = match *state {
                        "failed" => Some(Style::Bad),
                        "done" => Some(Style::Good),
                        _ => None,
                    };
                    (format!("{id} {state}"), style)
                }
                None => plain("-".into()),
            },
        ]);
    }
    if args.json {
        let doc = json!({
            "schedules": docs,
            "invalid": invalid.iter().map(|i| json!({"path": i.path, "why": i.why})).collect::<Vec<_>>(),
        });
        ctx.out.data(&format!("{doc:#}\n"))?;
        return Ok(());
    }
    for i in &invalid {
        ctx.out.note(&format!(
            "warning: {} is not a valid schedule, skipped: {}",
            i.path, i.why
        ));
    }
    if rows.is_empty() {
        ctx.out.note(&format!(
            "no schedules on `{}` (add one: farm schedule add ID --cron EXPR -m TEXT)",
            hub.branch
        ));
        return Ok(());
    }
    let header = ["SCHEDULE", "RULE", "ZONE", "NEXT", "LAST"];
    ctx.out.data(&table(&header, &rows, ctx.out.color_stdout))?;
    Ok(())
}
