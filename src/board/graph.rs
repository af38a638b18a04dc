//! The dependency graph of a [`Snapshot`] and the state of every task in it
//! ([`statuses`], [`next`], [`settled`], [`counts`]): pure, a snapshot in,
//! states out. Claims are not the board's business: the caller turns claim
//! files into [`Snapshot::claimed`].

use std::cmp::Ordering;
use std::collections::{BTreeMap, BTreeSet, HashSet, VecDeque};
use std::fmt;

use serde::Serialize;

use super::load::Snapshot;
use super::task::Task;
use crate::names::TaskId;

/// Where a task stands.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Status {
    /// Pending, and every task it depends on is done.
    Ready,
    /// Pending; waits for `on` (the dependencies not done yet), each of which can still finish.
    Blocked {
        on: Vec<TaskId>,
    },
    /// Pending and claimed, whatever its dependencies: someone is on it.
    Claimed {
        by: String,
    },
    Done,
    Failed,
    /// Pending and can never become ready without a change to the board.
    Stuck {
        why: String,
    },
    /// Pending, and a session asked a question it waits to have answered
    /// (`farm answer`); ready again then.
    Waiting {
        question: String,
    },
    /// Pending, and a session's change waits on the hub's branch `change`
    /// for a person's review (`farm approve`, `farm reject`). Approved, it
    /// is ready again: ready to be landed.
    Review {
        change: String,
    },
}

impl Status {
    /// One word, for a status column.
    pub fn label(&self) -> &'static str {
        match self {
            Status::Ready => "ready",
            Status::Blocked { .. } => "blocked",
            Status::Claimed { .. } => "claimed",
            Status::Done => "done",
            Status::Failed => "failed",
            Status::Stuck { .. } => "stuck",
            Status::Waiting { .. } => "waiting",
            Status::Review { .. } => "review",
        }
    }
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Status::Blocked { on } => {
                let on: Vec<String> = on.iter().map(|id| format!("`{id}`")).collect();
                write!(f, "blocked on {}", on.join(", "))
            }
            Status::Claimed { by } => write!(f, "claimed by {by}"),
            Status::Stuck { why } => write!(f, "stuck: {why}"),
            Status::Waiting { question } => {
                let first = question.lines().next().unwrap_or_default();
                write!(f, "waiting for an answer: {first}")
            }
            Status::Review { change } => write!(f, "waiting for review: `{change}`"),
            other => f.write_str(other.label()),
        }
    }
}

/// The status of every pending, done and failed task, sorted by id. An id in
/// several places counts once: done beats failed beats pending (as [`load`](super::load())
/// reports it). A claimed task counts as one that can finish, whatever its own
/// dependencies: someone is on it, so the tasks after it are blocked, not stuck.
pub fn statuses(s: &Snapshot) -> Vec<(TaskId, Status)> {
    let g = Graph::new(s);
    let open = g.judge_open();
    let mut all: BTreeMap<TaskId, Status> = BTreeMap::new();
    for id in &s.done {
        all.insert(id.clone(), Status::Done);
    }
    for id in &s.failed {
        all.entry(id.clone()).or_insert(Status::Failed);
    }
    for &id in g.pending.keys() {
        let status = match s.claimed.get(id) {
            Some(by) => Status::Claimed { by: by.clone() },
            // Every unclaimed pending task is judged; were one not, it had
            // better wait than run.
            None => open.get(id).cloned().unwrap_or_else(|| Status::Stuck {
                why: "not judged (a bug in farm)".into(),
            }),
        };
        all.insert(id.clone(), status);
    }
    all.into_iter().collect()
}

/// Why `t` waits for a person whatever else holds it, if it does: a question
/// (the answer comes first), or a change waiting for review (once approved,
/// the task is judged as any other: ready, to be landed).
fn held(t: &Task) -> Option<Status> {
    if t.asked.is_some() {
        return Some(Status::Waiting {
            question: super::question::last_question(&t.body)
                .unwrap_or_else(|| "(the question is not in the task file)".into()),
        });
    }
    if let (Some(change), None) = (&t.change, t.approved) {
        return Some(Status::Review {
            change: change.clone(),
        });
    }
    None
}

/// What a dependency is, seen from the task that waits for it.
enum Dep<'a> {
    Done,
    Failed,
    /// Pending and claimed: it can finish whatever its own dependencies say.
    Claimed,
    /// Pending and unclaimed: it is judged like the task itself.
    Open,
    /// Named only by a file that is not a usable task.
    Invalid(&'a str),
    Missing,
}

/// The dependency graph of one snapshot.
struct Graph<'a> {
    s: &'a Snapshot,
    /// Pending tasks that are neither done nor failed, by id (the first copy wins).
    pending: BTreeMap<&'a TaskId, &'a Task>,
    /// Ids whose file is invalid, with the file's name.
    invalid: BTreeMap<TaskId, &'a str>,
}

