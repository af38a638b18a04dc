//! What needs you, after a real run: a task failed for good, one stuck
//! behind it, one held by a holder silent for hours, the failed attempt's
//! rescue branch — at the top of `farm report`'s page (checked in headless
//! Chromium where there is one) and at the end of `farm status`.

use std::time::{Duration, SystemTime};

use crate::common::{Env, record};
use crate::run::{add_task, farm_run, rescue_branches};

/// The text of the page's `#needs-you` section, its tags dropped and its
/// spaces squeezed.
fn section_text(html: &str) -> String {
    let start = html
        .find("<section id=\"needs-you\">")
        .expect("a needs-you section");
    let end = start + html[start..].find("</section>").expect("its end");
    let mut text = String::new();
    let mut in_tag = false;
    for c in html[start..end].chars() {
        match c {
            '<' => in_tag = true,
            '>' => {
                in_tag = false;
                text.push(' ');
            }
            c if !in_tag => text.push(c),
            _ => {}
        }
    }
    let text = text
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&amp;", "&")
        .replace("&#39;", "'");
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[test]
fn the_report_and_status_say_what_needs_you() {
    let env = Env::git_hub(&[]);
    add_task(&env, &["doomed", "--max-attempts", "1", "-m", "Parse it"]);
    add_task(
        &env,
        &["after-doomed", "--after", "doomed", "-m", "Then this"],
    );
    add_task(&env, &["fine", "-m", "Easy"]);
    let agent = env.agent_script(
        "agent.sh",
        r#"echo "$FARM_TASK" > "$FARM_TASK.txt" && git add . && git commit -q -m "$FARM_TASK"
if [ "$FARM_TASK" = doomed ]; then echo "I could not make the parser work"; exit 3; fi
echo '{"type":"result","subtype":"success","is_error":false,"total_cost_usd":0.25}'
"#,
    );
    farm_run(&env, &agent, &[]).code(5);
    let rescued = rescue_branches(&env, "doomed");
    assert_eq!(rescued.len(), 1, "{rescued:?}");
    let rescue = &rescued[0];
    // A task whose holder went silent two hours ago, on another machine.
    add_task(&env, &["held", "-m", "Someone has it"]);
    env.plant(
        &record(
            "held",
            "bob",
            "box2",
            Duration::from_secs(3 * 3600),
            Duration::from_secs(2 * 3600),
        ),
        SystemTime::now() - Duration::from_secs(2 * 3600),
    );
    let state = env.tmp.path().join("state");
    let page = env.tmp.path().join("r.html");
    let doc = env
        .farm_git([
            "report",
            "--state-dir",
            state.to_str().unwrap(),
            "-o",
            page.to_str().unwrap(),
            "--json",
        ])
        .run()
        .success()
        .json();
    let needs = &doc["needs_you"];
    assert_eq!(needs["failed"][0]["task"], "doomed", "{needs:#}");
    assert_eq!(needs["left"]["claimed"], 1, "{needs:#}");
    assert_eq!(doc["outcomes"]["doomed"], "failed", "{doc:#}");
    assert_eq!(doc["outcomes"]["fine"], "done", "{doc:#}");

    let html = std::fs::read_to_string(&page).unwrap();
    // First on the page: before the cards and the lanes.
    let at = html.find("id=\"needs-you\"").unwrap();
    assert!(at < html.find("class=\"cards\"").unwrap());
    let text = section_text(&html);
    let hub = env.hub.display().to_string();
    for want in [
        "Needs you",
        "failed doomed : failed with exit code 3 farm task show doomed",
        "stuck after-doomed : depends on `doomed`, which failed farm task show after-doomed",
        "stuck held : held by bob@box2, stale (",
        &format!("rescued {rescue} : `doomed`:"),
        &format!("git -C {hub} log -p main..{rescue}"),
        "1 task left: 0 ready, 1 claimed, 0 blocked; cost: $0.25 so far",
    ] {
        assert!(text.contains(want), "no {want:?} in: {text}");
    }
    // "By task" has each task's outcome; the failed bar's panel its last words.
    assert!(
        html.contains("<td class=\"outcome failed\">failed</td>"),
        "{html}"
    );
    assert!(html.contains("<td class=\"outcome done\">done</td>"));
    assert!(
        html.contains("\"last\":\"I could not make the parser work\""),
        "{html}"
    );

    // `farm status` ends with the same summary, and has it in --json.
    let status = env
        .farm_git(["status", "--state-dir", state.to_str().unwrap()])
        .run()
        .success()
        .stdout;
    let tail = &status[status.find("NEEDS YOU").expect("a NEEDS YOU section")..];
    let flat = tail.split_whitespace().collect::<Vec<_>>().join(" ");
    for want in [
        "failed `doomed`: failed with exit code 3 (farm task show doomed)",
        "stuck `after-doomed`: depends on `doomed`, which failed",
        "stuck `held`: held by bob@box2, stale",
        &format!("rescued `{rescue}`: `doomed`:"),
        &format!("(git -C {hub} log -p main..{rescue})"),
        "left 1 task left: 0 ready, 1 claimed, 0 blocked",
        "cost $0.25 so far",
    ] {
        assert!(flat.contains(want), "no {want:?} in:\n{status}");
    }
    assert!(status.lines().all(|l| l.chars().count() <= 80), "{status}");
    let json = crate::run::status_json(&env);
    assert_eq!(json["needs_you"], *needs, "{json:#}");

    // In a real browser: the section is drawn, first, with its items.
    let Some(browser) = crate::report::chromium() else {
        return;
    };
    let loaded = crate::report::load(&browser, &page, env.tmp.path(), None);
    assert!(loaded.requests.is_empty(), "{:?}", loaded.requests);
    let dom_text = section_text(&loaded.dom);
    assert!(
        dom_text.contains("failed doomed : failed with exit code 3"),
        "{dom_text}"
    );
    assert_eq!(loaded.dom.matches("<li class=\"need ").count(), 4);
    if let Ok(shot) = std::env::var("FARM_NEEDS_SCREENSHOT") {
        crate::report::load(&browser, &page, env.tmp.path(), Some(shot.as_ref()));
    }
}
