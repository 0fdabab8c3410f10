#!/usr/bin/env bash
# One command that builds batchwise against the python3 torch of a (lent, offline) GPU machine,
# runs the CUDA tests and the CPU suite, then the GPU measurements, and writes OUT/summary.md (one
# row per measurement: device, driver, torch, commit, figure, status), OUT/summary.json and
# OUT/logs.tar.gz (every log and JSON report). docs/gpu.md says how to pack, carry and run it.
#
#   bash scripts/gpu-check.sh --dry-run /tmp/gpucheck        # here, on the CPU, smallest sizes (< 10 min warm)
#   bash scripts/gpu-check.sh --stage build,test "$OUT"       # on the GPU machine: one call
#   bash scripts/gpu-check.sh --stage measure --only fit,epoch,plan-for "$OUT"    # another call
#
# Options:
#   --dry-run        the same sequence on the CPU with the smallest sizes and a subset of the CPU suite
#   --stage LIST     configure, build, test, measure, or all (= build,test,measure; the default); a
#                    comma list runs several. `all` starts from an empty table; a single stage adds its
#                    rows to the table earlier calls left in the build directory (a warm machine keeps it)
#   --only LIST      measurements to run (names or prefixes: fit, epoch, plan-for, cpp-vs-python,
#                    finders, features, tune, or e.g. tune.resnet18); default all
#   --budget-s N     seconds this call may take (default 540 on a GPU: a lent machine's command stops at
#                    600; 1500 in a dry run). A measurement that would not fit in what is left is
#                    skipped with a note; a stage that runs past it is stopped and marked FAIL
#   --pack DIR       what scripts/gpu-pack.sh made (default: .gpu-pack in the repo, if there); its
#                    prefix is used for every library it holds, its data and wheels where missing
#   --build-dir DIR  default $BATCHWISE_BUILD_DIR, else build (kept between calls on a warm machine)
#   --jobs N         build and ctest parallelism (default: nproc)
#   --targets LIST   build only these targets (e.g. batchwise,batchwise_cuda_tests: the tool and the
#                    CUDA tests, about 60 % of the compile), default all
#   --labels LIST    the test stage's ctest labels, in order (default cuda,cpu); a label whose tests
#                    were not built is skipped with a note
# BATCHWISE_PYTHON picks the Python whose torch is built against (default: python3 if it imports
# torch, else /opt/batchwise-venv/bin/python); BATCHWISE_CMAKE_ARGS adds configure arguments.
# Exit status: 0 when no step of this call FAILed (a MISS, a goal not met, is a result), 1 otherwise,
# 2 for a usage error.
set -uo pipefail

usage() { sed -n '2,30p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2; exit 2; }
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
no_engine="" dry=0 stages=all only="" targets="" labels="cuda,cpu" budget="" pack="" build="${BATCHWISE_BUILD_DIR:-$root/build}" jobs="$(nproc)" out=""
while [ $# -gt 0 ]; do
  case "$1" in
    --dry-run) dry=1 ;;
    --stage) stages="${2:?--stage needs a value}"; shift ;;
    --only) only="${2:?--only needs a value}"; shift ;;
    --budget-s) budget="${2:?--budget-s needs a value}"; shift ;;
    --pack) pack="${2:?--pack needs a value}"; shift ;;
    --build-dir) build="${2:?--build-dir needs a value}"; shift ;;
    --jobs) jobs="${2:?--jobs needs a value}"; shift ;;
    --targets) targets="${2:?--targets needs a value}"; shift ;;
    --labels) labels="${2:?--labels needs a value}"; shift ;;
    -h|--help) usage ;;
    -*) echo "gpu-check: unknown option $1" >&2; usage ;;
    *) [ -z "$out" ] || { echo "gpu-check: one OUT only ($out, $1)" >&2; usage; }; out="$1" ;;
  esac
  shift