impl<'a> Graph<'a> {
    fn new(s: &'a Snapshot) -> Graph<'a> {
        let mut pending = BTreeMap::new();
        for t in &s.pending {
            if !s.done.contains(&t.id) && !s.failed.contains(&t.id) {
                pending.entry(&t.id).or_insert(&**t);
            }
        }
        let mut invalid = BTreeMap::new();
        for i in &s.invalid {
            let stem = i
                .name
                .strip_suffix(".md")
                .and_then(|n| n.rsplit('/').next());
            if let Some(id) = stem.and_then(|s| TaskId::parse(s).ok()) {
                invalid.entry(id).or_insert(i.name.as_str());
            }
        }
        Graph {
            s,
            pending,
            invalid,
        }
    }

    fn dep(&self, id: &TaskId) -> Dep<'a> {
        if self.s.done.contains(id) {
            Dep::Done
        } else if self.s.failed.contains(id) {
            Dep::Failed
        } else if self.pending.contains_key(id) {
            if self.s.claimed.contains_key(id) {
                Dep::Claimed
            } else {
                Dep::Open
            }
        } else if let Some(name) = self.invalid.get(id) {
            Dep::Invalid(name)
        } else {
            Dep::Missing
        }
    }

    /// The unclaimed pending tasks `id` depends on.
    fn open_deps(&self, id: &TaskId) -> impl Iterator<Item = &'a TaskId> + '_ {
        let after = self.pending.get(id).map_or(&[][..], |t| &t.after[..]);
        after.iter().filter(|d| matches!(self.dep(d), Dep::Open))
    }

    /// Why `t` is stuck by a dependency that can never be done, if it is.
    fn defect(&self, t: &Task) -> Option<String> {
        t.after.iter().find_map(|d| match self.dep(d) {
            Dep::Failed => Some(format!("depends on `{d}`, which failed")),
            Dep::Missing => Some(format!("depends on `{d}`, which does not exist")),
            Dep::Invalid(name) => Some(format!(
                "depends on `{d}`, whose task file `{name}` is invalid"
            )),
            Dep::Done | Dep::Claimed | Dep::Open => None,
        })
    }

    /// The status of `t` given the statuses of its open dependencies in `known`.
    fn judge(&self, t: &Task, known: &BTreeMap<&TaskId, Status>) -> Status {
        if let Some(held) = held(t) {
            return held;
        }
        if let Some(why) = self.defect(t) {
            return Status::Stuck { why };
        }
        let stuck_dep = self
            .open_deps(&t.id)
            .find(|d| matches!(known.get(d), Some(Status::Stuck { .. })));
        if let Some(d) = stuck_dep {
            return Status::Stuck {
                why: format!("depends on `{d}`, which is stuck"),
            };
        }
        let on: Vec<TaskId> = t
            .after
            .iter()
            .filter(|d| !self.s.done.contains(*d))
            .cloned()
            .collect();
        if on.is_empty() {
            Status::Ready
        } else {
            Status::Blocked { on }
        }
    }

