//! The servers a hub on "another machine" is reached through besides `git
//! daemon` (see daemon.rs): a real OpenSSH `sshd` and git's own smart-HTTP
//! backend (`git http-backend` behind a few lines of Python's
//! `http.server`), each with its own configuration and keys in the hub's
//! base directory, listening on a loopback port. ssh and https are how
//! fleets reach their hub; their failures (a session whose server side is
//! killed, an HTTP response cut short) are not `git daemon`'s.
//!
//! A missing server skips the test that needs it, with the reason printed
//! — except where `FARM_REQUIRE_SERVERS=1` (CI, which installs them in
//! `.ci/run`): there it fails.

use std::ffi::OsString;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;

/// The ways a served hub is reached.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Transport {
    /// `git://`, `git daemon`.
    Git,
    /// `ssh://`, OpenSSH's `sshd`.
    Ssh,
    /// `http://`, `git http-backend` as a CGI.
    Http,
}

/// The `sshd` binary (Debian's openssh-server installs it in /usr/sbin,
/// which may not be on a test's PATH).
fn sshd() -> Option<PathBuf> {
    ["/usr/sbin/sshd", "/usr/local/sbin/sshd"]
        .iter()
        .map(PathBuf::from)
        .chain(which("sshd"))
        .find(|p| p.is_file())
}

