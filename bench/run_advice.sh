#!/usr/bin/env bash
# Is tune's answer for the user's run right? For each workload and optimizer: `batchwise tune
# --epochs N --lr-schedule cosine` picks a batch (the run race); `batchwise validate` trains the
# grid's full runs of the same N epochs with the same schedule, from the same weights, each at the
# rate tune would advise for it, once per training seed. The good set: the batches whose mean final
# test accuracy (the transformer: final loss) is within max(0.005, 2 standard errors) of the best
# mean; a pick passes when it is in the good set and its mean training time is within 1.10x of the
# good set's fastest. Issue #30's benchmark; docs/benchmarks.md#the-run-race has the latest table.
#
#   bash bench/run_advice.sh                         # every cell below (hours on a 2-core CPU)
#   bash bench/run_advice.sh lenet-sgd mlp-adamw     # some of them
#   SEEDS="0 1 2" TUNE_SEEDS="0" bash bench/run_advice.sh lenet-sgd
#   SEEDS= bash bench/run_advice.sh mlp-sgd          # tune again against the grids already run (or kept
#                                                    # in bench/grids: run_advice_summary.py --save-grids)
#   RETIME=1 TUNE_SEEDS= bash bench/run_advice.sh transformer-sgd
#       # no tune and no grid: the kept grid's runs that can move a 1.10x verdict (the good set's members
#       # within 1.25x of its fastest) trained again, RETIME times per seed, for their times alone
#       # (NAME.retime.SEED.K.json; run_advice_summary.py --save-grids keeps them in bench/grids/NAME.times.csv)
#
# Where tune proposes a batch-size schedule, it trains beside the pick with the same seeds.
# Writes bench-results/run-advice/NAME.{tune.SEED,grid.SEED,schedule.SEED,retime.SEED.K}.json and
# .../summary.md.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
batchwise="${BATCHWISE:-$root/build/batchwise}"
python="${BATCHWISE_PYTHON:-/opt/batchwise-venv/bin/python}"
out="${OUT:-$root/bench-results/run-advice}"
seeds="${SEEDS-0 1 2}"  # SEEDS= (empty): tune only, no grid
tune_seeds="${TUNE_SEEDS-0}"  # TUNE_SEEDS= (empty): no tune
retime="${RETIME:-0}"
grid="${GRID:-16,32,64,128,256,512,1024}"
mkdir -p "$out"

# resnet18 and mobilenet_v3_small train on a fixed subset of Fashion-MNIST (issue #30), so that a full
# run takes 30-120 s here: mobilenet the first 12,000 training images (about 500 samples/s here),
# resnet18 the first 3,000 (about 65); both the first 2,000 test images. Written once.
subset_of() {  # FOLDER TRAINING_IMAGES
  [ -f "$1/t10k-labels-idx1-ubyte.gz" ] && return
  "$python" - "$1" "$2" <<'PY'
import gzip, os, sys
src, dst, train = "/usr/share/datasets/fashion-mnist", sys.argv[1], int(sys.argv[2])
os.makedirs(dst, exist_ok=True)
for name, header, item, n in [("train-images-idx3-ubyte", 16, 784, train), ("train-labels-idx1-ubyte", 8, 1, train),
                              ("t10k-images-idx3-ubyte", 16, 784, 2000), ("t10k-labels-idx1-ubyte", 8, 1, 2000)]:
    data = gzip.open(os.path.join(src, name + ".gz")).read()
    head = bytearray(data[:header])
    head[4:8] = n.to_bytes(4, "big")
    with gzip.open(os.path.join(dst, name + ".gz"), "wb") as f:
        f.write(bytes(head) + data[header:header + n * item])
PY
}
subset="$out/fashion-mnist-12k"
small_subset="$out/fashion-mnist-3k"
subset_of "$subset" 12000
subset_of "$small_subset" 3000
# A torchvision model, exported to TorchScript (tune and the grid train it from C++).
mobilenet="$out/mobilenet_v3_small.pt"
if [ ! -f "$mobilenet" ]; then
  "$python" "$root/examples/export_torchscript.py" --model mobilenet_v3_small --in-channels 1 --out "$mobilenet" \
    2>/dev/null
fi

