//! What needs you ([`crate::report::needs`]), gathered from the board at
//! the hub's branch, the claims, the hub's rescue branches and the journal:
//! for `farm report` and `farm status`.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::board::{self, Status};
use crate::claims::Listed;
use crate::claims::liveness::State;
use crate::git::command::Repo;
use crate::git::hub::Hub;
use crate::report::needs::{Left, Need, NeedsYou, Rescued};
use crate::run::journal::{Entry, Event};

/// Why each rescue branch was made, as the journal's `rescue` lines say:
/// branch → (task, why).
pub fn rescues_of(entries: &[&Entry<'_>]) -> BTreeMap<String, (Option<String>, String)> {
    entries
        .iter()
        .filter_map(|e| match &e.event {
            Event::Rescue { task, branch, why } => Some((
                branch.to_string(),
                (task.as_ref().map(ToString::to_string), why.to_string()),
            )),
            _ => None,
        })
        .collect()
}

/// What needs a person on `hub` (`Err`: it could not be opened, why),
/// whose board at its branch the caller read (`board`, its claimed tasks
/// the claims `listed`; `Err`: why it could not), with the claims judged
/// stale past `stale_after`, the journal's `rescues` and the cost so far.
pub fn gather(
    hub: Result<&Hub, String>,
    board: Result<&board::Snapshot, String>,
    listed: &[Listed],
    stale_after: Duration,
    rescues: &BTreeMap<String, (Option<String>, String)>,
    cost_usd: Option<f64>,
) -> NeedsYou {
    let mut needs = NeedsYou {
        cost_usd,
        ..NeedsYou::default()
    };
    let hub = match hub {
        Ok(hub) => hub,
        Err(why) => {
            needs.board_error = Some(why);
            return needs;
        }
    };
    match board {
        Ok(snapshot) => {
            let failed = super::tasks::failed(hub, snapshot);
            let counts = board::counts(snapshot);
            needs.left = Some(Left {
                ready: counts.ready,
                claimed: counts.claimed,
                blocked: counts.blocked,
            });
            for (id, status) in board::statuses(snapshot) {
                let look = format!("farm task show {id}");
                match status {
                    Status::Failed => needs.failed.push(Need {
                        task: id.to_string(),
                        why: failed
                            .get(&id)
                            .and_then(|f| f.last.clone())
                            .unwrap_or_else(|| "its attempts are used up".to_owned()),
                        look,
                    }),
                    Status::Stuck { why } => needs.stuck.push(Need {
                        task: id.to_string(),
                        why,
                        look,
                    }),
                    Status::Waiting { question } => needs.asked.push(Need {
                        task: id.to_string(),
                        why: question.lines().next().unwrap_or_default().to_owned(),
                        look: format!("farm answer {id} TEXT"),
                    }),
                    Status::Review { change } => needs.review.push(Need {
                        task: id.to_string(),
                        why: format!("its change waits on `{change}`"),
                        look: format!("farm approve {id} / farm reject {id} -m WHY"),
                    }),
                    _ => {}
                }
            }
        }
        Err(why) => needs.board_error = Some(why),
    }
    // Claims whose holder is silent past the threshold, or dead: the work
    // waits for a reap (the next `farm run` does it).
    let judge = super::judge_now(Some(stale_after));
    for l in listed {
        let v = l.judge(&judge);
        if matches!(v.state, State::Stale | State::Dead) {
            needs.stuck.push(Need {
                task: l.name.clone(),
                why: format!(
                    "held by {}, {} ({}): the next farm run reaps it",
                    l.who(),
                    v.state,
                    v.reason
                ),
                look: "farm locks".to_owned(),
            });
        }
    }
    needs.rescued = rescue_branches(hub)
        .into_iter()
        .map(|branch| {
            let (task, why) = match rescues.get(&branch) {
                Some((task, why)) => (task.clone(), Some(why.clone())),
                None => (task_of(&branch), None),
            };
            let look = match &hub.local {
                Some(local) => format!(
                    "git -C {} log -p {}..{branch}",
                    shell_words::quote(&local.dir.display().to_string()),
                    hub.branch
                ),
                None => format!(
                    "git fetch {} {branch} && git log -p HEAD..FETCH_HEAD",
                    shell_words::quote(&hub.url)
                ),
            };
            Rescued {
                branch,
                task,
                why,
                look,
            }
        })
        .collect();
    needs
}

/// The task a rescue branch `farm/rescue/<task>/<nonce>` is of; none for
/// an orphan of a clone (`farm/rescue/orphan/…`).
fn task_of(branch: &str) -> Option<String> {
    let rest = branch.strip_prefix("farm/rescue/")?;
    let (task, _) = rest.split_once('/')?;
    (task != "orphan").then(|| task.to_owned())
}

/// The hub's `farm/rescue/…` branches, by name (none when they cannot be
/// listed: what needs a person is shown without them).
fn rescue_branches(hub: &Hub) -> Vec<String> {
    let listed = match hub.git_dir() {
        Some(git_dir) => Repo::new(git_dir)
            .run([
                "for-each-ref",
                "--format=%(refname)",
                "refs/heads/farm/rescue/",
            ])
            .ok(),
        None => Repo::new(std::env::temp_dir())
            .run(["ls-remote", "--heads", &hub.url, "refs/heads/farm/rescue/*"])
            .ok(),
    };
    listed
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.split_whitespace().last()?.strip_prefix("refs/heads/"))
        .map(str::to_owned)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rescue_branch_names_its_task_unless_it_is_an_orphan() {
        assert_eq!(
            task_of("farm/rescue/parse-if/ab12").as_deref(),
            Some("parse-if")
        );
        assert_eq!(task_of("farm/rescue/orphan/box-1-abc"), None);
        assert_eq!(task_of("main"), None);
    }
}
