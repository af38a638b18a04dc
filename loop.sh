#!/usr/bin/env bash
# loop.sh — keep `farm run` going overnight: respawn it when it crashes or is
# killed, with exponential backoff; stop when it ends cleanly.
#
#   ./loop.sh --agent "claude -p --dangerously-skip-permissions" -j 8
#
# Arguments are passed to `farm run` as they are. farm's exit status decides:
#   0    the board is settled, every task done: stop
#   5    the board is settled with tasks failed, stuck or invalid: stop
#   6    farm ended with work left (drained by farm stop, or --until,
#        --max-sessions, --once): stop
#   130  stopped by SIGINT/SIGTERM: stop
#   2    bad usage or setup (fix the command line): stop
#   else a crash: wait, then run again. The wait doubles from 1 s up to
#        FARM_LOOP_MAX_DELAY (default 300 s) and starts over after a run that
#        lasted longer than 60 s. A respawned farm reaps the dead claims of
#        its predecessor at once and carries on.
# SIGINT/SIGTERM to loop.sh are passed to farm once each (the first drains,
# a second kills the sessions) and end the loop.
# FARM names the farm binary (default: farm on PATH).
set -u
farm=${FARM:-farm}
max_delay=${FARM_LOOP_MAX_DELAY:-300}
delay=1
stopping=0
child=0

stop() {
  stopping=1
  if [ "$child" -ne 0 ]; then kill -s "$1" "$child" 2>/dev/null; fi
}
trap 'stop INT' INT
trap 'stop TERM' TERM
# farm runs in a process group of its own, so a Ctrl-C at the terminal
# reaches loop.sh alone and is passed on exactly once: farm drains on the
# first signal and kills its sessions on the second, so a doubled SIGINT
# (terminal + forward) would skip the drain.
set -m

while :; do
  started=$(date +%s)
  "$farm" run "$@" &
  child=$!
  echo "loop.sh: farm run started (pid $child)" >&2
  # `wait` returns early when a trapped signal arrives; wait again for the exit.
  while :; do
    wait "$child"
    code=$?
    kill -0 "$child" 2>/dev/null || break
  done
  child=0
  case $code in
    0) echo "loop.sh: the board is settled, every task done; done" >&2; exit 0 ;;
    5) echo "loop.sh: the board is settled with tasks failed, stuck or invalid (farm tasks); done" >&2
       exit 5 ;;
    6) echo "loop.sh: farm drained with work left on the board; not respawning" >&2; exit 6 ;;
    130) echo "loop.sh: farm was stopped; done" >&2; exit 130 ;;
    2) echo "loop.sh: farm refused its arguments (exit 2); not respawning" >&2; exit 2 ;;
  esac
  if [ "$stopping" -eq 1 ]; then
    echo "loop.sh: stopped (farm exited $code)" >&2
    exit "$code"
  fi
  if [ $(( $(date +%s) - started )) -gt 60 ]; then delay=1; fi
  echo "loop.sh: farm run exited $code; running it again in ${delay}s" >&2
  sleep "$delay" & wait $! || true
  [ "$stopping" -eq 1 ] && exit "$code"
  delay=$(( delay * 2 )); [ "$delay" -gt "$max_delay" ] && delay=$max_delay
done