    /// The status of every unclaimed pending task. Dependencies are judged
    /// before their dependents; what is left over is in a cycle or waits for
    /// one, and each cycle is named before the rest is judged.
    fn judge_open(&self) -> BTreeMap<&'a TaskId, Status> {
        let open: Vec<&'a TaskId> = self
            .pending
            .keys()
            .copied()
            .filter(|id| !self.s.claimed.contains_key(*id))
            .collect();
        let mut known = BTreeMap::new();
        self.propagate(&open, &mut known);
        let left: BTreeSet<&'a TaskId> = open
            .iter()
            .copied()
            .filter(|id| !known.contains_key(id))
            .collect();
        for component in self.cycles(&left) {
            // Name a shortest cycle through each member, sharing one search
            // among all the members of the cycle it finds: a big simple cycle
            // costs one search, not one per member.
            let mut named: BTreeMap<&'a TaskId, String> = BTreeMap::new();
            for &id in &component {
                if !named.contains_key(id) {
                    let cycle = self
                        .shortest_cycle(id, &component)
                        .unwrap_or_else(|| vec![id]);
                    let why = cycle_why(&cycle);
                    for member in cycle {
                        named.entry(member).or_insert_with(|| why.clone());
                    }
                }
            }
            for (id, cycle) in named {
                let why = self.defect(self.pending[id]).unwrap_or(cycle);
                known.insert(id, Status::Stuck { why });
            }
        }
        let rest: Vec<&'a TaskId> = left
            .iter()
            .copied()
            .filter(|id| !known.contains_key(id))
            .collect();
        self.propagate(&rest, &mut known);
        known
    }

    /// The strongly connected components of the open dependency graph within
    /// `nodes` that hold a cycle (Tarjan's algorithm, iterative so that a long
    /// chain cannot overflow the stack).
    fn cycles(&self, nodes: &BTreeSet<&'a TaskId>) -> Vec<BTreeSet<&'a TaskId>> {
        let list: Vec<&'a TaskId> = nodes.iter().copied().collect();
        let at: BTreeMap<&TaskId, usize> =
            list.iter().enumerate().map(|(i, &id)| (id, i)).collect();
        let succ: Vec<Vec<usize>> = list
            .iter()
            .map(|&id| {
                self.open_deps(id)
                    .filter_map(|d| at.get(d).copied())
                    .collect()
            })
            .collect();
        const UNSEEN: usize = usize::MAX;
        let mut index = vec![UNSEEN; list.len()];
        let mut low = vec![0; list.len()];
        let mut on_stack = vec![false; list.len()];
        let mut stack = Vec::new();
        let mut next_index = 0;
        let mut out = Vec::new();
        for root in 0..list.len() {
            if index[root] != UNSEEN {
                continue;
            }
            // Each frame is a node and how many of its edges it has followed.
            let mut calls = vec![(root, 0)];
            index[root] = next_index;
            low[root] = next_index;
            next_index += 1;
            stack.push(root);
            on_stack[root] = true;
            while let Some(&(v, edge)) = calls.last() {
                if let Some(&w) = succ[v].get(edge) {
                    if let Some(frame) = calls.last_mut() {
                        frame.1 += 1;
                    }
                    if index[w] == UNSEEN {
                        index[w] = next_index;
                        low[w] = next_index;
                        next_index += 1;
                        stack.push(w);
                        on_stack[w] = true;
                        calls.push((w, 0));
                    } else if on_stack[w] {
                        low[v] = low[v].min(index[w]);
                    }
                    continue;
                }
                calls.pop();
                if let Some(&(u, _)) = calls.last() {
                    low[u] = low[u].min(low[v]);
                }
                if low[v] == index[v] {
                    let mut component = BTreeSet::new();
                    while let Some(w) = stack.pop() {
                        on_stack[w] = false;
                        component.insert(list[w]);
                        if w == v {
                            break;
                        }
                    }
                    // One task is a cycle only if it depends on itself, which
                    // parse refuses but a hand-made snapshot may hold.
                    if component.len() > 1 || succ[v].contains(&v) {
                        out.push(component);
                    }
                }
            }
        }
        out
    }

    /// Judge the tasks among `nodes` whose open dependencies are all judged,
    /// or can be judged in turn (Kahn's algorithm; no recursion, so a long
    /// chain cannot overflow the stack).
    fn propagate(&self, nodes: &[&'a TaskId], known: &mut BTreeMap<&'a TaskId, Status>) {
        let mut waiting: BTreeMap<&TaskId, usize> = BTreeMap::new();
        let mut dependents: BTreeMap<&TaskId, Vec<&'a TaskId>> = BTreeMap::new();
        let mut ready = VecDeque::new();
        for &id in nodes {
            let unknown: BTreeSet<&TaskId> = self
                .open_deps(id)
                .filter(|d| !known.contains_key(d))
                .collect();
            for d in &unknown {
                dependents.entry(d).or_default().push(id);
            }
            if unknown.is_empty() {
                ready.push_back(id);
            } else {
                waiting.insert(id, unknown.len());
            }
        }
        while let Some(id) = ready.pop_front() {
            let status = self.judge(self.pending[id], known);
            known.insert(id, status);
            for &r in dependents.get(id).into_iter().flatten() {
                if let Some(n) = waiting.get_mut(r) {
                    *n -= 1;
                    if *n == 0 {
                        ready.push_back(r);
                    }
                }
            }
        }
    }

    /// The shortest dependency cycle through `start` within `within`, as the
    /// path `start → … → last` (last depends on `start` again).
    fn shortest_cycle(
        &self,
        start: &'a TaskId,
        within: &BTreeSet<&'a TaskId>,
    ) -> Option<Vec<&'a TaskId>> {
        let mut parent: BTreeMap<&TaskId, &'a TaskId> = BTreeMap::new();
        let mut queue = VecDeque::from([start]);
        while let Some(u) = queue.pop_front() {
            for d in self.open_deps(u).filter(|d| within.contains(d)) {
                if d == start {
                    let mut path = vec![u];
                    let mut x = u;
                    while x != start {
                        x = parent[x];
                        path.push(x);
                    }
                    path.reverse();
                    return Some(path);
                }
                if !parent.contains_key(d) {
                    parent.insert(d, u);
                    queue.push_back(d);
                }
            }
        }
        None
    }
}

/// Cycles longer than this are shown cut short, so that a reason stays a line.
const CYCLE_SHOWN: usize = 8;

/// "in a dependency cycle: a → b → a", starting from the smallest id so that
/// every task of a simple cycle names it the same way.
fn cycle_why(cycle: &[&TaskId]) -> String {
    let first = (0..cycle.len()).min_by_key(|&i| cycle[i]).unwrap_or(0);
    let mut names: Vec<&str> = cycle[first..]
        .iter()
        .chain(&cycle[..first])
        .chain(cycle.get(first))
        .map(|id| id.as_str())
        .collect();
    if cycle.len() > CYCLE_SHOWN {
        // Keep the start, and the end that leads back to it.
        names.drain(CYCLE_SHOWN - 2..names.len() - 2);
        names.insert(CYCLE_SHOWN - 2, "…");
        return format!(
            "in a dependency cycle of {} tasks: {}",
            cycle.len(),
            names.join(" → ")
        );
    }
    format!("in a dependency cycle: {}", names.join(" → "))
}

