//! Shell completion as bash, zsh and fish do it: the script `farm
//! completions SHELL` prints, sourced in the real shell, offering the
//! subcommands, the task ids on the board and the agent names in the logs.
//! A shell that is not installed is skipped, and says so.

use std::path::Path;
use std::process::Command;

use crate::common::{Env, FARM, GIT_ENV};
use crate::run::{add_task, farm_run};

/// `shell ARGS...` in the hermetic environment, with the farm under test
/// first on the PATH (the script calls `farm`); its stdout. `None`: the
/// shell is not installed.
fn shell(env: &Env, name: &str, args: &[&str], hub_in_env: bool) -> Option<String> {
    let dir = Path::new(FARM).parent().unwrap();
    let path = format!(
        "{}:{}",
        dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let mut cmd = Command::new(name);
    cmd.env_clear()
        .env("PATH", path)
        .env("HOME", env.tmp.path())
        .env("NO_COLOR", "1")
        .envs(GIT_ENV)
        .env("FARM_STATE_DIR", env.tmp.path().join("state"))
        .current_dir(env.tmp.path())
        .args(args);
    if hub_in_env {
        cmd.env("FARM_HUB", &env.hub);
    }
    let out = match cmd.output() {
        Ok(out) => out,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            eprintln!("{name} is not installed: its completion is not tested");
            return None;
        }
        Err(e) => panic!("{name}: {e}"),
    };
    assert!(out.status.success(), "{name} {args:?}: {out:?}");
    Some(String::from_utf8(out.stdout).unwrap())
}

/// The words a shell offers after `line` (the words typed, the last one
/// being completed), one a line.
pub(crate) fn offered(
    env: &Env,
    name: &str,
    script: &Path,
    words: &[&str],
    hub_in_env: bool,
) -> Option<Vec<String>> {
    let script = script.display();
    let quoted: Vec<String> = words.iter().map(|w| format!("'{w}'")).collect();
    let list = quoted.join(" ");
    let probe = match name {
        // What bash does at a TAB: the words, the index of the one being
        // completed, then the function `complete -F` names.
        "bash" => format!(
            "source '{script}'\nCOMP_WORDS=({list}); COMP_CWORD={cword}; COMP_LINE=\"${{COMP_WORDS[*]}}\"; COMP_POINT=${{#COMP_LINE}}\n\
             _clap_complete_farm farm \"${{COMP_WORDS[COMP_CWORD]}}\" \"${{COMP_WORDS[COMP_CWORD-1]}}\"\n\
             printf '%s\\n' \"${{COMPREPLY[@]}}\"",
            cword = words.len() - 1
        ),
        // zsh's completion widgets cannot run outside a terminal: `compdef`
        // and `_describe` are stood in for, the script's own function runs
        // as zsh runs it, on `words` and `CURRENT`.
        "zsh" => format!(
            "compdef() {{ : }}\n_describe() {{ print -rl -- \"${{(@)other%%:*}}\" }}\n\
             source '{script}'\nwords=({list}); CURRENT=${{#words}}\n_clap_dynamic_completer_farm"
        ),
        // fish completes a command line as asked, no terminal needed.
        "fish" => format!("source '{script}'; complete -C \"{}\"", words.join(" ")),
        _ => unreachable!(),
    };
    let flags: &[&str] = match name {
        "bash" => &["--norc", "--noprofile", "-c"],
        "zsh" => &["-f", "-c"],
        _ => &["--no-config", "-c"],
    };
    let mut args = flags.to_vec();
    args.push(&probe);
    let out = shell(env, name, &args, hub_in_env)?;
    Some(
        out.lines()
            .map(|l| l.split('\t').next().unwrap().to_owned())
            .filter(|l| !l.is_empty())
            .collect(),
    )
}

