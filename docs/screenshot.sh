#!/usr/bin/env bash
# Make docs/report.png, the README's picture of `farm report`: run the built-in
# demo (`farm demo --dir`), then photograph the page it wrote with a headless
# Chromium (the distribution's `chromium` package).
set -euo pipefail
cd "$(dirname "$0")/.."
command -v chromium >/dev/null || { echo "screenshot: needs chromium (apt-get install chromium)" >&2; exit 1; }
cargo build --locked --quiet
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
NO_COLOR=1 target/debug/farm demo --dir "$work/demo" >/dev/null 2>&1
chromium --headless --no-sandbox --disable-gpu --hide-scrollbars --no-first-run \
  --user-data-dir="$work/profile" --window-size=1240,1100 \
  --screenshot="$PWD/docs/report.png" "file://$work/demo/hub/.farm/report.html" 2>/dev/null
echo "docs/report.png: $(wc -c < docs/report.png) bytes"
