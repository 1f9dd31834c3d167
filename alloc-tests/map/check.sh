#!/usr/bin/env bash
# Checks a symheap heap map (symheap-map's HTML) in headless Chromium:
#
#   alloc-tests/map/check.sh MAP.html EXPECTED_BLOCKS EXPECTED_FREE
#
# - the page refers to nothing outside itself (no http(s):// or //host sources, no @import);
# - it loads without console errors: a probe script, inserted into a copy of the page before
#   anything else, records uncaught errors, failed loads, unhandled rejections and
#   console.error / console.warn into an attribute of <html>; after load it writes the number
#   of `.block` and `.free` elements there too. `--dump-dom` gives the DOM back, and Chromium's
#   own log (stderr) must have no "Uncaught" and no CONSOLE lines;
# - the DOM has EXPECTED_BLOCKS elements of class "block" and EXPECTED_FREE of class "free".
#
# Exit status: 0 passed; 1 a check failed (it says which); 2 usage; 77 no Chromium
# (CHROMIUM=... to name one). Used by alloc-tests/heap_map.rs.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=chromium.sh
source "$here/chromium.sh"

if [[ $# -ne 3 ]]; then
  echo "usage: $0 MAP.html EXPECTED_BLOCKS EXPECTED_FREE" >&2
  exit 2
fi
page=$1 want_blocks=$2 want_free=$3
[[ -f "$page" ]] || { echo "$page: no such file" >&2; exit 2; }
find_chromium

work=$(mktemp -d "${TMPDIR:-/tmp}/symheap-map-check.XXXXXX")
trap 'rm -rf "$work"' EXIT

fail() {
  echo "heap map check FAILED ($page): $*" >&2
  exit 1
}

if grep -Eqi '(src|href)[[:space:]]*=[[:space:]]*["'"'"']?(https?:)?//|url\([[:space:]]*["'"'"']?(https?:)?//|@import' "$page"; then
  fail "the page refers to something outside itself: $(grep -Eoi '(src|href)[[:space:]]*=[[:space:]]*["'"'"']?(https?:)?//[^"'"'"' >]*|url\([[:space:]]*["'"'"']?(https?:)?//[^)]*\)|@import[^;]*' "$page" | head -n 3)"
fi

probe='<script>(function () {
  var errors = [];
  var root = document.documentElement;
  function note(what) {
    errors.push(String(what));
    root.setAttribute("data-check-errors", errors.join(" | "));
  }
  window.addEventListener("error", function (e) {
    var where = e.filename || (e.target && (e.target.src || e.target.href)) || "";
    note("error: " + (e.message || e.type) + " " + where);
  }, true);
  window.addEventListener("unhandledrejection", function (e) { note("unhandled rejection: " + e.reason); });
  ["error", "warn"].forEach(function (level) {
    var original = console[level];
    console[level] = function () {
      note("console." + level + ": " + Array.prototype.join.call(arguments, " "));
      return original.apply(console, arguments);
    };
  });
  window.addEventListener("load", function () {
    root.setAttribute("data-check-blocks", document.querySelectorAll(".block").length);
    root.setAttribute("data-check-free", document.querySelectorAll(".free").length);
    root.setAttribute("data-check-loaded", "yes");
  });
})();</script>'

# The copy: the probe right after <head> (the page's first element with scripts in it).
# (index/substr, not sub: the probe has "&", which sub would replace; ENVIRON, not -v: no
# escape processing.)
PROBE=$probe awk '!done && (i = index($0, "<head>")) {
    $0 = substr($0, 1, i + 5) ENVIRON["PROBE"] substr($0, i + 6); done = 1
  }
  { print }
  END { if (!done) exit 3 }' "$page" >"$work/page.html" || fail "no <head> to put the probe in"

run_chromium "$work" --virtual-time-budget=5000 --dump-dom "file://$work/page.html" ||
  fail "chromium did not run (see above)"
dom="$work/stdout"

attr() {
  grep -o "$1=\"[^\"]*\"" "$dom" | head -n 1 | sed 's/^[^"]*"//; s/"$//' || true
}
[[ "$(attr data-check-loaded)" == yes ]] ||
  fail "the page did not finish loading (no load event in the dumped DOM; $(wc -c <"$dom") bytes)"
errors=$(attr data-check-errors)
[[ -z "$errors" ]] || fail "errors in the page: $errors"
if grep -E 'Uncaught|:CONSOLE[:(]|CONSOLE\(' "$work/stderr" >&2; then
  fail "console messages in Chromium's log (above)"
fi
blocks=$(attr data-check-blocks)
free=$(attr data-check-free)
[[ "$blocks" == "$want_blocks" ]] || fail "$blocks block elements in the DOM, expected $want_blocks"
[[ "$free" == "$want_free" ]] || fail "$free free elements in the DOM, expected $want_free"
echo "heap map check passed ($page): $blocks blocks, $free free regions, no console errors"
