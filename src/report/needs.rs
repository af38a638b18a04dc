//! What needs you in the morning: the tasks that failed for good and those
//! stuck (blocked on a failed task, or held by a holder silent past the
//! staleness threshold), each with its reason and the command to look
//! further; the rescued work on the hub with the command to look at it; the
//! tasks left; what the night cost. `farm report` puts it at the top of its
//! page and `farm status` at its end; `commands/needs.rs` gathers it from
//! the board, the claims and the hub's branches.

use std::fmt::Write as _;

use serde::Serialize;

/// One task that needs a person: why, and the command to look further.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Need {
    pub task: String,
    pub why: String,
    pub look: String,
}

/// Work kept on a rescue branch of the hub.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Rescued {
    pub branch: String,
    /// Its task, when the branch is a task's (not an orphan of a clone).
    pub task: Option<String>,
    /// Why it was kept, when the journal says.
    pub why: Option<String>,
    /// The command that shows its commits.
    pub look: String,
}

/// The tasks left on the board.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Left {
    pub ready: usize,
    pub claimed: usize,
    pub blocked: usize,
}

impl Left {
    pub fn total(&self) -> usize {
        self.ready + self.claimed + self.blocked
    }
}

/// Everything that needs a person, as one value for both renderings.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct NeedsYou {
    /// Tasks waiting for the answer to a question a session asked.
    pub asked: Vec<Need>,
    /// Tasks whose change waits for review (`farm approve`).
    pub review: Vec<Need>,
    pub failed: Vec<Need>,
    pub stuck: Vec<Need>,
    pub rescued: Vec<Rescued>,
    /// `None` when the board could not be read (`board_error` says why).
    pub left: Option<Left>,
    pub board_error: Option<String>,
    /// What the sessions cost so far, where the CLI said.
    pub cost_usd: Option<f64>,
}

/// At most this many rescued branches are listed one by one; the rest are
/// counted (a hub of many nights may hold hundreds).
const RESCUES_SHOWN: usize = 20;

impl NeedsYou {
    /// Nothing a person must act on.
    pub fn nothing(&self) -> bool {
        self.asked.is_empty()
            && self.review.is_empty()
            && self.failed.is_empty()
            && self.stuck.is_empty()
            && self.rescued.is_empty()
    }

    /// The tasks left, in words: "3 tasks left: 1 ready, 0 claimed, 2 blocked".
    pub fn left_line(&self) -> String {
        match (&self.left, &self.board_error) {
            (Some(l), _) => format!(
                "{} left: {} ready, {} claimed, {} blocked",
                crate::output::count(l.total(), "task", "tasks"),
                l.ready,
                l.claimed,
                l.blocked
            ),
            (None, Some(e)) => format!("tasks left unknown: {e}"),
            (None, None) => "tasks left unknown".to_owned(),
        }
    }

    fn cost_line(&self) -> String {
        match self.cost_usd {
            Some(c) => format!("${c:.2} so far, as the agent CLIs said"),
            None => "not reported by the agent CLI".to_owned(),
        }
    }

    fn rescue_why(r: &Rescued) -> String {
        match (&r.task, &r.why) {
            (Some(t), Some(w)) => format!("`{t}`: {w}"),
            (Some(t), None) => format!("`{t}`"),
            (None, Some(w)) => w.clone(),
            (None, None) => "left in a clone by an earlier run".to_owned(),
        }
    }

    /// The section as plain lines (for `farm status`): a heading, then one
    /// line per item (`KIND  what: why  (command)`), unwrapped.
    pub fn lines(&self) -> Vec<String> {
        let mut out = vec![if self.nothing() {
            "NEEDS YOU: nothing failed, nothing stuck, nothing rescued".to_owned()
        } else {
            "NEEDS YOU".to_owned()
        }];
        for n in &self.asked {
            out.push(format!("  asks     `{}`: {}  ({})", n.task, n.why, n.look));
        }
        for n in &self.review {
            out.push(format!("  review   `{}`: {}  ({})", n.task, n.why, n.look));
        }
        for n in &self.failed {
            out.push(format!("  failed   `{}`: {}  ({})", n.task, n.why, n.look));
        }
        for n in &self.stuck {
            out.push(format!("  stuck    `{}`: {}  ({})", n.task, n.why, n.look));
        }
        for r in self.rescued.iter().take(RESCUES_SHOWN) {
            out.push(format!(
                "  rescued  `{}`: {}  ({})",
                r.branch,
                NeedsYou::rescue_why(r),
                r.look
            ));
        }
        if self.rescued.len() > RESCUES_SHOWN {
            out.push(format!(
                "  rescued  … and {} more (git branch -r --list '*farm/rescue/*')",
                self.rescued.len() - RESCUES_SHOWN
            ));
        }
        out.push(format!("  left     {}", self.left_line()));
        out.push(format!("  cost     {}", self.cost_line()));
        out
    }

