#!/usr/bin/env bash
# What the run race costs: wall time of `batchwise tune` (the batch race) against `batchwise tune
# --epochs N --lr-schedule cosine` (the run race) on the same workload and seed, run one after the
# other, ROUNDS times each in alternating order (ABBA), so a slower minute of the machine falls on
# both. Issue #30 item 6: tune --epochs may cost at most 1.5x what tune costs; tune stays under 60 s.
#
#   bash bench/run_cost.sh                       # lenet, mlp and the transformer, 2 rounds
#   ROUNDS=3 bash bench/run_cost.sh mlp
#
# Prints a markdown table (docs/benchmarks.md, "What the run race costs").
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
batchwise="${BATCHWISE:-$root/build/batchwise}"
rounds="${ROUNDS:-2}"

# name | workload flags | epochs (bench/run_advice.sh's runs; lenet 3, mlp 4 and the transformer 4
# until 2026-11-28)
cells=(
  "lenet|--model lenet --optimizer sgd|15"
  "mlp|--model mlp --optimizer sgd|35"
  "mlp-adamw|--model mlp --optimizer adamw|35"
  "transformer|--model transformer --dataset synthetic --optimizer adamw|2"
)
wanted=("$@")
seconds() {  # the wall time of one tune, in seconds
  local start end
  start=$(date +%s.%N)
  # shellcheck disable=SC2086
  "$batchwise" tune $1 --seed 0 --no-history -q >/dev/null
  end=$(date +%s.%N)
  echo "$end - $start" | bc
}
echo "| workload | tune (s, each round) | tune --epochs N (s, each round) | ratio of medians |"
echo "|---|---|---|---:|"
for spec in "${cells[@]}"; do
  IFS='|' read -r name flags epochs <<<"$spec"
  if [ ${#wanted[@]} -gt 0 ] && [[ ! " ${wanted[*]} " == *" $name "* ]]; then continue; fi
  plain=() run=()
  for ((i = 0; i < rounds; ++i)); do
    if ((i % 2 == 0)); then
      plain+=("$(seconds "$flags")")
      run+=("$(seconds "$flags --epochs $epochs --lr-schedule cosine")")
    else
      run+=("$(seconds "$flags --epochs $epochs --lr-schedule cosine")")
      plain+=("$(seconds "$flags")")
    fi
  done
  median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print (NR % 2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
  mp=$(median "${plain[@]}") mr=$(median "${run[@]}")
  printf '| %s (%s epochs) | %s | %s | %.2f |\n' "$name" "$epochs" \
    "$(printf '%.0f ' "${plain[@]}")" "$(printf '%.0f ' "${run[@]}")" "$(echo "$mr / $mp" | bc -l)"
done
