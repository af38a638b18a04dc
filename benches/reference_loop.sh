#!/usr/bin/env bash
# The reference for `cargo bench --bench run`: the claim protocol as people
# ran it by hand before farm, with nothing but the git CLI.
#
# usage: reference_loop.sh HUB AGENT
#
# HUB is a farm hub (a non-bare repository with receive.denyCurrentBranch=
# updateInstead, as `farm init` leaves it), so pushes go straight into its
# checked-out branch, as farm's do. AGENT is run in the clone with FARM_TASK
# set, as farm runs it. Until no task is left, one turn is:
#
#   1. git pull --rebase;
#   2. pick the first tasks/*.md with no lock file current_tasks/<id>.txt in
#      the repository;
#   3. write the lock file, git add, git commit, git push — a rejected push
#      means someone else pushed first: drop the claim commit, pull, pick again;
#   4. run the agent;
#   5. git mv tasks/<id>.md tasks/done/, commit, push (rejected: git pull
#      --rebase, push again);
#   6. git rm the lock, commit, push (the same way).
#
# farm init's current_tasks/.gitignore ignores everything there but README.md
# and .gitignore (farm's claims are live files in the hub, never committed),
# so this script must `git add -f` its lock files: here the lock *is* a commit.
#
# With REFERENCE_MAX=N set, it stops after N tasks (the `scale` bench's
# per-task cost on a board larger than a run).
#
# The clone lives in a temp dir next to nothing else and is removed at exit.
# Prints the number of tasks it did on stdout.
set -euo pipefail

if [ "$#" -ne 2 ]; then
  echo "usage: $0 HUB AGENT" >&2
  exit 2
fi
hub=$1
agent=$2
branch=main

work=$(mktemp -d "${TMPDIR:-/tmp}/reference-loop.XXXXXX")
trap 'rm -rf "$work"' EXIT
git clone --quiet "$hub" "$work/clone"
cd "$work/clone"

# Push HEAD to the hub's branch; on rejection pull --rebase and push again.
push_until_accepted() {
  local tries=0
  until git push --quiet origin "HEAD:$branch" 2>/dev/null; do
    tries=$((tries + 1))
    if [ "$tries" -ge 20 ]; then
      echo "reference_loop: push still rejected after $tries tries" >&2
      return 1
    fi
    git pull --quiet --rebase origin "$branch"
  done
}

done_count=0
while [ -z "${REFERENCE_MAX:-}" ] || [ "$done_count" -lt "$REFERENCE_MAX" ]; do
  git pull --quiet --rebase origin "$branch"

  # The first pending task with no lock file committed.
  id=
  for f in tasks/*.md; do
    [ -e "$f" ] || continue
    t=$(basename "$f" .md)
    [ "$t" = README ] && continue
    [ -e "current_tasks/$t.txt" ] && continue
    id=$t
    break
  done
  [ -n "$id" ] || break

  # Claim: the lock file is a commit; the first push wins it.
  lock="current_tasks/$id.txt"
  printf 'agent = "reference"\npid = %s\n' "$$" >"$lock"
  git add -f "$lock"
  git commit --quiet -m "claim $id"
  if ! git push --quiet origin "HEAD:$branch" 2>/dev/null; then
    # Someone moved the branch first: forget this claim and look again.
    git reset --quiet --hard "origin/$branch"
    continue
  fi

  # The session, as farm runs it: in the clone, FARM_TASK set.
  FARM_TASK=$id "$agent" "$id"

  # Done: move the task, publish.
  mkdir -p tasks/done
  git mv "tasks/$id.md" tasks/done/
  git commit --quiet -m "$id done"
  push_until_accepted

  # Release the lock.
  git rm --quiet "$lock"
  git commit --quiet -m "release $id"
  push_until_accepted

  done_count=$((done_count + 1))
done
echo "$done_count"
