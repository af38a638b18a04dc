//! `farm report`: the page of a generated 16-agent, 2,000-session night
//! checked in a real headless Chromium (every session a bar, the totals
//! those of the journal, no network request), and the report of a real run.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::common::Env;
use crate::night;

/// A headless Chromium of the distribution, if this machine has one. CI
/// installs it (`.ci/run`) and sets `FARM_REQUIRE_BROWSER=1`: there, a
/// missing browser fails the test rather than skipping it.
pub(crate) fn chromium() -> Option<PathBuf> {
    let found = ["chromium", "chromium-browser", "google-chrome", "chrome"]
        .iter()
        .find_map(|name| {
            std::env::var_os("PATH").and_then(|paths| {
                std::env::split_paths(&paths)
                    .map(|d| d.join(name))
                    .find(|p| p.is_file())
            })
        });
    if found.is_none() {
        assert!(
            std::env::var("FARM_REQUIRE_BROWSER").as_deref() != Ok("1"),
            "no chromium on PATH, and FARM_REQUIRE_BROWSER=1 (install the distribution's `chromium`)"
        );
        eprintln!("skipped: no chromium on PATH (apt-get install chromium)");
    }
    found
}

/// What the browser made of a page: the DOM after its scripts ran, the
/// URLs the page itself asked the network for (Chromium's own background
/// requests left out), and the Content-Security-Policy refusals it logged.
pub(crate) struct Loaded {
    pub dom: String,
    pub requests: Vec<String>,
    refused: Vec<String>,
}

/// Load `page` in headless Chromium with a network log.
pub(crate) fn load(browser: &Path, page: &Path, work: &Path, screenshot: Option<&Path>) -> Loaded {
    let net = work.join("net.json");
    let _ = std::fs::remove_file(&net);
    let mut cmd = Command::new(browser);
    cmd.args([
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--no-first-run",
        "--disable-extensions",
        "--hide-scrollbars",
        "--enable-logging=stderr",
        "--v=0",
        "--window-size=1300,1000",
    ])
    .arg(format!(
        "--user-data-dir={}",
        work.join("profile").display()
    ))
    .arg(format!("--log-net-log={}", net.display()));
    match screenshot {
        Some(png) => cmd.arg(format!("--screenshot={}", png.display())),
        None => cmd.arg("--dump-dom"),
    };
    let out = cmd
        .arg(format!("file://{}", page.display()))
        .output()
        .expect("chromium starts");
    assert!(out.status.success(), "chromium failed: {out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    let refused = stderr
        .lines()
        .filter(|l| l.contains("Content Security Policy"))
        .map(str::to_owned)
        .collect();
    // The page's requests are those made for a file:// site; Chromium's own
    // (updates, time, accounts) have no such site.
    let log: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&net).expect("a net log"))
            .expect("net log JSON");
    let mut requests: Vec<String> = log["events"]
        .as_array()
        .expect("events")
        .iter()
        .filter_map(|e| {
            let p = &e["params"];
            let url = p["url"].as_str()?;
            let key = p["network_isolation_key"].as_str()?;
            (key.contains("file://") && !url.starts_with("file:") && !url.starts_with("data:"))
                .then(|| url.to_owned())
        })
        .collect();
    requests.dedup();
    Loaded {
        dom: String::from_utf8_lossy(&out.stdout).into_owned(),
        requests,
        refused,
    }
}

/// `farm report --state-dir STATE ARGS...`.
fn report(env: &Env, state: &Path, args: &[&str]) -> crate::common::Farm {
    let mut all = vec!["report", "--state-dir", state.to_str().unwrap()];
    all.extend(args);
    env.farm_git(all)
}

