#!/usr/bin/env bash
# The figures the doctor and the loader search decide on, measured on this machine: the doctor's
# GEMM rate against the CPU's estimated peak (default threads, then one thread), and the input-pipeline
# search on an 8 ms-per-batch synthetic stall. The tests only check the decisions on known figures
# (judge_gemm, decide_loader) and that the CLI's decision follows its own figures; whether this
# machine reaches 50 % of its peak, or which worker count removes the stall here, is measured here.
# Run it on a quiet machine: another process on the cores lowers both.
#
#   bash bench/doctor_loader.sh [ROUNDS]     # default 5 rounds of each, alternating
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
batchwise="${BATCHWISE:-$root/build/batchwise}"
rounds="${1:-5}"
out="$root/bench-results/doctor_loader"
mkdir -p "$out"
for i in $(seq 1 "$rounds"); do
  "$batchwise" doctor --json "$out/doctor.default.$i.json" >/dev/null
  "$batchwise" doctor --threads 1 --json "$out/doctor.one.$i.json" >/dev/null
  "$batchwise" loader --model mlp --dataset synthetic --synthetic-size 1000 --io-latency-us 125 --batch 64 \
    --steps 6 --no-history -q --json "$out/loader.$i.json" >/dev/null
done
python3 - "$out" "$rounds" <<'PY'
import json, statistics, sys
out, rounds = sys.argv[1], int(sys.argv[2])
for threads in ("default", "one"):
    runs = [json.load(open(f"{out}/doctor.{threads}.{i}.json")) for i in range(1, rounds + 1)]
    fractions = [r["gemm_fraction_of_peak"] for r in runs]
    verdicts = [f["status"] for r in runs for f in r["findings"] if f["check"] == "gemm"]
    print(f"doctor, {threads} threads ({runs[0]['threads']['intra_op']}): GEMM at "
          f"{100 * statistics.median(fractions):.0f} % of the {runs[0]['cpu']['peak_gflops']:.0f} GFLOP/s estimated "
          f"peak (median; {100 * min(fractions):.0f} to {100 * max(fractions):.0f} %); verdicts {verdicts}")
chosen = []
for i in range(1, rounds + 1):
    l = json.load(open(f"{out}/loader.{i}.json"))["loader"]
    after = l["after"]
    chosen.append("none" if after is None else f"{after['workers']}w/p{after['prefetch']}")
    print(f"loader round {i}: given 0 workers: {l['before']['samples_per_s']:.0f} samples/s, "
          f"{100 * l['before']['data_wait_share']:.0f} % waiting; chosen {chosen[-1]}")
print(f"loader: chosen setting per round {chosen}")
PY
