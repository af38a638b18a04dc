//! Whom `farm say --to` names: an agent, a role, or every agent — told
//! apart by what can be known here: the roles of `farm.toml`, the agents
//! this state dir's journal has seen run, the agents of the claims on the
//! hub, and those that took earlier messages (their receipts). A name that
//! is both an agent's and a role's, or an agent name two live agents on
//! two hosts share, is refused as ambiguous.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use crate::claims::ClaimStore;
use crate::claims::host::Here;
use crate::claims::liveness::State;
use crate::claims::message::Posted;
use crate::claims::notice::Target;
use crate::error::Error;
use crate::run::journal::{self, Event};

/// What is known here of the fleet.
#[derive(Debug, Default)]
pub struct Known {
    /// The roles of `farm.toml` on the hub's branch; `None` when it could
    /// not be read (nothing is then refused as an unknown role).
    pub roles: Option<BTreeSet<String>>,
    /// Agent names seen on the hub or in this state dir.
    pub agents: BTreeSet<String>,
    /// The hosts each live agent runs on, where known.
    pub live: BTreeMap<String, BTreeSet<String>>,
}

impl Known {
    /// Gather it: `roles` from the settings, the journal of `state`, the
    /// claims of `store` and the receipts of `posted`.
    pub fn gather(
        roles: Option<BTreeSet<String>>,
        state: &Path,
        store: &dyn ClaimStore,
        posted: &[Posted],
    ) -> Result<Known, Error> {
        let mut known = Known {
            roles,
            ..Known::default()
        };
        if let Ok(text) = journal::read(state) {
            let entries = journal::entries(&text);
            let alive = journal::running(&entries);
            for e in &entries {
                if let Event::RunStart { agents, host, .. } = &e.event {
                    known.agents.extend(agents.iter().cloned());
                    if alive.contains(&e.pid) {
                        let host = if host.is_empty() {
                            Here::current().host.clone()
                        } else {
                            host.to_string()
                        };
                        for a in agents {
                            known
                                .live
                                .entry(a.clone())
                                .or_default()
                                .insert(host.clone());
                        }
                    }
                }
            }
        }
        let judge = super::judge_now(None);
        for listed in store.list()? {
            if let Ok(claim) = &listed.record {
                known.agents.insert(claim.agent.clone());
                if listed.judge(&judge).state == State::Alive {
                    known
                        .live
                        .entry(claim.agent.clone())
                        .or_default()
                        .insert(claim.host.clone());
                }
            }
        }
        for p in posted {
            known
                .agents
                .extend(p.receipts.iter().map(|r| r.agent.clone()));
        }
        Ok(known)
    }
}

/// The target `to` names (`all`, `agent:NAME`, `role:NAME`, or a bare
/// name), checked against what is `known`; `force` accepts a name nobody
/// here knows (an agent that has not run yet, or runs elsewhere).
pub fn resolve(to: &str, known: &Known, force: bool) -> Result<Target, Error> {
    let checked = |name: &str| {
        crate::names::check_agent_name(name)
            .map(|()| name.to_owned())
            .map_err(|e| Error::usage(format!("cannot say to `{to}`: {e}")))
    };
    let is_role = |r: &str| known.roles.as_ref().is_some_and(|roles| roles.contains(r));
    let target = if to == "all" {
        Target::All
    } else if let Some(a) = to.strip_prefix("agent:") {
        Target::Agent(checked(a)?)
    } else if let Some(r) = to.strip_prefix("role:") {
        Target::Role(checked(r)?)
    } else {
        let name = checked(to)?;
        match (is_role(&name), known.agents.contains(&name)) {
            (true, true) => {
                return Err(Error::usage(format!(
                    "cannot say to `{name}`: it is both a role (farm.toml) and an agent's name"
                ))
                .hint(format!("say which: --to agent:{name} or --to role:{name}")));
            }
            (true, false) => Target::Role(name),
            (false, true) => Target::Agent(name),
            (false, false) if force => Target::Agent(name),
            (false, false) => {
                return Err(Error::usage(format!(
                    "cannot say to `{name}`: no agent or role of that name is known here ({})",
                    seen(known)
                ))
                .hint(format!(
                    "an agent that has not run yet, or runs with a state dir of its own: \
                     farm say --to agent:{name} …, or --force"
                )));
            }
        }
    };
    match &target {
        Target::Role(r)
            if !force && known.roles.as_ref().is_some_and(|roles| !roles.contains(r)) =>
        {
            let roles = known.roles.iter().flatten().cloned().collect::<Vec<_>>();
            Err(Error::usage(format!(
                "cannot say to role `{r}`: farm.toml has no such role ({})",
                if roles.is_empty() {
                    "it has none".to_owned()
                } else {
                    format!("its roles: {}", roles.join(", "))
                }
            ))
            .hint("farm.toml's [roles.NAME] tables name the roles"))
        }
        Target::Agent(a) if known.live.get(a).is_some_and(|h| h.len() > 1) => {
            let hosts: Vec<&str> = known.live[a].iter().map(String::as_str).collect();
            Err(Error::usage(format!(
                "cannot say to agent `{a}`: two live agents have that name, on {}; \
                 only one of them would get the message",
                hosts.join(" and ")
            ))
            .hint("give the runs names of their own (farm run --name), or say to all"))
        }
        _ => Ok(target),
    }
}

/// "agents seen: a, b; roles: docs", for an error.
fn seen(known: &Known) -> String {
    let agents: Vec<&str> = known.agents.iter().map(String::as_str).collect();
    let roles: Vec<&str> = known.roles.iter().flatten().map(String::as_str).collect();
    format!(
        "agents seen: {}; roles: {}",
        if agents.is_empty() {
            "none".to_owned()
        } else {
            agents.join(", ")
        },
        if roles.is_empty() {
            "none".to_owned()
        } else {
            roles.join(", ")
        }
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn known() -> Known {
        Known {
            roles: Some(["docs".to_owned(), "box-1".to_owned()].into()),
            agents: ["box-1".to_owned(), "box-2".to_owned(), "twin".to_owned()].into(),
            live: [(
                "twin".to_owned(),
                ["east".to_owned(), "west".to_owned()].into(),
            )]
            .into(),
        }
    }

    #[test]
    fn a_name_resolves_to_its_agent_or_role_and_all_to_everyone() {
        let k = known();
        assert_eq!(resolve("all", &k, false).unwrap(), Target::All);
        assert_eq!(
            resolve("box-2", &k, false).unwrap(),
            Target::Agent("box-2".into())
        );
        assert_eq!(
            resolve("docs", &k, false).unwrap(),
            Target::Role("docs".into())
        );
        assert_eq!(
            resolve("agent:box-1", &k, false).unwrap(),
            Target::Agent("box-1".into())
        );
        assert_eq!(
            resolve("nobody", &k, true).unwrap(),
            Target::Agent("nobody".into())
        );
    }

    #[test]
    fn unknown_ambiguous_and_invalid_names_are_refused() {
        let k = known();
        let err = |to: &str| resolve(to, &k, false).unwrap_err().message;
        assert!(err("box-1").contains("both a role"), "{}", err("box-1"));
        assert!(err("nobody").contains("no agent or role of that name"));
        assert!(err("nobody").contains("agents seen: box-1, box-2, twin"));
        assert!(err("role:ops").contains("farm.toml has no such role"));
        assert!(err("twin").contains("two live agents have that name, on east and west"));
        assert!(err("a/b").contains("cannot say to `a/b`"));
        assert!(err("agent:").contains("cannot say to"));
    }
}
