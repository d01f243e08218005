#!/usr/bin/env bash
# A draft swapped in place under a steady load on one GPU (bench/gpu/campaigns/draft_swap_load.py): the trained target
# and head (nocliff.sh's train phase, reused when WORKDIR has them), a briefly trained head of the same shape, then
# the trained head -> the brief one -> the trained one again while BATCH clients keep requesting. Runs ON the GPU
# machine from the repository root after the kit is installed (docs/gpu-testbed.md):
#
#   source bench/gpu/kit/install_kit.sh && bench/gpu/campaigns/draft_swap.sh WORKDIR OUTDIR
#
# Writes OUTDIR/draft_swap_gpu.json (+ .log); `python bench/renderer.py report draft_swap` folds it into
# bench/results/draft_swap.{json,md}.
set -uo pipefail
work="${1:?usage: draft_swap.sh WORKDIR OUTDIR}"; out="${2:?usage: draft_swap.sh WORKDIR OUTDIR}"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
mkdir -p "$work" "$out"
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONPATH="$PWD/runtime:$PWD/operator${PYTHONPATH:+:$PYTHONPATH}"
[ -f "$work/eagle3/config.json" ] || "$here/nocliff.sh" "$work" "$out" train
if [ ! -f "$work/eagle3_brief/config.json" ]; then
  t0=$SECONDS
  python3 "$here/../trained/train_eagle3.py" --target "$work/target" --data "$work/corpus" --out "$work/eagle3_brief" \
      --minutes "${BRIEF_MINUTES:-0.1}" --draft-vocab "${DRAFT_VOCAB:-0}" >"$out/brief_head.log" 2>&1
  echo "brief head: exit $? in $((SECONDS - t0)) s"
  cp "$work/eagle3_brief/train_report.json" "$out/brief_head_report.json" 2>/dev/null
fi
GPU_NAME="$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1)" \
python3 "$here/draft_swap_load.py" --target "$work/target" --draft "$work/eagle3" --brief "$work/eagle3_brief" \
    --heldout "$work/corpus/heldout.txt" --batch "${BATCH:-8}" --steps "${STEPS:-3}" \
    --stretch-seconds "${STRETCH_SECONDS:-20}" --out "$out/draft_swap_gpu.json" >"$out/draft_swap_gpu.log" 2>&1
echo "draft swap: exit $?"; tail -n 5 "$out/draft_swap_gpu.log"