/// The task to work on next: the best ready task not in `skip`. Highest
/// priority first, then the oldest (tasks that do not say when they were
/// created come after those that do), then the smallest id.
///
/// The candidates are taken in that order, and one that depends on nothing
/// is judged alone: it is ready unless a person holds it (`held`). Only a
/// candidate with dependencies has the whole graph judged. On a board of
/// thousands of independent tasks, judging the graph at every pick was 5 %
/// of all of a night's CPU samples (perf, `cargo bench --bench scale --
/// disk`).
pub fn next<'a>(s: &'a Snapshot, skip: &HashSet<TaskId>) -> Option<&'a Task> {
    let mut open: Vec<&Task> = s
        .pending
        .iter()
        .map(|t| &**t)
        .filter(|t| {
            !skip.contains(&t.id)
                && !s.claimed.contains_key(&t.id)
                && !s.done.contains(&t.id)
                && !s.failed.contains(&t.id)
        })
        .collect();
    open.sort_by(|a, b| run_order(a, b));
    let mut judged = None;
    open.into_iter().find(|t| {
        if t.after.is_empty() {
            held(t).is_none()
        } else {
            judged.get_or_insert_with(|| ready(s)).contains(&t.id)
        }
    })
}

/// The ids [`statuses`] calls ready: the unclaimed pending tasks judged so,
/// read from the judgement alone. A pick reads nothing else, and at every
/// step: building every status (the done ones too, each id copied twice)
/// was most of a pick's cost on a board of thousands (perf, `cargo bench
/// --bench scale -- disk`).
fn ready(s: &Snapshot) -> HashSet<&TaskId> {
    Graph::new(s)
        .judge_open()
        .into_iter()
        .filter(|(_, st)| *st == Status::Ready)
        .map(|(id, _)| id)
        .collect()
}

/// How many of the best ready tasks an agent on the git store spreads its
/// first reach over (see [`next_spread`]).
pub const SPREAD: usize = 8;

/// [`next`], for an agent that shares no claims with the others until its
/// claim is pushed (the git store: a hub elsewhere): of the best ready
/// tasks — the first [`SPREAD`] in run order, of the highest priority among
/// them — the one at `offset`, counted round. Agents given different
/// offsets reach for different tasks at once instead of all racing for the
/// first, where each race lost costs a round trip to the hub; a task of a
/// lower priority is never taken before one of a higher.
pub fn next_spread<'a>(s: &'a Snapshot, skip: &HashSet<TaskId>, offset: usize) -> Option<&'a Task> {
    let ready = ready(s);
    let mut best: Vec<&Task> = s
        .pending
        .iter()
        .map(|t| &**t)
        .filter(|t| ready.contains(&t.id) && !skip.contains(&t.id))
        .collect();
    best.sort_by(|a, b| run_order(a, b));
    let top = best.first()?.priority;
    best.truncate(SPREAD);
    best.retain(|t| t.priority == top);
    Some(best[offset % best.len()])
}

fn run_order(a: &Task, b: &Task) -> Ordering {
    let created = match (a.created, b.created) {
        (Some(x), Some(y)) => x.cmp(&y),
        (Some(_), None) => Ordering::Less,
        (None, Some(_)) => Ordering::Greater,
        (None, None) => Ordering::Equal,
    };
    b.priority
        .cmp(&a.priority)
        .then(created)
        .then_with(|| a.id.cmp(&b.id))
}

/// Nothing more can happen without a change to the board: no task is ready
/// or claimed. (A blocked task waits for one that is ready or claimed, or
/// for one waiting for an answer, which `farm answer` gives by a change to
/// the board: with none ready or claimed, every blocked task waits for an
/// answer.) Agents stop waiting only then.
pub fn settled(s: &Snapshot) -> bool {
    statuses(s)
        .iter()
        .all(|(_, st)| !matches!(st, Status::Ready | Status::Claimed { .. }))
}

/// How many tasks are in each state, and how many files are invalid.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Counts {
    pub ready: usize,
    pub blocked: usize,
    pub claimed: usize,
    pub done: usize,
    pub failed: usize,
    pub stuck: usize,
    pub invalid: usize,
    /// Waiting for a person: for an answer (`farm answer`), or with a
    /// change to review (`farm approve`); `review` counts the latter.
    pub waiting: usize,
    /// Waiting with a change to review (`farm approve`, `farm reject`).
    pub review: usize,
}

