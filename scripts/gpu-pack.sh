#!/usr/bin/env bash
# Puts in DIR what an offline GPU machine lacks to build and test batchwise, within 64 MiB together
# with the source tree (what a lent machine receives: see docs/gpu.md).
#
#   bash scripts/gpu-pack.sh .gpu-pack      # then carry .gpu-pack and run scripts/gpu-check.sh there
#
# The GPU image has nvcc, CMake, ninja and a python3 with torch, torchvision, Lightning, Accelerate
# and Transformers, and no package registry. DIR gets, from this Debian machine's packages:
#   prefix/           a relocatable install prefix laid out like /usr: CLI11, nlohmann-json, Gloo's
#                     headers, GoogleTest and GoogleMock (static, with their CMake package), SQLite and zlib (static),
#                     Chart.js for the HTML report; scripts/gpu-check.sh points CMake at it
#   fashion-mnist/    the dataset's four IDX files (the default dataset and the tests read them)
#   wheels/           Python test packages the image lacks (Keras 3 and the two of its needs missing
#                     there), for CPython 3.12 on x86-64, installed there with pip --no-index
#   commit.txt        the commit packed, for a copy of the tree without .git
#   MANIFEST.txt      what came from where, with versions and sizes
# The static libraries were compiled position-independent by Debian (checked below), so they link
# into the tool and test binaries that another distribution's compiler builds as PIE; zlib's and
# SQLite's are PIE, not PIC, so the Python engine (a shared module) links the image's own shared
# libraries instead (scripts/gpu-check.sh).
set -euo pipefail

usage() { echo "usage: $0 DIR   (e.g. .gpu-pack inside the repo, which .gitignore leaves out)" >&2; exit 2; }
[ $# -eq 1 ] || usage
case "$1" in -h|--help) usage ;; esac
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
dir="$1"
mkdir -p "$dir"
dir="$(cd "$dir" && pwd)"
limit=$((64 << 20))

# --- What to take, and where it is here ---------------------------------------------------------
arch="$(dpkg-architecture -qDEB_HOST_MULTIARCH 2>/dev/null || echo x86_64-linux-gnu)"
[ "$arch" = x86_64-linux-gnu ] || { echo "gpu-pack: this machine is $arch; the GPU machine is x86-64" >&2; exit 1; }
packages=(libcli11-dev nlohmann-json3-dev libgtest-dev libgmock-dev libsqlite3-dev zlib1g-dev libgloo-dev libjs-chart.js
          dataset-fashion-mnist)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "gpu-pack: missing Debian packages: ${missing[*]} (apt-get install ${missing[*]})" >&2
  exit 1
fi
# Paths relative to /usr, copied to DIR/prefix with the same layout: the CMake packages find their
# libraries relative to themselves (GTest's goes four folders up from lib/<arch>/cmake/GTest).
usr_paths=(
  include/CLI share/cmake/CLI11
  include/nlohmann share/cmake/nlohmann_json
  include/gtest "lib/$arch/libgtest.a" "lib/$arch/libgtest_main.a" "lib/$arch/cmake/GTest"
  include/gmock "lib/$arch/libgmock.a" "lib/$arch/libgmock_main.a"  # GTest's package imports GMock's targets too
  include/sqlite3.h include/sqlite3ext.h "lib/$arch/libsqlite3.a"
  include/zlib.h include/zconf.h "lib/$arch/libz.a"
  include/gloo
  share/javascript/chart.js/chart.min.js)
data_src=/usr/share/datasets/fashion-mnist
data_files=(train-images-idx3-ubyte.gz train-labels-idx1-ubyte.gz t10k-images-idx3-ubyte.gz t10k-labels-idx1-ubyte.gz)
# Keras 3 on its torch backend for the Python callback tests (the version scripts/bootstrap.sh pins);
# of its needs the image lacks namex and optree (absl-py, h5py, ml-dtypes, numpy, packaging and rich
# are there). Lightning, Accelerate, Transformers and torchvision are in the image already.
wheels=(keras==3.15.1 namex==0.1.0 optree==0.20.0)

