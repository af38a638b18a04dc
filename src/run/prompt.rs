//! The prompts sessions get: `templates/prompt.md` and `templates/merge.md`,
//! from the repository when it has its own, else the built-in ones.
//!
//! Placeholders are `{{name}}`; substitution is a single pass over the
//! template, so text coming from a task (which may itself contain `{{…}}`)
//! is never expanded again.

use std::path::Path;

pub const PROMPT: &str = include_str!("../../templates/prompt.md");
pub const MERGE: &str = include_str!("../../templates/merge.md");

/// The template `name` (`prompt.md` or `merge.md`): the clone's own, if any.
pub fn template(clone: &Path, name: &str, builtin: &str) -> String {
    std::fs::read_to_string(clone.join("templates").join(name))
        .unwrap_or_else(|_| builtin.to_owned())
}

/// Replace each `{{key}}` with its value; unknown keys are left as they are.
pub fn render(template: &str, vars: &[(&str, &str)]) -> String {
    let mut out = String::with_capacity(template.len() + 256);
    let mut rest = template;
    while let Some(start) = rest.find("{{") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        match after.find("}}") {
            Some(end) => {
                let key = after[..end].trim();
                match vars.iter().find(|(k, _)| *k == key) {
                    Some((_, v)) => out.push_str(v),
                    None => out.push_str(&rest[start..start + 2 + end + 2]),
                }
                rest = &after[end + 2..];
            }
            None => {
                out.push_str(&rest[start..]);
                rest = "";
            }
        }
    }
    out.push_str(rest);
    out
}

/// What a session is told of the work of earlier attempts (`earlier`, in
/// its clone as `origin/<branch>`), and how to start from it; nothing when
/// there is none. `branch` is the hub's branch the work is integrated into.
pub fn earlier_work(earlier: &[crate::run::clone::Earlier], branch: &str) -> String {
    let Some(first) = earlier.first() else {
        return String::new();
    };
    let mut text = format!(
        "\n# Work of earlier attempts\n\nEarlier sessions of this task left commits that are \
         not on `{branch}`. They are in this clone, and you may start from them:\n\n"
    );
    for e in earlier {
        let subjects: Vec<String> = e.subjects.iter().map(|s| format!("\"{s}\"")).collect();
        let more = if e.commits > e.subjects.len() {
            ", …"
        } else {
            ""
        };
        text.push_str(&format!(
            "- `origin/{}`: {} ({}{more}){}\n",
            e.branch,
            crate::output::count(e.commits, "commit", "commits"),
            subjects.join(", "),
            if e.chosen {
                " — a person chose this one for you to start from"
            } else {
                ""
            }
        ));
    }
    text.push_str(&format!(
        "\nTo start from one, merge it: `git merge --no-edit origin/{b}` (look first: \
         `git log -p HEAD..origin/{b}`), or cherry-pick what you want of it. Do not reset \
         to it: your work must descend from the commit you start on.\n",
        b = first.branch
    ));
    text
}

/// Split a task body into its description and the notes farm appended
/// after failed attempts and questions asked (everything from the first
/// `## Attempt ` or `## Question ` heading on).
pub fn split_notes(body: &str) -> (&str, &str) {
    let headings = ["## Attempt ", "## Question "];
    if headings.iter().any(|h| body.starts_with(h)) {
        return ("", body);
    }
    match headings
        .iter()
        .filter_map(|h| body.find(&format!("\n{h}")))
        .min()
    {
        Some(i) => (&body[..i + 1], &body[i + 1..]),
        None => (body, ""),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_once_without_re_expanding_values() {
        let out = render(
            "a {{x}} b {{ y }} c {{unknown}} d {{",
            &[("x", "{{y}}"), ("y", "Y")],
        );
        assert_eq!(out, "a {{y}} b Y c {{unknown}} d {{");
    }

    #[test]
    fn builtin_templates_use_only_known_keys() {
        let keys = [
            "task",
            "title",
            "description",
            "attempt",
            "max_attempts",
            "notes",
            "branch",
            "conflicts",
            "progress",
            "role",
            "messages",
        ];
        let vars: Vec<(&str, &str)> = keys.iter().map(|k| (*k, "X")).collect();
        for t in [PROMPT, MERGE] {
            let out = render(t, &vars);
            assert!(!out.contains("{{"), "unrendered placeholder in:\n{out}");
        }
    }

    #[test]
    fn notes_split_from_the_description() {
        assert_eq!(split_notes("Do it.\n"), ("Do it.\n", ""));
        let body = "Do it.\n\n## Attempt 1 — failed\nno luck\n";
        assert_eq!(
            split_notes(body),
            ("Do it.\n\n", "## Attempt 1 — failed\nno luck\n")
        );
        assert_eq!(
            split_notes("## Attempt 1 — x\n"),
            ("", "## Attempt 1 — x\n")
        );
        let asked = "Do it.\n\n## Question — asked by a\n\n## Attempt 1 — x\n";
        assert_eq!(
            split_notes(asked),
            (
                "Do it.\n\n",
                "## Question — asked by a\n\n## Attempt 1 — x\n"
            )
        );
    }
}
