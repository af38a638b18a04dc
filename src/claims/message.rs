//! Messages: words from a person to the fleet (`farm say`) — to one agent,
//! the agents of one role, or every agent — durable on the hub and
//! delivered exactly once to each agent they reach.
//!
//! A message is a small TOML file beside the claims, `.msg.<id>.txt` (who
//! said it, when, to whom, until when, the text); each agent that takes it
//! leaves a receipt beside it, `.msg.<id>.read.<agent>.txt` (on which host,
//! when). A receipt is created only where none exists — `link(2)` on the fs
//! store, a compare-and-swap push on the git store — so of any number of
//! processes taking one message for one agent name, exactly one does: that
//! is what makes delivery once per addressee, on one machine or many.
//! Withdrawing a message removes it with its receipts; an expired one is
//! delivered to nobody and listed as expired until withdrawn. Dot names
//! are nobody's claim, and neither store lists them as claims.

use std::collections::BTreeMap;
use std::time::SystemTime;

use crate::claims::notice::Target;
use crate::claims::record::{Nonce, timestamp};

/// The longest text a message may have, in bytes.
pub const MAX_TEXT: usize = 16 * 1024;

/// The prefix of every message's (and receipt's) name beside the claims.
pub const PREFIX: &str = ".msg.";

/// One message, as posted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message {
    /// Eight hex digits, random: `farm say --withdraw ID` names it.
    pub id: String,
    pub to: Target,
    /// Who said it: `user@host (pid N)`.
    pub by: String,
    pub at: SystemTime,
    /// When it expires (`farm say --for`); `None`: until withdrawn.
    pub until: Option<SystemTime>,
    pub text: String,
}

/// That the agent `agent` (on `host`) took a message, and when.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Receipt {
    pub agent: String,
    pub host: String,
    pub at: SystemTime,
}

/// A message with the receipts of the agents that took it.
#[derive(Debug, Clone)]
pub struct Posted {
    pub message: Message,
    pub receipts: Vec<Receipt>,
}

/// A time to the millisecond, as it is written: it reads back equal.
pub fn to_millis(t: SystemTime) -> SystemTime {
    let since = t.duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default();
    SystemTime::UNIX_EPOCH
        + std::time::Duration::from_millis(u64::try_from(since.as_millis()).unwrap_or(0))
}

impl Message {
    /// A new message, with a fresh id.
    pub fn new(to: Target, by: &str, text: &str, until: Option<SystemTime>) -> Message {
        Message {
            id: Nonce::random().short().to_owned(),
            to,
            by: by.to_owned(),
            at: to_millis(SystemTime::now()),
            until: until.map(to_millis),
            text: text.to_owned(),
        }
    }

    /// Its name beside the claims, without `.txt`.
    pub fn name(&self) -> String {
        format!("{PREFIX}{}", self.id)
    }

    /// Has it expired at `now`?
    pub fn expired(&self, now: SystemTime) -> bool {
        self.until.is_some_and(|u| now >= u)
    }

    pub fn to_toml(&self) -> String {
        #[derive(serde::Serialize)]
        struct Raw<'a> {
            to: &'a str,
            #[serde(skip_serializing_if = "Option::is_none")]
            name: Option<&'a str>,
            by: &'a str,
            at: String,
            #[serde(skip_serializing_if = "Option::is_none")]
            until: Option<String>,
            text: &'a str,
        }
        let (to, name) = target_words(&self.to);
        let raw = Raw {
            to,
            name,
            by: &self.by,
            at: timestamp(self.at),
            until: self.until.map(timestamp),
            text: &self.text,
        };
        format!(
            "# farm say: a message to {}, delivered once to each agent it reaches.\n{}",
            self.to,
            toml::to_string(&raw).unwrap_or_default()
        )
    }

    /// The message `id` holding `bytes`; `None` for anything that is not a
    /// whole message.
    pub fn parse(id: &str, bytes: &[u8]) -> Option<Message> {
        #[derive(serde::Deserialize)]
        struct Raw {
            to: String,
            name: Option<String>,
            by: String,
            at: String,
            until: Option<String>,
            text: String,
        }
        let raw: Raw = toml::from_str(std::str::from_utf8(bytes).ok()?).ok()?;
        let named = |n: Option<String>| n.filter(|n| crate::names::check_agent_name(n).is_ok());
        let to = match raw.to.as_str() {
            "all" => Target::All,
            "agent" => Target::Agent(named(raw.name)?),
            "role" => Target::Role(named(raw.name)?),
            _ => return None,
        };
        let time = |s: &str| humantime::parse_rfc3339_weak(s).ok();
        Some(Message {
            id: id.to_owned(),
            to,
            by: raw.by,
            at: time(&raw.at)?,
            until: match raw.until {
                Some(u) => Some(time(&u)?),
                None => None,
            },
            text: raw.text,
        })
    }
}

