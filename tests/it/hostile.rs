//! Agents that turn their clone's git against farm: a config that sends
//! farm's pushes elsewhere, hooks that make farm's own git commands fail.
//! farm pushes to and fetches from the hub it was given, whatever the
//! clone's config says, and runs no hook an agent could have planted — the
//! hub's own hooks still run.

use std::path::Path;
use std::time::Instant;

use crate::common::{Env, git_in};
use crate::daemon::{Daemon, Machine, Running};
use crate::run::{LIMIT, add_task, assert_hub_sound, board, rescue_branches, run_args, show};

/// A bare repository of the agent's own, to send the work to.
fn elsewhere(tmp: &Path) -> std::path::PathBuf {
    let dir = tmp.join("elsewhere.git");
    let (ok, _, err) = git_in(tmp, tmp, ["init", "-q", "--bare", dir.to_str().unwrap()]);
    assert!(ok, "{err}");
    dir
}

/// The refs a repository holds (none, for one nothing was pushed to).
fn refs(dir: &Path, home: &Path) -> String {
    git_in(dir, home, ["for-each-ref"]).1
}

/// The agent's lines that point every way of reaching the hub at `evil`:
/// the remote's push URL and URL, and the rewrites of the hub's URL.
fn redirect(evil: &Path) -> String {
    let evil = evil.display();
    format!(
        "git config remote.origin.pushurl '{evil}'\n\
         git config url.'{evil}'.pushInsteadOf \"$FARM_HUB\"\n\
         git config url.'{evil}'.insteadOf \"$FARM_HUB\"\n\
         git config remote.origin.url '{evil}'\n"
    )
}

/// Hooks that fail, in `.git/hooks` and in a directory `core.hooksPath`
/// names, for every git command farm runs in a clone after a session.
fn failing_hooks(dir: &Path) -> String {
    let hooks = dir.display();
    let mut lines = format!("mkdir -p '{hooks}'\n");
    for hook in [
        "pre-push",
        "pre-commit",
        "commit-msg",
        "post-commit",
        "pre-rebase",
        "post-checkout",
        "post-rewrite",
        "pre-merge-commit",
        "reference-transaction",
    ] {
        for at in [hooks.to_string(), ".git/hooks".to_owned()] {
            lines.push_str(&format!(
                "printf '#!/bin/sh\\necho planted {hook} >&2\\nexit 1\\n' > '{at}/{hook}'\nchmod +x '{at}/{hook}'\n"
            ));
        }
    }
    lines.push_str(&format!("git config core.hooksPath '{hooks}'\n"));
    lines
}

/// Regression: an agent that set `remote.origin.pushurl` (or `url`, or
/// `url.*.pushInsteadOf`) in its clone sent the work and its rescue
/// branches to its own repository, and farm said "integrated": pushes went
/// to the remote *name* `origin`, read from the clone's config, and a local
/// hub's fetch bypassed `origin`, so nothing noticed.
#[test]
fn a_redirected_push_still_lands_on_the_hub() {
    let env = Env::git_hub(&[]);
    add_task(&env, &["r1", "-m", "Anything"]);
    add_task(&env, &["r2", "-m", "Anything"]);
    let evil = elsewhere(env.tmp.path());
    let agent = env.agent_script(
        "redirect.sh",
        &format!(
            "set -eu\necho w > \"w-$FARM_TASK\"\ngit add -A\ngit commit -q -m \"$FARM_TASK\"\n{}",
            redirect(&evil)
        ),
    );
    let out = env.farm_git(run_args(&env, &agent, &[])).run_within(LIMIT);
    assert_eq!(
        refs(&evil, env.tmp.path()),
        "",
        "pushed elsewhere: {out:#?}"
    );
    assert_eq!(out.code, Some(0), "{out:#?}");
    assert_eq!(board(&env, "tasks/done"), ["r1".into(), "r2".into()].into());
    for id in ["r1", "r2"] {
        assert_eq!(show(&env, &format!("main:w-{id}")).as_deref(), Some("w\n"));
    }
    assert!(out.stderr.contains("git config was changed"), "{out:#?}");
    assert_hub_sound(&env);
}

