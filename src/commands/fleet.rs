//! Whom `farm stop`, `farm pause` and `farm resume` speak to (`--agent`,
//! `--role`, or every agent), who is asking, and what the state dir's
//! journal knows of the agents running here — to say so when a name
//! reaches none of them.

use std::collections::BTreeSet;
use std::path::Path;

use serde_json::json;

use crate::claims::host::Here;
use crate::claims::notice::{Notice, Target};
use crate::claims::record::timestamp;
use crate::run::journal::{self, Event};

/// `--agent NAME` or `--role ROLE`; neither: every agent on the hub.
#[derive(Debug, Clone, clap::Args)]
pub struct Whom {
    /// Only the agent of this name (as `farm status` lists it: `--name`,
    /// with `-j N` NAME-1 … NAME-N), on whichever machine it runs.
    #[arg(
        long,
        value_name = "NAME",
        value_parser = crate::names::parse_agent_name,
        conflicts_with = "role",
        add = clap_complete::ArgValueCandidates::new(crate::commands::completions::agent_names)
    )]
    pub agent: Option<String>,

    /// Only the agents of this role (`[roles.ROLE]` in farm.toml).
    #[arg(long, value_name = "ROLE", value_parser = crate::names::parse_agent_name)]
    pub role: Option<String>,
}

impl Whom {
    pub fn target(&self) -> Target {
        match (&self.agent, &self.role) {
            (Some(a), _) => Target::Agent(a.clone()),
            (None, Some(r)) => Target::Role(r.clone()),
            (None, None) => Target::All,
        }
    }
}

/// The flags that name `target`, for a command to suggest.
pub fn flags(target: &Target) -> String {
    match target {
        Target::All => String::new(),
        Target::Agent(a) => format!(" --agent {a}"),
        Target::Role(r) => format!(" --role {r}"),
    }
}

/// Who is asking: `user@host (pid N)`.
pub fn asker() -> String {
    let user = std::env::var("USER")
        .or_else(|_| std::env::var("LOGNAME"))
        .unwrap_or_else(|_| "someone".to_owned());
    format!(
        "{user}@{} (pid {})",
        Here::current().host,
        std::process::id()
    )
}

/// The agents of the runs alive in the journal of `state`, and their roles.
#[derive(Debug, Default)]
pub struct Running {
    pub agents: BTreeSet<String>,
    pub roles: BTreeSet<String>,
}

impl Running {
    pub fn in_journal(state: &Path) -> Running {
        let Ok(text) = journal::read(state) else {
            return Running::default();
        };
        let entries = journal::entries(&text);
        let alive = journal::running(&entries);
        let mut running = Running::default();
        for e in entries.iter().filter(|e| alive.contains(&e.pid)) {
            if let Event::RunStart { agents, roles, .. } = &e.event {
                running.agents.extend(agents.iter().cloned());
                running.roles.extend(roles.values().cloned());
            }
        }
        running
    }

    /// Does `target` reach one of these agents?
    pub fn reached(&self, target: &Target) -> bool {
        match target {
            Target::All => !self.agents.is_empty(),
            Target::Agent(a) => self.agents.contains(a),
            Target::Role(r) => self.roles.contains(r),
        }
    }

    /// "no running agent here is named `x` (running here: a, b)", for a
    /// `target` that reaches none of them.
    pub fn none_reached(&self, target: &Target) -> String {
        let (what, names) = match target {
            Target::Role(r) => (
                format!("no running agent here has the role `{r}`"),
                &self.roles,
            ),
            Target::Agent(a) => (
                format!("no running agent here is named `{a}`"),
                &self.agents,
            ),
            Target::All => ("no farm run is running here".to_owned(), &self.agents),
        };
        if self.agents.is_empty() {
            format!("{what} (no farm run is alive in this state dir's journal)")
        } else if names.is_empty() {
            format!("{what} (no agent running here has a role)")
        } else {
            let kind = if matches!(target, Target::Role(_)) {
                "roles"
            } else {
                "agents"
            };
            let names: Vec<&str> = names.iter().map(String::as_str).collect();
            format!("{what} ({kind} running here: {})", names.join(", "))
        }
    }
}

/// A notice for `--json`.
pub fn notice_json(n: &Notice) -> serde_json::Value {
    let (target, name) = match &n.target {
        Target::All => ("all", None),
        Target::Agent(a) => ("agent", Some(a)),
        Target::Role(r) => ("role", Some(r)),
    };
    json!({
        "kind": n.kind.as_str(), "target": target, "name": name,
        "by": n.by, "at": timestamp(n.at), "now": n.now,
    })
}

/// "by al@box (pid 4), 3m ago": who asked for `n`, and when.
pub fn asked(n: &Notice) -> String {
    let ago = std::time::SystemTime::now()
        .duration_since(n.at)
        .unwrap_or_default();
    format!("by {}, {} ago", n.by, crate::age::Age(ago))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_name_that_reaches_nobody_is_said_with_the_names_that_run() {
        let none = Running::default();
        assert_eq!(
            none.none_reached(&Target::Agent("x".into())),
            "no running agent here is named `x` (no farm run is alive in this state dir's journal)"
        );
        let running = Running {
            agents: ["box-1".to_owned(), "box-2".to_owned()].into(),
            roles: BTreeSet::new(),
        };
        assert!(running.reached(&Target::Agent("box-2".into())));
        assert!(!running.reached(&Target::Role("docs".into())));
        assert_eq!(
            running.none_reached(&Target::Agent("x".into())),
            "no running agent here is named `x` (agents running here: box-1, box-2)"
        );
        assert_eq!(
            running.none_reached(&Target::Role("docs".into())),
            "no running agent here has the role `docs` (no agent running here has a role)"
        );
        let roles = Running {
            roles: ["code".to_owned()].into(),
            ..running
        };
        assert_eq!(
            roles.none_reached(&Target::Role("docs".into())),
            "no running agent here has the role `docs` (roles running here: code)"
        );
    }
}
