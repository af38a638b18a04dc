//! `farm messages`: the messages of `farm say` on the hub, with who has
//! read each.

use std::time::SystemTime;

use crate::age::Age;
use crate::claims::message;
use crate::config::Ctx;
use crate::error::Error;
use crate::output::{Style, table};

/// List the messages on the hub (`farm say`): id, whom, who said it, how
/// long ago, until when, the agents that took it (each takes a message
/// once, before its next claim), and the text's first line. An expired
/// message is delivered to nobody more; `farm say --withdraw ID` removes
/// one.
#[derive(Debug, clap::Args)]
#[command(after_help = "\
Examples:
  farm messages
  farm messages --json | jq -r '.messages[] | select(.read == []) | .id'")]
pub struct Args {
    /// Print JSON: {location, messages: [{id, to, name, by, at, until,
    /// expired, text, read: [{agent, host, at}]}]}.
    #[arg(long)]
    json: bool,
}

pub fn run(ctx: &Ctx, args: &Args) -> Result<(), Error> {
    let store = ctx.store()?;
    let posted = message::posted(&store.side_files(message::PREFIX, true)?);
    if args.json {
        let messages: Vec<_> = posted
            .iter()
            .filter_map(|p| super::say::json(&p.message, &p.receipts))
            .collect();
        return Ok(ctx.out.data(&format!(
            "{:#}\n",
            serde_json::json!({"location": store.location(), "messages": messages})
        ))?);
    }
    if posted.is_empty() {
        ctx.out
            .say(&format!("no messages on {}", store.location()))?;
        return Ok(());
    }
    let now = SystemTime::now();
    let ago = |t: SystemTime| Age(now.duration_since(t).unwrap_or_default()).to_string();
    let rows: Vec<Vec<(String, Option<Style>)>> = posted
        .iter()
        .map(|p| {
            let m = &p.message;
            let until = match m.until {
                None => ("until withdrawn".to_owned(), None),
                Some(_) if m.expired(now) => ("expired".to_owned(), Some(Style::Dim)),
                Some(u) => (
                    format!("{} more", Age(u.duration_since(now).unwrap_or_default())),
                    None,
                ),
            };
            let read = if p.receipts.is_empty() {
                ("nobody yet".to_owned(), Some(Style::Dim))
            } else {
                let who: Vec<String> = p
                    .receipts
                    .iter()
                    .map(|r| format!("{} ({} ago)", r.agent, ago(r.at)))
                    .collect();
                (who.join(", "), None)
            };
            let mut first = m.text.lines().next().unwrap_or("").to_owned();
            if first.chars().count() > 40 || m.text.trim_end().contains('\n') {
                first = first.chars().take(39).collect::<String>() + "…";
            }
            vec![
                (m.id.clone(), None),
                (to_word(&m.to), None),
                (m.by.clone(), None),
                (format!("{} ago", ago(m.at)), None),
                until,
                read,
                (first, None),
            ]
        })
        .collect();
    ctx.out.data(&table(
        &["ID", "TO", "BY", "SAID", "LASTS", "READ BY", "TEXT"],
        &rows,
        ctx.out.color_stdout,
    ))?;
    Ok(())
}

/// `all`, `box-2`, `role docs`: whom, in a cell.
fn to_word(t: &crate::claims::notice::Target) -> String {
    match message::target_words(t) {
        (_, Some(name)) if matches!(t, crate::claims::notice::Target::Role(_)) => {
            format!("role {name}")
        }
        (_, Some(name)) => name.to_owned(),
        (all, None) => all.to_owned(),
    }
}
