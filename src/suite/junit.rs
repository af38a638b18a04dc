//! JUnit XML, as pytest (`--junitxml`), cargo-nextest, jest-junit,
//! go-junit-report and most CI tools write it: `<testsuites>` of
//! `<testsuite name>` of `<testcase name classname file>`, a case failed
//! when it holds `<failure>` or `<error>` (why in `message`, else in the
//! element's text), skipped when it holds `<skipped>`.
//!
//! Read with quick-xml as a stream of events: a 20,000-case file is one
//! pass, no tree built.

use quick_xml::Reader;
use quick_xml::events::{BytesStart, Event};

use crate::suite::report::{Case, Outcome, Report, Unparsable, first_line};

const FORMAT: &str = "junit";

/// The cases of a JUnit XML report.
pub fn parse(text: &str) -> Result<Report, Unparsable> {
    let mut reader = Reader::from_str(text);
    let mut report = Report::default();
    // The names of the enclosing `<testsuite>`s, innermost last.
    let mut suites: Vec<String> = Vec::new();
    let mut case: Option<Case> = None;
    // Inside a `<failure>`/`<error>` with no `message`: its text is why.
    let mut why: Option<String> = None;
    let mut rooted = false;
    let bad = |reader: &Reader<&[u8]>, why: String| {
        let at = usize::try_from(reader.error_position())
            .unwrap_or(0)
            .min(text.len());
        let line = text[..at].matches('\n').count() + 1;
        Unparsable {
            format: FORMAT,
            line,
            text: text.lines().nth(line - 1).unwrap_or("").to_owned(),
            why,
        }
    };
    loop {
        let event = reader
            .read_event()
            .map_err(|e| bad(&reader, e.to_string()))?;
        match event {
            Event::Start(e) | Event::Empty(e) if e.name().as_ref() == "testsuites" => {
                rooted = true;
            }
            Event::Start(e) if e.name().as_ref() == "testsuite" => {
                rooted = true;
                suites.push(attr(&e, "name").unwrap_or_default());
            }
            Event::Empty(e) if e.name().as_ref() == "testsuite" => rooted = true,
            Event::End(e) if e.name().as_ref() == "testsuite" => {
                suites.pop();
            }
            ref ev @ (Event::Start(ref e) | Event::Empty(ref e))
                if e.name().as_ref() == "testcase" =>
            {
                let Some(name) = attr(e, "name") else {
                    return Err(bad(&reader, "a <testcase> with no `name`".into()));
                };
                let group = attr(e, "classname")
                    .filter(|c| !c.is_empty())
                    .or_else(|| suites.last().cloned().filter(|s| !s.is_empty()));
                let new = Case {
                    name,
                    group,
                    outcome: Outcome::Passed,
                    failure: None,
                    file: attr(e, "file"),
                };
                if matches!(ev, Event::Empty(_)) {
                    report.cases.push(new);
                } else {
                    case = Some(new);
                }
            }
            Event::End(e) if e.name().as_ref() == "testcase" => {
                report.cases.extend(case.take());
            }
            ref ev @ (Event::Start(ref e) | Event::Empty(ref e))
                if matches!(e.name().as_ref(), "failure" | "error") =>
            {
                if let Some(case) = &mut case {
                    case.outcome = Outcome::Failed;
                    match attr(e, "message").filter(|m| !m.trim().is_empty()) {
                        Some(m) => case.failure = Some(first_line(&m)),
                        None if matches!(ev, Event::Start(_)) => why = Some(String::new()),
                        None => case.failure = Some(String::new()),
                    }
                }
            }
            Event::End(e) if matches!(e.name().as_ref(), "failure" | "error") => {
                if let (Some(text), Some(case)) = (why.take(), &mut case) {
                    case.failure = Some(first_line(&text));
                }
            }
            Event::Start(e) | Event::Empty(e) if e.name().as_ref() == "skipped" => {
                if let Some(case) = &mut case
                    && case.outcome != Outcome::Failed
                {
                    case.outcome = Outcome::Skipped;
                }
            }
            Event::Text(t) => {
                if let Some(why) = &mut why {
                    why.push_str(&t.xml10_content());
                }
            }
            Event::CData(t) => {
                if let Some(why) = &mut why {
                    why.push_str(&t);
                }
            }
            Event::GeneralRef(r) => {
                if let Some(why) = &mut why {
                    let name = r.xml10_content();
                    match r.resolve_char_ref().ok().flatten() {
                        Some(c) => why.push(c),
                        None => why.push_str(match name.as_ref() {
                            "lt" => "<",
                            "gt" => ">",
                            "amp" => "&",
                            "quot" => "\"",
                            "apos" => "'",
                            other => other,
                        }),
                    }
                }
            }
            Event::Eof => break,
            _ => {}
        }
    }
    if !rooted {
        return Err(Unparsable::no_report(
            FORMAT,
            text,
            "no <testsuites> or <testsuite> element",
        ));
    }
    Ok(report)
}

