//! Notices: what a person asks of the fleet through the hub — `farm stop`
//! (drain: no new claims, running sessions finish) and `farm pause` (no new
//! claims until `farm resume`) — of every agent, of one agent by name, or of
//! the agents of one role.
//!
//! A notice is a small TOML file beside the claims, named after what it asks
//! and of whom: `.stop`, `.stop.agent.<name>`, `.stop.role.<role>`, and the
//! same with `pause`, each with `.txt`. A dot name is nobody's claim. Kept
//! where the claims are, every run on the hub reads the same notices — on
//! this machine (the fs store's directory) or on others (the git store's
//! branch) — and a farm killed and started again finds them still there.
//! The file name says what a notice asks and of whom; its text says who
//! asked and when. A stop stays (runs that began after it ignore it, by its
//! nonce); a pause stays until `farm resume` takes it away.

use std::time::SystemTime;

use crate::claims::record::{Nonce, timestamp};

/// What a notice asks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Drain: claim nothing new, finish what runs, end the loop.
    Stop,
    /// Claim nothing new until the notice is taken away.
    Pause,
}

impl Kind {
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Stop => "stop",
            Kind::Pause => "pause",
        }
    }
}

/// Whom a notice is for.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum Target {
    All,
    Agent(String),
    Role(String),
}

impl Target {
    /// Does it reach the agent `agent` (of role `role`, if any)?
    pub fn reaches(&self, agent: &str, role: Option<&str>) -> bool {
        match self {
            Target::All => true,
            Target::Agent(a) => a == agent,
            Target::Role(r) => Some(r.as_str()) == role,
        }
    }
}

impl std::fmt::Display for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Target::All => f.write_str("every agent"),
            Target::Agent(a) => write!(f, "agent `{a}`"),
            Target::Role(r) => write!(f, "role `{r}`"),
        }
    }
}

/// One notice, as posted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Notice {
    pub kind: Kind,
    pub target: Target,
    /// Who asked: `user@host (pid N)`.
    pub by: String,
    pub at: SystemTime,
    /// A stop that also kills running sessions (`farm stop --now`).
    pub now: bool,
    /// Tells notices apart without clocks: a run ignores the stops it saw
    /// when it began.
    pub nonce: Nonce,
}

impl Notice {
    pub fn new(kind: Kind, target: Target, by: &str, now: bool) -> Notice {
        // To the millisecond, as it is written: a notice reads back equal.
        let since = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap_or_default();
        let at = SystemTime::UNIX_EPOCH
            + std::time::Duration::from_millis(u64::try_from(since.as_millis()).unwrap_or(0));
        Notice {
            kind,
            target,
            by: by.to_owned(),
            at,
            now,
            nonce: Nonce::random(),
        }
    }

    /// The notice's name beside the claims, without `.txt`.
    pub fn name(&self) -> String {
        name_of(self.kind, &self.target)
    }

    pub fn to_toml(&self) -> String {
        #[derive(serde::Serialize)]
        struct Raw<'a> {
            by: &'a str,
            at: String,
            now: bool,
            nonce: &'a str,
        }
        let raw = Raw {
            by: &self.by,
            at: timestamp(self.at),
            now: self.now,
            nonce: self.nonce.as_str(),
        };
        let what = match (self.kind, &self.target) {
            (Kind::Stop, Target::All) => "every farm run drains when it sees this".to_owned(),
            (Kind::Stop, t) => format!("{t} drains when a farm run of it sees this"),
            (Kind::Pause, t) => format!("{t} claims nothing new until farm resume"),
        };
        format!(
            "# farm {}: {what}.\n{}",
            self.kind.as_str(),
            toml::to_string(&raw).unwrap_or_default()
        )
    }

    /// The notice named `name` (without `.txt`) holding `bytes`; `None` for
    /// a name that is no notice's or anything that is not a whole notice.
    pub fn parse(name: &str, bytes: &[u8]) -> Option<Notice> {
        #[derive(serde::Deserialize)]
        struct Raw {
            by: String,
            at: String,
            #[serde(default)]
            now: bool,
            nonce: String,
        }
        let (kind, target) = parse_name(name)?;
        let raw: Raw = toml::from_str(std::str::from_utf8(bytes).ok()?).ok()?;
        Some(Notice {
            kind,
            target,
            by: raw.by,
            at: humantime::parse_rfc3339_weak(&raw.at).ok()?,
            now: raw.now,
            nonce: Nonce::parse(&raw.nonce).ok()?,
        })
    }
}

