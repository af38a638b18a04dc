//! Issue 13, tests steer: the project's test suite as farm runs and reads
//! it (`[tests]` in farm.toml, `farm tests`).

use crate::common::Env;

/// A `farm init` hub holding `files`, whose farm.toml ends with `tests`.
fn hub_with_tests(tests: &str, files: &[(&str, &str)]) -> Env {
    let env = Env::git_hub(files);
    let toml = env.hub.join("farm.toml");
    let mut text = std::fs::read_to_string(&toml).unwrap();
    text.push_str(tests);
    std::fs::write(&toml, text).unwrap();
    env.git(["commit", "-qam", "the tests"]);
    env
}

/// Three tests in TAP; `parser` fails until a file `fixed` is committed.
const TAP_SUITE: &str = "echo 1..3
echo 'ok 1 - lexer'
if [ -e fixed ]; then echo 'ok 2 - parser'; else printf 'not ok 2 - parser\\n  ---\\n  message: expected an if\\n  ...\\n'; fi
echo 'ok 3 - emit # SKIP later'
[ -e fixed ]
";

#[test]
fn farm_tests_runs_the_suite_of_the_branch_and_reads_its_report() {
    let env = hub_with_tests(
        "\n[tests]\ncommand = \"sh t.sh\"\nformat = \"tap\"\n",
        &[("t.sh", TAP_SUITE)],
    );
    let out = env.farm_git(["tests"]).run().success();
    assert_eq!(
        out.stdout,
        "ERROR: parser: expected an if\n1 passed, 1 failed, 1 skipped, 3 total\n"
    );
    out.stderr_has("tests on `main` at ")
        .stderr_has("(`sh t.sh`, tap): 1 passed, 1 failed, 1 skipped, 3 total in ");

    let doc = env.farm_git(["tests", "--json"]).run().success().json();
    assert_eq!(
        doc["counts"],
        serde_json::json!({"passed": 1, "failed": 1, "skipped": 1, "total": 3})
    );
    assert_eq!(doc["exit"], 1, "the suite's own exit code");
    assert_eq!(doc["format"], "tap");
    assert_eq!(doc["branch"], "main");
    assert_eq!(doc["commit"], env.git(["rev-parse", "HEAD"]));
    assert_eq!(doc["failures"][0]["test"], "parser");
    assert_eq!(doc["failures"][0]["message"], "expected an if");
    assert_eq!(
        doc["errors"],
        serde_json::json!(["ERROR: parser: expected an if"])
    );

    // The branch is tested, not the hub's work tree.
    std::fs::write(env.hub.join("fixed"), "").unwrap();
    let doc = env.farm_git(["tests", "--json"]).run().success().json();
    assert_eq!(
        doc["counts"]["failed"], 1,
        "a fix not committed is not on the branch"
    );
    env.git(["add", "fixed"]);
    env.git(["commit", "-qm", "fix the parser"]);
    let out = env.farm_git(["tests"]).run().success();
    assert_eq!(out.stdout, "2 passed, 0 failed, 1 skipped, 3 total\n");
}

#[test]
fn a_junit_report_file_is_read_with_its_groups() {
    let script = r#"mkdir -p out
cat > out/report.xml <<'XML'
<?xml version="1.0" encoding="utf-8"?>
<testsuites><testsuite name="pytest">
<testcase classname="tests.test_lexer" name="test_ints" file="tests/test_lexer.py"/>
<testcase classname="tests.test_lexer" name="test_floats" file="tests/test_lexer.py"><failure message="assert 1.4 == 1.5">detail</failure></testcase>
<testcase classname="tests.test_parser" name="test_if"/>
</testsuite></testsuites>
XML
exit 1
"#;
    let env = hub_with_tests(
        "\n[tests]\ncommand = \"sh t.sh\"\nformat = \"junit\"\nreport = \"out/report.xml\"\n",
        &[("t.sh", script)],
    );
    let out = env.farm_git(["tests"]).run().success();
    assert_eq!(
        out.stdout,
        "GROUP              PASSED  FAILED  SKIPPED  TOTAL
tests.test_lexer   1       1       0        2
tests.test_parser  1       0       0        1
ERROR: tests.test_lexer::test_floats: assert 1.4 == 1.5
2 passed, 1 failed, 0 skipped, 3 total
"
    );
    let doc = env.farm_git(["tests", "--json"]).run().success().json();
    assert_eq!(doc["failures"][0]["file"], "tests/test_lexer.py");
    assert_eq!(doc["groups"]["tests.test_parser"]["passed"], 1);
}