#[test]
fn a_sixteen_agent_night_of_2000_sessions_renders_every_bar_in_chromium() {
    let Some(browser) = chromium() else { return };
    let env = Env::git_hub(&[]);
    let state = env.tmp.path().join("state");
    std::fs::create_dir_all(&state).unwrap();
    let made = night::night(16, 2000, 1_796_000_000.0, 4242);
    std::fs::write(state.join("journal.jsonl"), &made.journal).unwrap();
    let page = env.tmp.path().join("night.html");
    let trace = env.tmp.path().join("night.json");
    let summary = report(
        &env,
        &state,
        &[
            "-o",
            page.to_str().unwrap(),
            "--trace",
            trace.to_str().unwrap(),
            "--json",
        ],
    )
    .run()
    .success()
    .json();
    assert_eq!(summary["total"]["sessions"], 2000, "{summary:#}");
    assert_eq!(summary["lanes"].as_array().unwrap().len(), 16);

    let size = std::fs::metadata(&page).unwrap().len();
    eprintln!("report of 16 agents, 2000 sessions: {size} bytes");
    assert!(size < 2 * 1024 * 1024, "the page is {size} bytes");

    let loaded = load(&browser, &page, env.tmp.path(), None);
    let dom = &loaded.dom;
    // Every session has its bar, numbered once each.
    let bars = regex::Regex::new(r#"<rect class="b [a-z]+( crit)?" data-i="(\d+)""#).unwrap();
    let seen: BTreeSet<usize> = bars
        .captures_iter(dom)
        .map(|c| c[2].parse().unwrap())
        .collect();
    assert_eq!(bars.captures_iter(dom).count(), made.sessions);
    assert_eq!(seen, (0..made.sessions).collect());
    // The totals are the journal's.
    let card = |id: &str| {
        let re = regex::Regex::new(&format!(r#"id="total-{id}"><b>([^<]*)</b>"#)).unwrap();
        re.captures(dom)
            .map(|c| c[1].to_owned())
            .unwrap_or_default()
    };
    assert_eq!(card("sessions"), made.sessions.to_string());
    assert_eq!(card("done"), made.done.to_string());
    assert_eq!(
        card("cost"),
        format!("${}.{:02}", made.cost_cents / 100, made.cost_cents % 100)
    );
    assert_eq!(dom.matches("<rect class=\"w").count(), made.waits);
    // Its script ran (the page says when it was done rendering).
    let rendered = regex::Regex::new(r#"data-rendered="([0-9.]+)""#)
        .unwrap()
        .captures(dom)
        .map(|c| c[1].parse::<f64>().unwrap())
        .expect("the page's script ran");
    eprintln!("rendered in {rendered} ms (performance.now() at the end of the page)");
    // Nothing asked of the network, nothing refused by its policy.
    assert_eq!(loaded.requests, Vec::<String>::new());
    assert_eq!(loaded.refused, Vec::<String>::new());

    // A screenshot, kept beside the test binaries for a look.
    let shots = Path::new(env!("CARGO_TARGET_TMPDIR")).join("report");
    std::fs::create_dir_all(&shots).unwrap();
    let png = shots.join("night-16x2000.png");
    let _ = std::fs::remove_file(&png);
    load(&browser, &page, env.tmp.path(), Some(&png));
    let bytes = std::fs::read(&png).expect("a screenshot");
    assert!(
        bytes.starts_with(b"\x89PNG") && bytes.len() > 10_000,
        "{}",
        bytes.len()
    );
    eprintln!("screenshot: {}", png.display());

    // The trace has the same sessions.
    let t: serde_json::Value = serde_json::from_slice(&std::fs::read(&trace).unwrap()).unwrap();
    let complete = t["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["ph"] == "X" && e["cat"] != "wait")
        .count();
    assert_eq!(complete, made.sessions);
}

/// The network check above can fail: a page that loads an image from
/// elsewhere is caught, with its policy (refused) and without (requested).
#[test]
fn the_browser_check_catches_a_page_that_reaches_out() {
    let Some(browser) = chromium() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let img = r#"<img src="http://127.0.0.1:9/x.png">"#;
    let csp = r#"<meta http-equiv="Content-Security-Policy" content="default-src 'none'">"#;
    let open = tmp.path().join("open.html");
    std::fs::write(
        &open,
        format!("<!doctype html><html><body>{img}</body></html>"),
    )
    .unwrap();
    let closed = tmp.path().join("closed.html");
    std::fs::write(
        &closed,
        format!("<!doctype html><html><head>{csp}</head><body>{img}</body></html>"),
    )
    .unwrap();
    let loaded = load(&browser, &open, tmp.path(), None);
    assert_eq!(loaded.requests, ["http://127.0.0.1:9/x.png"]);
    let loaded = load(&browser, &closed, tmp.path(), None);
    assert_eq!(loaded.requests, Vec::<String>::new());
    assert_eq!(loaded.refused.len(), 1, "{:?}", loaded.refused);
}

/// The report of a real run: its sessions, done tasks and critical path
/// are the run's, and the trace opens as JSON.
#[test]
fn the_report_of_a_real_run_counts_what_the_run_did() {
    let env = Env::git_hub(&[]);
    crate::run::add_task(&env, &["a", "-m", "First"]);
    crate::run::add_task(&env, &["b", "-m", "Second", "--after", "a"]);
    crate::run::add_task(&env, &["c", "-m", "Alone"]);
    let agent = env.agent_script(
        "agent.sh",
        "case \"$FARM_TASK\" in a|b) sleep 0.4;; esac\n\
         echo \"$FARM_TASK\" > \"$FARM_TASK.txt\"\ngit add -A\ngit commit -q -m \"$FARM_TASK\"\n",
    );
    crate::run::farm_run(&env, &agent, &["-j", "2"]).success();
    let state = env.tmp.path().join("state");
    let page = env.tmp.path().join("r.html");
    let summary = report(&env, &state, &["-o", page.to_str().unwrap(), "--json"])
        .run()
        .success()
        .json();
    assert_eq!(summary["total"]["sessions"], 3, "{summary:#}");
    assert_eq!(summary["done"], 3, "{summary:#}");
    assert_eq!(summary["counts"]["done"], 3, "{summary:#}");
    assert_eq!(summary["by_cli"]["sh"]["sessions"], 3, "{summary:#}");
    // b waits for a: the chain a → b is the critical path (two sessions
    // against c's one).
    assert_eq!(
        summary["critical_path"]["tasks"],
        serde_json::json!(["a", "b"]),
        "{summary:#}"
    );
    let html = std::fs::read_to_string(&page).unwrap();
    assert_eq!(html.matches("<rect class=\"b done").count(), 3);

    // --open hands the page to $BROWSER.
    let opened = env.tmp.path().join("opened");
    let browser = env.tmp.path().join("browser.sh");
    std::fs::write(&browser, format!("echo \"$1\" > '{}'\n", opened.display())).unwrap();
    let out = report(&env, &state, &["-o", page.to_str().unwrap(), "--open"])
        .env("BROWSER", format!("sh {}", browser.display()))
        .run()
        .success();
    assert!(out.stderr.contains("opened "), "{out:#?}");
    crate::common::wait_for(&opened);
    let start = std::time::Instant::now();
    while std::fs::read_to_string(&opened)
        .unwrap_or_default()
        .trim()
        .is_empty()
    {
        assert!(start.elapsed() < std::time::Duration::from_secs(10));
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert_eq!(
        std::fs::read_to_string(&opened).unwrap().trim(),
        page.to_str().unwrap()
    );

    // Nothing in the journal for that run: a clear error, exit 2.
    let out = report(&env, &state, &["--run", "1"]).run().code(2);
    assert!(
        out.stderr.contains("no run of pid 1 in the journal"),
        "{out:#?}"
    );
    let out = env
        .farm_git(["report", "--since", "yesterday"])
        .run()
        .code(2);
    assert!(out.stderr.contains("invalid time `yesterday`"), "{out:#?}");
}

/// A state dir whose journal holds one short run, by hand.
fn small_journal(env: &Env) -> PathBuf {
    let state = env.tmp.path().join("state");
    std::fs::create_dir_all(&state).unwrap();
    std::fs::write(
        state.join("journal.jsonl"),
        "{\"at\":\"2026-12-01T00:00:00.000Z\",\"pid\":7,\"event\":\"run_start\",\"agents\":[\"a\"]}\n\
         {\"at\":\"2026-12-01T00:00:05.000Z\",\"pid\":7,\"agent\":\"a\",\"event\":\"claim\",\"task\":\"t\",\"attempt\":1}\n\
         {\"at\":\"2026-12-01T00:01:00.000Z\",\"pid\":7,\"agent\":\"a\",\"event\":\"session_end\",\"task\":\"t\",\"attempt\":1,\"outcome\":\"success\",\"class\":\"success\",\"secs\":55.0}\n\
         {\"at\":\"2026-12-01T00:01:01.000Z\",\"pid\":7,\"agent\":\"a\",\"event\":\"done\",\"task\":\"t\"}\n\
         {\"at\":\"2026-12-01T00:01:02.000Z\",\"pid\":7,\"event\":\"run_end\"}\n",
    )
    .unwrap();
    state
}

/// Regression: `farm report -o /nonexistent/dir/x.html` made the directory
/// (at `/`, as root). A page or trace in a directory that does not exist is
/// refused, exit 2, naming the directory; nothing is made.
#[test]
fn a_report_into_a_directory_that_does_not_exist_is_refused() {
    let env = Env::git_hub(&[]);
    let state = small_journal(&env);
    let missing = env.tmp.path().join("nonexistent");
    let page = missing.join("dir/x.html");
    let out = report(&env, &state, &["-o", page.to_str().unwrap()])
        .run()
        .code(2);
    assert!(
        out.stderr
            .contains(&format!("`{}`", missing.join("dir").display())),
        "{out:#?}"
    );
    assert!(!missing.exists(), "made {}", missing.display());
    // A trace there too, with the page where it may go: neither is written.
    let fine = env.tmp.path().join("fine.html");
    let trace = missing.join("t.json");
    report(
        &env,
        &state,
        &[
            "-o",
            fine.to_str().unwrap(),
            "--trace",
            trace.to_str().unwrap(),
        ],
    )
    .run()
    .code(2);
    assert!(!missing.exists() && !fine.exists());
}

/// Regression: the page and the trace were written 0600 whatever the umask
/// (a temp file's mode), so a report meant to be served or shared was not
/// readable by others. They take the umask's mode, as any file would.
#[test]
fn report_files_take_the_umask() {
    use std::os::unix::fs::PermissionsExt;
    use std::os::unix::process::CommandExt;
    let env = Env::git_hub(&[]);
    let state = small_journal(&env);
    for (umask, want) in [(0o022, 0o644), (0o027, 0o640)] {
        let page = env.tmp.path().join(format!("r-{umask:o}.html"));
        let trace = env.tmp.path().join(format!("t-{umask:o}.json"));
        let mut farm = report(
            &env,
            &state,
            &[
                "-o",
                page.to_str().unwrap(),
                "--trace",
                trace.to_str().unwrap(),
            ],
        );
        // SAFETY: umask is async-signal-safe.
        unsafe {
            farm.cmd.pre_exec(move || {
                libc::umask(umask);
                Ok(())
            });
        }
        farm.run().success();
        for file in [&page, &trace] {
            let mode = std::fs::metadata(file).unwrap().permissions().mode() & 0o777;
            assert_eq!(mode, want, "{}: {mode:o}", file.display());
        }
    }
}

/// Regression: `--open` on a machine with no display said "opened … with
/// xdg-open", which had failed at once. With no `$BROWSER`, an opener that
/// fails (as xdg-open does with no display) opened nothing, and is said so.
#[test]
fn open_with_no_display_does_not_say_opened() {
    use std::os::unix::fs::PermissionsExt;
    let env = Env::git_hub(&[]);
    let state = small_journal(&env);
    let bin = env.tmp.path().join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    for opener in ["xdg-open", "open"] {
        let path = bin.join(opener);
        std::fs::write(&path, "#!/bin/sh\necho 'no method available' >&2\nexit 3\n").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let page = env.tmp.path().join("r.html");
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let out = report(&env, &state, &["-o", page.to_str().unwrap(), "--open"])
        .env("PATH", path)
        .run()
        .success();
    assert!(!out.stderr.contains("opened"), "{out:#?}");
    assert!(
        out.stderr
            .contains(&format!("the page is {}", page.display())),
        "{out:#?}"
    );
}

/// Regression: `farm run` said "7 sessions" and `farm report` of the same
/// run "10 sessions": the report counted the merge sessions in. It counts
/// them apart, as `farm run` and `farm status` do.
#[test]
fn the_report_counts_merge_sessions_apart_as_the_run_does() {
    let env = Env::git_hub(&[]);
    let state = small_journal(&env);
    let mut text = std::fs::read_to_string(state.join("journal.jsonl")).unwrap();
    let end = text.rfind("{\"at\"").unwrap();
    text.insert_str(
        end,
        "{\"at\":\"2026-12-01T00:01:01.500Z\",\"pid\":7,\"agent\":\"a\",\"event\":\"merge_end\",\"task\":\"t\",\"outcome\":\"success\",\"result\":\"resolved\",\"secs\":0.5}\n",
    );
    std::fs::write(state.join("journal.jsonl"), text).unwrap();
    let page = env.tmp.path().join("r.html");
    let out = report(&env, &state, &["-o", page.to_str().unwrap()])
        .run()
        .success();
    assert!(
        out.stderr
            .contains("1 run: 1 session, 1 merge session, 1 done"),
        "{out:#?}"
    );
}