/// The name (without `.txt`) of the notice of `kind` for `target`.
pub fn name_of(kind: Kind, target: &Target) -> String {
    match target {
        Target::All => format!(".{}", kind.as_str()),
        Target::Agent(a) => format!(".{}.agent.{a}", kind.as_str()),
        Target::Role(r) => format!(".{}.role.{r}", kind.as_str()),
    }
}

/// What the name (without `.txt`) of a notice says it asks, and of whom;
/// `None` for any other name (a claim's, farm's scratch).
pub fn parse_name(name: &str) -> Option<(Kind, Target)> {
    let rest = name.strip_prefix('.')?;
    let (kind, rest) = if let Some(rest) = rest.strip_prefix("stop") {
        (Kind::Stop, rest)
    } else {
        (Kind::Pause, rest.strip_prefix("pause")?)
    };
    if rest.is_empty() {
        return Some((kind, Target::All));
    }
    let named = |n: &str| {
        crate::names::check_agent_name(n)
            .is_ok()
            .then(|| n.to_owned())
    };
    if let Some(agent) = rest.strip_prefix(".agent.") {
        Some((kind, Target::Agent(named(agent)?)))
    } else {
        let role = rest.strip_prefix(".role.")?;
        Some((kind, Target::Role(named(role)?)))
    }
}

/// Is `name` (without `.txt`) a notice's?
pub fn is_notice(name: &str) -> bool {
    parse_name(name).is_some()
}

/// The pause that holds the agent `agent` (of role `role`), if one does:
/// of several, the oldest, which is the one that held it first.
pub fn pause_of<'n>(notices: &'n [Notice], agent: &str, role: Option<&str>) -> Option<&'n Notice> {
    notices
        .iter()
        .filter(|n| n.kind == Kind::Pause && n.target.reaches(agent, role))
        .min_by_key(|n| n.at)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_other_names_are_no_notices() {
        for (kind, target) in [
            (Kind::Stop, Target::All),
            (Kind::Pause, Target::All),
            (Kind::Stop, Target::Agent("box-1".into())),
            (Kind::Pause, Target::Role("docs".into())),
            (Kind::Pause, Target::Agent("a.b_c".into())),
        ] {
            let name = name_of(kind, &target);
            assert_eq!(parse_name(&name), Some((kind, target)), "{name}");
        }
        assert_eq!(name_of(Kind::Stop, &Target::All), ".stop");
        for other in [
            "stop",
            "parse-if",
            ".stopped",
            ".pause.x",
            ".pause.agent.",
            ".pause.agent.../x",
            ".stop.role.a/b",
            ".push",
            ".read-cache",
        ] {
            assert_eq!(parse_name(other), None, "{other}");
        }
    }

    #[test]
    fn a_notice_reads_back_as_written_and_the_old_stop_notice_still_reads() {
        let n = Notice::new(
            Kind::Pause,
            Target::Role("docs".into()),
            "al@box (pid 1)",
            false,
        );
        let read = Notice::parse(&n.name(), n.to_toml().as_bytes()).unwrap();
        assert_eq!(read.nonce, n.nonce);
        assert_eq!((read.kind, read.target, read.by), (n.kind, n.target, n.by));
        // What `farm stop` has always written.
        let old = "by = \"al@box (pid 1)\"\nat = \"2026-11-30T01:19:38.371Z\"\nnow = true\n\
                   nonce = \"1f0095e44d59d72255897e93038ef349\"\n";
        let stop = Notice::parse(".stop", old.as_bytes()).unwrap();
        assert!(stop.now && stop.kind == Kind::Stop && stop.target == Target::All);
        assert_eq!(Notice::parse(".stop", b"by = \"x\"\n"), None);
    }

    #[test]
    fn a_pause_reaches_everyone_its_agent_or_its_role() {
        let at = |s: u64| SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(s);
        let mut role = Notice::new(Kind::Pause, Target::Role("docs".into()), "x", false);
        role.at = at(20);
        let mut agent = Notice::new(Kind::Pause, Target::Agent("b-1".into()), "x", false);
        agent.at = at(10);
        let stop = Notice::new(Kind::Stop, Target::All, "x", false);
        let notices = [role.clone(), agent.clone(), stop];
        assert_eq!(pause_of(&notices, "a-1", None), None);
        assert_eq!(pause_of(&notices, "a-1", Some("docs")), Some(&role));
        assert_eq!(pause_of(&notices, "b-1", Some("docs")), Some(&agent));
        let mut all = Notice::new(Kind::Pause, Target::All, "x", false);
        all.at = at(30);
        assert_eq!(pause_of(&[all.clone()], "anyone", None), Some(&all));
    }
}
