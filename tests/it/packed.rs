//! The repositories farm writes stay packed (`src/git/maintain.rs`,
//! `src/run/upkeep.rs`): the hub on this machine, the agents' clones and
//! the claims cache, at git's thresholds (set low here, through the
//! environment, as a user's git config would), with nothing an agent
//! committed lost; and farm's pushes start no gc in the hub.

use std::collections::BTreeSet;
use std::path::Path;

use crate::common::{Env, Farm, patch_ids};
use crate::run::{LIMIT, assert_hub_sound, board, logs, run_args};

/// git's thresholds for its two background tasks, given to farm the way a
/// user's own config would give them.
fn low_thresholds(farm: Farm, loose: usize, packs: usize) -> Farm {
    farm.env("GIT_CONFIG_COUNT", "2")
        .env("GIT_CONFIG_KEY_0", "maintenance.loose-objects.auto")
        .env("GIT_CONFIG_VALUE_0", loose.to_string())
        .env("GIT_CONFIG_KEY_1", "maintenance.incremental-repack.auto")
        .env("GIT_CONFIG_VALUE_1", packs.to_string())
}

/// A hub with `n` independent tasks `p00`, `p01`, ….
fn hub_of(n: usize) -> (Env, BTreeSet<String>) {
    let env = Env::git_hub(&[]);
    let mut ids = BTreeSet::new();
    for i in 0..n {
        let id = format!("p{i:02}");
        std::fs::write(
            env.hub.join(format!("tasks/{id}.md")),
            format!("+++\ntitle = \"Task {id}\"\n+++\nWrite work/{id}.txt.\n"),
        )
        .unwrap();
        ids.insert(id);
    }
    env.git(["add", "-A"]);
    env.git(["commit", "-q", "-m", "the tasks"]);
    (env, ids)
}

/// [`hub_of`], the hub a bare clone of it.
fn bare_hub_of(n: usize) -> (Env, BTreeSet<String>) {
    let (mut env, ids) = hub_of(n);
    let bare = env.tmp.path().join("hub.git");
    env.git([
        "clone".as_ref(),
        "-q".as_ref(),
        "--bare".as_ref(),
        env.hub.as_os_str(),
        bare.as_os_str(),
    ]);
    env.hub = bare;
    (env, ids)
}

/// The agent: one file of its own, committed; the commit's patch id noted
/// outside the repository, to find it on the hub afterwards.
fn agent(env: &Env) -> String {
    env.agent_script("agent.sh", &work(env))
}

/// [`agent`]'s script.
fn work(env: &Env) -> String {
    format!(
        r#"mkdir -p work
echo "$FARM_TASK $FARM_AGENT" > "work/$FARM_TASK.txt"
git add -A
git commit -q -m "$FARM_TASK by $FARM_AGENT"
git show HEAD | git patch-id --stable | cut -d' ' -f1 >> "{}/patches.log"
"#,
        logs(env).display()
    )
}

/// Loose objects and packs of the repository whose git dir is `git_dir`,
/// as `git count-objects -v` says.
fn objects(env: &Env, git_dir: &Path) -> (usize, usize) {
    let (ok, out, err) = crate::common::git_in(git_dir, env.tmp.path(), ["count-objects", "-v"]);
    assert!(ok, "git count-objects in {}: {err}", git_dir.display());
    let field = |name: &str| -> usize {
        out.lines()
            .find_map(|l| l.strip_prefix(&format!("{name}: ")))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or_else(|| panic!("no {name} in {out}"))
    };
    (field("count"), field("packs"))
}

/// The git dirs of the agents' clones under the state dir of [`run_args`].
fn clones(env: &Env) -> Vec<std::path::PathBuf> {
    let dir = env.tmp.path().join("state/clones");
    let mut all: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .flatten()
        .map(|e| e.path().join(".git"))
        .filter(|p| p.is_dir())
        .collect();
    all.sort();
    all
}

/// Every agent commit noted in the log is on the hub's branch (by patch:
/// rebased onto it).
#[track_caller]
fn assert_nothing_lost(env: &Env, tasks: usize) {
    let noted: BTreeSet<String> = std::fs::read_to_string(logs(env).join("patches.log"))
        .unwrap()
        .lines()
        .map(str::to_owned)
        .collect();
    assert_eq!(noted.len(), tasks, "{noted:?}");
    let on_main = patch_ids(&env.hub, &env.git(["log", "--no-merges", "-p", "main"]));
    let lost: Vec<_> = noted.difference(&on_main).collect();
    assert!(lost.is_empty(), "agent commits not on main: {lost:?}");
}

