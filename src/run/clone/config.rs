//! The clone's git config, which farm owns: an agent works in the clone and
//! git obeys that file, so what a session writes there must neither
//! redirect farm's pushes nor run anything of farm's. The file is written
//! from a keep-list ([`KEPT`]) plus the hub as the only remote, and put back
//! before each of farm's git commands if anything changed it.

use std::ffi::OsStr;
use std::path::Path;

use super::PrivateClone;
use super::git_procs::git_working_in;
use crate::error::Error;
use crate::git::command::Repo;
use crate::git::hub::Hub;

impl PrivateClone {
    /// The clone's repository, its config first put back as farm keeps it
    /// (see [`own_config`]).
    pub(super) fn repo(&self) -> Result<&Repo, Error> {
        self.own_config()?;
        Ok(&self.raw)
    }

    /// Put `.git/config` back as farm keeps it, if anything changed it
    /// since (see [`own_config`]); said when it did. Reading the file is
    /// all it costs when nothing did: it runs before each of farm's git
    /// commands here.
    pub(super) fn own_config(&self) -> Result<(), Error> {
        // Every command of farm's here passes this way: what it leaves in
        // the work tree, the last sweep did not see.
        self.swept.set(false);
        self.restore_config().map_err(|e| {
            Error::failure(format!(
                "cannot put back the git config of the clone `{}`: {e}",
                self.dir().display()
            ))
            .hint("farm makes its clones itself: remove the clone and run again")
        })
    }

    /// Put `.git/config` back as farm keeps it when anything changed it,
    /// and say so.
    pub(super) fn restore_config(&self) -> std::io::Result<()> {
        let git_dir = self.dir().join(".git");
        if is_config(&git_dir, &self.config) && !git_dir.join("commondir").exists() {
            return Ok(());
        }
        write_config(self.dir(), &self.config)?;
        self.say(&format!(
            "the clone's git config was changed (by a session?); put back as farm keeps it, \
             with the hub `{}` its only remote",
            self.hub_url
        ));
        Ok(())
    }
}

/// The settings of a clone's `.git/config` kept from what is there when it
/// is opened: the repository's format (git cannot read it without them),
/// the file system's traits git probed when it cloned, and the commit
/// identity. None of them names a remote, a program, a hook, a filter, a
/// pager, an editor, another file to read or another work tree.
const KEPT: [&str; 8] = [
    "core.repositoryformatversion",
    "core.filemode",
    "core.symlinks",
    "core.ignorecase",
    "core.precomposeunicode",
    "extensions.objectformat",
    "user.name",
    "user.email",
];

/// Write the clone at `dir` a `.git/config` of farm's own: the [`KEPT`]
/// settings of the one there, the hub as its only remote (`origin`), and
/// `settings`; nothing else.
///
/// farm owns its clones' config because an agent works in the clone and
/// git obeys that file: `remote.origin.pushurl` or `url`, `url.*.insteadOf`
/// or `pushInsteadOf` sent the work and its rescue branches to the agent's
/// own repository (and farm said "integrated"); `core.hooksPath`,
/// `core.fsmonitor`, `core.sshCommand`, `core.gitProxy`, `credential.*`,
/// `filter.*`, `diff.external`, `core.pager`, `core.editor`,
/// `sequence.editor`, `gpg.program`, `merge.*.driver`, `remote.*.uploadpack`
/// and `receivepack`, `include.*` and `includeIf.*` (another file, or a
/// FIFO that hangs every git), `core.worktree` and `extensions.*` —
/// each runs a command, reads another file, or points git elsewhere, and
/// the list grows with git. So it is not a list of what to remove but of
/// what to keep. Read with `--no-includes`, from outside the clone: its
/// own git must not follow what it names. A `commondir` file (which would
/// make the clone read another repository's config) is removed.
pub(super) fn own_config(dir: &Path, hub: &Hub, settings: &[(&str, &str)]) -> Result<(), Error> {
    let path = dir.join(".git/config");
    let listed = Repo::new(std::env::temp_dir()).run_input(
        [
            OsStr::new("config"),
            OsStr::new("--file"),
            path.as_os_str(),
            OsStr::new("--no-includes"),
            OsStr::new("--null"),
            OsStr::new("--list"),
        ],
        &[],
        b"",
    );
    // A config git cannot parse keeps nothing: a repository of the default
    // format then, which `usable` judges.
    let listed = listed.unwrap_or_default();
    let kept: Vec<(String, String)> = listed
        .split(|&b| b == 0)
        .filter_map(|entry| {
            let entry = String::from_utf8_lossy(entry);
            let (key, value) = entry.split_once('\n').unwrap_or((&entry, ""));
            let key = key.to_ascii_lowercase();
            KEPT.iter()
                .find(|k| k.eq_ignore_ascii_case(&key))
                .map(|k| ((*k).to_owned(), value.to_owned()))
        })
        .collect();
    let text = config_text(&kept, &hub.url, &hub.branch, settings);
    write_config(dir, text.as_bytes()).map_err(|e| {
        Error::failure(format!("cannot write `{}`: {e}", path.display()))
            .hint("farm makes its clones itself: remove the clone and run again")
    })
}

