//! The critical path of the board: the chain of tasks, each waiting for the
//! one before (`after = [...]`), whose sessions took longest in all. No
//! number of agents finishes the night sooner than it.

use std::collections::{BTreeMap, HashMap};

/// The longest chain by `weight` (a task's session seconds; none is 0) in
/// the graph of `after` (task → the tasks it waits for), first task first,
/// and its total. Tasks of no weight at either end are left off. A cycle
/// (a stuck board) is cut where it closes.
pub fn critical(
    after: &BTreeMap<String, Vec<String>>,
    weight: &BTreeMap<String, f64>,
) -> (Vec<String>, f64) {
    let mut memo: HashMap<&str, (f64, Option<&str>)> = HashMap::new();
    let mut best: Option<(&str, f64)> = None;
    for task in after.keys().chain(weight.keys()) {
        let (total, _) = longest(task, after, weight, &mut memo, &mut Vec::new());
        if best.is_none_or(|(_, b)| total > b) {
            best = Some((task, total));
        }
    }
    let Some((mut at, total)) = best else {
        return (Vec::new(), 0.0);
    };
    let mut chain = vec![at.to_owned()];
    while let Some((_, Some(next))) = memo.get(at) {
        if chain.iter().any(|t| t == next) {
            break; // a cycle's memo may lead back
        }
        chain.push((*next).to_owned());
        at = next;
    }
    // `chain` runs from the last task back to the first.
    chain.reverse();
    let heavy = |t: &String| weight.get(t).copied().unwrap_or(0.0) > 0.0;
    while chain.first().is_some_and(|t| !heavy(t)) {
        chain.remove(0);
    }
    while chain.last().is_some_and(|t| !heavy(t)) {
        chain.pop();
    }
    (chain, total)
}

/// The heaviest chain ending at `task`: its total, and the task before it.
fn longest<'a>(
    task: &'a str,
    after: &'a BTreeMap<String, Vec<String>>,
    weight: &'a BTreeMap<String, f64>,
    memo: &mut HashMap<&'a str, (f64, Option<&'a str>)>,
    stack: &mut Vec<&'a str>,
) -> (f64, Option<&'a str>) {
    if let Some(&m) = memo.get(task) {
        return m;
    }
    stack.push(task);
    let mut before: (f64, Option<&str>) = (0.0, None);
    for dep in after.get(task).into_iter().flatten() {
        if stack.contains(&dep.as_str()) {
            continue; // the cycle closes here
        }
        let (t, _) = longest(dep, after, weight, memo, stack);
        if before.1.is_none() || t > before.0 {
            before = (t, Some(dep.as_str()));
        }
    }
    stack.pop();
    let own = weight.get(task).copied().unwrap_or(0.0);
    let m = (own + before.0, before.1);
    memo.insert(task, m);
    m
}

#[cfg(test)]
mod tests {
    use super::*;

    fn graph(edges: &[(&str, &[&str])]) -> BTreeMap<String, Vec<String>> {
        edges
            .iter()
            .map(|(t, d)| ((*t).to_owned(), d.iter().map(|s| (*s).to_owned()).collect()))
            .collect()
    }

    fn weights(w: &[(&str, f64)]) -> BTreeMap<String, f64> {
        w.iter().map(|(t, s)| ((*t).to_owned(), *s)).collect()
    }

    #[test]
    fn the_heaviest_chain_wins_not_the_longest() {
        // a → b → c (1 + 1 + 1) against x → y (5 + 1).
        let after = graph(&[("b", &["a"]), ("c", &["b"]), ("y", &["x"])]);
        let w = weights(&[("a", 1.0), ("b", 1.0), ("c", 1.0), ("x", 5.0), ("y", 1.0)]);
        assert_eq!(critical(&after, &w), (vec!["x".into(), "y".into()], 6.0));
    }

    #[test]
    fn a_join_follows_its_heavier_branch_and_weightless_ends_are_cut() {
        // d waits for b and c, which wait for a; c is heavier; e (no
        // sessions this night) waits for d.
        let after = graph(&[
            ("b", &["a"]),
            ("c", &["a"]),
            ("d", &["b", "c"]),
            ("e", &["d"]),
        ]);
        let w = weights(&[("a", 2.0), ("b", 1.0), ("c", 3.0), ("d", 1.0)]);
        let (chain, total) = critical(&after, &w);
        assert_eq!(chain, ["a", "c", "d"]);
        assert_eq!(total, 6.0);
    }

    #[test]
    fn a_cycle_is_cut_and_nothing_is_nothing() {
        let after = graph(&[("a", &["b"]), ("b", &["a"])]);
        let w = weights(&[("a", 1.0), ("b", 2.0)]);
        let (chain, total) = critical(&after, &w);
        assert_eq!(total, 3.0);
        assert_eq!(chain.len(), 2);
        assert_eq!(critical(&BTreeMap::new(), &BTreeMap::new()), (vec![], 0.0));
    }
}