#[test]
fn a_suite_farm_cannot_run_or_read_is_a_clear_error() {
    // No [tests] at all.
    let env = Env::git_hub(&[]);
    env.farm_git(["tests"])
        .run()
        .code(2)
        .stderr_has("farm.toml on `main` has no [tests]")
        .stderr_has("hint: add a [tests] table");

    for (tests, code, says) in [
        (
            "command = \"sh t.sh\"\nformat = \"xunit\"",
            2,
            "invalid [tests] in farm.toml on `main`: unknown `format` \"xunit\": one of junit, libtest-json, tap, lines",
        ),
        (
            "command = \"no-such-runner --all\"\nformat = \"tap\"",
            2,
            "cannot run the test command `no-such-runner --all`",
        ),
        (
            "command = \"sh -c 'echo Segmentation fault; exit 139'\"\nformat = \"junit\"",
            1,
            "cannot read the test report as junit: line 1: no <testsuites> or <testsuite> element (`Segmentation fault`)",
        ),
        (
            "command = \"sh -c 'echo started; sleep 60'\"\nformat = \"tap\"\ntimeout = \"1s\"",
            1,
            "did not finish within 1s: killed",
        ),
        (
            "command = \"true\"\nformat = \"junit\"\nreport = \"report.xml\"",
            1,
            "left no report at `report.xml`",
        ),
    ] {
        let env = hub_with_tests(&format!("\n[tests]\n{tests}\n"), &[("t.sh", TAP_SUITE)]);
        env.farm_git(["tests"]).run().code(code).stderr_has(says);
    }
}

#[test]
fn farm_doctor_names_an_invalid_tests_table() {
    let env = hub_with_tests(
        "\n[tests]\ncommand = \"sh t.sh\"\nformat = \"tap\"\nreport = \"../out.tap\"\n",
        &[("t.sh", TAP_SUITE)],
    );
    let state = env.tmp.path().join("state");
    let out = env
        .farm_git([
            "doctor",
            "--agent",
            "sh",
            "--state-dir",
            state.to_str().unwrap(),
        ])
        .run()
        .code(1);
    assert!(
        out.stdout.lines().any(|l| l.starts_with("!! settings")
            && l.contains("invalid [tests] in farm.toml on branch `main`")
            && l.contains("inside the clone")),
        "{out:#?}"
    );
}

/// Issue 13, part 4's first piece: labels on tasks (what roles will pick
/// by), given to `farm task add`, written in the file, listed by `farm tasks`.
#[test]
fn task_add_labels_a_task_and_farm_tasks_lists_its_labels() {
    let env = Env::git_hub(&[]);
    env.farm_git([
        "task", "add", "t1", "--label", "test", "--label", "docs", "--label", "test", "-m",
        "Fix it",
    ])
    .run()
    .success();
    let file = env.git(["show", "main:tasks/t1.md"]);
    assert!(
        file.lines().any(|l| l == "labels = [\"test\", \"docs\"]"),
        "{file}"
    );
    env.farm_git(["task", "add", "t2", "-m", "No labels"])
        .run()
        .success();
    let json = env.farm_git(["tasks", "--json"]).run().success().json();
    let labels = |id: &str| {
        json["tasks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["id"] == id)
            .unwrap()["labels"]
            .clone()
    };
    assert_eq!(labels("t1"), serde_json::json!(["test", "docs"]));
    assert_eq!(labels("t2"), serde_json::json!([]));

    env.farm_git(["task", "add", "t3", "--label", "unit tests", "-m", "x"])
        .run()
        .code(2)
        .stderr_has("invalid label `unit tests`");
    assert!(
        !env.git(["ls-tree", "-r", "--name-only", "main"])
            .contains("t3"),
        "nothing written"
    );
}
