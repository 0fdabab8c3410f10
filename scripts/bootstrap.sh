#!/usr/bin/env bash
# Installs what is missing, builds batchwise, then runs the default job or the test suite.
#
#   bash scripts/bootstrap.sh run     # build, then `batchwise tune` (lenet on Fashion-MNIST)
#   bash scripts/bootstrap.sh test    # build, then the whole test suite (ctest)
#   bash scripts/bootstrap.sh build   # build only
#
# LibTorch comes from PyPI's torch wheel, installed into a virtual environment outside the source
# tree ($BATCHWISE_VENV, default /opt/batchwise-venv). Already have torch? Point the build at it:
#   BATCHWISE_PYTHON=/path/to/python-with-torch bash scripts/bootstrap.sh run
# Debian packages are installed with apt-get when missing (run as root on Debian 12).
set -euo pipefail

action="${1:-run}"
case "$action" in run|test|build) ;; *) echo "usage: $0 run|test|build" >&2; exit 2 ;; esac
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${BATCHWISE_BUILD_DIR:-$root/build}"
venv="${BATCHWISE_VENV:-/opt/batchwise-venv}"

# --- Debian packages -------------------------------------------------------------------------
packages=(g++ cmake ninja-build git python3 python3-venv python3-dev zlib1g-dev nlohmann-json3-dev libcli11-dev
          libgtest-dev libsqlite3-dev libjs-chart.js libgloo-dev dataset-fashion-mnist)
# The tests open the HTML report in Debian's Chromium (headless), and check the tree's format with
# Debian's clang-format (14); neither is needed to run batchwise.
[ "$action" = test ] && packages+=(chromium clang-format)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "bootstrap: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq "${missing[@]}" >/dev/null
fi

# --- LibTorch ----------------------------------------------------------------------------------
if [ -n "${BATCHWISE_PYTHON:-}" ]; then
  python="$BATCHWISE_PYTHON"
else
  python="$venv/bin/python"
  if ! "$python" -c "import torch" 2>/dev/null; then
    echo "bootstrap: installing PyPI's torch into $venv (a few GiB, once)"
    python3 -m venv "$venv"
    "$python" -m pip install -q --upgrade pip
    "$python" -m pip install -q torch
  fi
fi
torch_prefix="$("$python" -c 'import torch.utils; print(torch.utils.cmake_prefix_path)')" || {
  echo "bootstrap: $python cannot import torch; install it (pip install torch) or set BATCHWISE_PYTHON" >&2
  exit 1
}
if "$python" -c 'import sys, torch; sys.exit(0 if torch.version.cuda else 1)'; then
  # A CUDA build of torch needs the CUDA toolkit to configure against (it compiles our CUDA paths).
  if ! command -v nvcc >/dev/null && [ ! -x /usr/local/cuda/bin/nvcc ]; then
    echo "bootstrap: this torch was built with CUDA, and configuring against it needs the CUDA toolkit" \
         "(nvcc); install it, or point BATCHWISE_PYTHON at a CPU-only torch" >&2
    exit 1
  fi
  command -v nvcc >/dev/null || export PATH="/usr/local/cuda/bin:$PATH"
fi

# The tests export a torchvision ResNet-18 to TorchScript (a test-only dependency, never needed at
# run time); torch stays at the version the build uses.
if [ "$action" = test ] && ! "$python" -c "import torchvision" 2>/dev/null; then
  torch_version="$("$python" -c 'import torch; print(torch.__version__.split("+")[0])')"
  echo "bootstrap: installing torchvision for the tests (torch stays $torch_version)"
  "$python" -m pip install -q torchvision "torch==$torch_version"
fi
# The Python callbacks (python/) are tested with the real frameworks, pinned to the versions they
# were tested with (test-only, like torchvision: batchwise and its Python package need none of them;
# transformers' Trainer needs accelerate).
python_frameworks=(lightning==2.6.6 transformers==5.23.0 accelerate==1.15.0 keras==3.15.1)
if [ "$action" = test ] && ! "$python" -c "
import importlib.metadata as m, sys
sys.exit(any(m.version(p.split('==')[0]) != p.split('==')[1] for p in sys.argv[1:]))" "${python_frameworks[@]}" 2>/dev/null; then
  torch_version="$("$python" -c 'import torch; print(torch.__version__.split("+")[0])')"
  echo "bootstrap: installing ${python_frameworks[*]} for the tests (torch stays $torch_version)"
  "$python" -m pip install -q "${python_frameworks[@]}" "torch==$torch_version"
fi

# --- Build -------------------------------------------------------------------------------------
launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$torch_prefix" \
      "${launcher[@]}" >"$build.configure.log" 2>&1 || { cat "$build.configure.log" >&2; exit 1; }
cmake --build "$build" --parallel "$(nproc)"

case "$action" in
  run) "$build/batchwise" tune ;;
  test) ctest --test-dir "$build" --output-on-failure --parallel "$(nproc)" ;;
  build) ;;
esac