    /// The section as HTML (for the report's page): `#needs-you`, an item
    /// per task or branch with its kind as a class (`n-failed`: the page's
    /// `failed` paints a bar), the commands as code.
    pub fn html(&self) -> String {
        let esc = super::html::esc;
        let mut h = String::from("<section id=\"needs-you\"><h2>Needs you</h2>\n");
        if self.nothing() {
            h.push_str(
                "<p class=\"none\">Nothing failed, nothing is stuck, nothing was rescued.</p>\n",
            );
        } else {
            h.push_str("<ul class=\"needs\">");
            let mut item = |kind: &str, what: &str, why: &str, look: &str| {
                let _ = write!(
                    h,
                    "<li class=\"need n-{kind}\"><b>{kind}</b> <code>{}</code>: {} \
                     <span class=\"look\"><code>{}</code></span></li>",
                    esc(what),
                    esc(why),
                    esc(look)
                );
            };
            for n in &self.asked {
                item("asks", &n.task, &n.why, &n.look);
            }
            for n in &self.review {
                item("review", &n.task, &n.why, &n.look);
            }
            for n in &self.failed {
                item("failed", &n.task, &n.why, &n.look);
            }
            for n in &self.stuck {
                item("stuck", &n.task, &n.why, &n.look);
            }
            for r in self.rescued.iter().take(RESCUES_SHOWN) {
                item("rescued", &r.branch, &NeedsYou::rescue_why(r), &r.look);
            }
            if self.rescued.len() > RESCUES_SHOWN {
                let _ = write!(
                    h,
                    "<li class=\"need n-rescued\">… and {} more rescue branches</li>",
                    self.rescued.len() - RESCUES_SHOWN
                );
            }
            h.push_str("</ul>\n");
        }
        let _ = writeln!(
            h,
            "<p id=\"needs-left\">{}; cost: {}.</p></section>",
            esc(&self.left_line()),
            esc(&self.cost_line())
        );
        h
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn needs() -> NeedsYou {
        NeedsYou {
            asked: vec![Need {
                task: "q".into(),
                why: "Tabs or spaces?".into(),
                look: "farm answer q TEXT".into(),
            }],
            review: vec![Need {
                task: "r".into(),
                why: "its change waits on `farm/review/r/n1`".into(),
                look: "farm approve r / farm reject r -m WHY".into(),
            }],
            failed: vec![Need {
                task: "doomed".into(),
                why: "failed with exit code 1".into(),
                look: "farm task show doomed".into(),
            }],
            stuck: vec![Need {
                task: "after<doomed>".into(),
                why: "waits for `doomed`, which failed".into(),
                look: "farm task show after-doomed".into(),
            }],
            rescued: vec![Rescued {
                branch: "farm/rescue/r1/ab12".into(),
                task: Some("r1".into()),
                why: Some("the run was stopped".into()),
                look: "git -C /hub log -p main..farm/rescue/r1/ab12".into(),
            }],
            left: Some(Left {
                ready: 1,
                claimed: 0,
                blocked: 2,
            }),
            board_error: None,
            cost_usd: Some(1.2),
        }
    }

    #[test]
    fn each_item_says_why_and_how_to_look() {
        let lines = needs().lines();
        assert_eq!(
            lines,
            [
                "NEEDS YOU",
                "  asks     `q`: Tabs or spaces?  (farm answer q TEXT)",
                "  review   `r`: its change waits on `farm/review/r/n1`  (farm approve r / farm reject r -m WHY)",
                "  failed   `doomed`: failed with exit code 1  (farm task show doomed)",
                "  stuck    `after<doomed>`: waits for `doomed`, which failed  (farm task show after-doomed)",
                "  rescued  `farm/rescue/r1/ab12`: `r1`: the run was stopped  (git -C /hub log -p main..farm/rescue/r1/ab12)",
                "  left     3 tasks left: 1 ready, 0 claimed, 2 blocked",
                "  cost     $1.20 so far, as the agent CLIs said",
            ]
        );
        let h = needs().html();
        assert!(h.starts_with("<section id=\"needs-you\">"), "{h}");
        assert!(h.contains("<code>after&lt;doomed&gt;</code>"), "{h}");
        assert_eq!(h.matches("<li class=\"need ").count(), 5, "{h}");
        assert!(h.contains("3 tasks left: 1 ready, 0 claimed, 2 blocked; cost: $1.20"));
    }

    #[test]
    fn nothing_is_said_as_such() {
        let none = NeedsYou {
            left: Some(Left {
                ready: 0,
                claimed: 0,
                blocked: 0,
            }),
            ..NeedsYou::default()
        };
        assert!(none.nothing());
        assert_eq!(
            none.lines()[0],
            "NEEDS YOU: nothing failed, nothing stuck, nothing rescued"
        );
        assert!(none.html().contains("Nothing failed"));
        assert!(none.lines()[1].contains("0 tasks left"));
    }
}
