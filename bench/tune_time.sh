#!/usr/bin/env bash
# Does tune keep to the time it states? For each case, `batchwise tune` with --json, then one row:
# what it stated once the fit had timed the steps (expected, at most), what it stated again before
# the race where the rest was far off (restated_s), what it took, and each phase's expected and
# actual seconds (report.timing). Issue #33 item 3; the latest figures are in
# docs/benchmarks.md#how-long-tune-takes.
#
#   bash bench/tune_time.sh                      # every case below
#   bash bench/tune_time.sh lenet transformer    # some of them
#
# Writes bench-results/tune-time/NAME.json and prints a markdown table.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
batchwise="${BATCHWISE:-$root/build/batchwise}"
python="${BATCHWISE_PYTHON:-/opt/batchwise-venv/bin/python}"
out="${OUT:-$root/bench-results/tune-time}"
mkdir -p "$out"

# name | flags
cases=(
  "lenet|--model lenet"
  "mlp|--model mlp"
  "lenet-budget-20|--model lenet --advice-budget 20"
  "lenet-epochs-2|--model lenet --epochs 2 --lr-schedule cosine"
  "transformer|--model transformer --dataset synthetic"
)
wanted=("$@")
names=()
for spec in "${cases[@]}"; do
  IFS='|' read -r name flags <<<"$spec"
  if [ ${#wanted[@]} -gt 0 ] && [[ ! " ${wanted[*]} " == *" $name "* ]]; then continue; fi
  # shellcheck disable=SC2086
  "$batchwise" tune $flags --no-history -q --json "$out/$name.json" >/dev/null
  names+=("$name")
done
"$python" - "$out" "${names[@]}" <<'PY'
import json, os, sys
out, names = sys.argv[1], sys.argv[2:]
print("| case | expected | at most | took | took / expected | took / at most | stated again (took / it) "
      "| phases: took (expected) |")
print("|---|---:|---:|---:|---:|---:|---:|---|")
for name in names:
    t = json.load(open(os.path.join(out, name + ".json")))["timing"]
    phases = ", ".join(f"{p['phase']} {p['wall_s']:.1f}" + (f" ({p['expected_s']:.1f})" if "expected_s" in p else "")
                       for p in t["phases"] if p["wall_s"] >= 0.05)
    e, m, took, again = t.get("expected_s", 0), t.get("at_most_s", 0), t["total_s"], t.get("restated_s", 0)
    again = f"{again:.0f} s ({took / again:.2f})" if again else "-"
    print(f"| {name} | {e:.0f} s | {m:.0f} s | {took:.0f} s | {took / e:.2f} | {took / m:.2f} | {again} | {phases} |"
          if e else f"| {name} | | | {took:.0f} s | | | | {phases} |")
PY
