//! An agent's inbox: the messages of `farm say` that reach it, taken as its
//! next session starts — its claim won, its prompt not yet written — and
//! put in that prompt. A message said before the agent scans the board is
//! so in the prompt of the session the scan leads to (or said later, while
//! the claim was made). An idle agent, waiting for the hub to change,
//! takes them too, each time before it waits: a message wakes it and is
//! read within a look at the hub, then held here for its next session.
//! An agent that is neither waiting nor starting a session takes none, and
//! a message it never took stays unread on the hub for a later run.
//!
//! Taking a message leaves its receipt on the hub (see
//! [`crate::claims::message`]): of any number of processes taking one
//! message for one agent name, exactly one does, so each agent gets it
//! once. A message taken is first written to the state dir
//! (`inbox/<agent>/<id>.toml`), then receipted: a farm killed after the
//! receipt finds it there when it starts again, and the session after that
//! gets it. Once a session's prompt holds them, they are removed.

use std::path::{Path, PathBuf};
use std::time::SystemTime;

use crate::claims::host::Here;
use crate::claims::message::{self, Message, Receipt};
use crate::claims::record::timestamp;
use crate::error::Error;
use crate::run::event::Event;
use crate::run::state::Run;

/// The messages an agent took and no prompt has held yet.
#[derive(Debug)]
pub struct Inbox {
    dir: PathBuf,
    held: Vec<Message>,
}

impl Inbox {
    /// The inbox of the agent `agent`, with what an earlier run of it took
    /// and no session of it got.
    pub fn open(state: &Path, agent: &str) -> Inbox {
        let dir = state.join("inbox").join(agent);
        let mut held = Vec::new();
        if let Ok(entries) = std::fs::read_dir(&dir) {
            for entry in entries.flatten() {
                let name = entry.file_name();
                let Some(id) = name.to_str().and_then(|n| n.strip_suffix(".toml")) else {
                    continue;
                };
                if let Ok(bytes) = std::fs::read(entry.path())
                    && let Some(m) = Message::parse(id, &bytes)
                {
                    held.push(m);
                }
            }
        }
        held.sort_by_key(|m| m.at);
        Inbox { dir, held }
    }

    /// Are messages waiting for the next session?
    pub fn is_empty(&self) -> bool {
        self.held.is_empty()
    }

    /// How many messages wait for the next session.
    pub fn len(&self) -> usize {
        self.held.len()
    }

    /// Take the messages on the hub that reach the agent `name` and that it
    /// has not taken yet (the store's view from its last look at the hub,
    /// which the caller has just made). Each taken is said and journaled.
    pub fn take(&mut self, run: &Run, name: &str) -> Result<(), Error> {
        let files = run.store.side_files(message::PREFIX, false)?;
        if files.is_empty() {
            return Ok(());
        }
        let posted = message::posted(&files);
        let unread = message::unread(&posted, name, run.role_of(name), SystemTime::now());
        if unread.is_empty() {
            return Ok(());
        }
        std::fs::create_dir_all(&self.dir)
            .map_err(|e| Error::failure(format!("cannot create `{}`: {e}", self.dir.display())))?;
        let host = Here::current().host.clone();
        let mut receipts = Vec::new();
        for m in &unread {
            // Kept here before the receipt: a farm killed between the two
            // still has it when it starts again.
            let path = self.file(&m.id);
            std::fs::write(&path, m.to_toml())
                .map_err(|e| Error::failure(format!("cannot write `{}`: {e}", path.display())))?;
            let receipt = Receipt {
                agent: name.to_owned(),
                host: host.clone(),
                at: message::to_millis(SystemTime::now()),
            };
            receipts.push((
                message::receipt_name(&m.id, name),
                receipt.to_toml().into_bytes(),
            ));
        }
        let why = format!("`{name}` took {} message(s)", receipts.len());
        let created = run.store.create_side(&receipts, &why)?;
        for m in unread {
            let mine = created.contains(&message::receipt_name(&m.id, name));
            let had = self.held.iter().any(|h| h.id == m.id);
            if !mine {
                // Another process of the same name took it first: it is
                // that one's to deliver.
                if !had {
                    let _ = std::fs::remove_file(self.file(&m.id));
                }
                continue;
            }
            if !had {
                self.held.push(m.clone());
            }
            run.tell(
                name,
                &Event::Message {
                    id: m.id.as_str().into(),
                    by: m.by.as_str().into(),
                },
            );
        }
        Ok(())
    }

    /// The prompt's section of the messages held, or nothing.
    pub fn section(&self) -> String {
        section(&self.held)
    }

    /// A session's prompt held the messages: they are delivered.
    pub fn delivered(&mut self) {
        for m in self.held.drain(..) {
            let _ = std::fs::remove_file(self.dir.join(format!("{}.toml", m.id)));
        }
    }

    fn file(&self, id: &str) -> PathBuf {
        self.dir.join(format!("{id}.toml"))
    }
}

/// The prompt's section of `messages`: each with who said it, to whom and
/// when.
pub fn section(messages: &[Message]) -> String {
    if messages.is_empty() {
        return String::new();
    }
    let mut out = String::from(
        "\n# Messages from the people running farm\n\n\
         Read these first; they may change how you do the task.\n",
    );
    for m in messages {
        out.push_str(&format!(
            "\n## From {}, to {}, at {}\n\n{}\n",
            m.by,
            m.to,
            timestamp(m.at),
            m.text.trim_end()
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::claims::notice::Target;

    #[test]
    fn the_section_names_who_said_what_to_whom_and_when() {
        assert_eq!(section(&[]), "");
        let m = Message::new(
            Target::Role("docs".into()),
            "al@box (pid 1)",
            "the API changed\n",
            None,
        );
        let s = section(std::slice::from_ref(&m));
        assert!(
            s.contains(&format!(
                "## From al@box (pid 1), to role `docs`, at {}\n\nthe API changed\n",
                timestamp(m.at)
            )),
            "{s}"
        );
    }

    #[test]
    fn what_a_killed_run_took_is_held_again_until_delivered() {
        let dir = tempfile::tempdir().unwrap();
        let m = Message::new(Target::All, "x", "hello", None);
        let inbox_dir = dir.path().join("inbox").join("a");
        std::fs::create_dir_all(&inbox_dir).unwrap();
        std::fs::write(inbox_dir.join(format!("{}.toml", m.id)), m.to_toml()).unwrap();
        let mut inbox = Inbox::open(dir.path(), "a");
        assert!(inbox.section().contains("hello"));
        inbox.delivered();
        assert!(Inbox::open(dir.path(), "a").is_empty());
    }
}
