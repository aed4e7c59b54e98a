#!/usr/bin/env bash
# tools/gpu_check.sh: everything GPU-side in one command, for a machine with NVIDIA GPUs (a few
# minutes; run it from a fresh copy of the tree too, it builds its own folder):
#   1. builds the CUDA backend for this machine's GPU (build/gpu-check; CMAKE_CUDA_ARCHITECTURES=
#      native to build fast: CI builds the fat binary for sm_80/86/89/90 + PTX);
#   2. runs the CUDA tests (each op against ops/ref within its dtype's tolerance, training against
#      the simulator, DataParallel when there are two GPUs or more) with FURNACE_REQUIRE_GPU=1, so
#      a test that cannot see the GPU fails instead of skipping; the op tests again under
#      compute-sanitizer's memcheck when the toolkit has it;
#   3. trains the reference MLP with `furnace train` on one GPU (and DataParallel over up to four)
#      and on the simulator, and compares their test accuracy;
#   4. measures training throughput: fp32, fp16 and bf16 at hidden 4096, and the reference MLP,
#      side by side with PyTorch eager (bench/pytorch_mlp.py) where PyTorch with CUDA is installed;
#   5. prints a summary table.
# Exit status 1 on any failure (build, test, accuracy), with the reason on stderr; the throughput
# goals (Furnace >= 1.0x PyTorch eager, bf16 >= 2x fp32 at hidden 4096) are reported, and fail
# the run only with GPU_CHECK_STRICT=1.
#   tools/gpu_check.sh [--build-dir DIR] [--skip-build]
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=$ROOT/build/gpu-check
SKIP_BUILD=0
while (($#)); do
  case "$1" in
    --build-dir)
      (($# >= 2)) || { echo "gpu_check.sh: --build-dir needs a folder" >&2; exit 2; }
      BUILD=$(realpath -m "$2"); shift 2 ;;
    --skip-build) SKIP_BUILD=1; shift ;;
    -h|--help) sed -n '2,20p' "$0"; exit 0 ;;
    *) echo "gpu_check.sh: unknown option '$1' (see --help)" >&2; exit 2 ;;
  esac
done

T0=$SECONDS
LOG=$BUILD/gpu-check-logs
declare -a SUMMARY=()
FAILED=0
note() { SUMMARY+=("$(printf '%-44s %-8s %s' "$1" "$2" "$3")"); }
die() { echo "gpu_check.sh: FAILED: $*" >&2; print_summary; exit 1; }
fail_check() { note "$1" FAIL "$2"; FAILED=1; echo "gpu_check.sh: FAILED: $1: $2" >&2; }
step() { echo; echo "==> [$((SECONDS - T0))s] $*"; }
print_summary() {
  echo
  echo "================ Furnace GPU check ($((SECONDS - T0)) s) ================"
  printf '%-44s %-8s %s\n' check result detail
  for line in "${SUMMARY[@]}"; do echo "$line"; done
}
# (Display pipelines use sed -n, not head: under pipefail a head that stops reading early makes the
# writer die of SIGPIPE, and set -e would end the script.)
# A number from the one-line JSON `furnace train --json` ends with.
json_number() { grep -o "\"$2\":[-0-9.eE+]*" "$1" | tail -1 | cut -d: -f2; }
# awk arithmetic on the command line: calc "a / b".
calc() { awk "BEGIN { printf \"%.4f\", $1 }"; }
is_true() { awk "BEGIN { exit !($1) }"; }

