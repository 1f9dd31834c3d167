# Sourced by check.sh and screenshot.sh: finds headless Chromium and runs it robustly.
#
# CHROMIUM=/path/to/chromium overrides the search. `find_chromium` exits 77 when there is
# none (the caller decides whether that is a skip or a failure).

find_chromium() {
  if [[ -n "${CHROMIUM:-}" ]]; then
    command -v "$CHROMIUM" >/dev/null 2>&1 && return 0
    echo "CHROMIUM=$CHROMIUM is not an executable" >&2
    exit 77
  fi
  for c in chromium chromium-browser google-chrome-stable google-chrome; do
    if command -v "$c" >/dev/null 2>&1; then
      CHROMIUM=$c
      return 0
    fi
  done
  echo "no chromium found (Debian: apt-get install -y chromium)" >&2
  exit 77
}

# run_chromium WORKDIR ARGS... : headless, sandbox off (root in containers), a fresh profile
# under WORKDIR, stderr logging on (console messages appear as CONSOLE lines), a 60 s limit.
# Retries twice when Chromium itself fails (crash, timeout), not when the page is wrong.
# Writes stdout to WORKDIR/stdout and stderr to WORKDIR/stderr.
run_chromium() {
  local work=$1
  shift
  local try
  for try in 1 2 3; do
    rm -rf "$work/profile"
    mkdir -p "$work/profile"
    if timeout -k 5 60 "$CHROMIUM" --headless --no-sandbox --disable-gpu \
      --disable-dev-shm-usage --no-first-run --no-default-browser-check \
      --disable-extensions --disable-background-networking --disable-component-update \
      --disable-sync --mute-audio --hide-scrollbars \
      --user-data-dir="$work/profile" --enable-logging=stderr --v=0 \
      "$@" >"$work/stdout" 2>"$work/stderr"; then
      return 0
    fi
    echo "chromium failed (try $try of 3, status $?); stderr tail:" >&2
    tail -n 5 "$work/stderr" >&2 || true
    sleep 1
  done
  return 1
}