fn which(name: &str) -> Option<PathBuf> {
    std::env::split_paths(&std::env::var_os("PATH")?)
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

/// The Python interpreter itself, not a shim: a pyenv shim on PATH finds
/// its interpreter from HOME, which the server's hermetic environment
/// changes.
fn python() -> Option<PathBuf> {
    static FOUND: OnceLock<Option<PathBuf>> = OnceLock::new();
    FOUND
        .get_or_init(|| {
            let out = Command::new("python3")
                .args(["-c", "import sys, http.server; print(sys.executable)"])
                .stdin(Stdio::null())
                .stderr(Stdio::null())
                .output()
                .ok()?;
            let path = PathBuf::from(String::from_utf8(out.stdout).ok()?.trim());
            (out.status.success() && path.is_file()).then_some(path)
        })
        .clone()
}

/// Whether `transport`'s server can run here. If not: a failure where
/// `FARM_REQUIRE_SERVERS=1`, else the reason printed and `false` (the
/// caller skips).
pub fn available(transport: Transport) -> bool {
    let missing = match transport {
        Transport::Git => None,
        Transport::Ssh if sshd().is_none() => Some("no `sshd` (apt-get install openssh-server)"),
        Transport::Ssh if which("ssh").is_none() || which("ssh-keygen").is_none() => {
            Some("no `ssh` or `ssh-keygen` on PATH (apt-get install openssh-client)")
        }
        Transport::Ssh => None,
        Transport::Http if python().is_none() => {
            Some("no `python3` with http.server on PATH (apt-get install python3)")
        }
        Transport::Http => None,
    };
    let Some(why) = missing else {
        return true;
    };
    assert!(
        std::env::var("FARM_REQUIRE_SERVERS").as_deref() != Ok("1"),
        "{why}, and FARM_REQUIRE_SERVERS=1: the {transport:?} hub's tests must run"
    );
    eprintln!("skipped: {why}");
    false
}

fn write(path: &Path, text: &str, mode: u32) {
    std::fs::write(path, text).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

// --- sshd -------------------------------------------------------------------

/// `base/sshd/`: host key, the client's key, sshd's and ssh's config.
fn ssh_dir(base: &Path) -> PathBuf {
    base.join("sshd")
}

/// Make the keys and the two configs, once per base directory.
fn prepare_sshd(base: &Path) {
    let dir = ssh_dir(base);
    if dir.join("sshd_config").is_file() {
        return;
    }
    std::fs::create_dir_all(&dir).unwrap();
    if is_root() {
        // Run as root, sshd wants its privilege-separation directory (even
        // to check a config); the package's service makes it at boot, which
        // a container never has.
        let _ = std::fs::create_dir_all("/run/sshd");
    }
    for key in ["host_key", "client_key"] {
        let out = Command::new("ssh-keygen")
            .args(["-q", "-t", "ed25519", "-N", "", "-C", "farm-test", "-f"])
            .arg(dir.join(key))
            .stdin(Stdio::null())
            .output()
            .expect("ssh-keygen runs");
        assert!(
            out.status.success(),
            "ssh-keygen: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    std::fs::copy(dir.join("client_key.pub"), dir.join("authorized_keys")).unwrap();
    // The server side of a session (git-upload-pack, git-receive-pack and
    // the hub's hooks) gets the test's PATH and no user or system git
    // config, as `git daemon` does. sshd runs the command through the
    // user's login shell, and Debian's bash then reads ~/.bashrc (a
    // pyenv init there cost 0.4 s a connection, and its PATH won) unless
    // it is a nested shell: SHLVL=1 says so.
    let path = std::env::var("PATH").unwrap_or_default();
    let mut config = format!(
        "ListenAddress 127.0.0.1\n\
         HostKey {dir}/host_key\n\
         AuthorizedKeysFile {dir}/authorized_keys\n\
         PidFile none\n\
         StrictModes no\n\
         UsePAM no\n\
         PasswordAuthentication no\n\
         KbdInteractiveAuthentication no\n\
         PubkeyAuthentication yes\n\
         PermitRootLogin prohibit-password\n\
         PrintMotd no\n\
         UseDNS no\n\
         LogLevel ERROR\n\
         SetEnv SHLVL=1 \"PATH={path}\" GIT_CONFIG_GLOBAL=/dev/null GIT_CONFIG_NOSYSTEM=1 LC_ALL=C\n\
         AcceptEnv GIT_PROTOCOL\n",
        dir = dir.display(),
    );
    // Past MaxStartups' 10 unauthenticated connections sshd drops new ones
    // at random, and OpenSSH 9.8+ penalises (refuses for a while) an
    // address whose sessions end badly — every client here is 127.0.0.1,
    // and the chaos rounds kill clients: faults no test asked for.
    config.push_str("MaxStartups 1000\nMaxSessions 1000\n");
    write(&dir.join("sshd_config"), &config, 0o600);
    if penalties_known(&dir) {
        config.push_str("PerSourcePenalties no\n");
        write(&dir.join("sshd_config"), &config, 0o600);
    }
    write(
        &dir.join("ssh_config"),
        &format!(
            "Host *\n  IdentityFile {dir}/client_key\n  IdentitiesOnly yes\n  \
             UserKnownHostsFile /dev/null\n  StrictHostKeyChecking no\n  BatchMode yes\n  \
             LogLevel ERROR\n  KexAlgorithms curve25519-sha256\n",
            dir = dir.display()
        ),
        0o600,
    );
}

/// Does this sshd know `PerSourcePenalties` (OpenSSH 9.8 and later)?
fn penalties_known(dir: &Path) -> bool {
    Command::new(sshd().unwrap())
        .arg("-t")
        .arg("-f")
        .arg(dir.join("sshd_config"))
        .args(["-o", "PerSourcePenalties=no"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// `sshd` in the foreground on `port`, logging to stderr.
pub fn sshd_command(base: &Path, port: u16) -> Command {
    prepare_sshd(base);
    let mut cmd = Command::new(sshd().expect("sshd is available"));
    cmd.arg("-D")
        .arg("-e")
        .arg("-f")
        .arg(ssh_dir(base).join("sshd_config"))
        .arg("-p")
        .arg(port.to_string());
    cmd
}

fn is_root() -> bool {
    // SAFETY: geteuid(2) only reads.
    unsafe { libc::geteuid() == 0 }
}

/// `ssh://127.0.0.1:PORT/<base>/hub.git` (the user is this process's).
pub fn ssh_url(base: &Path, port: u16) -> String {
    format!("ssh://127.0.0.1:{port}{}/hub.git", base.display())
}

/// What git runs as ssh to reach the hub (`GIT_SSH_COMMAND` or
/// `core.sshCommand`): the client key, no known-hosts file, no prompt, and
/// no config of the user's (`-F`). A connection per git command, as
/// without a ControlMaster; the key exchange is the cheaper classic one
/// (the default post-quantum one took a third longer per connection).
pub fn ssh_command(base: &Path) -> String {
    prepare_sshd(base);
    format!("ssh -F {}", ssh_dir(base).join("ssh_config").display())
}

// --- git http-backend ---------------------------------------------------------

/// A threaded HTTP/1.0 server that runs `git http-backend` as a CGI for
/// every request, the request's body on its stdin and its output streamed
/// back. `REMOTE_USER` is set, which enables receive-pack.
const HTTP_HUB: &str = r#"
import os, subprocess, sys, threading, urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

PORT, ROOT = int(sys.argv[1]), sys.argv[2]

class Cgi(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.0"

    def do_GET(self):
        self.cgi()

    def do_POST(self):
        self.cgi()

    def body(self):
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            parts = []
            while True:
                size = int(self.rfile.readline().split(b";")[0], 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    return b"".join(parts)
                parts.append(self.rfile.read(size))
                self.rfile.readline()
        return self.rfile.read(int(self.headers.get("Content-Length") or 0))

    def cgi(self):
        path, _, query = self.path.partition("?")
        body = self.body()
        env = dict(os.environ)
        env.update(
            GIT_PROJECT_ROOT=ROOT,
            GIT_HTTP_EXPORT_ALL="1",
            REMOTE_USER="farm",
            REMOTE_ADDR=self.client_address[0],
            REQUEST_METHOD=self.command,
            PATH_INFO=urllib.parse.unquote(path),
            QUERY_STRING=query,
            CONTENT_TYPE=self.headers.get("Content-Type", ""),
            CONTENT_LENGTH=str(len(body)),
        )
        for header, var in (("Content-Encoding", "HTTP_CONTENT_ENCODING"), ("Git-Protocol", "GIT_PROTOCOL")):
            if self.headers.get(header):
                env[var] = self.headers[header]
        cgi = subprocess.Popen(["git", "http-backend"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env)

        def feed():
            try:
                cgi.stdin.write(body)
                cgi.stdin.close()
            except OSError:
                pass

        threading.Thread(target=feed, daemon=True).start()
        status, headers = 200, []
        while True:
            line = cgi.stdout.readline()
            if line in (b"\r\n", b"\n"):
                break
            if not line:
                # The backend died before its headers: a gateway error.
                cgi.wait()
                self.send_error(502, "git http-backend exited early")
                return
            name, _, value = line.decode("latin-1").strip().partition(":")
            if name.lower() == "status":
                status = int(value.split()[0])
            else:
                headers.append((name, value.strip()))
        self.send_response(status)
        for name, value in headers:
            self.send_header(name, value)
        self.end_headers()
        while True:
            chunk = cgi.stdout.read1(65536)
            if not chunk:
                break
            self.wfile.write(chunk)
            self.wfile.flush()
        cgi.wait()

ThreadingHTTPServer.daemon_threads = True
ThreadingHTTPServer(("127.0.0.1", PORT), Cgi).serve_forever()
"#;

/// The HTTP hub server on `port`, serving `base` (so `/hub.git`).
pub fn http_command(base: &Path, port: u16) -> Command {
    let script = base.join("http_hub.py");
    if !script.is_file() {
        write(&script, HTTP_HUB, 0o644);
    }
    let mut cmd = Command::new(python().expect("python3 is available"));
    cmd.arg(&script).arg(port.to_string()).arg(base);
    cmd
}

/// `http://127.0.0.1:PORT/hub.git`.
pub fn http_url(port: u16) -> String {
    format!("http://127.0.0.1:{port}/hub.git")
}

/// The environment a client of `transport` needs besides the hermetic one.
pub fn client_env(transport: Transport, base: &Path) -> Vec<(&'static str, OsString)> {
    match transport {
        Transport::Ssh => vec![("GIT_SSH_COMMAND", ssh_command(base).into())],
        Transport::Git | Transport::Http => Vec::new(),
    }
}
