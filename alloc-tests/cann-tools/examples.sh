#!/usr/bin/env bash
# Builds the official HCCL examples with their own, unchanged Makefiles against the emulator's
# CANN install layout (install.sh) and runs them: hicann/hccl's examples/01_point_to_point and
# examples/02_collectives (11 programs, one thread per device, `make test`), and, given a
# checkout of hicann/hcomm, its examples/01_communicators one_device_per_pthread and
# one_device_per_process (under mpirun -n 4). Fails on any failed build or run.
#
# Usage: examples.sh HCCL_CHECKOUT [HCOMM_CHECKOUT]
#   The checkouts are copied, never modified; the repository vendors neither.
# Environment: MPI_HOME, SYMHEAP_EMU_LIBRARY, as for hccl_test.sh; EXAMPLES_WORKDIR (default: a
#   fresh temporary directory). The examples use every device the runtime reports, one rank
#   each; SYMHEAP_EMU_DEVICE_COUNT=4 keeps them at 4 ranks (their printing waits a second
#   per device).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
if [[ $# -lt 1 || $# -gt 2 ]]; then
  echo "usage: $0 HCCL_CHECKOUT [HCOMM_CHECKOUT]" >&2
  exit 2
fi
hccl=$1
hcomm=${2:-}
[[ -d $hccl/examples/02_collectives ]] || { echo "$hccl has no examples/02_collectives" >&2; exit 2; }
started=$SECONDS
work=${EXAMPLES_WORKDIR:-$(mktemp -d -t symheap-cann-examples.XXXXXX)}
mkdir -p "$work"
work=$(cd "$work" && pwd)
rm -rf "$work/hccl" "$work/hcomm" "$work/cann"
"$here/../emu-cdylib/install.sh" "$work/cann" ${SYMHEAP_EMU_LIBRARY:+"$SYMHEAP_EMU_LIBRARY"}
# shellcheck source=/dev/null
source "$work/cann/set_env.sh"
export SYMHEAP_EMU_DEVICE_COUNT=${SYMHEAP_EMU_DEVICE_COUNT:-4}

failed=0
runs=0
# run NAME DIR COMMAND...: builds DIR with its Makefile, then runs COMMAND there.
run() {
  local name=$1 dir=$2
  shift 2
  runs=$((runs + 1))
  if ! make -s -C "$dir" >"$work/$name.build.log" 2>&1; then
    failed=$((failed + 1))
    echo "FAIL $name: did not build (log: $work/$name.build.log)"
    tail -20 "$work/$name.build.log" | sed 's/^/    /'
  elif ! (cd "$dir" && timeout 300 "$@") >"$work/$name.log" 2>&1; then
    failed=$((failed + 1))
    echo "FAIL $name (log: $work/$name.log)"
    tail -20 "$work/$name.log" | sed 's/^/    /'
  else
    echo "ok   $name"
  fi
}

mkdir -p "$work/hccl"
cp -R "$hccl/examples/01_point_to_point" "$hccl/examples/02_collectives" "$work/hccl/"
for dir in "$work"/hccl/01_point_to_point/*/ "$work"/hccl/02_collectives/*/; do
  run "hccl-$(basename "$dir")" "$dir" make -s test
done

if [[ -n $hcomm ]]; then
  [[ -d $hcomm/examples/01_communicators ]] || { echo "$hcomm has no examples/01_communicators" >&2; exit 2; }
  mkdir -p "$work/hcomm"
  cp -R "$hcomm/examples/01_communicators" "$work/hcomm/"
  run hcomm-one_device_per_pthread "$work/hcomm/01_communicators/03_one_device_per_pthread" \
    make -s test
  # Its Makefile links MPI as hccl_test's does (see mpi_home.sh).
  # shellcheck source=mpi_home.sh
  source "$here/mpi_home.sh"
  export MPI_HOME=$mpi_home OMPI_MCA_btl_vader_single_copy_mechanism=none
  mpirun_args=(-n 4 --oversubscribe)
  [[ $(id -u) -eq 0 ]] && mpirun_args+=(--allow-run-as-root)
  run hcomm-one_device_per_process "$work/hcomm/01_communicators/01_one_device_per_process" \
    mpirun "${mpirun_args[@]}" ./one_device_per_process
fi
echo "CANN examples: $((runs - failed)) of $runs passed in $((SECONDS - started)) s"
[[ $failed -eq 0 ]]