/// Attribute `key` of `e`, unescaped; `None` when absent or unreadable.
fn attr(e: &BytesStart<'_>, key: &str) -> Option<String> {
    let a = e.try_get_attribute(key).ok().flatten()?;
    a.normalized_value(quick_xml::XmlVersion::Implicit1_0)
        .ok()
        .map(|v| v.into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    const PYTEST: &str = r#"<?xml version="1.0" encoding="utf-8"?>
<testsuites name="pytest tests">
  <testsuite name="pytest" errors="0" failures="2" skipped="1" tests="5">
    <testcase classname="tests.test_lexer" name="test_ints" file="tests/test_lexer.py" time="0.001" />
    <testcase classname="tests.test_lexer" name="test_floats" time="0.002">
      <failure message="AssertionError: assert 1.4 == 1.5&#10;  where 1.4 = lex(&quot;1.5&quot;)">def test_floats():
&gt;       assert lex("1.5") == 1.5</failure>
    </testcase>
    <testcase classname="tests.test_parser" name="test_if">
      <error>
        <![CDATA[RuntimeError: boom & bust]]>
      </error>
    </testcase>
    <testcase classname="tests.test_parser" name="test_while"><skipped message="later" /></testcase>
    <testcase name="test_orphan"><system-out>hello</system-out></testcase>
  </testsuite>
</testsuites>"#;

    #[test]
    fn pytest_report_reads_to_cases() {
        let report = parse(PYTEST).unwrap();
        let ids: Vec<(String, Outcome, Option<String>)> = report
            .cases
            .iter()
            .map(|c| (c.id(), c.outcome, c.failure.clone()))
            .collect();
        assert_eq!(
            ids,
            [
                ("tests.test_lexer::test_ints".into(), Outcome::Passed, None),
                (
                    "tests.test_lexer::test_floats".into(),
                    Outcome::Failed,
                    Some("AssertionError: assert 1.4 == 1.5".into())
                ),
                (
                    "tests.test_parser::test_if".into(),
                    Outcome::Failed,
                    Some("RuntimeError: boom & bust".into())
                ),
                (
                    "tests.test_parser::test_while".into(),
                    Outcome::Skipped,
                    None
                ),
                ("pytest::test_orphan".into(), Outcome::Passed, None),
            ]
        );
        assert_eq!(report.cases[0].file.as_deref(), Some("tests/test_lexer.py"));
    }

    #[test]
    fn a_bare_testsuite_and_text_with_entities() {
        let xml = "<testsuite name=\"go\"><testcase name=\"TestA\"><failure>\n  a &lt; b &#x41;\nmore</failure></testcase></testsuite>";
        let report = parse(xml).unwrap();
        assert_eq!(report.cases[0].id(), "go::TestA");
        assert_eq!(report.cases[0].failure.as_deref(), Some("a < b A"));
    }

    #[test]
    fn broken_xml_names_the_format_and_the_line() {
        let xml = "<testsuites>\n<testsuite name=\"x\">\n<testcase name=\"a\"></testsuite>\n</testsuites>";
        let err = parse(xml).unwrap_err();
        assert_eq!(err.format, "junit");
        assert_eq!(err.line, 3, "{err}");
        assert!(
            err.to_string()
                .starts_with("cannot read the test report as junit: line 3"),
            "{err}"
        );

        let err = parse("just some text\n").unwrap_err();
        assert!(err.why.contains("no <testsuites>"), "{err}");
        let err = parse("<testsuite><testcase classname=\"c\"/></testsuite>").unwrap_err();
        assert!(err.why.contains("no `name`"), "{err}");
    }
}
