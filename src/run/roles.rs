//! Roles: agents with a speciality. `[roles.<name>]` in farm.toml gives a
//! role its number of agents, its own prompt template, the tasks it may
//! claim (by label, `label:docs`, or by id glob, `id:docs-*`; none: every
//! task), and a standing task — work re-armed whenever the role has nothing
//! else to do ("improve one thing about the code's quality"). `farm run`
//! without `-j` starts the roles' agents, named `<name>-<role>-<n>`.
//!
//! A standing task is an ordinary task, `standing-<role>-<n>`, labelled
//! `standing` and the role's name; only that role's agents claim it. It is
//! re-armed while the rest of the board still has work (or with `--watch`),
//! so that a run still ends once the real work is done.

use std::collections::BTreeMap;

use serde::Deserialize;

use crate::board::Task;

/// `[roles.<name>]` in farm.toml, as written.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Raw {
    /// How many agents have this role (default 1).
    pub agents: Option<usize>,
    /// Its prompt template: a file of the repository (default: the usual).
    pub prompt: Option<String>,
    /// What it may claim: `label:<label>` or `id:<glob>` (default: all).
    pub tasks: Option<Vec<String>>,
    /// A task's text, re-armed whenever the role has nothing else to do.
    pub standing: Option<String>,
}

/// The label of every standing task.
pub const STANDING: &str = "standing";

/// A role, checked.
#[derive(Clone, Debug)]
pub struct Role {
    pub name: String,
    pub agents: usize,
    /// The path of its prompt template in the repository.
    pub prompt: Option<String>,
    labels: Vec<String>,
    ids: Vec<glob::Pattern>,
    pub standing: Option<String>,
}

impl Role {
    /// Whether an agent of this role may claim `task`: one of its labels or
    /// id globs matches (a role that names none takes any task), and a
    /// standing task is its own role's alone.
    pub fn allows(&self, task: &Task) -> bool {
        if task.labels.iter().any(|l| l == STANDING) {
            return task.labels.contains(&self.name);
        }
        (self.labels.is_empty() && self.ids.is_empty())
            || task.labels.iter().any(|l| self.labels.contains(l))
            || self.ids.iter().any(|p| p.matches(task.id.as_str()))
    }

    /// The id prefix of this role's standing tasks: `standing-<role>-`.
    pub fn standing_prefix(&self) -> String {
        format!("{STANDING}-{}-", self.name)
    }
}

/// The roles `raw` describes, in name order; why not, naming the role and
/// the key.
pub fn resolve(raw: &BTreeMap<String, Raw>) -> Result<Vec<Role>, String> {
    let mut roles = Vec::new();
    for (name, r) in raw {
        let bad = |why: String| format!("[roles.{name}]: {why}");
        crate::names::parse_label(name).map_err(|e| bad(format!("the role's name: {e}")))?;
        let agents = r.agents.unwrap_or(1);
        if agents == 0 || agents > 256 {
            return Err(bad(format!("`agents` = {agents}: from 1 to 256")));
        }
        let (mut labels, mut ids) = (Vec::new(), Vec::new());
        for filter in r.tasks.iter().flatten() {
            if let Some(label) = filter.strip_prefix("label:") {
                labels.push(
                    crate::names::parse_label(label).map_err(|e| bad(format!("`tasks`: {e}")))?,
                );
            } else if let Some(glob) = filter.strip_prefix("id:") {
                ids.push(
                    glob::Pattern::new(glob)
                        .map_err(|e| bad(format!("`tasks`: {filter:?} is not a glob: {e}")))?,
                );
            } else {
                return Err(bad(format!(
                    "`tasks`: {filter:?} is neither `label:<label>` nor `id:<glob>`"
                )));
            }
        }
        if r.standing.as_deref().is_some_and(|s| s.trim().is_empty()) {
            return Err(bad("`standing` is empty".into()));
        }
        if let Some(p) = &r.prompt
            && (p.is_empty() || p.starts_with('/') || p.split('/').any(|c| c == ".."))
        {
            return Err(bad(format!(
                "`prompt` = {p:?} must be a file of the repository (a relative path, no `..`)"
            )));
        }
        roles.push(Role {
            name: name.clone(),
            agents,
            prompt: r.prompt.clone(),
            labels,
            ids,
            standing: r.standing.clone(),
        });
    }
    Ok(roles)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::names::TaskId;

    fn roles(text: &str) -> Result<Vec<Role>, String> {
        #[derive(Deserialize)]
        struct File {
            roles: BTreeMap<String, Raw>,
        }
        let file: File = toml::from_str(text).unwrap();
        resolve(&file.roles)
    }

    fn task(id: &str, labels: &[&str]) -> Task {
        let mut t = crate::board::new_task(
            TaskId::parse(id).unwrap(),
            id,
            "",
            vec![],
            0,
            std::time::SystemTime::now(),
        );
        t.labels = labels.iter().map(|l| (*l).to_owned()).collect();
        t
    }

    #[test]
    fn a_role_claims_by_label_or_id_glob_and_standing_tasks_are_its_own() {
        let r = roles(
            "[roles.docs]\nagents = 2\ntasks = [\"label:docs\", \"id:readme-*\"]\nstanding = \"Improve the docs\"\n\
             [roles.default]\nagents = 3\n",
        )
        .unwrap();
        let (default, docs) = (&r[0], &r[1]);
        assert_eq!((docs.name.as_str(), docs.agents), ("docs", 2));
        assert!(docs.allows(&task("a", &["docs"])));
        assert!(docs.allows(&task("readme-fix", &[])));
        assert!(!docs.allows(&task("parser", &["code"])));
        assert!(default.allows(&task("parser", &["code"])));
        assert!(default.allows(&task("a", &["docs"])));
        let standing = task("standing-docs-1", &[STANDING, "docs"]);
        assert!(docs.allows(&standing));
        assert!(!default.allows(&standing));
        assert_eq!(docs.standing_prefix(), "standing-docs-");
    }

    #[test]
    fn a_bad_role_is_named_with_its_key() {
        for (text, says) in [
            ("[roles.q]\nagents = 0\n", "[roles.q]: `agents` = 0"),
            (
                "[roles.q]\ntasks = [\"docs\"]\n",
                "neither `label:<label>` nor `id:<glob>`",
            ),
            ("[roles.q]\ntasks = [\"id:[\"]\n", "is not a glob"),
            ("[roles.q]\ntasks = [\"label:a b\"]\n", "invalid label"),
            ("[roles.q]\nstanding = \" \"\n", "`standing` is empty"),
            (
                "[roles.q]\nprompt = \"../x.md\"\n",
                "a file of the repository",
            ),
            ("[roles.\"a/b\"]\n", "the role's name"),
        ] {
            let e = roles(text).unwrap_err();
            assert!(e.contains(says), "{text}: {e}");
        }
    }
}