#[test]
fn sixty_tasks_leave_the_hub_and_the_clones_packed_and_lose_nothing() {
    let (env, ids) = hub_of(60);
    let agent = agent(&env);
    // Unpacked, the hub would hold ~7 loose objects a task (420), and each
    // clone ~3.
    let out = low_thresholds(
        env.farm_git(run_args(&env, &agent, &["-j", "2", "-v"])),
        20,
        3,
    )
    .run_within(LIMIT)
    .success();
    assert_eq!(board(&env, "tasks/done"), ids, "{out:#?}");
    assert_nothing_lost(&env, ids.len());
    assert_hub_sound(&env);
    assert!(out.stderr.contains("packed the hub"), "{}", out.stderr);

    let hub_git = env.hub.join(".git");
    let (loose, packs) = objects(&env, &hub_git);
    // What came after the last upkeep is loose: less than the threshold
    // and one task's pushes.
    assert!(loose < 20 + 10, "the hub keeps {loose} loose objects");
    assert!(packs >= 1, "the hub has no pack");
    assert!(
        hub_git.join("objects/pack/multi-pack-index").is_file(),
        "the hub's packs were never rolled up"
    );
    let clones = clones(&env);
    assert_eq!(clones.len(), 4, "{clones:?}");
    for clone in &clones {
        let (loose, packs) = objects(&env, clone);
        assert!(
            loose < 20 + 10 && packs >= 1,
            "{}: {loose} loose objects, {packs} packs",
            clone.display()
        );
        // Every object its refs and reflogs name can be read, its own or
        // the hub's.
        let (ok, out, err) = crate::common::git_in(
            clone,
            env.tmp.path(),
            [
                "fsck",
                "--connectivity-only",
                "--no-dangling",
                "--no-progress",
            ],
        );
        assert!(ok, "git fsck in {}: {out}{err}", clone.display());
    }
}

#[test]
fn the_claims_cache_is_packed_too() {
    // (A hub with its branch checked out refuses the git store's atomic
    // pushes now and then: "Working directory has staged changes".)
    let (env, ids) = bare_hub_of(16);
    let agent = agent(&env);
    let out = low_thresholds(
        env.farm_git(run_args(
            &env,
            &agent,
            &["-j", "2", "-v", "--claims", "git"],
        )),
        10,
        3,
    )
    .run_within(LIMIT)
    .success();
    assert_eq!(board(&env, "tasks/done"), ids, "{out:#?}");
    assert_nothing_lost(&env, ids.len());
    assert!(
        out.stderr.contains("packed the claims cache"),
        "{}",
        out.stderr
    );
    let cache = env.tmp.path().join("state/claims.git");
    let (loose, packs) = objects(&env, &cache);
    // Packed after integrations only: what claims, heartbeats and releases
    // wrote after the last one is loose, and how much that is depends on
    // the machine's load (36 seen under a load average of 20). Most of
    // the cache is packed, whatever the load.
    let in_pack = in_pack(&env, &cache);
    assert!(
        packs >= 1 && in_pack > 2 * loose,
        "the claims cache: {loose} loose objects, {in_pack} in {packs} packs"
    );
}