/// The text of a clone's config as farm keeps it (see [`own_config`]).
fn config_text(
    kept: &[(String, String)],
    url: &str,
    branch: &str,
    settings: &[(&str, &str)],
) -> String {
    let last = |key: &str| {
        kept.iter()
            .rfind(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    };
    let boolean = |key: &str| last(key).filter(|v| matches!(*v, "true" | "false"));
    let format = last("extensions.objectformat").filter(|v| matches!(*v, "sha1" | "sha256"));
    let mut text = String::from("[core]\n");
    let version = if format.is_some() { "1" } else { "0" };
    text.push_str(&format!("\trepositoryformatversion = {version}\n"));
    text.push_str(&format!(
        "\tfilemode = {}\n",
        boolean("core.filemode").unwrap_or("true")
    ));
    text.push_str("\tbare = false\n\tlogallrefupdates = true\n");
    for key in ["symlinks", "ignorecase", "precomposeunicode"] {
        if let Some(v) = boolean(&format!("core.{key}")) {
            text.push_str(&format!("\t{key} = {v}\n"));
        }
    }
    if let Some(format) = format {
        text.push_str(&format!("[extensions]\n\tobjectformat = {format}\n"));
    }
    let user: Vec<(&str, &str)> = ["name", "email"]
        .into_iter()
        .filter_map(|k| Some((k, last(&format!("user.{k}"))?)))
        .collect();
    if !user.is_empty() {
        text.push_str("[user]\n");
        for (k, v) in user {
            text.push_str(&format!("\t{k} = {}\n", quoted(v)));
        }
    }
    text.push_str(&format!(
        "[remote \"origin\"]\n\turl = {}\n\tfetch = {}\n\ttagOpt = --no-tags\n",
        quoted(url),
        quoted(&format!(
            "+refs/heads/{branch}:refs/remotes/origin/{branch}"
        ))
    ));
    let mut section = "";
    for (key, value) in settings {
        let (sect, name) = key.split_once('.').unwrap_or((key, ""));
        if sect != section {
            text.push_str(&format!("[{sect}]\n"));
            section = sect;
        }
        text.push_str(&format!("\t{name} = {}\n", quoted(value)));
    }
    text
}

/// `value` as a git config value: quoted, with `"`, `\\` and control
/// characters escaped.
fn quoted(value: &str) -> String {
    let mut out = String::from("\"");
    for c in value.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            c if c.is_control() => {}
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// Whether `git_dir/config` is a plain file holding `text`.
fn is_config(git_dir: &Path, text: &[u8]) -> bool {
    let path = git_dir.join("config");
    std::fs::symlink_metadata(&path).is_ok_and(|m| m.file_type().is_file())
        && std::fs::read(&path).is_ok_and(|now| now == text)
}

/// Replace the clone's `.git/config` with `text`, as git does: written to
/// `config.lock` (created exclusively) and renamed over it (a symlink
/// there is replaced, not followed). A `config.lock` with no git working
/// in the clone is stale (the clone is this loop's alone) and removed.
fn write_config(dir: &Path, text: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    let git_dir = dir.join(".git");
    let lock = git_dir.join("config.lock");
    let _ = std::fs::remove_file(git_dir.join("commondir"));
    let mut file = match std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&lock)
    {
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            let alive = dir.canonicalize().ok().and_then(|d| git_working_in(&d));
            if let Some(pid) = alive {
                return Err(std::io::Error::other(format!(
                    "`{}` is held by git (pid {pid})",
                    lock.display()
                )));
            }
            std::fs::remove_file(&lock)?;
            std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(&lock)?
        }
        opened => opened?,
    };
    let written = file.write_all(text).and_then(|()| file.sync_data());
    drop(file);
    match written.and_then(|()| std::fs::rename(&lock, git_dir.join("config"))) {
        Ok(()) => Ok(()),
        Err(e) => {
            let _ = std::fs::remove_file(&lock);
            Err(e)
        }
    }
}
