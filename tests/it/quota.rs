//! Per-session limits (`--session-memory`, `--session-cpu`, farm.toml
//! `session_memory`, `session_cpu`): a session past them fails its
//! attempt, said in its note; the other tasks go on; bad values are
//! refused before anything is written.

use std::collections::BTreeSet;

use crate::common::Env;
use crate::run::{add_task, board, farm_run, show};

/// An agent that, on task `spin`, spins forever and, on task `eat`, maps
/// 512 MiB; on any other task it does the work.
fn agent(env: &Env) -> String {
    env.agent_script(
        "greedy.sh",
        "case \"$FARM_TASK\" in\n\
           spin) while :; do :; done;;\n\
           eat) python3 -c 'b = bytearray(512 * 2**20); print(len(b))' || exit 7;;\n\
         esac\n\
         echo done > \"$FARM_TASK.txt\"\ngit add -A\ngit commit -qm \"work on $FARM_TASK\"\n",
    )
}

/// Past 1 s of CPU the spinning session is stopped by the kernel (not by
/// the hour's timeout), past 256 MiB the eating one cannot allocate; both
/// attempts fail, saying why, and the third task is done.
#[test]
fn a_session_past_its_limits_fails_its_attempt_and_the_others_go_on() {
    let env = Env::git_hub(&[]);
    for id in ["spin", "eat", "fine"] {
        add_task(&env, &[id, "--max-attempts", "1", "-m", "Work"]);
    }
    let agent = agent(&env);
    let out = farm_run(
        &env,
        &agent,
        &[
            "--session-memory",
            "256M",
            "--session-cpu",
            "1s",
            "--timeout",
            "1h",
        ],
    )
    .code(5);
    assert!(
        out.stderr.contains(
            "farm run: session limits: 256 MiB of memory and 1s of CPU time for each process"
        ),
        "said at start-up: {out:#?}"
    );
    assert_eq!(
        board(&env, "tasks/failed"),
        BTreeSet::from(["eat".to_owned(), "spin".to_owned()]),
        "{out:#?}"
    );
    assert_eq!(
        board(&env, "tasks/done"),
        BTreeSet::from(["fine".to_owned()])
    );
    let spin = show(&env, "main:tasks/failed/spin.md").unwrap();
    assert!(spin.contains("SIGXCPU: past its CPU time limit"), "{spin}");
    let eat = show(&env, "main:tasks/failed/eat.md").unwrap();
    assert!(eat.contains("failed with exit code 7"), "{eat}");
    assert!(eat.contains("MemoryError"), "{eat}");
}

/// Without limits the same agent's `eat` maps its 512 MiB and is done:
/// the limit, not the machine, failed it above.
#[test]
fn without_limits_the_same_session_succeeds() {
    let env = Env::git_hub(&[]);
    add_task(&env, &["eat", "--max-attempts", "1", "-m", "Work"]);
    let agent = agent(&env);
    let out = farm_run(&env, &agent, &[]).success();
    assert!(!out.stderr.contains("session limits"), "{out:#?}");
    assert_eq!(
        board(&env, "tasks/done"),
        BTreeSet::from(["eat".to_owned()])
    );
}

/// Nonsense is refused, naming where it came from and how to say it, and
/// no claim is made.
#[test]
fn bad_limits_are_refused_naming_the_flag_or_the_setting() {
    let env = Env::git_hub(&[("farm.toml", "session_cpu = \"soon\"\n")]);
    add_task(&env, &["t", "-m", "Work"]);
    let agent = agent(&env);
    let out = farm_run(&env, &agent, &["--session-memory", "lots"]).code(2);
    assert!(
        out.stderr
            .contains("--session-memory `lots`: `lots` is not a size")
            && out.stderr.contains("4G, 512M"),
        "{out:#?}"
    );
    let out = farm_run(&env, &agent, &[]).code(2);
    assert!(
        out.stderr.contains("farm.toml `session_cpu` `soon`") && out.stderr.contains("30m"),
        "{out:#?}"
    );
    assert!(board(&env, "tasks/done").is_empty());
    let locks = env.farm_git(["locks", "--json"]).run().success().stdout;
    assert!(!locks.contains("\"task\""), "no claim: {locks}");
}
