#!/usr/bin/env bash
# A PNG of a symheap heap map (or any page), made by headless Chromium:
#
#   alloc-tests/map/screenshot.sh MAP.html OUT.png [WIDTH [HEIGHT]]
#
# WIDTH x HEIGHT is the window (default 1300 x 900 CSS pixels); the PNG is that size. For
# example, a 4-rank map of the inference worker:
#
#   cargo run --release --example inference_worker -- --snapshot /tmp/snap
#   cargo run --release -p symheap-tools --bin symheap-map -- /tmp/snap/rank-*.json -o /tmp/snap/heap-map.html
#   alloc-tests/map/screenshot.sh /tmp/snap/heap-map.html heap-map.png
#
# Exit status: 0 written; 1 Chromium failed; 2 usage; 77 no Chromium (CHROMIUM=... to name one).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=chromium.sh
source "$here/chromium.sh"

if [[ $# -lt 2 || $# -gt 4 ]]; then
  echo "usage: $0 MAP.html OUT.png [WIDTH [HEIGHT]]" >&2
  exit 2
fi
[[ -f "$1" ]] || { echo "$1: no such file" >&2; exit 2; }
page=$(realpath "$1")
out=$(realpath -m "$2")
width=${3:-1300} height=${4:-900}
find_chromium

work=$(mktemp -d "${TMPDIR:-/tmp}/symheap-map-shot.XXXXXX")
trap 'rm -rf "$work"' EXIT
rm -f "$out"
run_chromium "$work" --window-size="$width,$height" --virtual-time-budget=5000 \
  --screenshot="$out" "file://$page" || { echo "chromium failed" >&2; exit 1; }
[[ -s "$out" ]] || { echo "chromium wrote no screenshot" >&2; tail -n 5 "$work/stderr" >&2; exit 1; }
echo "wrote $out (${width}x${height})"
