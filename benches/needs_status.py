#!/usr/bin/env python3
"""What "needs you" costs `farm status` on a large board: two farm binaries,
interleaved, on one hub.

    python3 benches/needs_status.py OLD_FARM NEW_FARM [RUNS]

The hub (made in $TMPDIR by OLD_FARM's `farm init`): 10,000 tasks in one
commit (9,000 done, 300 failed with an attempt note, 200 blocked on a
failed one, 500 ready) and 50 rescue branches of one commit each; an empty
journal. `farm status` and `farm status --json` are run RUNS times each per
binary (21 by default), the order alternating every round; printed: the
median wall time of each and NEW/OLD. Both must exit 0, and NEW's `--json`
must count the 300 failed and 50 rescued, or the bench fails.
"""
import json, os, statistics, subprocess, sys, tempfile, time

def git(hub, *args, **kw):
    return subprocess.run(['git', '-C', hub, *args], check=True, capture_output=True, text=True, **kw).stdout

def make_hub(root, farm):
    hub = os.path.join(root, 'hub')
    subprocess.run(['git', 'init', '-q', '-b', 'main', hub], check=True)
    git(hub, 'commit', '-q', '--allow-empty', '-m', 'root')
    subprocess.run([farm, '-q', 'init'], cwd=hub, check=True)
    tasks = os.path.join(hub, 'tasks')
    os.makedirs(os.path.join(tasks, 'done')); os.makedirs(os.path.join(tasks, 'failed'))
    def write(rel, text):
        with open(os.path.join(tasks, rel), 'w') as f: f.write(text)
    for i in range(9000):
        write(f'done/d{i:05}.md', f'+++\ntitle = "Done {i}"\n+++\ndone\n\n## Result\nok\n')
    for i in range(300):
        write(f'failed/f{i:04}.md', f'+++\ntitle = "Failed {i}"\nattempts = 3\n+++\nfailed\n\n## Attempt 3 — failed with exit code 1\nlog\n')
    for i in range(200):
        write(f'b{i:04}.md', f'+++\ntitle = "Blocked {i}"\nafter = ["f{i:04}"]\n+++\nblocked\n')
    for i in range(500):
        write(f'p{i:04}.md', f'+++\ntitle = "Pending {i}"\n+++\npending\n')
    git(hub, 'add', '-A'); git(hub, 'commit', '-q', '-m', 'the board')
    env = dict(os.environ, GIT_INDEX_FILE=os.path.join(root, 'rescue-index'))
    for i in range(50):
        branch = f'farm/rescue/p{i:04}/{i:032x}'
        git(hub, 'read-tree', 'HEAD', env=env)
        blob = git(hub, 'hash-object', '-w', '--stdin', input=f'work {i}\n').strip()
        git(hub, 'update-index', '--add', '--cacheinfo', f'100644,{blob},work/{i}.txt', env=env)
        tree = git(hub, 'write-tree', env=env).strip()
        commit = git(hub, 'commit-tree', tree, '-p', 'HEAD', '-m', f'work {i}').strip()
        git(hub, 'update-ref', f'refs/heads/{branch}', commit)
    return hub

def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    old, new = sys.argv[1], sys.argv[2]
    runs = int(sys.argv[3]) if len(sys.argv) > 3 else 21
    env = dict(os.environ, NO_COLOR='1', COLUMNS='100', GIT_CONFIG_GLOBAL='/dev/null', GIT_CONFIG_NOSYSTEM='1',
               GIT_AUTHOR_NAME='bench', GIT_AUTHOR_EMAIL='bench@farm.invalid',
               GIT_COMMITTER_NAME='bench', GIT_COMMITTER_EMAIL='bench@farm.invalid')
    os.environ.update(env)
    print(f"needs_status: load average at the start: {' '.join(open('/proc/loadavg').read().split()[:3])}")
    with tempfile.TemporaryDirectory(prefix='farm-bench-needs.') as root:
        hub = make_hub(root, old)
        said = json.loads(subprocess.run([new, 'status', '--json'], cwd=hub, check=True, capture_output=True).stdout)
        needs = said.get('needs_you') or {}
        failed, rescued = len(needs.get('failed', [])), len(needs.get('rescued', []))
        if (failed, rescued) != (300, 50):
            sys.exit(f'BENCH FAILED: {new} status --json says {failed} failed, {rescued} rescued (300, 50 made)')
        times = {(b, j): [] for b in (old, new) for j in (False, True)}
        for i in range(runs):
            for b in ((old, new) if i % 2 == 0 else (new, old)):
                for j in (False, True):
                    start = time.perf_counter()
                    p = subprocess.run([b, 'status'] + (['--json'] if j else []), cwd=hub, capture_output=True)
                    times[(b, j)].append((time.perf_counter() - start) * 1000)
                    if p.returncode != 0:
                        sys.exit(f'BENCH FAILED: {b} status: {p.stderr.decode()[-400:]}')
        for j in (False, True):
            a, b = statistics.median(times[(old, j)]), statistics.median(times[(new, j)])
            label = 'farm status --json' if j else 'farm status'
            print(f'{label}, 10,000 tasks, 50 rescues: {a:.1f} ms -> {b:.1f} ms, {b / a:.2f}x (medians of {runs})')
    print(f"needs_status: load average at the end: {' '.join(open('/proc/loadavg').read().split()[:3])}")

main()
