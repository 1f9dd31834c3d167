#!/usr/bin/env bash
# Lays out symheap's emulator as a CANN install at PREFIX, the way ASCEND_HOME_PATH looks:
#   PREFIX/lib64/libsymheap_emu.so, and libhccl.so, libhcomm.so, libascendcl.so, libacl_rt.so
#   (the runtime's current name) and libmsprofiler.so (the profiling API) linking to it
#   PREFIX/include/acl/*.h, PREFIX/include/hccl/*.h and PREFIX/include/hcomm_res.h (CANN's
#   declarations, as C and C++)
#   PREFIX/set_env.sh, to source as CANN's own: ASCEND_HOME_PATH, ASCEND_TOOLKIT_HOME and
#   LD_LIBRARY_PATH
# so that an unmodified CANN program builds and runs as the official HCCL examples do:
#   source PREFIX/set_env.sh
#   g++ main.cc -I$ASCEND_HOME_PATH/include -L$ASCEND_HOME_PATH/lib64 -lhccl -lascendcl
# and CANN's own Makefiles (hccl_test's: -lhccl -lacl_rt -lmsprofiler, -Werror) build unchanged.
#
# Usage: install.sh PREFIX [LIBRARY]
#   LIBRARY: an already built libsymheap_emu_cdylib.so; without it the library is built here
#   (cargo build --release, into $CARGO_TARGET_DIR or the workspace's target/).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
if [[ $# -lt 1 || $# -gt 2 ]]; then
  echo "usage: $0 PREFIX [LIBRARY]" >&2
  exit 2
fi
prefix=$1
lib=${2:-}
if [[ -z $lib ]]; then
  cargo build --release --quiet --manifest-path "$here/Cargo.toml"
  target=${CARGO_TARGET_DIR:-$(cd "$here/../.." && pwd)/target}
  lib=$target/release/libsymheap_emu_cdylib.so
fi
if [[ ! -f $lib ]]; then
  echo "$lib is not a built library" >&2
  exit 1
fi
mkdir -p "$prefix/lib64" "$prefix/include"
prefix=$(cd "$prefix" && pwd)
install -m 0755 "$lib" "$prefix/lib64/libsymheap_emu.so"
# One library under every name: a program that links several loads it once (the loader
# knows the file by device and inode), so HCCL, the runtime and the profiler share one state.
for name in libhccl.so libhcomm.so libascendcl.so libacl_rt.so libmsprofiler.so; do
  ln -sfn libsymheap_emu.so "$prefix/lib64/$name"
done
cp -R "$here/include/." "$prefix/include/"
cat >"$prefix/set_env.sh" <<EOF
# symheap's emulator of CANN at $prefix: source this where CANN's set_env.sh is sourced.
export ASCEND_HOME_PATH="$prefix"
export ASCEND_TOOLKIT_HOME="$prefix"
export LD_LIBRARY_PATH="$prefix/lib64\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}"
EOF
echo "symheap's emulator of CANN installed at $prefix; source $prefix/set_env.sh"