done
[ -n "$out" ] || usage
[[ "$budget" =~ ^[0-9]*$ ]] || { echo "gpu-check: --budget-s $budget: seconds, a whole number" >&2; exit 2; }
[ -n "$budget" ] || budget=$([ $dry = 1 ] && echo 1500 || echo 540)
start=$(date +%s)
deadline=$((start + budget))
left() { local l=$((deadline - $(date +%s))); echo $((l > 1 ? l : 1)); }  # timeout 0 would mean none
want=()
IFS=, read -r -a asked <<<"$stages"
for s in "${asked[@]}"; do
  case "$s" in
    all) want+=(build test measure) ;;
    configure|build|test|measure) want+=("$s") ;;
    *) echo "gpu-check: --stage $s: one of configure, build, test, measure, all" >&2; exit 2 ;;
  esac
done
has_stage() { local s; for s in "${want[@]}"; do [ "$s" = "$1" ] && return 0; done; return 1; }
mkdir -p "$out" "$build"
out="$(cd "$out" && pwd)"
build="$(cd "$build" && pwd)"
state="$build/gpu-check"
if [[ ",$stages," == *,all,* ]]; then rm -rf "$state"; fi
mkdir -p "$state/logs" "$state/json"
export GPU_CHECK_RUN_ID="$start-$$"
say() { echo "gpu-check: $*"; }

# --- Python with torch, and the tools a CUDA build needs ---------------------------------------
python="${BATCHWISE_PYTHON:-}"
if [ -z "$python" ]; then
  if python3 -c 'import torch' 2>/dev/null; then python="$(command -v python3)"
  elif [ -x /opt/batchwise-venv/bin/python ]; then python=/opt/batchwise-venv/bin/python
  else echo "gpu-check: no python3 with torch here; set BATCHWISE_PYTHON" >&2; exit 1
  fi
fi
dry_flag=()
[ $dry = 1 ] && dry_flag=(--dry-run)
helper() { "$python" "$root/scripts/gpu_check.py" "$@" --state "$state" "${dry_flag[@]}"; }
row() { helper row --name "$1" --status "$2" --figure "$3" ${4:+--log "$4"}; }
torch_prefix="$("$python" -c 'import torch.utils; print(torch.utils.cmake_prefix_path)' 2>/dev/null)" || {
  echo "gpu-check: $python cannot import torch; set BATCHWISE_PYTHON to a Python that can" >&2; exit 1; }
for tool in cmake ninja; do
  command -v "$tool" >/dev/null || { echo "gpu-check: $tool is missing (the build needs it)" >&2; exit 1; }
done
cxx="${CXX:-$(command -v c++ || command -v g++ || true)}"
[ -n "$cxx" ] || { echo "gpu-check: no C++ compiler (c++ or g++; nvcc needs g++ as its host compiler too)" >&2; exit 1; }
if "$python" -c 'import sys, torch; sys.exit(0 if torch.version.cuda else 1)'; then
  # A CUDA torch's CMake package looks for the CUDA toolkit (as scripts/bootstrap.sh says).
  if ! command -v nvcc >/dev/null; then
    [ -x /usr/local/cuda/bin/nvcc ] || { echo "gpu-check: this torch was built with CUDA and configuring" \
      "against it needs the CUDA toolkit (nvcc); none on PATH or in /usr/local/cuda" >&2; exit 1; }
    export PATH="/usr/local/cuda/bin:$PATH"
  fi
fi