/// `("agent", Some(name))`, `("role", Some(role))` or `("all", None)`.
pub fn target_words(t: &Target) -> (&'static str, Option<&str>) {
    match t {
        Target::All => ("all", None),
        Target::Agent(a) => ("agent", Some(a)),
        Target::Role(r) => ("role", Some(r)),
    }
}

impl Receipt {
    pub fn to_toml(&self) -> String {
        format!(
            "# farm: this agent took the message beside this file.\n{}",
            toml::to_string(&serde_json::json!({
                "agent": self.agent, "host": self.host, "at": timestamp(self.at),
            }))
            .unwrap_or_default()
        )
    }

    pub fn parse(agent: &str, bytes: &[u8]) -> Option<Receipt> {
        #[derive(serde::Deserialize)]
        struct Raw {
            host: String,
            at: String,
        }
        let raw: Raw = toml::from_str(std::str::from_utf8(bytes).ok()?).ok()?;
        Some(Receipt {
            agent: agent.to_owned(),
            host: raw.host,
            at: humantime::parse_rfc3339_weak(&raw.at).ok()?,
        })
    }
}

/// The name (without `.txt`) of the receipt of message `id` by `agent`.
pub fn receipt_name(id: &str, agent: &str) -> String {
    format!("{PREFIX}{id}.read.{agent}")
}

/// What a side file's name says it is.
#[derive(Debug, PartialEq, Eq)]
pub enum Name<'a> {
    Message(&'a str),
    Receipt { id: &'a str, agent: &'a str },
}

/// Is `id` a message's id: eight lowercase hex digits?
pub fn is_id(id: &str) -> bool {
    id.len() == 8 && id.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// What the name (without `.txt`) of a file beside the claims is, if it is
/// a message's or a receipt's.
pub fn parse_name(name: &str) -> Option<Name<'_>> {
    let rest = name.strip_prefix(PREFIX)?;
    let (id, rest) = rest.split_at_checked(8)?;
    if !is_id(id) {
        return None;
    }
    if rest.is_empty() {
        return Some(Name::Message(id));
    }
    let agent = rest.strip_prefix(".read.")?;
    crate::names::check_agent_name(agent).ok()?;
    Some(Name::Receipt { id, agent })
}

/// The messages among `files` (side files by name), each with its
/// receipts, oldest first. A receipt whose message is gone is left out.
pub fn posted(files: &[(String, Vec<u8>)]) -> Vec<Posted> {
    let mut messages: BTreeMap<&str, Posted> = BTreeMap::new();
    let mut receipts = Vec::new();
    for (name, bytes) in files {
        match parse_name(name) {
            Some(Name::Message(id)) => {
                if let Some(message) = Message::parse(id, bytes) {
                    messages.insert(
                        id,
                        Posted {
                            message,
                            receipts: Vec::new(),
                        },
                    );
                }
            }
            Some(Name::Receipt { id, agent }) => {
                if let Some(r) = Receipt::parse(agent, bytes) {
                    receipts.push((id, r));
                }
            }
            None => {}
        }
    }
    for (id, r) in receipts {
        if let Some(p) = messages.get_mut(id) {
            p.receipts.push(r);
        }
    }
    let mut out: Vec<Posted> = messages.into_values().collect();
    out.sort_by(|a, b| (a.message.at, &a.message.id).cmp(&(b.message.at, &b.message.id)));
    for p in &mut out {
        p.receipts.sort_by_key(|r| r.at);
    }
    out
}

