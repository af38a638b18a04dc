//! The change a reviewer rejected (`farm reject`), offered to the task's
//! next session: the rejection note names its branch ([`REVIEWED`]), and
//! the prompt says where the session finds it. Apart from
//! [`crate::run::review`] so that a turn, which writes the prompt, needs
//! nothing of the review gate's landing.

use crate::run::clone::PrivateClone;

/// The line of a rejection note that names the change reviewed.
pub const REVIEWED: &str = "- reviewed: branch `";

/// The last branch a rejection note in `body` names.
fn last_reviewed(body: &str) -> Option<String> {
    body.lines()
        .rev()
        .find_map(|l| l.strip_prefix(REVIEWED)?.strip_suffix('`'))
        // A branch farm named, not what a reviewer's words may hold.
        .filter(|b| {
            b.starts_with(crate::board::task::REVIEW_PREFIX)
                && !b.contains("..")
                && b.bytes()
                    .all(|c| c.is_ascii_alphanumeric() || b"/._-".contains(&c))
        })
        .map(str::to_owned)
}

/// The prompt's paragraph on the change a reviewer rejected last, fetched
/// into `clone` as `origin/<branch>`; nothing when none was.
pub(super) fn rejected_work(clone: &PrivateClone, body: &str) -> String {
    let Some(branch) = last_reviewed(body) else {
        return String::new();
    };
    match clone.fetch(&branch) {
        Ok(()) => format!(
            "\nThe change a reviewer rejected is on `origin/{branch}` in this repository \
             (`git log -p origin/{branch}`): keep what the review did not object to, \
             or start afresh.\n"
        ),
        Err(_) => format!(
            "\nThe change a reviewer rejected is on the hub's branch `{branch}`; it could \
             not be fetched here.\n"
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_last_rejected_change_is_read_back() {
        let body = "Do it.\n\n## Attempt 1 — rejected\n\n- reviewed: branch `farm/review/a/n1`\n\n\
                    ## Attempt 2 — rejected\n\n- reviewed: branch `farm/review/a/n2`\n";
        assert_eq!(last_reviewed(body).as_deref(), Some("farm/review/a/n2"));
        assert_eq!(last_reviewed("Do it.\n"), None);
    }
}
