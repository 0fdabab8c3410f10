#!/usr/bin/env bash
# The whole test suite under AddressSanitizer and UndefinedBehaviorSanitizer, and the libFuzzer
# targets, from one Clang build in build-sanitize/ (docs/reliability.md says when it is run and what
# each suppression is for).
#
#   bash scripts/sanitize.sh                    # build, then every test (ctest)
#   bash scripts/sanitize.sh -R 'Fuzz|Trial'    # build, then the tests ctest -R picks (any ctest flags)
#   bash scripts/sanitize.sh fuzz npy 300       # build, then fuzz one target for 300 s from its corpus
#   bash scripts/sanitize.sh build              # build only (then BATCHWISE_NO_BUILD=1 runs several
#                                               # fuzz targets side by side without building again)
#
# Needs what scripts/bootstrap.sh installs (run it first) and Clang (installed here when missing).
# LibTorch itself is not instrumented: the sanitizers check batchwise's code, the tests' and what
# LibTorch's headers inline into it.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${BATCHWISE_SANITIZE_DIR:-$root/build-sanitize}"
python="${BATCHWISE_PYTHON:-${BATCHWISE_VENV:-/opt/batchwise-venv}/bin/python}"

if ! command -v clang++ >/dev/null || ! ls /usr/lib/llvm-*/lib/clang/*/lib/linux/libclang_rt.fuzzer-x86_64.a >/dev/null 2>&1; then
  echo "sanitize: installing clang (and its compiler-rt: the sanitizers' and libFuzzer's run-time)"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq clang >/dev/null
fi
torch_prefix="$("$python" -c 'import torch.utils; print(torch.utils.cmake_prefix_path)')" || {
  echo "sanitize: $python cannot import torch; run scripts/bootstrap.sh first, or set BATCHWISE_PYTHON" >&2
  exit 1
}
command -v nvcc >/dev/null || export PATH="/usr/local/cuda/bin:$PATH"
launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
if [ -z "${BATCHWISE_NO_BUILD:-}" ]; then
  # RelWithDebInfo: optimised as the suite is in CI, with line numbers in every report.
  CXX=clang++ cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_PREFIX_PATH="$torch_prefix" -DBATCHWISE_SANITIZE=address,undefined -DBATCHWISE_BUILD_FUZZ=ON \
    "${launcher[@]}" >"$build.configure.log" 2>&1 || { cat "$build.configure.log" >&2; exit 1; }
  cmake --build "$build" --parallel "$(nproc)"
fi
[ "${1:-}" = build ] && exit 0

supp="$root/scripts/sanitize"
export ASAN_OPTIONS="detect_leaks=1:abort_on_error=1:strict_string_checks=1:detect_stack_use_after_return=1"
export LSAN_OPTIONS="suppressions=$supp/lsan.supp:print_suppressions=0"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:suppressions=$supp/ubsan.supp"

if [ "${1:-}" = fuzz ]; then
  target="${2:?usage: $0 fuzz TARGET [SECONDS]}"
  seconds="${3:-300}"
  work="$build/fuzz-corpus/$target"  # what the run adds to the seeds; the seeds stay as committed
  mkdir -p "$work" "$build/fuzz-findings/$target"
  cd "$build/fuzz-findings/$target"
  exec "$build/fuzz/fuzz_$target" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=4096 -print_final_stats=1 \
    "$work" "$root/fuzz/corpus/$target"
fi
ctest --test-dir "$build" --output-on-failure --parallel "$(nproc)" "$@"
