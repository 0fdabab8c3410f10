#!/usr/bin/env bash
# The utilisation monitor's cost on the step it watches: lenet sweeps at batches 64 and 256 with and
# without the monitor, alternating runs (A B A B ...) so that drift in the machine hits both alike.
# Prints the median samples/s of each and the ratio.
#
#   bash bench/monitor_overhead.sh [ROUNDS]     # default 6 rounds of each
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
batchwise="${BATCHWISE:-$root/build/batchwise}"
rounds="${1:-6}"
out="$root/bench-results/monitor"
mkdir -p "$out"
for i in $(seq 1 "$rounds"); do
  for mode in on off; do
    flag=""; [ "$mode" = off ] && flag="--no-monitor"
    "$batchwise" sweep --model lenet --batch-sizes 64,256 --repetitions 3 --steps 10 --no-history -q $flag \
      --json "$out/$mode.$i.json" >/dev/null
  done
done
python3 - "$out" "$rounds" <<'PY'
import json, statistics, sys
out, rounds = sys.argv[1], int(sys.argv[2])
for batch in (64, 256):
    speed = {}
    for mode in ("on", "off"):
        speed[mode] = statistics.median(
            p["samples_per_s"] for i in range(1, rounds + 1)
            for p in json.load(open(f"{out}/{mode}.{i}.json"))["sweep"]["points"] if p["batch"] == batch)
    print(f"batch {batch}: {speed['on']:.0f} samples/s with the monitor, {speed['off']:.0f} without: "
          f"ratio {speed['on'] / speed['off']:.4f} ({100 * (1 - speed['on'] / speed['off']):+.2f} % cost)")
PY