# --- The pack: libraries, data, wheels, commit ---------------------------------------------------
[ -n "$pack" ] || { [ -d "$root/.gpu-pack/prefix" ] && pack="$root/.gpu-pack"; }
cmake_args=(-DCMAKE_PREFIX_PATH="$torch_prefix" -DBATCHWISE_TEST_PYTHON="$python")
if [ -n "$pack" ]; then
  [ -d "$pack/prefix" ] || { echo "gpu-check: --pack $pack has no prefix/ (make it with scripts/gpu-pack.sh)" >&2; exit 1; }
  pack="$(cd "$pack" && pwd)"
  p="$pack/prefix" arch=x86_64-linux-gnu
  # Every library the pack holds comes from it: named outright, and first on CMAKE_PREFIX_PATH (also
  # in the environment, for the consumer test's own configure of the installed package).
  cmake_args=(-DCMAKE_PREFIX_PATH="$torch_prefix;$p" -DBATCHWISE_TEST_PYTHON="$python"
    -DGTest_DIR="$p/lib/$arch/cmake/GTest" -Dnlohmann_json_DIR="$p/share/cmake/nlohmann_json"
    -DSQLite3_INCLUDE_DIR="$p/include" -DSQLite3_LIBRARY="$p/lib/$arch/libsqlite3.a"
    -DZLIB_INCLUDE_DIR="$p/include" -DZLIB_LIBRARY="$p/lib/$arch/libz.a"
    -DBATCHWISE_CLI11_INCLUDE="$p/include" -DBATCHWISE_GLOO_INCLUDE="$p/include"
    -DBATCHWISE_CHARTJS="$p/share/javascript/chart.js/chart.min.js")
  export CMAKE_PREFIX_PATH="$p${CMAKE_PREFIX_PATH:+:$CMAKE_PREFIX_PATH}"
  # Debian compiled its static zlib and SQLite position-independent for executables (-fPIE), not for
  # shared objects: the Python engine (a shared module) fails to link them ("relocation R_X86_64_PC32
  # against symbol `z_errmsg' can not be used when making a shared object"; the H200, 2026-11-27).
  # Every image has both as shared libraries (Python itself loads them): link those, with the pack's
  # headers; where one is missing, the pack's static library and no Python engine.
  for lib in z:ZLIB_LIBRARY sqlite3:SQLite3_LIBRARY; do
    so="$(ldconfig -p 2>/dev/null | awk -v n="lib${lib%%:*}.so." '$1 ~ "^"n && /x86-64/ {print $NF; exit}')"
    if [ -n "$so" ]; then
      cmake_args+=(-D"${lib#*:}=$so")
    else
      no_engine="the image has no shared lib${lib%%:*} for the Python engine to link (the pack's is for executables only)"
    fi
  done
fi
# shellcheck disable=SC2206  # word splitting is the point
[ -z "${BATCHWISE_CMAKE_ARGS:-}" ] || cmake_args+=(${BATCHWISE_CMAKE_ARGS})
command -v ccache >/dev/null && cmake_args+=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
# The Python engine (python/) needs this Python's headers; an image without them builds the rest, and
# the `inprocess` measurement says it skipped.
if ! "$python" -c 'import os, sys, sysconfig; sys.exit(not os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")))'; then
  cmake_args+=(-DBATCHWISE_BUILD_PYTHON=OFF)
  say "no Python.h for $python: the Python engine is not built (the inprocess measurement skips)"
elif [ -n "${no_engine:-}" ]; then
  cmake_args+=(-DBATCHWISE_BUILD_PYTHON=OFF)
  say "$no_engine: the Python engine is not built (the inprocess measurement skips)"
fi

