#!/usr/bin/env bash
# Make docs/report.png, the README's picture of `farm report`: a small night
# on a scratch hub (three agents, fourteen tasks; one fails for good, one
# asks a question, so the page's "Needs you" has something to say), then
# the page photographed with a headless Chromium (the distribution's
# `chromium` package).
set -euo pipefail
cd "$(dirname "$0")/.."
command -v chromium >/dev/null || { echo "screenshot: needs chromium (apt-get install chromium)" >&2; exit 1; }
cargo build --locked --quiet
farm=$PWD/target/debug/farm
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export GIT_CONFIG_GLOBAL=/dev/null GIT_CONFIG_NOSYSTEM=1 NO_COLOR=1 FARM_SANDBOX=off
export GIT_AUTHOR_NAME=farm GIT_AUTHOR_EMAIL=farm@example.invalid
export GIT_COMMITTER_NAME=farm GIT_COMMITTER_EMAIL=farm@example.invalid
git init -q -b main "$work/hub"
cd "$work/hub"
git commit -q --allow-empty -m root
"$farm" -q init
for t in lexer parser ast-dump codegen-x86 codegen-arm optimizer docs-intro docs-api \
  tests-lexer tests-parser flaky-net; do
  "$farm" -q task add "$t" -m "Work on $t"
done
"$farm" -q task add parse-if --after parser -m "Parse if statements"
"$farm" -q task add benchmarks --after codegen-x86 -m "Benchmarks"
cat > "$work/agent.sh" <<'AGENT'
#!/bin/sh
# Sessions of 1.1-1.9 s; flaky-net always fails, parse-if asks.
sleep "1.$(( $(od -An -N1 -tu1 /dev/urandom) % 9 + 1 ))"
case "$FARM_TASK" in
  flaky-net) echo "ERROR: connection refused by the package mirror" >&2; exit 1 ;;
  parse-if) echo "Should if without braces be accepted?" > "$FARM_ASK"; exit 0 ;;
esac
echo "$FARM_TASK" > "$FARM_TASK.txt"
git add -A
git commit -qm "work on $FARM_TASK"
AGENT
# Exit 6: a task waits for an answer, which is the point.
"$farm" -q run --agent "sh $work/agent.sh" -j 3 --name box || [ $? -eq 6 ]
"$farm" -q report -o "$work/report.html"
cd - >/dev/null
chromium --headless --no-sandbox --disable-gpu --hide-scrollbars --no-first-run \
  --user-data-dir="$work/profile" --window-size=1240,1100 \
  --screenshot="$PWD/docs/report.png" "file://$work/report.html" 2>/dev/null
echo "docs/report.png: $(wc -c < docs/report.png) bytes"
