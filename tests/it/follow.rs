//! Watching a run as it goes: `farm logs -F` follows an agent from session
//! to session and ends with its run; `farm status --watch` says when it last
//! looked, and that the run ended.

use std::time::Duration;

use crate::common::{Env, Farm, wait_for};
use crate::run::{LIMIT, add_task, run_args};

/// A slow agent: each session says when it starts and ends, a second apart.
fn slow_agent(env: &Env) -> String {
    env.agent_script(
        "slow.sh",
        "echo \"start $FARM_TASK\"\nsleep 1\necho \"end $FARM_TASK\"\necho x > \"$FARM_TASK.txt\" && git add . && git commit --quiet -m \"work on $FARM_TASK\"\n",
    )
}

/// `-f` stayed on one log: a person watching an agent overnight had to run
/// `farm logs` again for each session. `-F` goes on to each next session's
/// log as it starts, in order, and ends by itself when the run does.
#[test]
fn logs_follow_sessions_goes_from_session_to_session_until_the_run_ends() {
    let env = Env::git_hub(&[]);
    add_task(&env, &["f1", "-m", "First"]);
    add_task(&env, &["f2", "-m", "Second", "--after", "f1"]);
    add_task(&env, &["f3", "-m", "Third", "--after", "f2"]);
    let agent = slow_agent(&env);
    let run = env
        .farm_git(run_args(&env, &agent, &["--name", "walker"]))
        .spawn();
    let state = env.tmp.path().join("state");
    wait_for(&state.join("logs/walker"));
    let state = state.to_str().unwrap();
    let follow = env
        .farm(["logs", "-F", "walker", "--state-dir", state])
        .spawn();
    let out = Farm::wait_within(follow, LIMIT).success();
    Farm::wait_within(run, LIMIT).success();
    let at = |s: &str| {
        out.stdout
            .find(s)
            .unwrap_or_else(|| panic!("{s:?} not followed: {out:#?}"))
    };
    assert!(
        at("start f1") < at("end f1")
            && at("end f1") < at("start f2")
            && at("end f2") < at("start f3")
            && at("start f3") < at("end f3"),
        "{out:#?}"
    );
    assert_eq!(
        out.stdout.matches("[farm] ended: success").count(),
        3,
        "{out:#?}"
    );
    assert!(out.stderr.contains("logs/walker/f3-"), "{out:#?}");
    assert!(out.stderr.contains(") ended <=="), "{out:#?}");
    // With no run running, the latest log and an end at once.
    let after = env
        .farm(["logs", "-F", "walker", "--state-dir", state])
        .run_within(Duration::from_secs(20))
        .success()
        .stderr_has("no run is running");
    assert!(after.stdout.contains("end f3"), "{after:#?}");
    // -F names whom to follow.
    env.farm(["logs", "-F", "--state-dir", state]).run().code(2);
}

/// `--watch` redrew the same screen forever: nothing said whether it was
/// still updating, and after the run ended it went on showing "ended" among
/// the lines until interrupted. Each frame now says when it was drawn, and
/// when the run it watched ends, the last frame says so and the watch ends.
#[test]
fn status_watch_says_when_it_updated_and_ends_with_the_run() {
    let env = Env::git_hub(&[]);
    add_task(&env, &["w1", "-m", "First"]);
    add_task(&env, &["w2", "-m", "Second", "--after", "w1"]);
    let agent = slow_agent(&env);
    let run = env
        .farm_git(run_args(&env, &agent, &["--name", "watched"]))
        .spawn();
    let state = env.tmp.path().join("state");
    wait_for(&state.join("logs/watched"));
    let watch = env
        .farm(["status", "--watch", "--state-dir", state.to_str().unwrap()])
        .spawn();
    Farm::wait_within(run, LIMIT).success();
    let out = Farm::wait_within(watch, Duration::from_secs(60)).success();
    let frames: Vec<&str> = out.stdout.split("\x1b[H\x1b[2J").skip(1).collect();
    assert!(frames.len() >= 2, "{out:#?}");
    assert!(
        frames[0].starts_with("updated ") && frames[0].contains(" UTC, every 2s"),
        "{out:#?}"
    );
    let last = frames.last().unwrap();
    assert!(
        last.starts_with("updated ")
            && last
                .lines()
                .next()
                .unwrap()
                .ends_with("the run ended; nothing more will change"),
        "{out:#?}"
    );
    assert!(last.contains(": ended, started "), "{out:#?}");
}
