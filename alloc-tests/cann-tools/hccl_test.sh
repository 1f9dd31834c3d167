#!/usr/bin/env bash
# Builds CANN's HCCL test tool (hicann/oam-tools, src/hccl_test) with its own, unchanged Makefile
# against the emulator's CANN install layout (install.sh), and runs its 11 tools in its 3
# memory modes (default, zero-copy `-z 1`, symmetric windows `-m 1`) as 4 MPI processes, with
# result checking on (`-c 1`): 33 runs. Fails on any failed build, run or check.
#
# Usage: hccl_test.sh SRC_DIR
#   SRC_DIR: a checkout of hicann/oam-tools (or its src/hccl_test directory); it is copied,
#   never modified. Not vendored: the repository has no copy of it.
# Environment:
#   MPI_HOME           the MPI install the Makefile builds against (default: OpenMPI's, found
#                      with `mpicc --showme:incdirs`)
#   SYMHEAP_EMU_LIBRARY  an already built libsymheap_emu_cdylib.so (default: install.sh builds it)
#   HCCL_TEST_WORKDIR  where to build and install (default: a fresh temporary directory)
#   HCCL_TEST_ARGS     the sizes and iterations of every run (default below: 5 sizes, 8 B to
#                      512 KiB, 2 iterations after 1 warm-up)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
if [[ $# -ne 1 ]]; then
  echo "usage: $0 SRC_DIR (a checkout of hicann/oam-tools or its src/hccl_test)" >&2
  exit 2
fi
src=$1
[[ -f $src/src/hccl_test/Makefile ]] && src=$src/src/hccl_test
if [[ ! -f $src/Makefile || ! -d $src/opbase_test ]]; then
  echo "$1 holds no hccl_test (no Makefile and opbase_test/)" >&2
  exit 2
fi
for tool in mpirun mpicc make g++; do
  command -v "$tool" >/dev/null || { echo "$tool is needed and not on PATH" >&2; exit 2; }
done
started=$SECONDS
work=${HCCL_TEST_WORKDIR:-$(mktemp -d -t symheap-hccl-test.XXXXXX)}
mkdir -p "$work"
work=$(cd "$work" && pwd)
rm -rf "$work/hccl_test" "$work/cann"
cp -R "$src" "$work/hccl_test"
"$here/../emu-cdylib/install.sh" "$work/cann" ${SYMHEAP_EMU_LIBRARY:+"$SYMHEAP_EMU_LIBRARY"}

# An MPI_HOME the Makefile can link against (see mpi_home.sh).
# shellcheck source=mpi_home.sh
source "$here/mpi_home.sh"

echo "building hccl_test in $work/hccl_test with its Makefile"
make -C "$work/hccl_test" -j"$(nproc)" MPI_HOME="$mpi_home" ASCEND_DIR="$work/cann" >"$work/build.log" 2>&1 ||
  { tail -40 "$work/build.log" >&2; echo "hccl_test did not build (log: $work/build.log)" >&2; exit 1; }

# shellcheck source=/dev/null
source "$work/cann/set_env.sh"
# OpenMPI in a container: no cross-memory-attach (ptrace is often refused), and root needs
# its own flag. More ranks than cores is the point of an emulator.
export OMPI_MCA_btl_vader_single_copy_mechanism=none
mpirun_args=(-n 4 --oversubscribe)
[[ $(id -u) -eq 0 ]] && mpirun_args+=(--allow-run-as-root)
read -r -a sizes <<<"${HCCL_TEST_ARGS:--b 8 -e 512K -f 16 -n 2 -w 1}"

tools=(all_gather_test all_gatherv_test all_reduce_test alltoall_test alltoallv_test
  alltoallvc_test broadcast_test reduce_scatter_test reduce_scatterv_test reduce_test scatter_test)
modes=("" "-z 1" "-m 1")
failed=0
runs=0
for mode in "${modes[@]}"; do
  for tool in "${tools[@]}"; do
    runs=$((runs + 1))
    read -r -a mode_args <<<"$mode"
    log=$work/${tool}${mode:+_${mode// /}}.log
    status=0
    timeout 300 mpirun "${mpirun_args[@]}" "$work/hccl_test/bin/$tool" "${sizes[@]}" -c 1 -p 4 \
      "${mode_args[@]}" >"$log" 2>&1 || status=$?
    # A result row is `size | time | bandwidth | check`; every one must say success.
    rows=$(grep -cE '^[0-9]+ +\|' "$log" || true)
    good=$(grep -cE '^[0-9]+ +\|.*\| *success *$' "$log" || true)
    if [[ $status -ne 0 || $rows -eq 0 || $good -ne $rows ]]; then
      failed=$((failed + 1))
      echo "FAIL $tool ${mode:-(default)}: exit $status, $good of $rows sizes checked ok (log: $log)"
      tail -20 "$log" | sed 's/^/    /'
    else
      echo "ok   $tool ${mode:-(default)}: $rows sizes checked"
    fi
  done
done
echo "hccl_test: $((runs - failed)) of $runs runs passed in $((SECONDS - started)) s"
[[ $failed -eq 0 ]]
