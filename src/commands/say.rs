//! `farm say`: a message to the fleet — one agent, a role's agents, or
//! every agent — through the hub, delivered once to each agent it reaches
//! in its next session's prompt; `farm say --withdraw ID` takes one back.

use std::io::Read;
use std::path::PathBuf;
use std::time::{Duration, SystemTime};

use super::fleet;
use super::recipients::{self, Known};
use crate::claims::message::{self, MAX_TEXT, Message};
use crate::claims::notice::Target;
use crate::config::Ctx;
use crate::error::Error;
use crate::settings::Settings;

/// Say something to the agents: the message waits on the hub, and each
/// agent it reaches takes it once — an idle agent before it next scans
/// the board, a busy one when its session ends — and its next session's
/// prompt holds it, with who said it and when. Agents on other machines
/// (a hub by URL) take it at their next look at the hub.
///
/// `--to` names an agent (as `farm status` lists it), a role of farm.toml,
/// or `all` (the default); `agent:NAME` or `role:NAME` where a name could
/// be either. A message stays until withdrawn, or for `--for`; it is at
/// most 16 KiB. `farm messages` lists them, with who has read each.
#[derive(Debug, clap::Args)]
#[command(after_help = "\
Examples:
  farm say 'the API changed: use v2 endpoints'     every agent
  farm say --to box-2 'leave the parser alone'     one agent
  farm say --to docs --for 2h 'freeze: no renames' a role's agents, for two hours
  farm say --to all -F notes.md                    the text of a file (- for stdin)
  farm messages                                    who has read what
  farm say --withdraw 3f9a21c0                     take a message back")]
pub struct Args {
    /// The message (`-`: read it from stdin).
    #[arg(value_name = "TEXT", required_unless_present_any = ["file", "withdraw"])]
    text: Option<String>,

    /// Whom: an agent's name, a role's, or `all`.
    #[arg(long, value_name = "AGENT|ROLE|all", default_value = "all")]
    to: String,

    /// Read the message from FILE (`-`: stdin).
    #[arg(short = 'F', long, value_name = "FILE", conflicts_with = "text")]
    file: Option<PathBuf>,

    /// Let it expire after DURATION (`30m`, `2h`, `1d`); without it, it
    /// stays until withdrawn.
    #[arg(long = "for", value_name = "DURATION", value_parser = crate::age::parse_duration)]
    lasts: Option<Duration>,

    /// Take back the message ID (as `farm messages` lists it), with its
    /// receipts: agents that have not taken it yet never will.
    #[arg(long, value_name = "ID", conflicts_with_all = ["text", "file", "lasts"])]
    withdraw: Option<String>,

    /// Say it to an agent nobody here knows of (one that has not run yet,
    /// or runs with a state dir of its own) or a role farm.toml lacks.
    #[arg(long)]
    force: bool,

    /// Print the message as JSON, as `farm messages --json` lists it.
    #[arg(long)]
    json: bool,
}

pub fn run(ctx: &Ctx, args: &Args) -> Result<(), Error> {
    if let Some(id) = &args.withdraw {
        return withdraw(ctx, id);
    }
    // Everything about the input is checked before the hub is touched.
    let text = read_text(args)?;
    let spec = ctx.hub_spec()?;
    let state = ctx.state_dir(&spec);
    let store = ctx.store_for(&spec)?;
    let roles = Settings::of_hub(&spec, None, &state)
        .ok()
        .map(|s| s.roles.keys().cloned().collect());
    let posted = message::posted(&store.side_files(message::PREFIX, true)?);
    let known = Known::gather(roles, &state, store.as_ref(), &posted)?;
    let to = recipients::resolve(&args.to, &known, args.force)?;
    let until = args.lasts.map(|d| SystemTime::now() + d);
    let m = Message::new(to.clone(), &fleet::asker(), &text, until);
    let created = store.create_side(
        &[(m.name(), m.to_toml().into_bytes())],
        &format!("message {} to {}, from {}", m.id, m.to, m.by),
    )?;
    if created.is_empty() {
        return Err(Error::failure(format!(
            "cannot post the message: the id `{}` is taken; say it again",
            m.id
        )));
    }
    if args.json {
        return Ok(ctx
            .out
            .data(&format!("{:#}\n", json(&m, &[]).unwrap_or_default()))?);
    }
    let lasts = match args.lasts {
        Some(d) => format!("for {}", crate::age::Age(d)),
        None => format!("until farm say --withdraw {}", m.id),
    };
    ctx.out.say(&format!(
        "said `{}` to {to} on {} ({} bytes, {lasts})",
        m.id,
        store.location(),
        text.len()
    ))?;
    if let Target::Agent(a) = &to
        && !known.agents.contains(a)
    {
        ctx.out.note(&format!(
            "note: no agent `{a}` has been seen here yet; it takes the message when it runs"
        ));
    }
    let busy = busy_agents(&to, store.as_ref());
    ctx.out.note(&format!(
        "each agent it reaches takes it before its next claim, and that session's prompt holds it{}",
        if busy.is_empty() {
            String::new()
        } else {
            format!(
                "; busy now, so for their next session: {}",
                busy.join(", ")
            )
        }
    ));
    Ok(())
}