/// The same on a hub reached by URL (git store): the claims commit went to
/// the agent's repository too, and the real claim was left behind.
#[test]
fn a_redirected_push_to_a_url_hub_still_lands_and_releases_the_claim() {
    let daemon = Daemon::with_hub(&[("tasks/u1.md", "+++\ntitle = \"u1\"\n+++\nWork.\n")]);
    let evil = elsewhere(daemon.base.path());
    let agent = daemon.base.path().join("redirect.sh");
    std::fs::write(
        &agent,
        format!(
            "set -eu\necho w > w-u1\ngit add -A\ngit commit -q -m u1\n{}",
            redirect(&evil)
        ),
    )
    .unwrap();
    let agent = format!("sh '{}'", agent.display());
    let machine = Machine::new("m1", &daemon.url());
    let out =
        Running::spawn(machine.farm(["run", "--agent", &agent])).finish_by(Instant::now() + LIMIT);
    assert_eq!(
        refs(&evil, daemon.base.path()),
        "",
        "pushed elsewhere: {out:#?}"
    );
    assert_eq!(out.code, Some(0), "{out:#?}");
    let hub = daemon.hub();
    assert_eq!(hub.show("main:w-u1").as_deref(), Some("w\n"), "{out:#?}");
    assert!(hub.show("main:tasks/done/u1.md").is_some(), "{out:#?}");
    assert_eq!(machine.locks()["claims"], serde_json::json!([]));
}

/// Regression: a failing `pre-push` hook an agent left (in `.git/hooks`,
/// or where it pointed `core.hooksPath`) wedged it for good: every push
/// failed, the run exited 1, and every restart failed the same way, the
/// recovery's rescue push too. farm's own git commands in a clone run no
/// hook the agent could have planted; the hub's hooks (here a
/// `post-receive` of the hub's owner) still run.
#[test]
fn hooks_an_agent_planted_do_not_run_and_the_hubs_own_do() {
    let env = Env::git_hub(&[]);
    add_task(&env, &["h1", "-m", "Anything"]);
    add_task(&env, &["h2", "-m", "Anything"]);
    let received = env.tmp.path().join("received");
    let hub_hooks = env.hub.join(".git/hooks");
    std::fs::create_dir_all(&hub_hooks).unwrap();
    let post_receive = hub_hooks.join("post-receive");
    std::fs::write(
        &post_receive,
        format!("#!/bin/sh\necho pushed >> '{}'\n", received.display()),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&post_receive, std::fs::Permissions::from_mode(0o755)).unwrap();
    let planted = env.tmp.path().join("planted-hooks");
    let agent = env.agent_script(
        "hooks.sh",
        &format!(
            "set -eu\necho w > \"w-$FARM_TASK\"\ngit add -A\ngit commit -q -m \"$FARM_TASK\"\n{}",
            failing_hooks(&planted)
        ),
    );
    let out = env.farm_git(run_args(&env, &agent, &[])).run_within(LIMIT);
    assert!(
        !out.stderr.contains("planted"),
        "a planted hook ran: {out:#?}"
    );
    assert_eq!(out.code, Some(0), "{out:#?}");
    assert_eq!(board(&env, "tasks/done"), ["h1".into(), "h2".into()].into());
    assert!(
        std::fs::read_to_string(&received).is_ok_and(|r| r.lines().count() >= 2),
        "the hub's own post-receive did not run: {out:#?}"
    );
    assert_hub_sound(&env);
}

/// A session that fails after planting the hooks: its work goes to a
/// rescue branch on the hub — the rescue push runs no planted hook either.
#[test]
fn a_rescue_push_runs_no_planted_hook() {
    let env = Env::git_hub(&[]);
    add_task(&env, &["f1", "-m", "Anything", "--max-attempts", "1"]);
    let planted = env.tmp.path().join("planted-hooks");
    let agent = env.agent_script(
        "fails.sh",
        &format!(
            "set -eu\necho w > w-f1\ngit add -A\ngit commit -q -m f1\n{}exit 3\n",
            failing_hooks(&planted)
        ),
    );
    let out = env.farm_git(run_args(&env, &agent, &[])).run_within(LIMIT);
    assert!(
        !out.stderr.contains("planted"),
        "a planted hook ran: {out:#?}"
    );
    assert_eq!(out.code, Some(5), "{out:#?}");
    // (A session that fails at once is taken for one that did not start,
    // and run again: each leaves a rescue branch.)
    let rescued = rescue_branches(&env, "f1");
    assert!(!rescued.is_empty(), "{out:#?}");
    for branch in rescued {
        assert_eq!(
            show(&env, &format!("{branch}:w-f1")).as_deref(),
            Some("w\n"),
            "{out:#?}"
        );
    }
}