/// The objects in the packs of `git_dir` (`git count-objects -v`'s
/// `in-pack`).
fn in_pack(env: &Env, git_dir: &Path) -> usize {
    let (ok, out, err) = crate::common::git_in(git_dir, env.tmp.path(), ["count-objects", "-v"]);
    assert!(ok, "git count-objects in {}: {err}", git_dir.display());
    out.lines()
        .find_map(|l| l.strip_prefix("in-pack: "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no in-pack in {out}"))
}

/// The hub's own git runs a gc after a push (`receive.autogc`) when it
/// finds too many loose objects or packs; detached, that gc kept the push's
/// open files, the hub's push lock among them, and every farm push on this
/// host waited for it to end. farm's pushes ask for none. Here any gc would
/// find too many packs (two, past `gc.autoPackLimit = 1`) and roll them into
/// one, while farm's own upkeep has nothing due (git's default thresholds).
#[test]
fn pushes_start_no_gc_in_the_hub() {
    let (env, ids) = hub_of(8);
    env.git(["repack", "-q", "-d"]);
    std::fs::write(env.hub.join("more.txt"), "more\n").unwrap();
    env.git(["add", "more.txt"]);
    env.git(["commit", "-q", "-m", "more"]);
    env.git(["repack", "-q", "-d"]);
    env.git(["config", "gc.autoPackLimit", "1"]);
    let hub_git = env.hub.join(".git");
    assert_eq!(objects(&env, &hub_git).1, 2);
    let agent = agent(&env);
    let out = env
        .farm_git(run_args(&env, &agent, &["-j", "2", "-v"]))
        .run_within(LIMIT)
        .success();
    assert_eq!(board(&env, "tasks/done"), ids, "{out:#?}");
    assert_nothing_lost(&env, ids.len());
    assert!(
        !hub_git.join("gc.pid").exists(),
        "a gc runs in the hub (gc.pid)"
    );
    let (loose, packs) = objects(&env, &hub_git);
    assert_eq!(
        packs, 2,
        "the hub was repacked ({loose} loose objects left)"
    );
    assert!(loose > 0);
    assert!(!out.stderr.contains("packed the hub"), "{}", out.stderr);
}

/// Reads and writes of the hub from outside farm, in a loop until `stop`
/// exists, as real processes: a bare clone borrowing the hub's objects
/// (`--shared`, as the agents' clones do) walked whole and every object
/// read, checked with `git fsck`; then a push of a new commit to a branch
/// of its own (its objects come through the hub's quarantine). What failed
/// goes to `fails`, each round's number to `rounds`.
const RACER: &str = r#"hub=$1 work=$2 stop=$3
fails=$work/fails
# A read that saw a pack deleted under it (a roll-up's `expire` removed a
# pack the multi-pack-index it had loaded still named: "failed to load
# pack in position N") is asked once more, with the hub as it is now: git
# readers meet that in git's own maintenance too. A read that fails twice,
# or an object missing twice, is a loss.
again() { "$@" 2>> "$fails.log" || { sleep 0.2; "$@" 2>> "$fails.log"; }; }
clone_r() { rm -rf "$r"; git clone -q --bare --shared "$hub" "$r"; }
read_all() {
  git -C "$r" rev-list --objects --all > "$work/list" &&
    cut -d' ' -f1 < "$work/list" | git -C "$r" cat-file --batch > "$work/read" &&
    ! grep -q ' missing$' "$work/read" &&
    git -C "$r" fsck --connectivity-only --no-dangling --no-progress
}
git clone -q "$hub" "$work/w" || echo "first clone" >> "$fails"
i=0
while [ ! -e "$stop" ]; do
  i=$((i + 1))
  r=$work/r$i
  if ! again clone_r; then
    echo "clone $i" >> "$fails"
  elif ! again read_all >> "$fails.log"; then
    echo "read $i" >> "$fails"
  fi
  rm -rf "$r"
  (cd "$work/w" && echo "$i" > side.txt && git add side.txt && git commit -qm "side $i" \
    && git push -q origin HEAD:refs/heads/side) 2>> "$fails.log" || echo "push $i" >> "$fails"
  echo "$i" > "$work/rounds"
done
"#;

/// Packing must never lose an object anyone needs: here the hub is packed
/// after every integration and its packs rolled up at every second one,
/// the claims cache (git store) likewise, while every push of agent work
/// goes through the merge queue (candidate refs under `refs/farm/queue/`,
/// each pushed through the hub's quarantine), the agents' clones read the
/// hub's objects where they are, and a process of git's own reads the hub
/// whole through a borrowing clone and pushes to it, round after round.
/// No read may miss an object (asked twice: see [`RACER`]), no push fail,
/// no `git fsck` complain, and every agent commit must land.
#[test]
fn packing_races_pushes_clones_and_the_queue_and_loses_nothing() {
    let (mut env, ids) = hub_of(30);
    let toml = env.hub.join("farm.toml");
    let mut text = std::fs::read_to_string(&toml).unwrap();
    text.push_str("\n[tests]\ncommand = \"echo 'PASS: a'\"\nformat = \"lines\"\n");
    std::fs::write(&toml, text).unwrap();
    env.git([
        "commit",
        "-qam",
        "a gate: every change goes through the queue",
    ]);
    let bare = env.tmp.path().join("hub.git");
    env.git([
        "clone".as_ref(),
        "-q".as_ref(),
        "--bare".as_ref(),
        env.hub.as_os_str(),
        bare.as_os_str(),
    ]);
    env.hub = bare;
    let agent = agent(&env);

    let racer = env.tmp.path().join("racer");
    std::fs::create_dir(&racer).unwrap();
    let stop = env.tmp.path().join("stop");
    let script = env.tmp.path().join("racer.sh");
    std::fs::write(&script, RACER).unwrap();
    let mut reader = std::process::Command::new("sh")
        .arg(&script)
        .arg(&env.hub)
        .arg(&racer)
        .arg(&stop)
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", env.tmp.path())
        .envs(crate::common::GIT_ENV)
        .spawn()
        .unwrap();
    let out = low_thresholds(
        env.farm_git(run_args(
            &env,
            &agent,
            &["-j", "3", "-v", "--claims", "git"],
        )),
        1,
        2,
    )
    .run_within(LIMIT * 2);
    std::fs::write(&stop, "").unwrap();
    let racer_ended = reader.wait().unwrap();
    let out = out.success();
    assert!(racer_ended.success());
    let read = |name: &str| std::fs::read_to_string(racer.join(name)).unwrap_or_default();
    assert_eq!(
        read("fails"),
        "",
        "the racer failed: {}\n{}",
        read("fails.log"),
        out.stderr
    );
    let rounds: usize = read("rounds").trim().parse().unwrap_or(0);
    let packed = |what: &str| out.stderr.matches(&format!("packed {what} in")).count();
    eprintln!(
        "{rounds} rounds of the racer; the hub packed {} times, the claims cache {}, the clones {}",
        packed("the hub"),
        packed("the claims cache"),
        packed("its clone")
    );
    assert!(rounds >= 5, "the racer ran {rounds} rounds only");
    assert!(packed("the hub") >= 10, "{}", out.stderr);
    assert!(packed("the claims cache") >= 3, "{}", out.stderr);

    assert_eq!(board(&env, "tasks/done"), ids, "{out:#?}");
    assert_nothing_lost(&env, ids.len());
    let no_problem = |git_dir: &Path, args: &[&str]| {
        let (ok, out, err) = crate::common::git_in(git_dir, env.tmp.path(), args);
        assert!(ok, "git {args:?} in {}: {out}{err}", git_dir.display());
    };
    // Every object of the hub whole and sound, every ref's history there.
    no_problem(
        &env.hub,
        &[
            "fsck",
            "--full",
            "--strict",
            "--no-dangling",
            "--no-progress",
        ],
    );
    for clone in clones(&env) {
        no_problem(
            &clone,
            &[
                "fsck",
                "--connectivity-only",
                "--no-dangling",
                "--no-progress",
            ],
        );
    }
    // The claims cache holds no refs: every object it has is read whole.
    let cache = env.tmp.path().join("state/claims.git");
    no_problem(
        &cache,
        &["fsck", "--full", "--no-dangling", "--no-progress"],
    );
    // The racer's last push, and everything under it, is on the hub.
    let side = env.git(["log", "--format=%s", "-1", "side"]);
    assert_eq!(side, format!("side {rounds}"));
}

/// The agent of [`a_night_of_packings_leaves_farm_holding_no_deleted_pack`]:
/// [`agent`]'s work, and a line to `held.log` of how many deleted packs
/// (files under `objects/pack/`) the farm process running it still holds
/// open or mapped, found by walking up its parents.
fn counting_agent(env: &Env) -> String {
    env.agent_script(
        "counting.sh",
        &format!(
            r#"{work}p=$PPID
while [ "$p" -gt 1 ] && [ "$(cat /proc/$p/comm)" != farm ]; do
  p=$(cut -d' ' -f4 "/proc/$p/stat")
done
[ "$p" -gt 1 ] || {{ echo "no farm above $$" >&2; exit 1; }}
held=$( {{ ls -l "/proc/$p/fd" 2>/dev/null; cat "/proc/$p/maps" 2>/dev/null; }} |
  grep '/objects/pack/.*(deleted)' | sed 's/.* \(\/[^ ]*\) (deleted)$/\1/' | sort -u | wc -l)
echo "$FARM_TASK $held" >> "{logs}/held.log"
"#,
            work = work(env),
            logs = logs(env).display()
        ),
    )
}

/// A loop keeps its clone's repository open for its whole life (see
/// `git/workdir.rs`); the packs farm's upkeep deletes in the clone and in
/// the hub (which the clone reads through its alternates) must not stay
/// open in it. They did: after a night of 5,000 tasks the supervisor held
/// ~1,000 deleted packs, open and mapped — file descriptors past a usual
/// limit of 1,024, disk not given back, and its memory and every fork (the
/// page tables of all it maps) growing with each task. Here the hub and
/// the clones are packed every few tasks; what the last sessions see farm
/// hold must not grow with the tasks done.
#[test]
fn a_night_of_packings_leaves_farm_holding_no_deleted_pack() {
    let (env, ids) = bare_hub_of(48);
    let agent = counting_agent(&env);
    let out = low_thresholds(
        env.farm_git(run_args(&env, &agent, &["-j", "2", "-v"])),
        6,
        2,
    )
    .run_within(LIMIT)
    .success();
    assert_eq!(board(&env, "tasks/done"), ids, "{out:#?}");
    assert_nothing_lost(&env, ids.len());
    assert!(out.stderr.contains("packed the hub"), "{}", out.stderr);
    let held: Vec<usize> = std::fs::read_to_string(logs(&env).join("held.log"))
        .unwrap()
        .lines()
        .map(|l| l.split(' ').nth(1).unwrap().parse().unwrap())
        .collect();
    assert_eq!(held.len(), ids.len(), "{held:?}");
    // A clone lets go of old packs after each of its integrations: until
    // then it may hold what the upkeeps deleted meanwhile, here 0 to 23
    // (the 4 clones together, in 5 runs), never what came before. Held
    // for good, they were 111 to 155 over the last sessions.
    let last = held[held.len() - 12..].iter().max().unwrap();
    assert!(*last <= 32, "farm holds {last} deleted packs: {held:?}");
}

/// The loose objects of the object directory `objects`, by path.
fn loose_files(objects: &Path) -> BTreeSet<std::path::PathBuf> {
    let mut all = BTreeSet::new();
    for fan in std::fs::read_dir(objects).unwrap().flatten() {
        let name = fan.file_name();
        let name = name.to_string_lossy();
        if name.len() != 2 || !name.bytes().all(|b| b.is_ascii_hexdigit()) {
            continue;
        }
        for object in std::fs::read_dir(fan.path()).unwrap().flatten() {
            all.insert(object.path());
        }
    }
    all
}

/// Whether the loose object at `path` is deflated in zlib's stored
/// blocks: its first block, after the two bytes of zlib's header, says so
/// in its type bits (00).
fn stored(path: &Path) -> bool {
    let bytes = std::fs::read(path).unwrap();
    assert!(bytes.len() > 2 && bytes[0] == 0x78, "{}", path.display());
    bytes[2] & 0b110 == 0
}

/// Deflating the trees a push writes in the hub was a quarter of a push
/// on a board of 5,000 tasks, under the push lock: where farm packs the
/// hub (its upkeep is on there), a push has them written stored, and
/// packed later as the user's settings say; where the user chose a level
/// of their own, it is theirs.
#[test]
fn pushed_objects_are_stored_uncompressed_where_farm_packs_the_hub() {
    for level in [None, Some("1")] {
        let (env, ids) = bare_hub_of(3);
        if let Some(level) = level {
            env.git(["config", "core.looseCompression", level]);
        }
        let objects = env.hub.join("objects");
        let before = loose_files(&objects);
        let agent = agent(&env);
        let out = env
            .farm_git(run_args(&env, &agent, &["-j", "1"]))
            .run_within(LIMIT)
            .success();
        assert_eq!(board(&env, "tasks/done"), ids, "{out:#?}");
        assert_nothing_lost(&env, ids.len());
        let written: Vec<_> = loose_files(&objects).difference(&before).cloned().collect();
        // Three tasks: three agent commits, their files, the done commits
        // and their trees, under git's threshold of 100 for packing.
        assert!(written.len() >= 9, "{level:?}: {written:?}");
        let kinds: Vec<bool> = written.iter().map(|p| stored(p)).collect();
        match level {
            None => assert!(kinds.iter().all(|s| *s), "{kinds:?}"),
            Some(_) => assert!(kinds.iter().any(|s| !*s), "{kinds:?}"),
        }
    }
}