/// The message's text: the argument, `-F FILE`, or stdin; refused when
/// empty, not UTF-8, or over [`MAX_TEXT`].
fn read_text(args: &Args) -> Result<String, Error> {
    let from_stdin = || {
        let mut bytes = Vec::new();
        std::io::stdin()
            .read_to_end(&mut bytes)
            .map_err(|e| Error::failure(format!("cannot read the message from stdin: {e}")))?;
        Ok::<_, Error>((bytes, "stdin".to_owned()))
    };
    let (bytes, from) = match (&args.text, &args.file) {
        (Some(t), _) if t == "-" => from_stdin()?,
        (Some(t), _) => (t.clone().into_bytes(), "the argument".to_owned()),
        (None, Some(f)) if f.as_os_str() == "-" => from_stdin()?,
        (None, Some(f)) => (
            std::fs::read(f).map_err(|e| {
                Error::usage(format!(
                    "cannot read the message from `{}`: {e}",
                    f.display()
                ))
            })?,
            format!("`{}`", f.display()),
        ),
        (None, None) => return Err(Error::usage("say what? give TEXT, or -F FILE")),
    };
    if bytes.len() > MAX_TEXT {
        return Err(Error::usage(format!(
            "the message from {from} is {} bytes; a message is at most {MAX_TEXT} (16 KiB)",
            bytes.len()
        ))
        .hint("put the long text in a file of the repository, or a task (farm task add), and say where it is"));
    }
    let text = String::from_utf8(bytes)
        .map_err(|_| Error::usage(format!("the message from {from} is not UTF-8 text")))?;
    if text.trim().is_empty() {
        return Err(Error::usage(format!("the message from {from} is empty")));
    }
    Ok(text)
}

/// The agents `to` reaches that hold a claim now (their sessions run).
fn busy_agents(to: &Target, store: &dyn crate::claims::ClaimStore) -> Vec<String> {
    let mut busy: Vec<String> = store
        .list()
        .unwrap_or_default()
        .into_iter()
        .filter_map(|l| l.record.ok())
        .filter(|c| match to {
            Target::Role(_) => false,
            t => t.reaches(&c.agent, None),
        })
        .map(|c| format!("{} (on `{}`)", c.agent, c.task))
        .collect();
    busy.sort();
    busy.dedup();
    busy
}

/// `farm say --withdraw ID`.
fn withdraw(ctx: &Ctx, id: &str) -> Result<(), Error> {
    if !message::is_id(id) {
        return Err(Error::usage(format!(
            "`{id}` is not a message id (eight hex digits, as farm messages lists them)"
        )));
    }
    let store = ctx.store()?;
    let files = store.side_files(message::PREFIX, true)?;
    let posted = message::posted(&files);
    let Some(p) = posted.iter().find(|p| p.message.id == id) else {
        return Err(
            Error::usage(format!("no message `{id}` on {}", store.location()))
                .hint("farm messages lists them"),
        );
    };
    // Its receipts go with it, the message first: an agent looking
    // between the two finds nothing to take.
    let mut names = vec![p.message.name()];
    names.extend(
        files
            .iter()
            .map(|(n, _)| n)
            .filter(|n| {
                matches!(message::parse_name(n), Some(message::Name::Receipt { id: r, .. }) if r == id)
            })
            .cloned(),
    );
    store.remove_side(&names, &format!("message {id} withdrawn"))?;
    let read: Vec<&str> = p.receipts.iter().map(|r| r.agent.as_str()).collect();
    ctx.out.say(&format!(
        "withdrew `{id}` (to {}, from {}){}",
        p.message.to,
        p.message.by,
        if read.is_empty() {
            ": nobody had taken it".to_owned()
        } else {
            format!("; taken already by {}", read.join(", "))
        }
    ))?;
    Ok(())
}

/// A message for `--json`, with its receipts.
pub fn json(m: &Message, receipts: &[message::Receipt]) -> Option<serde_json::Value> {
    use crate::claims::record::timestamp;
    let (to, name) = message::target_words(&m.to);
    Some(serde_json::json!({
        "id": m.id, "to": to, "name": name, "by": m.by, "at": timestamp(m.at),
        "until": m.until.map(timestamp),
        "expired": m.expired(SystemTime::now()),
        "text": m.text,
        "read": receipts.iter().map(|r| serde_json::json!({
            "agent": r.agent, "host": r.host, "at": timestamp(r.at),
        })).collect::<Vec<_>>(),
    }))
}
