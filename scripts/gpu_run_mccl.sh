#!/usr/bin/env bash
# mccl on NCCL across GPUs (the two-GPU machine, nvidia-h200-x2): build, run the mccl
# tests under the cuda driver, where every 2-rank launch gets a GPU per rank and so
# NCCL (collectives, DDP 2 ranks against 1 rank with the full batch, FSDP2; 3-rank
# launches stage Gloo), then all_reduce bus bandwidth of mccl on musa tensors
# against native NCCL on cuda tensors, 1 MB to 1 GB, into $RESULTS as
# mccl_vs_nccl.{json,md,png}.
#
#   bash scripts/gpu_run_mccl.sh
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
RESULTS=${RESULTS:-benchmarks/results}
mkdir -p "$RESULTS"
# NVLink multicast stays off (the lent machines' rule), in every process started below.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
ngpu=$($PY -c "import torch; print(torch.cuda.device_count())")
(( ngpu >= 2 )) || { echo "mccl on NCCL needs 2 GPUs; this machine has $ngpu"; exit 2; }
STAGES=build RESULTS="$RESULTS" bash scripts/gpu_run.sh || exit 1

export TORCH_MUSA_DRIVER=cuda
$PY -c "import torch_musa.distributed.mccl as m; print('engine for 2 ranks:', m.engine(2))"
$PY -m pytest -q -p no:cacheprovider -n "${DIST_JOBS:-2}" --timeout 600 -rfE \
  --junitxml="$RESULTS/mccl_nccl_tests.xml" tests/distributed 2>&1 | tee "$RESULTS/mccl_nccl_tests.log"
status=${PIPESTATUS[0]}
$PY benchmarks/bench_mccl.py --reference nccl --world 2 --sizes 1M,4M,16M,64M,256M,1G \
  --rounds 7 --stat median --out "$RESULTS" || status=1
exit $status
