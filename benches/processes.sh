#!/usr/bin/env bash
# Ranks as processes against ranks as threads, measured in alternation in one run:
#   benches/processes.sh [ROUNDS]     (default 7; about 10 s a round on 2 cores)
# Prints each round's numbers, then the medians and the ratios that issue targets name:
# 4-rank AllReduce bus bandwidth at 64 MiB (processes / threads, at least 0.9), 1 KiB AllReduce
# latency (processes / threads, at most 1.5), and the inference worker's pooled / window per
# tensor speed-up in processes (at least 10).
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-7}
cargo build --quiet --release --example coll_perf --example inference_worker
bin=target/release/examples

# The value of column $2 of the row of size $1 in coll_perf's table.
column() { awk -v size="$1" -v col="$2" '{ sub(/^\[rank 0\] /, "") } $1 == size { print $col }'; }
median() { sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
speedup() { awk '/speed-up/ { sub(/x$/, "", $NF); print $NF }'; }

declare -A values
for round in $(seq "$rounds"); do
  for mode in threads procs; do
    flag=--ranks; [ "$mode" = procs ] && flag=--procs
    big=$($bin/coll_perf $flag 4 --min 64M --max 64M --iters 10 | column 67108864 8)
    small=$($bin/coll_perf $flag 4 --min 1K --max 1K --iters 300 | column 1024 6)
    if [ "$mode" = procs ]; then worker=$($bin/inference_worker | speedup)
    else worker=$($bin/inference_worker --threads | speedup); fi
    values[$mode.busbw]+="$big "; values[$mode.latency]+="$small "; values[$mode.worker]+="$worker "
    echo "round $round $mode: busbw 64 MiB $big GB/s, 1 KiB $small us, worker speed-up ${worker}x"
  done
done
for key in threads.busbw procs.busbw threads.latency procs.latency threads.worker procs.worker; do
  m=$(tr ' ' '\n' <<< "${values[$key]}" | grep . | median)
  printf '%-16s median %s\n' "$key" "$m"
  values[$key.median]=$m
done
awk -v p="${values[procs.busbw.median]}" -v t="${values[threads.busbw.median]}" \
  'BEGIN { printf "busbw 64 MiB, processes / threads: %.2f (target >= 0.90)\n", p / t }'
awk -v p="${values[procs.latency.median]}" -v t="${values[threads.latency.median]}" \
  'BEGIN { printf "1 KiB latency, processes / threads: %.2f (target <= 1.5)\n", p / t }'
echo "inference worker in processes, pooled / window per tensor: ${values[procs.worker.median]}x (target >= 10)"
