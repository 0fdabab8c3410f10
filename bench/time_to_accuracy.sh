#!/usr/bin/env bash
# Time to a test accuracy on Fashion-MNIST with lenet: tune's recommended batch against a grid of
# batch sizes (each with its scaled learning rate), the largest batch that fits (what Lightning's
# finder would pick) and 32. One `batchwise validate` run trains every candidate from the same
# weights, so the times are side by side.
#
#   bash bench/time_to_accuracy.sh [TARGET] [MAX_EPOCHS]      # defaults: 0.88, 5
#
# Writes bench-results/time_to_accuracy.{tune,validate}.json and prints the validation table.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
batchwise="${BATCHWISE:-$root/build/batchwise}"
target="${1:-0.88}"
epochs="${2:-5}"
out="$root/bench-results"
mkdir -p "$out"

# tune's recommendation twice: from its measurements alone (the goodput optimum), and after
# tune --validate has trained the recommendation, the knee, half and twice it to the same target.
"$batchwise" tune --model lenet --no-history -q --validate --target-accuracy "$target" --max-epochs "$epochs" \
  --eval-every 6000 --json "$out/time_to_accuracy.tune.json" >/dev/null
read -r predicted recommended fitted < <(python3 -c "
import json, sys
r = json.load(open(sys.argv[1]))
g = r.get('goodput') or {}
print(g.get('best_batch') or r['recommendation']['batch'], r['recommendation']['batch'], r['fit']['batch'])" \
  "$out/time_to_accuracy.tune.json")
echo "tune recommends batch $predicted from its measurements, batch $recommended after --validate;" \
     "the largest batch that fits (within --max) is $fitted"
candidates="$(python3 -c "
import sys
print(','.join(str(b) for b in sorted({16, 32, 64, 128, 256, 512, 2048, *map(int, sys.argv[1:])})))" \
  "$predicted" "$recommended" "$fitted")"
"$batchwise" validate --model lenet --batch-sizes "$candidates" --target-accuracy "$target" --max-epochs "$epochs" \
  --eval-every 6000 --no-history -q --json "$out/time_to_accuracy.validate.json" | sed -n '/^validation:/,/^$/p'
python3 - "$out/time_to_accuracy.validate.json" "$recommended" "$fitted" "$predicted" <<'PY'
import json, sys
v = json.load(open(sys.argv[1]))["validation"]
rec, fit, pred = int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
runs = {r["batch"]: r for r in v["runs"]}
reached = {b: r["train_s"] for b, r in runs.items() if r["reached"]}
best = min(reached.values()) if reached else None
def show(name, b):
    r = runs[b]
    t = f"{r['train_s']:.1f} s" if r["reached"] else f"not reached ({r['message']})"
    ratio = f", {r['train_s'] / best:.2f}x the grid's best" if r["reached"] and best else ""
    print(f"{name} (batch {b}): {t}{ratio}")
print(f"grid's best: batch {min(reached, key=reached.get)} in {best:.1f} s" if best else "no candidate reached the target")
show("recommended from measurements (goodput)", pred)
show("recommended after tune --validate", rec)
show("largest that fits", fit)
show("32", 32)
PY
