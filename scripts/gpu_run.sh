#!/usr/bin/env bash
# The cuda driver, end to end, on a machine with an NVIDIA GPU and a CUDA build
# of torch (the lent H200 has torch 2.11 + CUDA 13): build torch_musa with the
# cuda driver, run the whole test suite under TORCH_MUSA_DRIVER=cuda (host-driver
# tests are marked requires_host_driver: strict expected failures), then the benchmark
# against native cuda. Results go to $RESULTS (default benchmarks/results).
#
#   bash scripts/gpu_run.sh            # build + tests + benchmark
#   STAGES="build bench" bash scripts/gpu_run.sh
#   STAGES="build dist" bash scripts/gpu_run.sh   # only tests/distributed
#   STAGES="build doctor" bash scripts/gpu_run.sh # musa-doctor's estimate against the GPU
#   STAGES="build spy" bash scripts/gpu_run.sh    # where a host-bound step's extra host time goes
#                                                 # (py-spy: carry its wheel in .whl/)
#   STAGES="build phases" bash scripts/gpu_run.sh # the same step's host time per phase
#   STAGES="build moves" bash scripts/gpu_run.sh  # musa's host cost per tensor (list ops, compiled moves)
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
RESULTS=${RESULTS:-benchmarks/results}
STAGES=${STAGES:-build tests dist bench}
mkdir -p "$RESULTS"
export MAX_JOBS=${MAX_JOBS:-$(nproc)} PYTHONUNBUFFERED=1
# The system C++ compiler, not whatever $CXX names: the lent machine sets
# CXX=/opt/gcc/bin/g++, whose _C crashed the process on the first C++ error
# (the system g++ builds one that raises cleanly).
export CXX=${TORCH_MUSA_CXX:-$(command -v g++ || command -v c++)}
# Deterministic cuBLAS for the parity tests (read when cuBLAS starts).
export CUBLAS_WORKSPACE_CONFIG=${CUBLAS_WORKSPACE_CONFIG:-:4096:8}
status=0

if [[ " $STAGES " == *" build "* ]]; then
  # Wheels the test suite needs that the machine may lack (carried in .whl/;
  # scripts/gpu_wheels.sh downloads them).
  if compgen -G ".whl/*.whl" > /dev/null; then
    $PY -m pip install -q --no-index --no-deps --no-compile .whl/*.whl || exit 1
  fi
  # A warm lent machine keeps build/ and the built libraries between calls, but every
  # copied source is new to the compiler's timestamps, so pip rebuilt all of it each
  # call (~2 min of device time). The build's inputs' content decides instead.
  inputs=$(find setup.py torch_musa/csrc torch_musa/distributed/csrc torch_musa/ops/codegen.py \
    torch_musa/ops/musa_functions.yaml -type f | sort | xargs sha1sum | sha1sum | cut -d' ' -f1)
  if [[ "$(cat build/.inputs_sha1 2>/dev/null)" == "$inputs" ]] && $PY -c "import torch_musa" 2>/dev/null; then
    echo "build: skipped (its inputs match the last build on this machine)"
  else
    start=$(date +%s)
    $PY -m pip install -q --no-build-isolation --no-deps -e . || exit 1
    mkdir -p build && echo "$inputs" > build/.inputs_sha1
    echo "build: $(( $(date +%s) - start )) s"
  fi
fi

export TORCH_MUSA_DRIVER=cuda
$PY -c "import torch, torch_musa; assert torch_musa._C._driver_name() == 'cuda', 'not the cuda driver'; \
x = torch.randn(4, 4, device='musa'); print('smoke:', (x @ x).sum().item(), torch.musa.get_device_name())" || exit 1

if [[ " $STAGES " == *" tests "* ]]; then
  start=$(date +%s)
  # -v: a line per test as it ends, so that a run cut short by the device budget
  # still tells what passed (grep -c "] PASSED").
  $PY -m pytest -v -p no:cacheprovider -n "${TEST_JOBS:-8}" --timeout 600 -rfE --ignore=tests/distributed \
    --junitxml="$RESULTS/cuda_driver_tests.xml" tests 2>&1 | tee "$RESULTS/cuda_driver_tests.log"
  status=${PIPESTATUS[0]}
  echo "tests: exit $status, $(( $(date +%s) - start )) s"
fi

if [[ " $STAGES " == *" dist "* ]]; then
  start=$(date +%s)
  # The distributed tests start 2-3 CUDA processes per launch on the one GPU; fewer
  # launches at once keep CUDA context creation from outlasting a collective's timeout.
  $PY -m pytest -q -p no:cacheprovider -n "${DIST_JOBS:-4}" --timeout 600 -rfE \
    --junitxml="$RESULTS/cuda_driver_tests_distributed.xml" tests/distributed 2>&1 \
    | tee "$RESULTS/cuda_driver_tests_distributed.log"
  dist_status=${PIPESTATUS[0]}
  (( status == 0 )) && status=$dist_status
  echo "distributed tests: exit $dist_status, $(( $(date +%s) - start )) s"
fi

if [[ " $STAGES " == *" doctor "* ]]; then
  # The estimate against measured steps, native CUDA's too, with both sides' per-op
  # profiles (the host costs the doctor's model prices), the host priced at this
  # machine's measured costs; DOCTOR_ARGS: e.g. "--models resnet18".
  $PY benchmarks/doctor_validate.py --native --calibrate-host --json "$RESULTS/doctor_validate.json" \
    --profile-dir "$RESULTS/doctor_profiles" ${DOCTOR_ARGS:-} || status=1
fi

if [[ " $STAGES " == *" spy "* ]]; then
  # py-spy's native stacks of a host-bound step on musa and on native cuda, frame by
  # frame; SPY_ARGS: e.g. "--case gpt2-b4x256 --seconds 30".
  $PY benchmarks/spy_cuda_driver_step.py --out "$RESULTS" ${SPY_ARGS:-} || status=1
fi

if [[ " $STAGES " == *" phases "* ]]; then
  # A host-bound step's host issue time per phase (forward, backward, optimizer) on musa
  # and native cuda, from an idle queue and back to back; PHASES_ARGS: e.g.
  # "--case gpt2-b4x256 --compiled --cprofile" (cProfile tables of each side too), or
  # "--case gpt2-b4x256 --ops" (each side's op calls, reported syncs and allocations).
  $PY benchmarks/step_phases.py --out "$RESULTS" ${PHASES_ARGS:-} || status=1
  $PY benchmarks/step_phases.py --out "$RESULTS" --back-to-back ${PHASES_ARGS:-} || status=1
fi

if [[ " $STAGES " == *" moves "* ]]; then
  # musa's host cost per tensor: list ops (fused AdamW, foreach) and compiled graphs'
  # argument and result moves, against native cuda and the bare aliases.
  $PY benchmarks/bench_kernel_moves.py --out "$RESULTS" || status=1
fi

if [[ " $STAGES " == *" bench "* ]]; then
  # BENCH_ARGS: e.g. "--cases gpt2 --train compiled" to fit a shorter device lease.
  $PY benchmarks/bench_cuda_driver.py --out "$RESULTS" --profile ${BENCH_ARGS:-} || status=1
fi
exit $status
