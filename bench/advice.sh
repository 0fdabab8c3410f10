#!/usr/bin/env bash
# Is tune's advice right on its own? For each workload of the benchmark set: plain `batchwise tune`
# (no --validate) picks a batch and learning rate; `batchwise validate` then trains a grid of batch
# sizes (16 ... 1024, and the pick) from the same weights to a held-out target, each at the rate tune
# would advise for it, once per seed; a grid candidate stops at 1.6x the pick's (or the fastest
# so far's) training time. The table: the picks, the grid's best, the ratio of their mean times to
# the target on validate's clock and on the sweep's, and what the advice cost against the grid.
#
#   bash bench/advice.sh                      # every workload below (hours on a 2-core CPU)
#   bash bench/advice.sh lenet-sgd mlp-adamw  # some of them
#   SEEDS="0 1 2" bash bench/advice.sh        # grid seeds (default "0 1"); tune runs with seed 0
#   TUNE_SEEDS="0 1 2 3 4" bash bench/advice.sh lenet-sgd   # the pick's stability over seeds
#   TUNE_TARGET=1 OUT=bench-results/advice-target bash bench/advice.sh   # tune is told the target too
#
# Writes bench-results/advice/NAME.{tune.SEED,grid.SEED}.json and bench-results/advice/summary.md.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
batchwise="${BATCHWISE:-$root/build/batchwise}"
python="${BATCHWISE_PYTHON:-/opt/batchwise-venv/bin/python}"
out="${OUT:-$root/bench-results/advice}"
seeds="${SEEDS:-0 1}"
tune_seeds="${TUNE_SEEDS:-0}"
tune_target="${TUNE_TARGET:-}"
grid="16,32,64,128,256,512,1024"
mkdir -p "$out"

# A torchvision model, exported to TorchScript (the grid and tune train it from C++).
mobilenet="$out/mobilenet_v3_small.pt"
if [ ! -f "$mobilenet" ]; then
  "$python" "$root/examples/export_torchscript.py" --model mobilenet_v3_small --in-channels 1 --out "$mobilenet" \
    2>/dev/null
fi

# name | workload flags (tune and validate) | tune's own flags | target and validate flags
workloads=(
  "lenet-sgd|--model lenet --optimizer sgd||--target-accuracy 0.88 --max-epochs 5 --eval-every 1500"
  "lenet-adamw|--model lenet --optimizer adamw||--target-accuracy 0.88 --max-epochs 5 --eval-every 1500"
  "mlp-sgd|--model mlp --optimizer sgd||--target-accuracy 0.87 --max-epochs 5 --eval-every 1500"
  "mlp-adamw|--model mlp --optimizer adamw||--target-accuracy 0.87 --max-epochs 5 --eval-every 1500"
  "transformer-sgd|--model transformer --dataset synthetic --optimizer sgd||--target-loss 1.0 --max-epochs 20 --eval-every 2000"
  "transformer-adamw|--model transformer --dataset synthetic --optimizer adamw||--target-loss 0.8 --max-epochs 20 --eval-every 2000"
  "mobilenet-sgd|--model $mobilenet --optimizer sgd|--max 1024|--target-accuracy 0.80 --max-epochs 4 --eval-every 3000 --held-out-samples 2000"
  "mobilenet-adamw|--model $mobilenet --optimizer adamw|--max 1024|--target-accuracy 0.82 --max-epochs 4 --eval-every 3000 --held-out-samples 2000"
  "resnet18-sgd|--model resnet18 --optimizer sgd|--max 1024|--target-accuracy 0.82 --max-epochs 1 --eval-every 1000 --held-out-samples 1000"
  "resnet18-adamw|--model resnet18 --optimizer adamw|--max 1024|--target-accuracy 0.82 --max-epochs 1 --eval-every 1000 --held-out-samples 1000"
)
wanted=("$@")
for spec in "${workloads[@]}"; do
  IFS='|' read -r name flags tune_flags target <<<"$spec"
  if [ ${#wanted[@]} -gt 0 ] && [[ ! " ${wanted[*]} " == *" $name "* ]]; then continue; fi
  echo "== $name"
  picks=()
  told=""  # with TUNE_TARGET: the grid's target, for the race to measure where it reaches it
  if [ -n "$tune_target" ]; then told=$(grep -oE -- '--target-(accuracy|loss) [0-9.]+' <<<"$target"); fi
  for seed in $tune_seeds; do
    start=$(date +%s.%N)
    # shellcheck disable=SC2086
    "$batchwise" tune $flags $tune_flags $told --seed "$seed" --no-history -q --json "$out/$name.tune.$seed.json" >/dev/null
    wall=$(echo "$(date +%s.%N) - $start" | bc)
    pick=$("$python" -c "import json,sys; print(json.load(open(sys.argv[1]))['recommendation']['batch'])" \
      "$out/$name.tune.$seed.json")
    echo "$wall" >"$out/$name.tune.$seed.wall"
    echo "tune (seed $seed): batch $pick in ${wall%.*} s"
    picks+=("$pick")
  done
  for seed in $seeds; do
    start=$(date +%s.%N)
    # The pick first, then the rest of the grid, each candidate stopped once it has trained 1.6x the
    # pick's time (it is then known to be slower than the pick by more than the 1.10 that matters).
    # shellcheck disable=SC2086
    "$batchwise" validate $flags $target --seed "$seed" --batch-sizes "${picks[0]}" --no-history -q \
      --json "$out/$name.pick.$seed.json" >/dev/null
    limit=$("$python" -c "
import json, sys
r = json.load(open(sys.argv[1]))['validation']['runs'][0]
print(f\"--max-seconds {1.6 * r['train_s']:.1f}\" if r['reached'] else '')" "$out/$name.pick.$seed.json")
    rest=$("$python" -c "import sys; print(','.join(b for b in sys.argv[1].split(',') if b != sys.argv[2]))" \
      "$grid" "${picks[0]}")
    # shellcheck disable=SC2086
    "$batchwise" validate $flags $target $limit --stop-slower-than 1.6 --seed "$seed" --batch-sizes "$rest" \
      --no-history -q --json "$out/$name.grid.$seed.json" >/dev/null
    echo "$(echo "$(date +%s.%N) - $start" | bc)" >"$out/$name.grid.$seed.wall"
    echo "grid (seed $seed) done"
  done
done
"$python" "$root/bench/advice_summary.py" "$out" | tee "$out/summary.md"