# ---- 0. the machine ----------------------------------------------------------------------------
command -v nvidia-smi >/dev/null || die "nvidia-smi not found: this script needs an NVIDIA driver and GPU"
nvidia-smi -L >/dev/null 2>&1 || die "nvidia-smi -L failed: no usable NVIDIA driver"
GPUS=$(nvidia-smi -L | grep -c '^GPU ' || true)
((GPUS > 0)) || die "nvidia-smi lists no GPU"
GPU_NAME=$(nvidia-smi --query-gpu=name --format=csv,noheader | sed -n 1p)
NVCC=${CUDACXX:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
[[ -x $NVCC ]] || die "nvcc not found (set CUDACXX or install the CUDA toolkit in /usr/local/cuda)"
command -v cmake >/dev/null || die "cmake not found (./bootstrap.sh --deps-only installs the build dependencies)"
mkdir -p "$LOG"
note "machine" info "$GPUS x $GPU_NAME, $("$NVCC" --version | grep -o 'release [0-9.]*')"
step "$GPUS GPU(s): $(nvidia-smi -L | tr '\n' ';')"

# ---- 1. build -----------------------------------------------------------------------------------
if ((!SKIP_BUILD)); then
  step "configure and build in $BUILD"
  generator=()
  command -v ninja >/dev/null && generator=(-G Ninja)
  cmake -S "$ROOT" -B "$BUILD" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_CUDA_COMPILER="$NVCC" -DFURNACE_WITH_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=native \
    -DFURNACE_BUILD_TESTS=ON -DFURNACE_BUILD_BENCH=ON -DFURNACE_BUILD_VISUALIZER=OFF \
    >"$LOG/configure.log" 2>&1 || { tail -30 "$LOG/configure.log" >&2; die "cmake configure (log: $LOG/configure.log)"; }
  grep -E "Furnace: (CUDA|NCCL|building)" "$LOG/configure.log" || true
  cmake --build "$BUILD" -j"$(nproc)" --target furnace test_cuda test_device_ops furnace_bench_gpu \
    >"$LOG/build.log" 2>&1 || { grep -E "error|Error" "$LOG/build.log" | sed -n 1,30p >&2; die "build (log: $LOG/build.log)"; }
  note "build (native arch)" ok "$((SECONDS - T0)) s so far"
fi
FURNACE=$BUILD/runtime/furnace
BENCH=$BUILD/bench/furnace_bench_gpu
for exe in "$FURNACE" "$BUILD/tests/test_cuda" "$BUILD/tests/test_device_ops" "$BENCH"; do
  [[ -x $exe ]] || die "$exe was not built"
done
export FURNACE_DATA_DIR=$ROOT/data

# ---- 2. tests -------------------------------------------------------------------------------------
step "CUDA tests (FURNACE_REQUIRE_GPU=1: a test that sees no GPU fails)"
if FURNACE_REQUIRE_GPU=1 "$BUILD/tests/test_cuda" --gtest_brief=1 >"$LOG/test_cuda.log" 2>&1; then
  passed=$(grep -o '\[  PASSED  \] [0-9]*' "$LOG/test_cuda.log" | grep -o '[0-9]*$' || echo 0)
  skipped=$(grep -o '\[  SKIPPED \] [0-9]* test' "$LOG/test_cuda.log" | grep -o '[0-9]*' | sed -n 1p || true)
  note "CUDA tests vs ref / sim" ok "$passed passed, ${skipped:-0} skipped (DP needs 2 GPUs)"
else
  grep -E "Failure|FAILED|error" "$LOG/test_cuda.log" | sed -n 1,40p >&2 || true
  fail_check "CUDA tests vs ref / sim" "see $LOG/test_cuda.log"
fi
grep -E "^\[ (cuda vs sim|cuda DP) \]" "$LOG/test_cuda.log" || true
if "$BUILD/tests/test_device_ops" --gtest_brief=1 >"$LOG/test_device_ops.log" 2>&1; then
  note "device dispatch tests (CPU)" ok ""
else
  fail_check "device dispatch tests (CPU)" "see $LOG/test_device_ops.log"
fi
SANITIZER=$(command -v compute-sanitizer || true)
[[ -z $SANITIZER && -x $(dirname "$NVCC")/compute-sanitizer ]] && SANITIZER=$(dirname "$NVCC")/compute-sanitizer
if [[ -n $SANITIZER ]]; then
  step "op tests under compute-sanitizer memcheck"
  # Small shapes that still reach every kernel and branch (memcheck slows kernels down a lot).
  filter='CudaOpsTest.Relu*:CudaOpsTest.Casts*:CudaOpsTest.Add*:CudaOpsTest.Accuracy*:CudaOpsTest.AdamW*'
  filter+=':CudaOpsTest.NonFinite*:CudaOpsTest.Pinned*:CudaOpsTest.CatFlat*:CudaOpsTest.EmptyBatch*'
  filter+=':CudaOpsTest.AnOutOfRange*:Shapes/CudaLoss.*:OddSizes/CudaLinear.*B37_C83_OC29'
  filter+=':OddSizes/CudaLinear.*B1_C1_OC1'
  if timeout 150 "$SANITIZER" --tool memcheck --error-exitcode 3 --leak-check no \
      "$BUILD/tests/test_cuda" --gtest_filter="$filter" --gtest_brief=1 >"$LOG/memcheck.log" 2>&1; then
    note "memcheck (op tests)" ok "no invalid access"
  else
    grep -E "Invalid|ERROR SUMMARY|FAILED" "$LOG/memcheck.log" | sed -n 1,20p >&2 || true
    fail_check "memcheck (op tests)" "see $LOG/memcheck.log"
  fi
else
  note "memcheck (op tests)" skipped "compute-sanitizer not found"
fi

# ---- 3. the reference MLP on the GPU vs the simulator --------------------------------------------
DATA_ARGS=() DATA_NAME="full Fashion-MNIST, 2 epochs" EPOCHS=2
if [[ ! -f /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz ]]; then
  DATA_ARGS=(--data "$ROOT/data/fashion-mnist") DATA_NAME="committed slice, 6 epochs" EPOCHS=6
fi
train_json() {  # name, extra args...: runs furnace train --json into $LOG/name.json
  local name=$1; shift
  if ! "$FURNACE" train --quiet --json --epochs "$EPOCHS" "${DATA_ARGS[@]}" "$@" >"$LOG/$name.json" 2>"$LOG/$name.err"; then
    cat "$LOG/$name.err" >&2
    return 1
  fi
}
compare_accuracy() {  # label, cuda run, sim run
  local c s
  c=$(json_number "$LOG/$2.json" test_accuracy)
  s=$(json_number "$LOG/$3.json" test_accuracy)
  if is_true "($c - $s) < 0.01 && ($s - $c) < 0.01 && $c > 0.6"; then
    note "$1" ok "accuracy cuda $c, sim $s ($DATA_NAME)"
  else
    fail_check "$1" "accuracy cuda $c vs sim $s ($DATA_NAME): more than 0.01 apart"
  fi
}
step "reference MLP: furnace train on cuda:0 and on the simulator ($DATA_NAME)"
if train_json train_cuda --backend cuda && train_json train_sim --backend sim; then
  compare_accuracy "train 1 GPU vs sim" train_cuda train_sim
else
  fail_check "train 1 GPU vs sim" "furnace train failed (logs in $LOG)"
fi
if ((GPUS >= 2)); then
  K=$((GPUS < 4 ? GPUS : 4))
  IDS=$(seq -s, 0 $((K - 1)))
  step "DataParallel over $K GPUs vs the simulator's workstation-4x3090"
  if train_json dp_cuda --backend cuda --parallel dp --device-ids "$IDS" &&
     train_json dp_sim --backend sim --topology workstation-4x3090 --parallel dp --device-ids "$IDS"; then
    compare_accuracy "train DataParallel x$K vs sim" dp_cuda dp_sim
  else
    fail_check "train DataParallel x$K vs sim" "furnace train --parallel dp failed (logs in $LOG)"
  fi
else
  note "train DataParallel vs sim" skipped "one GPU"
fi

# ---- 4. throughput ------------------------------------------------------------------------------
bench_furnace() { "$BENCH" "$@" 2>>"$LOG/bench.err" | awk '/^samples_per_s/ { print $2 }'; }
TORCH_PY=""
for py in python3 /usr/bin/python3; do
  if command -v "$py" >/dev/null && "$py" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
    TORCH_PY=$py
    break
  fi
done
bench_torch() { "$TORCH_PY" "$ROOT/bench/pytorch_mlp.py" --device cuda --threads "$(nproc)" "$@" 2>>"$LOG/bench.err" | awk '/^samples_per_s/ { print $2 }'; }

step "throughput at hidden 4096 (batch 2048): fp32, fp16, bf16"
H=(--hidden 4096 --batch 2048 --steps 60 --warmup 10)
declare -A F=()
for amp in off fp16 bf16; do
  F[$amp]=$(bench_furnace "${H[@]}" --amp "$amp") || true
  [[ -n ${F[$amp]} ]] || { fail_check "bench hidden 4096 amp $amp" "furnace_bench_gpu failed (see $LOG/bench.err)"; F[$amp]=0; }
done
if is_true "${F[off]} > 0"; then
  for amp in fp16 bf16; do
    ratio=$(calc "${F[$amp]} / ${F[off]}")
    status=ok
    [[ $amp == bf16 ]] && ! is_true "$ratio >= 2" && status=GOAL-MISS
    note "furnace $amp vs fp32, hidden 4096" "$status" "${ratio}x (${F[$amp]} vs ${F[off]} samples/s)"
  done
fi
step "reference MLP (hidden 512, batch 256): Furnace vs PyTorch eager"
REF=(--hidden 512 --batch 256 --steps 300 --warmup 30)
F512=$(bench_furnace "${REF[@]}") || true
[[ -n $F512 ]] || { fail_check "bench reference MLP" "furnace_bench_gpu failed (see $LOG/bench.err)"; F512=0; }
if [[ -n $TORCH_PY ]]; then
  T512=$(bench_torch "${REF[@]}") || true
  T4096=$(bench_torch "${H[@]}" --amp bf16) || true
  if [[ -n $T512 ]] && is_true "$T512 > 0"; then
    ratio=$(calc "$F512 / $T512")
    status=ok
    is_true "$ratio >= 1.0" || status=GOAL-MISS
    note "furnace / pytorch eager, reference MLP" "$status" "${ratio}x ($F512 vs $T512 samples/s, fp32)"
  else
    fail_check "pytorch eager, reference MLP" "bench/pytorch_mlp.py failed (see $LOG/bench.err)"
  fi
  [[ -n $T4096 ]] && note "furnace / pytorch eager, h4096 bf16" info "$(calc "${F[bf16]} / $T4096")x (${F[bf16]} vs $T4096 samples/s)"
else
  note "furnace / pytorch eager" skipped "no PyTorch with CUDA here; furnace fp32: $F512 samples/s"
fi

print_summary
if ((FAILED)); then
  echo "gpu_check.sh: FAILED (logs in $LOG)" >&2
  exit 1
fi
if [[ ${GPU_CHECK_STRICT:-0} == 1 ]] && printf '%s\n' "${SUMMARY[@]}" | grep -q GOAL-MISS; then
  echo "gpu_check.sh: a throughput goal was missed (GPU_CHECK_STRICT=1)" >&2
  exit 1
fi
echo "gpu_check.sh: all checks passed"
