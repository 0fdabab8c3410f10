#!/usr/bin/env bash
# Data-parallel scaling on this machine: 1 and 2 processes (c10d Gloo, one intra-op thread each),
# mlp and lenet on Fashion-MNIST at three per-device batch sizes. Each point is one
# `batchwise sweep --nproc 2` trial beside rank 0 alone at the same per-device batch (measured in
# the same run, right after): global samples/s, scaling efficiency and the all-reduce share.
#
#   bash bench/scaling.sh [build-dir]      # results in bench-results/scaling-*.json and a table
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${1:-$root/build}"
out="$root/bench-results"
mkdir -p "$out"
for model in mlp lenet; do
  "$build/batchwise" sweep --model "$model" --nproc 2 --threads 1 --batch-sizes 32,128,512 --warmup 3 --steps 20 \
    --repetitions 3 --no-history --quiet --json "$out/scaling-$model.json" >/dev/null
done
python3 - "$out" <<'PY'
import json, sys, os
out = sys.argv[1]
print("| model | per-device batch | 1 process samples/s | 2 processes samples/s | efficiency | all-reduce share |")
print("|---|---|---|---|---|---|")
for model in ("mlp", "lenet"):
    r = json.load(open(os.path.join(out, f"scaling-{model}.json")))
    for p in r["sweep"]["points"]:
        d = p["distributed"]
        print(f"| {model} | {p['batch']} | {d['single_process_samples_per_s']:,.0f} | {p['samples_per_s']:,.0f} | "
              f"{d['scaling_efficiency']:.2f} | {100 * d['allreduce_share']:.0f} % |")
PY