# --- prefix/ ------------------------------------------------------------------------------------
rm -rf "$dir/prefix" "$dir/fashion-mnist" "$dir/wheels"
mkdir -p "$dir/prefix"
for p in "${usr_paths[@]}"; do
  [ -e "/usr/$p" ] || { echo "gpu-pack: /usr/$p is missing (its Debian package is installed: reinstall it)" >&2; exit 1; }
  (cd /usr && cp -a --parents "$p" "$dir/prefix/")
done
# A non-PIC object in a static library would fail to link into a PIE executable there.
for a in "$dir/prefix/lib/$arch"/*.a; do
  if readelf -r "$a" | grep -qE 'R_X86_64_(32|32S) '; then
    echo "gpu-pack: $a has absolute relocations (not position-independent); it cannot link into PIE binaries" >&2
    exit 1
  fi
done

# --- fashion-mnist/ -----------------------------------------------------------------------------
mkdir -p "$dir/fashion-mnist"
for f in "${data_files[@]}"; do
  cp -a "$data_src/$f" "$dir/fashion-mnist/"
done

# --- wheels/ ------------------------------------------------------------------------------------
python="${BATCHWISE_PYTHON:-}"
if [ -z "$python" ]; then
  for candidate in /opt/batchwise-venv/bin/python python3; do
    if "$candidate" -m pip --version >/dev/null 2>&1; then python="$candidate"; break; fi
  done
fi
[ -n "$python" ] || { echo "gpu-pack: no python with pip here to download the wheels (set BATCHWISE_PYTHON)" >&2; exit 1; }
mkdir -p "$dir/wheels"
"$python" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
  -d "$dir/wheels" "${wheels[@]}"

# --- commit.txt, MANIFEST.txt -------------------------------------------------------------------
if commit="$(git -C "$root" rev-parse --short=7 HEAD 2>/dev/null)"; then
  [ -z "$(git -C "$root" status --porcelain --untracked-files=no 2>/dev/null)" ] || commit="$commit-dirty"
else
  commit=unknown
fi
echo "$commit" >"$dir/commit.txt"
{
  echo "batchwise GPU pack, made $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(hostname) from commit $commit"
  echo
  echo "Debian packages (prefix/ mirrors /usr for the paths below; fashion-mnist/ from $data_src):"
  for p in "${packages[@]}"; do dpkg-query -W -f='  ${Package} ${Version}\n' "$p"; done
  echo
  echo "prefix/ paths:"
  printf '  %s\n' "${usr_paths[@]}"
  echo
  echo "wheels/ (pip download for CPython 3.12, manylinux x86-64):"
  for f in "$dir"/wheels/*.whl; do echo "  ${f##*/}"; done
  echo
  echo "sizes (bytes):"
  (cd "$dir" && du -sb prefix fashion-mnist wheels | sed 's/^/  /')
} >"$dir/MANIFEST.txt"

# --- Size: the pack, and the pack with the tree that travels beside it --------------------------
pack_bytes="$(du -sb "$dir" | cut -f1)"
tree_bytes=0
if git -C "$root" rev-parse --git-dir >/dev/null 2>&1; then
  tree_bytes="$(cd "$root" && git ls-files -z --cached --others --exclude-standard | xargs -0 -r du -cb 2>/dev/null | tail -1 | cut -f1)"
fi
mib() { awk -v b="$1" 'BEGIN { printf "%.1f MiB", b / 1048576 }'; }
echo "gpu-pack: $dir: $(mib "$pack_bytes") (prefix, fashion-mnist, wheels); the tree beside it: $(mib "$tree_bytes");" \
     "together $(mib $((pack_bytes + tree_bytes))) of the 64 MiB a lent machine receives"
if [ "$pack_bytes" -gt "$limit" ] || [ $((pack_bytes + tree_bytes)) -gt "$limit" ]; then
  echo "gpu-pack: over 64 MiB: it would not travel" >&2
  exit 1
fi