pub fn counts(s: &Snapshot) -> Counts {
    let mut c = Counts {
        invalid: s.invalid.len(),
        ..Counts::default()
    };
    for (_, st) in statuses(s) {
        *match st {
            Status::Ready => &mut c.ready,
            Status::Blocked { .. } => &mut c.blocked,
            Status::Claimed { .. } => &mut c.claimed,
            Status::Done => &mut c.done,
            Status::Failed => &mut c.failed,
            Status::Stuck { .. } => &mut c.stuck,
            Status::Waiting { .. } => &mut c.waiting,
            Status::Review { .. } => {
                c.review += 1;
                &mut c.waiting
            }
        } += 1;
    }
    c
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::board::Invalid;
    use crate::board::testing::{at, blocked, id, ids, minimal, status_of, stuck};
    use proptest::prelude::*;
    use std::sync::Arc;

    fn pending(name: &str, after: &[&str]) -> Task {
        Task {
            after: ids(after),
            ..minimal(name)
        }
    }

    fn board(tasks: &[(&str, &[&str])], done: &[&str], failed: &[&str]) -> Snapshot {
        Snapshot {
            pending: tasks.iter().map(|(n, a)| Arc::new(pending(n, a))).collect(),
            done: ids(done).into_iter().collect(),
            failed: ids(failed).into_iter().collect(),
            ..Snapshot::default()
        }
    }

    #[test]
    fn chain_runs_in_order() {
        // c after b after a.
        let mut s = board(&[("a", &[]), ("b", &["a"]), ("c", &["b"])], &[], &[]);
        assert_eq!(
            statuses(&s),
            vec![
                (id("a"), Status::Ready),
                (id("b"), blocked(&["a"])),
                (id("c"), blocked(&["b"])),
            ]
        );
        s.pending.remove(0);
        s.done.insert(id("a"));
        assert_eq!(status_of(&s, "a"), Status::Done);
        assert_eq!(status_of(&s, "b"), Status::Ready);
        assert_eq!(status_of(&s, "c"), blocked(&["b"]));
    }

    #[test]
    fn diamond_waits_for_both_sides() {
        let tasks: &[(&str, &[&str])] = &[("b", &["a"]), ("c", &["a"]), ("d", &["b", "c"])];
        let s = board(tasks, &["a"], &[]);
        assert_eq!(status_of(&s, "b"), Status::Ready);
        assert_eq!(status_of(&s, "c"), Status::Ready);
        assert_eq!(status_of(&s, "d"), blocked(&["b", "c"]));
        let s = board(&[("c", &["a"]), ("d", &["b", "c"])], &["a", "b"], &[]);
        assert_eq!(status_of(&s, "d"), blocked(&["c"]));
    }

    #[test]
    fn missing_and_failed_dependencies_make_a_task_stuck() {
        let s = board(&[("a", &["x", "ghost"]), ("b", &["f"])], &["x"], &["f"]);
        assert_eq!(
            status_of(&s, "a"),
            stuck("depends on `ghost`, which does not exist")
        );
        assert_eq!(status_of(&s, "b"), stuck("depends on `f`, which failed"));
        assert_eq!(status_of(&s, "f"), Status::Failed);
        assert_eq!(status_of(&s, "x"), Status::Done);
        assert!(settled(&s));
    }

    #[test]
    fn invalid_dependency_makes_a_task_stuck() {
        let mut s = board(&[("a", &["bad"])], &[], &[]);
        s.invalid.push(Invalid {
            name: "tasks/bad.md".into(),
            error: "`title` is missing".into(),
        });
        assert_eq!(
            status_of(&s, "a"),
            stuck("depends on `bad`, whose task file `tasks/bad.md` is invalid")
        );
        assert_eq!(counts(&s).invalid, 1);
        // A directory that is not one names no task.
        let mut s = board(&[("a", &["tasks"])], &[], &[]);
        s.invalid.push(Invalid {
            name: "tasks".into(),
            error: "not a directory".into(),
        });
        assert_eq!(
            status_of(&s, "a"),
            stuck("depends on `tasks`, which does not exist")
        );
    }

    #[test]
    fn cycles_are_named_and_the_rest_keeps_working() {
        let tasks: &[(&str, &[&str])] = &[
            ("a", &["b"]),
            ("b", &["a"]),
            ("p", &["q"]),
            ("q", &["r"]),
            ("r", &["p"]),
            ("innocent", &[]),
            ("later", &["innocent"]),
        ];
        let s = board(tasks, &[], &[]);
        let two = stuck("in a dependency cycle: a → b → a");
        let three = stuck("in a dependency cycle: p → q → r → p");
        assert_eq!(
            statuses(&s),
            vec![
                (id("a"), two.clone()),
                (id("b"), two),
                (id("innocent"), Status::Ready),
                (id("later"), blocked(&["innocent"])),
                (id("p"), three.clone()),
                (id("q"), three.clone()),
                (id("r"), three),
            ]
        );
        assert_eq!(
            next(&s, &HashSet::new()).map(|t| t.id.as_str()),
            Some("innocent")
        );
        assert!(!settled(&s));
    }

    #[test]
    fn stuck_spreads_to_everything_downstream() {
        let tasks: &[(&str, &[&str])] = &[
            ("a", &["b"]),
            ("b", &["a"]),
            ("c", &["a"]),
            ("d", &["c", "ok"]),
            ("e", &["ghost"]),
            ("f", &["e"]),
            ("ok", &[]),
        ];
        let s = board(tasks, &[], &[]);
        assert_eq!(status_of(&s, "c"), stuck("depends on `a`, which is stuck"));
        assert_eq!(status_of(&s, "d"), stuck("depends on `c`, which is stuck"));
        assert_eq!(status_of(&s, "f"), stuck("depends on `e`, which is stuck"));
        assert_eq!(status_of(&s, "ok"), Status::Ready);
    }

    #[test]
    fn a_defect_is_named_before_a_cycle() {
        let s = board(&[("a", &["ghost", "b"]), ("b", &["a"])], &[], &[]);
        assert_eq!(
            status_of(&s, "a"),
            stuck("depends on `ghost`, which does not exist")
        );
        assert_eq!(
            status_of(&s, "b"),
            stuck("in a dependency cycle: a → b → a")
        );
    }

    #[test]
    fn claimed_wins_and_blocks_its_dependents() {
        let mut s = board(&[("a", &[]), ("b", &["a"]), ("c", &["ghost"])], &[], &[]);
        s.claimed.insert(id("a"), "alice@vm".into());
        s.claimed.insert(id("c"), "bob@vm".into());
        // Claims on tasks that are not pending change nothing.
        s.claimed.insert(id("zzz"), "carol@vm".into());
        assert_eq!(
            statuses(&s),
            vec![
                (
                    id("a"),
                    Status::Claimed {
                        by: "alice@vm".into()
                    }
                ),
                (id("b"), blocked(&["a"])),
                (
                    id("c"),
                    Status::Claimed {
                        by: "bob@vm".into()
                    }
                ),
            ]
        );
        assert_eq!(next(&s, &HashSet::new()), None);
        assert!(!settled(&s));
    }

    #[test]
    fn a_claimed_task_breaks_its_cycle() {
        let mut s = board(&[("a", &["b"]), ("b", &["a"])], &[], &[]);
        s.claimed.insert(id("a"), "alice@vm".into());
        assert_eq!(status_of(&s, "b"), blocked(&["a"]));
    }

    #[test]
    fn done_beats_failed_beats_pending() {
        let s = board(&[("a", &[]), ("b", &[])], &["a", "c"], &["b", "c"]);
        assert_eq!(
            statuses(&s),
            vec![
                (id("a"), Status::Done),
                (id("b"), Status::Failed),
                (id("c"), Status::Done),
            ]
        );
    }

    #[test]
    fn next_prefers_priority_then_age_then_id() {
        let t = |name: &str, priority: i64, created: Option<u64>| Task {
            priority,
            created: created.map(at),
            asked: None,
            ..minimal(name)
        };
        let mut s = Snapshot {
            pending: [
                t("a", 0, Some(1)),
                t("b", 5, None),
                t("c", 5, Some(30)),
                t("d", 5, Some(20)),
                t("e", 5, Some(20)),
                t("f", 9, None),
            ]
            .map(Arc::new)
            .into(),
            ..Snapshot::default()
        };
        s.pending.push(Arc::new(Task {
            after: ids(&["a"]),
            ..t("blocked", 100, Some(0))
        }));
        let order = |s: &Snapshot| {
            let mut skip = HashSet::new();
            let mut out = Vec::new();
            while let Some(t) = next(s, &skip) {
                out.push(t.id.to_string());
                skip.insert(t.id.clone());
            }
            out
        };
        assert_eq!(order(&s), ["f", "d", "e", "c", "b", "a"]);
        let skip: HashSet<TaskId> = ids(&["f", "d"]).into_iter().collect();
        assert_eq!(next(&s, &skip).map(|t| t.id.as_str()), Some("e"));
    }

    #[test]
    fn a_spread_pick_takes_the_offsets_best_task_never_a_lower_priority() {
        let t = |name: &str, priority: i64| Task {
            priority,
            ..minimal(name)
        };
        let mut s = Snapshot {
            pending: (1..=12)
                .map(|i| Arc::new(t(&format!("t{i:02}"), 0)))
                .collect(),
            ..Snapshot::default()
        };
        let none = HashSet::new();
        let pick = |s: &Snapshot, offset| next_spread(s, &none, offset).map(|t| t.id.to_string());
        // Offsets apart reach for tasks apart, among the first SPREAD.
        let picks: BTreeSet<_> = (0..4).map(|o| pick(&s, o).unwrap()).collect();
        assert_eq!(picks.len(), 4);
        assert_eq!(pick(&s, 0).as_deref(), Some("t01"));
        assert_eq!(pick(&s, SPREAD).as_deref(), Some("t01"));
        assert_eq!(pick(&s, SPREAD - 1).as_deref(), Some("t08"));
        // Two tasks of a higher priority: the spread stays between them.
        s.pending.push(Arc::new(t("hi1", 5)));
        s.pending.push(Arc::new(t("hi2", 5)));
        for o in 0..SPREAD {
            assert!(pick(&s, o).unwrap().starts_with("hi"));
        }
        // Skipped, claimed and blocked tasks are not reached for.
        s.claimed.insert(id("hi1"), "alice@vm".into());
        s.pending.push(Arc::new(Task {
            after: ids(&["t12"]),
            ..t("blocked", 9)
        }));
        let skip: HashSet<TaskId> = ids(&["hi2"]).into_iter().collect();
        for o in 0..SPREAD {
            let got = next_spread(&s, &skip, o).unwrap().id.to_string();
            assert!(got.starts_with('t') && *got <= *"t08", "{got}");
        }
        let all: HashSet<TaskId> = s.pending.iter().map(|t| t.id.clone()).collect();
        assert!(next_spread(&s, &all, 3).is_none());
    }

    #[test]
    fn settled_only_when_nothing_can_move() {
        assert!(settled(&Snapshot::default()));
        assert!(settled(&board(&[], &["a"], &["b"])));
        assert!(settled(&board(&[("a", &["b"]), ("b", &["a"])], &[], &[])));
        assert!(!settled(&board(&[("a", &[])], &[], &[])));
        // Nothing is ready, but a claimed task may finish and unblock the rest.
        let mut s = board(&[("a", &[]), ("b", &["a"])], &[], &[]);
        s.claimed.insert(id("a"), "alice@vm".into());
        assert!(!settled(&s));
        s.pending.remove(0);
        s.claimed.clear();
        s.done.insert(id("a"));
        assert!(!settled(&s));
    }

    #[test]
    fn counts_every_state() {
        let mut s = board(
            &[("r", &[]), ("b", &["r"]), ("c", &[]), ("s", &["ghost"])],
            &["d"],
            &["f"],
        );
        s.claimed.insert(id("c"), "alice@vm".into());
        s.invalid.push(Invalid {
            name: "tasks/X y.md".into(),
            error: "bad".into(),
        });
        assert_eq!(
            counts(&s),
            Counts {
                ready: 1,
                blocked: 1,
                claimed: 1,
                done: 1,
                failed: 1,
                stuck: 1,
                invalid: 1,
                waiting: 0,
                review: 0,
            }
        );
    }

    #[test]
    fn a_change_waits_for_review_until_approved_then_is_ready_to_land() {
        let change = "farm/review/r/0123456789abcdef0123456789abcdef".to_owned();
        let mut s = board(&[("r", &[]), ("after-r", &["r"])], &[], &[]);
        Arc::make_mut(&mut s.pending[0]).change = Some(change.clone());
        assert_eq!(status_of(&s, "r"), Status::Review { change });
        assert!(matches!(status_of(&s, "after-r"), Status::Blocked { .. }));
        assert!(settled(&s), "only a person can move it on");
        let c = counts(&s);
        assert_eq!((c.waiting, c.review, c.ready), (1, 1, 0));
        Arc::make_mut(&mut s.pending[0]).approved = Some(at(1));
        assert_eq!(status_of(&s, "r"), Status::Ready);
        assert!(!settled(&s));
    }

    #[test]
    fn a_long_chain_does_not_overflow() {
        let names: Vec<String> = (0..20_000).map(|i| format!("t{i:05}")).collect();
        let mut s = Snapshot::default();
        for (i, n) in names.iter().enumerate() {
            // Each task depends on the next, so the last one is the only ready one.
            let after = names.get(i + 1).map(|d| vec![id(d)]).unwrap_or_default();
            s.pending.push(Arc::new(Task {
                after,
                ..minimal(n)
            }));
        }
        assert_eq!(next(&s, &HashSet::new()).unwrap().id.as_str(), "t19999");
        Arc::make_mut(s.pending.last_mut().unwrap()).after = ids(&["t00000"]);
        assert_eq!(counts(&s).stuck, 20_000);
        assert_eq!(
            status_of(&s, "t12345"),
            stuck(
                "in a dependency cycle of 20000 tasks: \
                 t00000 → t00001 → t00002 → t00003 → t00004 → t00005 → … → t19999 → t00000"
            )
        );
    }

    /// Can a task still finish? The least fixed point, computed as plainly as
    /// possible: done and claimed tasks can; so can any pending task whose
    /// dependencies all can.
    fn can_finish_reference(s: &Snapshot) -> BTreeSet<TaskId> {
        let mut can: BTreeSet<TaskId> = s.done.clone();
        can.extend(
            s.pending
                .iter()
                .filter(|t| s.claimed.contains_key(&t.id))
                .map(|t| t.id.clone()),
        );
        loop {
            let before = can.len();
            for t in &s.pending {
                if t.after.iter().all(|d| can.contains(d)) {
                    can.insert(t.id.clone());
                }
            }
            if can.len() == before {
                return can;
            }
        }
    }

    fn arb_board() -> impl Strategy<Value = Snapshot> {
        // Ten tasks t0..t9; each is pending, done, failed, missing or
        // invalid, may be claimed, and depends on any of the others.
        proptest::collection::vec(
            (
                0u8..5,
                any::<bool>(),
                proptest::collection::btree_set(0usize..10, 0..4),
            ),
            10,
        )
        .prop_map(|spec| {
            let mut s = Snapshot::default();
            for (i, (place, claimed, deps)) in spec.into_iter().enumerate() {
                let name = format!("t{i}");
                let after = deps
                    .into_iter()
                    .filter(|&d| d != i)
                    .map(|d| id(&format!("t{d}")))
                    .collect();
                match place {
                    0 | 1 => s.pending.push(Arc::new(Task {
                        after,
                        ..minimal(&name)
                    })),
                    2 => drop(s.done.insert(id(&name))),
                    3 => drop(s.failed.insert(id(&name))),
                    _ => s.invalid.push(Invalid {
                        name: format!("tasks/{name}.md"),
                        error: "bad".into(),
                    }),
                }
                if claimed && place < 2 {
                    s.claimed.insert(id(&name), "someone".into());
                }
            }
            s
        })
    }

    /// [`arb_board`] with some pending tasks holding a question or a change
    /// to review (approved or not), of several priorities, and some ids to
    /// skip.
    fn arb_pick() -> impl Strategy<Value = (Snapshot, HashSet<TaskId>)> {
        let extras = proptest::collection::vec((any::<bool>(), 0u8..3, 0i64..3, any::<bool>()), 10);
        (arb_board(), extras).prop_map(|(mut s, extras)| {
            let mut skip = HashSet::new();
            for (t, (asked, change, priority, skipped)) in s.pending.iter_mut().zip(extras) {
                let t = Arc::make_mut(t);
                if asked {
                    t.asked = Some(at(1));
                }
                if change > 0 {
                    t.change = Some(format!("farm/review/{}/n", t.id));
                }
                if change > 1 {
                    t.approved = Some(at(2));
                }
                t.priority = priority;
                if skipped {
                    skip.insert(t.id.clone());
                }
            }
            (s, skip)
        })
    }

    proptest! {
        #[test]
        fn next_picks_the_best_task_the_whole_judgement_calls_ready((s, skip) in arb_pick()) {
            let judged = statuses(&s);
            let want = s
                .pending
                .iter()
                .filter(|t| !skip.contains(&t.id))
                .filter(|t| judged.iter().any(|(i, st)| i == &t.id && *st == Status::Ready))
                .min_by(|a, b| run_order(a, b))
                .map(|t| &t.id);
            prop_assert_eq!(next(&s, &skip).map(|t| &t.id), want);
        }

        #[test]
        fn statuses_agree_with_the_reference(s in arb_board()) {
            let all = statuses(&s);
            let listed: Vec<&TaskId> = all.iter().map(|(i, _)| i).collect();
            let mut want: Vec<&TaskId> = s.pending.iter().map(|t| &t.id).chain(&s.done).chain(&s.failed).collect();
            want.sort();
            prop_assert_eq!(listed, want);
            let can = can_finish_reference(&s);
            for (i, st) in &all {
                let task = s.pending.iter().find(|t| &t.id == i);
                match st {
                    Status::Done => prop_assert!(s.done.contains(i)),
                    Status::Failed => prop_assert!(s.failed.contains(i)),
                    Status::Claimed { .. } => prop_assert!(s.claimed.contains_key(i)),
                    Status::Ready => {
                        prop_assert!(task.unwrap().after.iter().all(|d| s.done.contains(d)));
                    }
                    Status::Blocked { on } => {
                        prop_assert!(can.contains(i), "{} is blocked but cannot finish", i);
                        let want: Vec<TaskId> = task.unwrap().after.iter().filter(|d| !s.done.contains(*d)).cloned().collect();
                        prop_assert_eq!(on, &want);
                        prop_assert!(!on.is_empty());
                    }
                    Status::Waiting { .. } => prop_assert!(task.unwrap().asked.is_some()),
                    Status::Review { .. } => prop_assert!(task.unwrap().change.is_some()),
                    Status::Stuck { why } => {
                        prop_assert!(!can.contains(i), "{} is stuck ({}) but can finish", i, why);
                    }
                }
                if !matches!(st, Status::Done | Status::Failed | Status::Claimed { .. }) {
                    prop_assert!(!s.claimed.contains_key(i));
                }
            }
            let moving = all.iter().any(|(_, st)| matches!(st, Status::Ready | Status::Blocked { .. } | Status::Claimed { .. }));
            prop_assert_eq!(settled(&s), !moving);
        }
    }
}