data=/usr/share/datasets/fashion-mnist
if [ ! -f "$data/train-images-idx3-ubyte.gz" ] && [ -n "$pack" ] && [ -d "$pack/fashion-mnist" ]; then
  # The tests and the default dataset read the Debian package's path; the lent machine runs as root.
  if mkdir -p "$data" 2>/dev/null && cp "$pack/fashion-mnist"/*.gz "$data/" 2>/dev/null; then
    say "Fashion-MNIST copied from the pack to $data"
  else
    data="$pack/fashion-mnist"
    say "cannot write $data's default place; measurements read $data, tests that use the default fail"
  fi
fi
if ! "$python" -c 'import importlib.util as u, sys; sys.exit(u.find_spec("keras") is None)' 2>/dev/null && [ -n "$pack" ] && compgen -G "$pack/wheels/*.whl" >/dev/null; then
  # Test-only Python packages the image lacks, installed beside it, not into it.
  if "$python" -m pip install -q --no-index --no-deps --no-compile --target "$state/site" "$pack"/wheels/*.whl \
       >"$state/logs/wheels.log" 2>&1; then
    say "installed the pack's wheels into $state/site"
  else
    say "the pack's wheels did not install (logs/wheels.log): the Keras tests skip"
  fi
fi
[ -d "$state/site" ] && export PYTHONPATH="$state/site${PYTHONPATH:+:$PYTHONPATH}"

if commit="$(git -C "$root" rev-parse --short=7 HEAD 2>/dev/null)"; then
  if [ -n "$(git -C "$root" status --porcelain --untracked-files=no 2>/dev/null)" ]; then
    packed="$([ -n "$pack" ] && cat "$pack/commit.txt" 2>/dev/null)"
    if [ -n "$packed" ] && [ "$packed" != "$commit" ]; then
      # The lent machine's copy carried an older .git than its tree (seen on the H200, 2026-11-26
      # and 27: reports stamped c8f9a80-dirty for 6db2f7b's tree): the pack says which commit it is.
      commit="$packed (packed; the .git here is at $commit)"
      BATCHWISE_BUILD_COMMIT="$packed"
      export BATCHWISE_BUILD_COMMIT
    else
      commit="$commit-dirty"
    fi
  fi
elif [ -n "$pack" ] && [ -s "$pack/commit.txt" ]; then
  commit="$(cat "$pack/commit.txt") (packed; no .git here)"
  BATCHWISE_BUILD_COMMIT="$(cat "$pack/commit.txt")"
  export BATCHWISE_BUILD_COMMIT  # cmake/version.cmake stamps reports with it
else
  commit=unknown
fi
helper context --commit "$commit" || exit 1
bw="$build/batchwise"

# --- configure, build --------------------------------------------------------------------------
failed_build=0
if has_stage configure || has_stage build; then
  log="$state/logs/configure.log"
  t0=$(date +%s)
  if timeout "$(left)" cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release "${cmake_args[@]}" >"$log" 2>&1; then
    found="$(grep -E '^(GTest_DIR|nlohmann_json_DIR|SQLite3_LIBRARY|ZLIB_LIBRARY[A-Z_]*|BATCHWISE_(CLI11|GLOO)_INCLUDE|BATCHWISE_CHARTJS|Torch_DIR):' \
               "$build/CMakeCache.txt" | sed 's/:[A-Z]*=/=/' | tr '\n' ' ')"
    row configure PASS "$(( $(date +%s) - t0 )) s; $found" "$log"
  else
    row configure FAIL "cmake's configure failed" "$log"
    failed_build=1
  fi
fi
if has_stage build && [ $failed_build = 0 ]; then
  log="$state/logs/build.log"
  t0=$(date +%s)
  target_args=()
  [ -z "$targets" ] || target_args=(--target ${targets//,/ })
  timeout "$(left)" cmake --build "$build" --parallel "$jobs" "${target_args[@]}" >"$log" 2>&1
  rc=$?
  if [ $rc = 0 ]; then
    row build PASS "$(( $(date +%s) - t0 )) s with $jobs jobs${targets:+ (targets $targets)} ($cxx; $(grep -m1 -o 'Torch [^ ]* at [^ ]*' "$state/logs/configure.log" 2>/dev/null || echo "torch at $torch_prefix"))" "$log"
  else
    why=$([ $rc = 124 ] && echo "stopped at the budget: run --stage build again, the build directory is kept" || echo "exit $rc")
    row build FAIL "$why" "$log"
    failed_build=1
  fi
fi

# --- tests -------------------------------------------------------------------------------------
# The dry run's subset of the CPU suite: a few tests of each area (units, CPU memory, the fake NVML,
# the report and its golden files, the --plan-for arithmetic, a fit, the history's SQLite, the CLI
# end to end, the Python package through the test Python); a minute or two on 2 cores. The whole
# suite runs on the GPU machine.
dry_cpu_regex='^(Units|ParseBytes|FormatBytes|CpuMemoryTracker|Nvml|Report|PlanFor)\.|^(Fit\.BinsearchFindsTheExactMaximum|History\.TwoConcurrentWritersBothLand|Cli\.MissingDatasetNamesTheFix|Cli\.CudaWithoutAGpuIsADeviceError|Cli\.PlanForWritesThePlan|Python\.PackagePrintsTheProtocolAndAPlainLoopSweeps)$'
if has_stage test; then
  if [ $failed_build = 1 ] || [ ! -x "$bw" ]; then
    row ctest-cuda FAIL "not run: no build (run --stage build first)"
    row ctest-cpu FAIL "not run: no build (run --stage build first)"
  else
    IFS=, read -r -a label_list <<<"$labels"
    for label in "${label_list[@]}"; do
      case "$label" in cuda|cpu) ;; *) echo "gpu-check: --labels $label: cuda or cpu" >&2; exit 2 ;; esac
      log="$state/logs/ctest-$label.log"
      args=(--test-dir "$build" -L "^$label\$" --output-on-failure --parallel "$jobs")
      # JUnit files (CTest 3.21 and later) go into logs.tar.gz; the rows are counted from the log.
      junit_ok="$(printf '3.21\n%s\n' "$(ctest --version | grep -oE '[0-9]+\.[0-9]+' | head -1)" | sort -V | head -1)"
      [ "$junit_ok" = 3.21 ] && args+=(--output-junit "$state/ctest-$label.xml")
      note=""
      if [ $label = cpu ] && [ $dry = 1 ]; then args+=(-R "$dry_cpu_regex"); note="dry run: the subset -R '$dry_cpu_regex'"; fi
      if [ "$(left)" -lt 30 ]; then
        row "ctest-$label" SKIP "not started: $(left) s left of the budget; run --stage test in another call"
        continue
      fi
      rm -f "$state/ctest-$label.xml"
      if [ $label = cpu ]; then
        # The CPU suite as CI runs it: with the GPU hidden (tests such as Cli.CudaWithoutAGpuIsADeviceError
        # and every --device auto expect none).
        note="${note:+$note; }GPU hidden (CUDA_VISIBLE_DEVICES='')"
        CUDA_VISIBLE_DEVICES="" timeout "$(left)" ctest "${args[@]}" >"$log" 2>&1
      else
        timeout "$(left)" ctest "${args[@]}" >"$log" 2>&1
      fi
      rc=$?
      extra=()
      [ $label = cuda ] && [ $dry = 0 ] && extra=(--require-run)
      helper ctest --name "ctest-$label" --log "$log" --rc $rc --note "$note" "${extra[@]}"
    done
  fi
fi

# --- measurements ------------------------------------------------------------------------------
if has_stage measure; then
  if [ ! -x "$bw" ]; then
    row measure FAIL "not run: no batchwise binary at $bw (run --stage build first)"
  else
    helper measure --batchwise "$bw" --root "$root" --data-dir "$data" --deadline "$deadline" ${only:+--only "$only"}
  fi
fi

# --- summary -----------------------------------------------------------------------------------
helper summary --out "$out" --run-id "$GPU_CHECK_RUN_ID"
rc=$?
files=(logs json)
for f in "$state"/ctest-*.xml "$state"/context.json "$state"/rows.json; do [ -e "$f" ] && files+=("${f##*/}"); done
tar -czf "$out/logs.tar.gz" -C "$state" "${files[@]}"
say "$out/summary.md, summary.json, logs.tar.gz ($(( $(date +%s) - start )) s)"
exit $rc