/// Completion offered the subcommands and flags only: `farm task show
/// <TAB>` and `farm logs <TAB>` offered nothing of the board or the run.
#[test]
fn bash_zsh_and_fish_complete_task_ids_and_agent_names() {
    let env = Env::git_hub(&[]);
    add_task(&env, &["lexer", "-m", "Write the lexer"]);
    add_task(&env, &["parser", "-m", "Parse", "--after", "lexer"]);
    let agent = env.agent_script(
        "agent.sh",
        "echo x > \"$FARM_TASK.txt\" && git add . && git commit --quiet -m \"work on $FARM_TASK\"\n",
    );
    farm_run(&env, &agent, &["--name", "walker", "--once"]).code(6);
    add_task(&env, &["typer", "-m", "Check types"]);
    let mut tried = 0;
    for name in ["bash", "zsh", "fish"] {
        let out = env.farm(["completions", name]).run().success();
        let script = env.tmp.path().join(format!("farm.{name}"));
        std::fs::write(&script, &out.stdout).unwrap();
        let Some(tasks) = offered(&env, name, &script, &["farm", "task", "show", ""], true) else {
            continue;
        };
        tried += 1;
        for id in ["lexer", "parser", "typer"] {
            assert!(
                tasks.contains(&id.to_owned()),
                "{name}: no {id} in {tasks:?}"
            );
        }
        let logs = offered(&env, name, &script, &["farm", "logs", ""], true).unwrap();
        assert!(logs.contains(&"walker".to_owned()), "{name}: {logs:?}");
        assert!(logs.contains(&"lexer".to_owned()), "{name}: {logs:?}");
        assert!(
            !logs.contains(&"typer".to_owned()),
            "{name}: no log of typer: {logs:?}"
        );
        // A prefix narrows, the subcommands complete as before.
        let some = offered(&env, name, &script, &["farm", "task", "edit", "pa"], true).unwrap();
        assert_eq!(some, ["parser"], "{name}");
        let subs = offered(&env, name, &script, &["farm", "re"], true).unwrap();
        for sub in ["reap", "release", "report", "rescue", "resume"] {
            assert!(
                subs.contains(&sub.to_owned()),
                "{name}: no {sub} in {subs:?}"
            );
        }
        // The line's own --hub, with none in the environment.
        let hub = env.hub.to_str().unwrap();
        let there = offered(
            &env,
            name,
            &script,
            &["farm", "--hub", hub, "task", "rm", "le"],
            false,
        )
        .unwrap();
        assert_eq!(there, ["lexer"], "{name}");
    }
    eprintln!("completion tested in {tried} shell(s)");
}

/// Every shell's script is the same few lines calling back into farm.
#[test]
fn completions_for_each_shell_call_farm_back() {
    let env = Env::new();
    for shell in ["bash", "zsh", "fish", "elvish", "powershell"] {
        let out = env.farm(["completions", shell]).run().success();
        assert!(out.stdout.contains("FARM_COMPLETE"), "{shell}: {out:#?}");
    }
    let out = env.farm(["completions", "tcsh"]).run().code(2);
    assert!(out.stderr.contains("possible values: bash"), "{out:#?}");
}

/// Installed as `farm completions --help` says, `_farm` in `$fpath`, the zsh script is
/// the body of `_farm`, run at the first TAB: it named its completer for
/// later TABs and offered nothing at the first one, in every new shell.
/// A real interactive zsh in tmux, TAB pressed once.
#[test]
fn zsh_offers_the_task_ids_at_the_first_tab() {
    let env = Env::git_hub(&[]);
    add_task(&env, &["lexer", "-m", "Write the lexer"]);
    let home = env.tmp.path();
    let script = env.farm(["completions", "zsh"]).run().success().stdout;
    std::fs::create_dir_all(home.join("fpath")).unwrap();
    std::fs::write(home.join("fpath/_farm"), script).unwrap();
    std::fs::write(
        home.join(".zshrc"),
        format!(
            "PS1='> '\nexport PATH='{}':$PATH\nfpath=('{}' $fpath)\nautoload -U compinit; compinit -u\n",
            Path::new(FARM).parent().unwrap().display(),
            home.join("fpath").display()
        ),
    )
    .unwrap();
    let socket = home.join("tmux.sock");
    let tmux = |args: &[&str]| {
        Command::new("tmux")
            .arg("-S")
            .arg(&socket)
            .args(args)
            .env("HOME", home)
            .env("ZDOTDIR", home)
            .env("FARM_HUB", &env.hub)
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .output()
    };
    let installed = |name: &str| {
        Command::new(name)
            .arg("-c")
            .arg("true")
            .output()
            .is_ok_and(|o| o.status.success())
    };
    if !installed("zsh") || tmux(&["-V"]).is_err() {
        eprintln!("zsh or tmux is not installed: the first TAB is not tested");
        return;
    }
    let started = tmux(&["new-session", "-d", "-x", "120", "-y", "20", "zsh"]).unwrap();
    assert!(started.status.success(), "{started:?}");
    let _server = KillServer(&socket);
    let screen = || String::from_utf8(tmux(&["capture-pane", "-p"]).unwrap().stdout).unwrap();
    let wait = |what: &str| {
        let start = std::time::Instant::now();
        while start.elapsed() < std::time::Duration::from_secs(20) {
            if screen().contains(what) {
                return true;
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        false
    };
    // The line is typed, then TAB pressed once zsh shows it: a TAB that
    // comes with the text may reach zsh before its line editor reads keys.
    // (The screen comes without trailing blanks: the prompt is `>`.)
    let ready = wait(">");
    tmux(&["send-keys", "farm task show "]).unwrap();
    let typed = wait("> farm task show");
    std::thread::sleep(std::time::Duration::from_millis(500));
    tmux(&["send-keys", "Tab"]).unwrap();
    let offered = wait("lexer");
    let seen = screen();
    assert!(ready && typed, "zsh did not take the line: {seen}");
    assert!(offered, "the first TAB offered no task id: {seen}");
}

/// Ends the tmux server on this socket, however the test ends.
struct KillServer<'a>(&'a Path);

impl Drop for KillServer<'_> {
    fn drop(&mut self) {
        let _ = Command::new("tmux")
            .arg("-S")
            .arg(self.0)
            .arg("kill-server")
            .output();
    }
}
