//! Task ids and agent names: the names that claims, the board, clones and
//! logs are keyed by.
//!
//! A task id becomes a file name (`current_tasks/<id>.txt`), an agent name a
//! directory name (its clone, its logs), so each must be a name and never a
//! path: `[A-Za-z0-9][A-Za-z0-9._-]{0,99}`, with no `..`. Validation happens
//! once, at the edge; everything past it holds a [`TaskId`] or a checked name.

use std::fmt;

/// The directory of claims: `current_tasks/` at the root of a hub on this
/// machine, and the same path on the git store's branch.
pub const CLAIMS_DIR: &str = "current_tasks";

/// The rule, as shown to users when an id is refused.
pub const TASK_ID_RULE: &str =
    "a letter or digit, then up to 99 letters, digits, `.`, `_` or `-`, with no `..`";

const MAX_LEN: usize = 100;

/// A validated task id.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TaskId(String);

/// Why a string is not a task id.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid task id `{shown}`: {why}; a task id is {TASK_ID_RULE}")]
pub struct InvalidTaskId {
    shown: String,
    why: &'static str,
}

/// Task ids the board reads as something else, so a task by that name
/// would never appear: `tasks/README.md` is the board's own readme, which
/// the board skips in `tasks/`, `tasks/done/` and `tasks/failed/`.
pub const RESERVED: [&str; 1] = ["README"];

/// Why a string is not an agent name. Agent names follow the task-id rule:
/// they too become file names (clones, logs) and are never paths.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid agent name `{shown}`: {why}; an agent name is {TASK_ID_RULE}")]
pub struct InvalidAgentName {
    shown: String,
    why: &'static str,
}

/// Check an agent name: the task-id rule.
pub fn check_agent_name(s: &str) -> Result<(), InvalidAgentName> {
    match why_not_a_name(s) {
        None => Ok(()),
        Some(why) => Err(InvalidAgentName {
            shown: shown(s),
            why,
        }),
    }
}

/// An agent name given on the command line (a clap value parser).
pub fn parse_agent_name(s: &str) -> Result<String, InvalidAgentName> {
    check_agent_name(s).map(|()| s.to_owned())
}

/// A task's label (`test`, `docs`): a name as a task id is; why not, when
/// it is not one.
pub fn parse_label(s: &str) -> Result<String, String> {
    match why_not_a_name(s) {
        None => Ok(s.to_owned()),
        Some(why) => Err(format!(
            "invalid label `{}`: {why}; a label is {TASK_ID_RULE}",
            shown(s)
        )),
    }
}

/// Why `s` breaks the name rule shared by task ids and agent names, if it does.
fn why_not_a_name(s: &str) -> Option<&'static str> {
    if s.is_empty() {
        Some("it is empty")
    } else if s.len() > MAX_LEN {
        Some("it is longer than 100 characters")
    } else if !s.as_bytes()[0].is_ascii_alphanumeric() {
        Some("it must start with a letter or digit")
    } else if !s
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
    {
        Some("it may only contain letters, digits, `.`, `_` and `-`")
    } else if s.contains("..") {
        Some("it contains `..`")
    } else {
        None
    }
}

impl TaskId {
    pub fn parse(s: &str) -> Result<TaskId, InvalidTaskId> {
        match why_not_a_name(s) {
            None => Ok(TaskId(s.to_owned())),
            Some(why) => Err(InvalidTaskId {
                shown: shown(s),
                why,
            }),
        }
    }

    /// Whether the board would not see a task by this id (see [`RESERVED`]).
    pub fn is_reserved(&self) -> bool {
        RESERVED.contains(&self.0.as_str())
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// The offending input, escaped and cut short so that an error stays one line.
pub(crate) fn shown(s: &str) -> String {
    let escaped: String = s.escape_debug().collect();
    if escaped.chars().count() > 60 {
        let cut: String = escaped.chars().take(57).collect();
        format!("{cut}...")
    } else {
        escaped
    }
}

impl fmt::Display for TaskId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::str::FromStr for TaskId {
    type Err = InvalidTaskId;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        TaskId::parse(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn accepts_names() {
        for ok in ["a", "parse-if", "A1.b_c-d", "0", &"x".repeat(100), "v1.2"] {
            assert_eq!(TaskId::parse(ok).unwrap().as_str(), ok);
        }
    }

    #[test]
    fn refuses_paths_and_oddities() {
        for bad in [
            "",
            ".hidden",
            "-x",
            "_x",
            "a/b",
            "../etc",
            "a..b",
            "a b",
            "a\nb",
            "é",
            "a\\b",
            &"x".repeat(101),
        ] {
            let err = TaskId::parse(bad).unwrap_err().to_string();
            assert!(err.contains("a task id is"), "{bad:?}: {err}");
        }
    }

    #[test]
    fn agent_names_follow_the_same_rule() {
        for ok in ["alice", "vm-2", "ci.7_x"] {
            assert!(check_agent_name(ok).is_ok(), "{ok}");
        }
        for bad in [
            "",
            "../../../ESCAPED",
            "a/b",
            "..",
            ".x",
            "a b",
            "a@b",
            &"x".repeat(101),
        ] {
            let err = check_agent_name(bad).unwrap_err().to_string();
            assert!(err.starts_with("invalid agent name"), "{bad:?}: {err}");
            assert!(err.contains("an agent name is"), "{bad:?}: {err}");
            assert!(TaskId::parse(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn error_stays_on_one_line() {
        let err = TaskId::parse("a\nb").unwrap_err().to_string();
        assert!(!err.contains('\n'), "{err}");
        assert!(err.contains(r"a\nb"), "{err}");
    }

    /// A reference implementation of the rule, written as differently as possible.
    fn reference(s: &str) -> bool {
        let mut chars = s.chars();
        let Some(first) = chars.next() else {
            return false;
        };
        first.is_ascii_alphanumeric()
            && s.chars().count() <= 100
            && s.chars()
                .all(|c| c.is_ascii_alphanumeric() || ".-_".contains(c))
            && !s.contains("..")
    }

    proptest! {
        #[test]
        fn agrees_with_reference(s in "\\PC{0,110}") {
            prop_assert_eq!(TaskId::parse(&s).is_ok(), reference(&s));
        }

        #[test]
        fn agrees_with_reference_on_near_misses(s in "[A-Za-z0-9._/ -]{0,105}") {
            prop_assert_eq!(TaskId::parse(&s).is_ok(), reference(&s));
        }

        #[test]
        fn valid_ids_are_plain_file_names(s in "[A-Za-z0-9][A-Za-z0-9._-]{0,99}") {
            if let Ok(id) = TaskId::parse(&s) {
                let p = std::path::Path::new(id.as_str());
                prop_assert_eq!(p.components().count(), 1);
                prop_assert!(matches!(p.components().next(), Some(std::path::Component::Normal(_))));
            } else {
                prop_assert!(s.contains(".."));
            }
        }
    }
}
