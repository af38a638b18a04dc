//! A hub whose connections go silent: a peer that accepts the TCP
//! connection and then never sends a byte. git's `git://` and ssh
//! transports have no timeout of their own; farm's watchdog stops such a
//! git after `--net-timeout` and tries again, as for a hub that did not
//! answer.

use std::io::Write;
use std::net::{Shutdown, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::daemon::{Daemon, Machine, Running};

/// How long the watchdog waits in these tests.
const QUIET: Duration = Duration::from_secs(2);

/// A TCP server on loopback that accepts every connection and holds it,
/// silent — or, while `hole` says no, forwards it to `upstream`.
struct BlackHole {
    port: u16,
    stop: Arc<AtomicBool>,
    held: Arc<Mutex<Vec<TcpStream>>>,
}

impl BlackHole {
    /// Silent for every connection.
    fn always() -> BlackHole {
        BlackHole::start(None, Arc::new(|| true))
    }

    /// Forwarding to `upstream`, silent while `hole()` is true.
    fn start(upstream: Option<u16>, hole: Arc<dyn Fn() -> bool + Send + Sync>) -> BlackHole {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        listener.set_nonblocking(true).unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let held = Arc::new(Mutex::new(Vec::new()));
        let (s, h) = (stop.clone(), held.clone());
        std::thread::spawn(move || {
            while !s.load(Ordering::SeqCst) {
                let client = match listener.accept() {
                    Ok((client, _)) => client,
                    Err(_) => {
                        std::thread::sleep(Duration::from_millis(10));
                        continue;
                    }
                };
                client.set_nonblocking(false).unwrap();
                match upstream {
                    Some(up) if !hole() => forward(client, up),
                    _ => h.lock().unwrap().push(client),
                }
            }
        });
        BlackHole { port, stop, held }
    }

    fn url(&self) -> String {
        format!("git://127.0.0.1:{}/hub.git", self.port)
    }

    fn host(&self) -> String {
        format!("`127.0.0.1:{}`", self.port)
    }

    fn held(&self) -> usize {
        self.held.lock().unwrap().len()
    }
}

impl Drop for BlackHole {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
    }
}

/// Copy bytes both ways between `client` and 127.0.0.1:`port`.
fn forward(client: TcpStream, port: u16) {
    let Ok(server) = TcpStream::connect(("127.0.0.1", port)) else {
        return;
    };
    let pipe = |mut from: TcpStream, mut to: TcpStream| {
        std::thread::spawn(move || {
            let _ = std::io::copy(&mut from, &mut to);
            let _ = to.flush();
            let _ = to.shutdown(Shutdown::Write);
        })
    };
    pipe(client.try_clone().unwrap(), server.try_clone().unwrap());
    pipe(server, client);
}

/// A hub that never answers — every connection accepted and held silent —
/// used to hold `farm run` in its first `git ls-remote` for ever, printing
/// nothing. Now the watchdog stops each try after `--net-timeout`, and the
/// run ends within it and half a minute, naming the host that went silent.
#[test]
fn a_black_holed_hub_ends_the_run_naming_the_host() {
    let hole = BlackHole::always();
    let machine = Machine::new("m1", &hole.url());
    let started = Instant::now();
    let out = Running::spawn(machine.farm(["run", "--agent", "true", "--net-timeout", "2s"]))
        .finish_by(Instant::now() + QUIET + Duration::from_secs(30));
    assert!(
        hole.held() >= 1,
        "no connection reached the black hole: {out:#?}"
    );
    assert_eq!(out.code, Some(2), "{out:#?}");
    assert!(out.stderr.contains(&hole.host()), "{out:#?}");
    assert!(
        out.stderr.contains("no byte came from or went to"),
        "{out:#?}"
    );
    assert!(started.elapsed() >= QUIET, "{out:#?}");
}

/// The same from `FARM_NET_TIMEOUT`.
#[test]
fn the_net_timeout_comes_from_the_environment_too() {
    let hole = BlackHole::always();
    let machine = Machine::new("m1", &hole.url());
    let out = Running::spawn(
        machine
            .farm(["run", "--agent", "true"])
            .env("FARM_NET_TIMEOUT", "1s"),
    )
    .finish_by(Instant::now() + Duration::from_secs(31));
    assert_eq!(out.code, Some(2), "{out:#?}");
    assert!(out.stderr.contains("for 1s"), "{out:#?}");
}

/// The hub goes silent just as the session ends (the agent's last act
/// turns the black hole on, for a while): farm's fetch, push and claim
/// traffic then is stopped by the watchdog, tried again once the hole has
/// closed, and the run goes on to the end — the task done, on the hub.
#[test]
fn a_hub_silent_for_a_while_mid_run_is_waited_out_and_the_run_goes_on() {
    let daemon = Daemon::with_hub(&[("tasks/t1.md", "+++\ntitle = \"t1\"\n+++\nWork.\n")]);
    let flag: PathBuf = daemon.base.path().join("hole-on");
    let opened: Arc<Mutex<Option<Instant>>> = Arc::new(Mutex::new(None));
    let hole = {
        let (flag, opened) = (flag.clone(), opened.clone());
        BlackHole::start(
            Some(daemon.port()),
            Arc::new(move || hole_open(&flag, &opened, Duration::from_secs(6))),
        )
    };
    let agent = daemon.base.path().join("agent.sh");
    std::fs::write(
        &agent,
        format!(
            "set -eu\necho w > w-t1\ngit add -A\ngit commit -q -m t1\ntouch '{}'\n",
            flag.display()
        ),
    )
    .unwrap();
    let agent = format!("sh '{}'", agent.display());
    let machine = Machine::new("m1", &hole.url());
    let out = Running::spawn(
        machine
            .farm(["run", "-v", "--agent", &agent])
            .env("FARM_NET_TIMEOUT", "2s"),
    )
    .finish_by(Instant::now() + Duration::from_secs(120));
    assert!(
        opened.lock().unwrap().is_some(),
        "the hole never opened: {out:#?}"
    );
    assert!(hole.held() >= 1, "no connection fell in: {out:#?}");
    assert_eq!(out.code, Some(0), "{out:#?}");
    assert!(out.stderr.contains(&hole.host()), "{out:#?}");
    let hub = daemon.hub();
    assert_eq!(hub.show("main:w-t1").as_deref(), Some("w\n"), "{out:#?}");
    assert!(hub.show("main:tasks/done/t1.md").is_some(), "{out:#?}");
}

/// Whether the hole is open: from when `flag` appears, for `open_for`.
fn hole_open(flag: &Path, opened: &Mutex<Option<Instant>>, open_for: Duration) -> bool {
    let mut opened = opened.lock().unwrap();
    match *opened {
        Some(at) => at.elapsed() < open_for,
        None if flag.exists() => {
            *opened = Some(Instant::now());
            true
        }
        None => false,
    }
}