/// The messages of `posted` the agent `agent` (of role `role`) has still to
/// take at `now`: they reach it, have not expired, and bear no receipt of
/// its name. Oldest first.
pub fn unread<'p>(
    posted: &'p [Posted],
    agent: &str,
    role: Option<&str>,
    now: SystemTime,
) -> Vec<&'p Message> {
    posted
        .iter()
        .filter(|p| {
            p.message.to.reaches(agent, role)
                && !p.message.expired(now)
                && !p.receipts.iter().any(|r| r.agent == agent)
        })
        .map(|p| &p.message)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn a_message_and_a_receipt_read_back_as_written() {
        let m = Message::new(
            Target::Role("docs".into()),
            "al@box (pid 1)",
            "stop touching the parser\n\"quoted\" ''' text",
            Some(SystemTime::now() + Duration::from_secs(7200)),
        );
        assert!(is_id(&m.id), "{}", m.id);
        let read = Message::parse(&m.id, m.to_toml().as_bytes()).unwrap();
        assert_eq!(read, m);
        let r = Receipt {
            agent: "box-1".into(),
            host: "box".into(),
            at: to_millis(SystemTime::now()),
        };
        assert_eq!(Receipt::parse("box-1", r.to_toml().as_bytes()), Some(r));
        assert_eq!(Message::parse("0badc0de", b"to = \"nobody\"\n"), None);
    }

    #[test]
    fn names_say_message_or_receipt_and_nothing_else() {
        assert_eq!(parse_name(".msg.0a1b2c3d"), Some(Name::Message("0a1b2c3d")));
        assert_eq!(
            parse_name(".msg.0a1b2c3d.read.box-1.x"),
            Some(Name::Receipt {
                id: "0a1b2c3d",
                agent: "box-1.x"
            })
        );
        assert_eq!(receipt_name("0a1b2c3d", "b"), ".msg.0a1b2c3d.read.b");
        for other in [
            ".msg.0A1B2C3D",
            ".msg.0a1b2c3",
            ".msg.0a1b2c3d.read.",
            ".msg.0a1b2c3d.read.a/b",
            ".msg.0a1b2c3d.x",
            ".stop",
            "parse-if",
        ] {
            assert_eq!(parse_name(other), None, "{other}");
        }
    }

    #[test]
    fn unread_is_what_reaches_the_agent_unexpired_and_without_its_receipt() {
        let now = SystemTime::now();
        let msg = |to: Target, until: Option<SystemTime>| Message::new(to, "x", "hi", until);
        let to_a = msg(Target::Agent("a".into()), None);
        let to_docs = msg(Target::Role("docs".into()), None);
        let to_all = msg(Target::All, None);
        let expired = msg(Target::All, Some(now - Duration::from_secs(1)));
        let files: Vec<(String, Vec<u8>)> = [&to_a, &to_docs, &to_all, &expired]
            .iter()
            .map(|m| (m.name(), m.to_toml().into_bytes()))
            .chain([(
                receipt_name(&to_all.id, "b"),
                Receipt {
                    agent: "b".into(),
                    host: "h".into(),
                    at: now,
                }
                .to_toml()
                .into_bytes(),
            )])
            .collect();
        let posted = posted(&files);
        assert_eq!(posted.len(), 4);
        let ids = |v: Vec<&Message>| {
            let mut v: Vec<String> = v.into_iter().map(|m| m.id.clone()).collect();
            v.sort();
            v
        };
        let mut want = vec![to_a.id.clone(), to_all.id.clone()];
        want.sort();
        assert_eq!(ids(unread(&posted, "a", None, now)), want);
        assert_eq!(
            ids(unread(&posted, "b", Some("docs"), now)),
            vec![to_docs.id.clone()]
        );
        assert!(unread(&posted, "c", None, now + Duration::from_secs(1)).len() == 1);
    }
}
