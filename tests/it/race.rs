//! Exactly-once claims, proven by real processes racing, many rounds.

use std::collections::BTreeMap;
use std::process::Child;

use crate::common::{Env, race};

fn rounds(default: usize) -> usize {
    std::env::var("FARM_TEST_ROUNDS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(default)
}

fn finish(child: Child) -> (Option<i32>, String) {
    let out = child.wait_with_output().unwrap();
    (out.status.code(), String::from_utf8(out.stdout).unwrap())
}

/// 32 processes claim the same task, 200 rounds: exactly one winner per round,
/// every loser exits 3, and the claim on disk names the winner.
#[test]
fn one_winner_among_32_racers_every_round() {
    let env = Env::new();
    let racers = 32;
    for round in 0..rounds(200) {
        let task = format!("race-{round}");
        let children = race(
            (0..racers)
                .map(|i| env.farm(["claim", &task, "--agent", &format!("racer-{i}")]))
                .collect(),
        );
        let mut winners = Vec::new();
        for (i, child) in children.into_iter().enumerate() {
            match finish(child) {
                (Some(0), _) => winners.push(i),
                (Some(3), _) => {}
                other => panic!("round {round}: racer {i} ended with {other:?}"),
            }
        }
        assert_eq!(winners.len(), 1, "round {round}: winners {winners:?}");
        let text = std::fs::read_to_string(env.claim_path(&task)).unwrap();
        assert!(
            text.contains(&format!("agent = \"racer-{}\"", winners[0])),
            "round {round}: {text}"
        );
    }
}

/// 16 processes each try to claim all of 2,000 tasks: every task is claimed
/// exactly once, by the process that says it won it.
#[test]
fn sixteen_sweepers_claim_two_thousand_tasks_exactly_once() {
    let env = Env::new();
    let tasks: Vec<String> = (0..2000).map(|i| format!("t{i:04}")).collect();
    let children = race(
        (0..16)
            .map(|w| {
                // Half sweep forwards and half backwards: every task is
                // contended, by the pack at once or by the two packs crossing.
                let mut order = tasks.clone();
                if w % 2 == 1 {
                    order.reverse();
                }
                let mut farm = env.farm(["claim", "--agent", &format!("w{w}")]);
                farm.cmd.args(&order);
                farm
            })
            .collect(),
    );
    let mut won_by: BTreeMap<String, Vec<usize>> = BTreeMap::new();
    for (w, child) in children.into_iter().enumerate() {
        let (code, stdout) = finish(child);
        assert!(matches!(code, Some(0 | 3)), "sweeper {w} exited {code:?}");
        for line in stdout.lines() {
            let task = line.split('`').nth(1).expect("claimed `task` as ...");
            won_by.entry(task.to_owned()).or_default().push(w);
        }
    }
    assert_eq!(won_by.len(), 2000, "every task claimed");
    let twice: Vec<_> = won_by.iter().filter(|(_, w)| w.len() != 1).collect();
    assert!(twice.is_empty(), "claimed more than once: {twice:?}");
    for (task, w) in &won_by {
        let text = std::fs::read_to_string(env.claim_path(task)).unwrap();
        assert!(
            text.contains(&format!("agent = \"w{}\"", w[0])),
            "{task}: {text}"
        );
    }
    // Every file but the hub's protocol version (and its lock) is a claim.
    let files = std::fs::read_dir(env.claims())
        .unwrap()
        .filter(|e| {
            let name = e.as_ref().unwrap().file_name();
            ![".protocol.txt", ".protocol.lock"].contains(&name.to_str().unwrap())
        })
        .count();
    assert_eq!(files, 2000, "no temp files left behind");
}