# name | workload flags (tune and validate) | epochs (a full run of 30-120 s here at the grid's middle;
# lenet and mlp ran 3 and 4 epochs, runs of 3-8 s, until 2026-11-26)
cells=(
  "lenet-sgd|--model lenet --optimizer sgd|15"
  "lenet-adamw|--model lenet --optimizer adamw|15"
  "mlp-sgd|--model mlp --optimizer sgd|35"
  "mlp-adamw|--model mlp --optimizer adamw|35"
  "transformer-sgd|--model transformer --dataset synthetic --optimizer sgd|2"
  "transformer-adamw|--model transformer --dataset synthetic --optimizer adamw|2"
  "mobilenet-sgd|--model $mobilenet --data-dir $subset --optimizer sgd|2"
  "mobilenet-adamw|--model $mobilenet --data-dir $subset --optimizer adamw|2"
  "resnet18-sgd|--model resnet18 --data-dir $small_subset --optimizer sgd|1"
  "resnet18-adamw|--model resnet18 --data-dir $small_subset --optimizer adamw|1"
)
wanted=("$@")
for spec in "${cells[@]}"; do
  IFS='|' read -r name flags epochs <<<"$spec"
  if [ ${#wanted[@]} -gt 0 ] && [[ ! " ${wanted[*]} " == *" $name "* ]]; then continue; fi
  echo "== $name ($epochs epochs, cosine)"
  for seed in $tune_seeds; do
    start=$(date +%s.%N)
    # shellcheck disable=SC2086
    "$batchwise" tune $flags --epochs "$epochs" --lr-schedule cosine --seed "$seed" --no-history -q \
      --json "$out/$name.tune.$seed.json" >/dev/null
    echo "$(echo "$(date +%s.%N) - $start" | bc)" >"$out/$name.tune.$seed.wall"
    echo "tune (seed $seed): batch $("$python" -c "import json,sys; print(json.load(open(sys.argv[1]))['recommendation']['batch'])" "$out/$name.tune.$seed.json")"
  done
  if [ "$retime" -gt 0 ]; then
    kept="$root/bench/grids/$name.csv"
    [ -f "$kept" ] || { echo "no kept grid $kept to time again"; continue; }
    batches=$("$python" "$root/bench/advice_grid.py" retime-batches "$kept")
    for seed in $seeds; do
      for k in $(seq 1 "$retime"); do
        # shellcheck disable=SC2086
        "$batchwise" validate $flags --batch-sizes "$batches" --epochs "$epochs" --lr-schedule cosine --seed "$seed" \
          --no-history -q --json "$out/$name.retime.$seed.$k.json" >/dev/null
        echo "timed again (seed $seed, $k of $retime): $batches"
      done
    done
    continue
  fi
  for seed in $seeds; do
    # shellcheck disable=SC2086
    "$batchwise" validate $flags --batch-sizes "$grid" --epochs "$epochs" --lr-schedule cosine --seed "$seed" \
      --no-history -q --json "$out/$name.grid.$seed.json" >/dev/null
    echo "grid (seed $seed) done"
  done
  # A batch-size schedule tune proposed (its first seed's): trained with the same seeds beside the
  # pick, so the summary compares the predicted saving with the measured one.
  first_tune=$(echo "$tune_seeds" | awk '{print $1}')
  [ -n "$first_tune" ] || continue
  read -r schedule pick < <("$python" -c "
import json, sys
r = json.load(open(sys.argv[1]))
s = (r.get('run_race') or {}).get('schedule')
print((s or {}).get('text', '-'), r['recommendation']['batch'])" "$out/$name.tune.$first_tune.json")
  rm -f "$out/$name".schedule.*.json  # an earlier run's schedule is not this tune's
  if [ "$schedule" != "-" ]; then
    for seed in $seeds; do
      # shellcheck disable=SC2086
      "$batchwise" validate $flags --batch-sizes "$pick" --batch-schedule "$schedule" --epochs "$epochs" \
        --lr-schedule cosine --seed "$seed" --no-history -q --json "$out/$name.schedule.$seed.json" >/dev/null
      echo "schedule $schedule (seed $seed) done"
    done
  fi
done
# Cells without grid reports here are judged against the grids kept in bench/grids (written by
# run_advice_summary.py --save-grids bench/grids once a cell's grid has run).
"$python" "$root/bench/run_advice_summary.py" "$out" --grids "$root/bench/grids" | tee "$out/summary.md"
