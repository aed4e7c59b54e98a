#!/usr/bin/env bash
# README command 1: install what is missing (Debian packages), configure, build, and run the main
# job (the reference MLP trained on Fashion-MNIST on one simulated GPU).
#
#   ./bootstrap.sh              everything
#   ./bootstrap.sh --deps-only  only install missing packages (used by .ci/run)
#   ./bootstrap.sh --no-run     install and build, do not train
#   ./bootstrap.sh --with-torch also install python3-torch (benchmarks, reference regeneration)
set -euo pipefail
cd "$(dirname "$0")"

# What the build, the tests and the default scenario need. Everything comes from Debian.
PACKAGES=(g++ cmake ninja-build pkg-config libgtest-dev libgmock-dev libopenblas-dev
          nlohmann-json3-dev libcli11-dev libtomlplusplus-dev libmd4c-dev zlib1g-dev dataset-fashion-mnist
          libicu-dev libimgui-dev libglfw3-dev libgl-dev libpng-dev libfreetype-dev libfontconfig-dev
          libgloo-dev libgl1-mesa-dri fonts-dejavu-core fonts-wqy-microhei xvfb xauth)
# clang + its libFuzzer runtime (a Recommends of clang, so named here): the fuzz test
# (tests/fuzz) reports SKIPPED without them.
PACKAGES+=(clang libclang-rt-dev)
deps_only=0 run=1
for arg in "$@"; do
  case "$arg" in
    --deps-only) deps_only=1 ;;
    --no-run) run=0 ;;
    --with-torch) PACKAGES+=(python3-torch) ;;
    -h|--help) sed -n '2,10p' "$0"; exit 0 ;;
    *) echo "bootstrap.sh: unknown option '$arg' (see --help)" >&2; exit 2 ;;
  esac
done

if ! command -v dpkg-query >/dev/null 2>&1; then
  echo "bootstrap.sh: this is not a Debian/Ubuntu system; install the equivalents of: ${PACKAGES[*]}" >&2
  exit 1
fi
missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  apt_line="apt-get update && apt-get install -y --no-install-recommends ${missing[*]}"
  if [[ $(id -u) -eq 0 ]]; then
    echo "==> installing: ${missing[*]}"
    apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}"
  elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
    echo "==> installing with sudo: ${missing[*]}"
    sudo apt-get update -q && sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}"
  else
    echo "bootstrap.sh: missing packages; run this as root (or with sudo), then run ./bootstrap.sh again:" >&2
    echo "  sudo sh -c '$apt_line'" >&2
    exit 1
  fi
fi
((deps_only)) && exit 0

# Only what the main job needs (the furnace CLI, and the visualizer where it builds): the test
# suite, fuzzers and benchmarks are command 2's, `cmake --workflow --preset test`, which builds
# them in the same build/release.
# The CUDA backend is built for this machine's GPUs only (nvcc for one architecture instead of
# four), and left out where no GPU is visible: the main job then runs on the simulator, and nvcc
# took half of this build's time. Command 2's configure (the release preset) builds it again
# wherever nvcc is found, for the tests.
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L 2>/dev/null | grep -q '^GPU '; then
  cuda=(-DCMAKE_CUDA_ARCHITECTURES=native)
  echo "==> configuring and building the furnace CLI and the visualizer (build/release; CUDA for this machine's GPUs)"
else
  cuda=(-DFURNACE_WITH_CUDA=OFF)
  echo "==> configuring and building the furnace CLI and the visualizer (build/release; no GPU visible: the"
  echo "    CUDA backend is left out until command 2, which builds it where nvcc is found)"
fi
cmake --preset release "${cuda[@]}" >/dev/null
cmake --build --preset main -j"$(nproc)"
((run)) || exit 0

echo "==> the main job: furnace train (reference MLP on Fashion-MNIST, one simulated GPU)"
build/release/runtime/furnace train
viz=build/release/visualizer/furnace-viz
if [[ -x $viz ]]; then
  if [[ -n ${DISPLAY:-} || -n ${WAYLAND_DISPLAY:-} ]]; then
    echo "==> opening the visualizer ($viz); close its window to finish"
    "$viz" || echo "bootstrap.sh: the visualizer could not open a window (see above)"
  else
    echo "No display: the GUI was not opened. On a desktop run $viz;"
    echo "headless: xvfb-run -a $viz --screenshot viz.png --frames 120"
  fi
fi
echo
echo "Next: build/release/runtime/furnace --help; the tests: cmake --workflow --preset test"
