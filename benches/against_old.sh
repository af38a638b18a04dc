#!/usr/bin/env bash
# farm's own cost against a fixed older build, interleaved in one run.
#
#   bash benches/against_old.sh OLD_FARM NEW_FARM [ROUNDS]
#
# Build the older one once in a worktree of its own, e.g.
#   git worktree add --detach ../farm-34e3500 34e3500
#   (cd ../farm-34e3500 && cargo build --release --locked)
# and this one with `cargo build --release --locked`. Each round runs, for
# OLD then NEW: `farm run` on an empty board; 40 trivial tasks (an agent that
# appends a line and commits) with -j 1, then with -j 4, each on a fresh bare
# hub. Prints each round, then the medians and NEW/OLD ratios. Wall times of
# whole runs: the machine's load is printed first and last.
set -euo pipefail
OLD=$(realpath "$1"); NEW=$(realpath "$2"); ROUNDS=${3:-5}
export GIT_CONFIG_GLOBAL=/dev/null GIT_CONFIG_NOSYSTEM=1 \
  GIT_AUTHOR_NAME=bench GIT_AUTHOR_EMAIL=bench@example.com \
  GIT_COMMITTER_NAME=bench GIT_COMMITTER_EMAIL=bench@example.com
W=$(mktemp -d); trap 'rm -rf "$W"' EXIT; cd "$W"
git init -q --bare -b main tasks.git
git clone -q tasks.git s 2>/dev/null
(cd s && git commit -q --allow-empty -m init && git push -q origin HEAD:main)
git clone -q --bare tasks.git empty.git
(cd s && mkdir -p tasks && for i in $(seq -w 1 40); do
   printf '+++\ntitle = "t%s"\n+++\nAnything.\n' "$i" > "tasks/t$i.md"; done &&
 git add -A && git commit -q -m tasks && git push -q origin HEAD:main)
printf '#!/bin/sh\necho x >> "work-$FARM_TASK.txt"; git add -A; git commit -q -m "$FARM_TASK"\n' > agent.sh
chmod +x agent.sh
ms() { local a; a=$(date +%s%N); "$@" >/dev/null 2>&1 || true; echo $(( ($(date +%s%N) - a) / 1000000 )); }
one() { # BIN HUB_TEMPLATE ARGS...: ms of one run on a fresh copy
  local bin=$1 tpl=$2; shift 2
  rm -rf hub.git st; cp -a "$tpl" hub.git
  ms "$bin" run --hub "$W/hub.git" --agent "$W/agent.sh" --state-dir "$W/st" -q "$@"
}
echo "load: $(cut -d' ' -f1-3 /proc/loadavg); $(nproc) cores"
declare -A t
for r in $(seq 1 "$ROUNDS"); do
  for b in OLD NEW; do
    bin=${!b}
    e=$(one "$bin" empty.git); j1=$(one "$bin" tasks.git -j 1); j4=$(one "$bin" tasks.git -j 4)
    t[$b.empty]+="$e "; t[$b.j1]+="$j1 "; t[$b.j4]+="$j4 "
    echo "round $r $b: empty board ${e} ms, 40 tasks -j 1 ${j1} ms, -j 4 ${j4} ms"
  done
done
median() { tr ' ' '\n' | grep . | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
for k in empty j1 j4; do
  o=$(echo "${t[OLD.$k]}" | median); n=$(echo "${t[NEW.$k]}" | median)
  echo "median $k: OLD ${o} ms, NEW ${n} ms, NEW/OLD $(awk "BEGIN {printf \"%.2f\", $n / $o}")"
done
echo "load: $(cut -d' ' -f1-3 /proc/loadavg)"
