#!/usr/bin/env bash
# The split draft on two GPUs of one host (nvidia-h200-x2): tokens, acceptance, graphs and speed of split vs sharded
# over NCCL, through `specdecode-runtime selftest --device cuda --tp 2`. NVLink multicast stays off.
# Runs ON the GPU machine from the repository root, after the kit is installed (docs/gpu-testbed.md):
#
#   source bench/gpu/kit/install_kit.sh && bench/gpu/campaigns/split_x2.sh OUTDIR [tiny1] [tiny0] [tree] [shape8b]
#
#   tiny1    agreeing tiny models, nospec,sharded,split with the draft on rank 1, Live steps 3 -> 1 -> 5
#   tiny0    the same with the draft on rank 0 (S holds the exporting rank)
#   tree     topk 2 (a tree of 4 draft tokens), draft on rank 1
#   shape8b  Llama-3-8B shape (dummy weights) + EAGLE-3 head, sharded and split (draft on rank 1), Live tiers 1/3/5:
#            served cycle per layout at batch 1, 8, 32, graphs per tier, memory per rank
# Each phase writes OUTDIR/x2_<phase>.json and .log; `python bench/renderer.py report gpu_h200x2_split --raw DIR` writes
# bench/results/gpu_h200x2_split.{json,md}. With DRY_RUN=1 it prints the commands and checks the flags only.
set -uo pipefail
out="${1:?usage: split_x2.sh OUTDIR [tiny1] [tiny0] [tree] [shape8b]}"; shift
phases=("$@"); [ ${#phases[@]} -eq 0 ] && phases=(tiny1 tiny0 tree shape8b)
mkdir -p "$out"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# the Llama-3-8B shape, from the one home of model shapes (bench/shapes.py), next to the run's reports
shape8b_yaml="$(python3 "$here/../../shapes.py" llama3-8b "$out/llama3-8b-shape.yaml")" || exit 1
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
device="${DEVICE:-cuda}"
common=(--device "$device" --tp 2 --json --timeout 300)
gpu=(--sglang-arg attention-backend=triton --sglang-arg sampling-backend=pytorch
     --sglang-arg max-running-requests=32 --sglang-arg max-total-tokens=131072
     --sglang-arg disable-prefill-cuda-graph --sglang-arg cuda-graph-max-bs-decode=32)
[ "$device" = cpu ] && gpu=()

run() {  # phase, then selftest flags
    local phase="$1"; shift
    if [ -n "${DRY_RUN:-}" ]; then
        echo "selftest ${common[*]} ${gpu[*]} $*"
        python3 - "$@" <<'PY' || exit 2
import argparse, sys
from specdecode_runtime.selftest import options
ap = argparse.ArgumentParser(); options.add_arguments(ap)
options.from_namespace(ap.parse_args(["--tp", "2", "--device", "cpu", *sys.argv[1:]]))
PY
        return
    fi
    local t0=$SECONDS
    python3 -m specdecode_runtime selftest "${common[@]}" "${gpu[@]}" "$@" >"$out/x2_$phase.json" 2>"$out/x2_$phase.err"
    local rc=$?
    tail -c 200000 "$out/x2_$phase.err" >"$out/x2_$phase.log"; rm -f "$out/x2_$phase.err"
    echo "phase $phase: exit $rc in $((SECONDS - t0)) s"
}

for phase in "${phases[@]}"; do
    case "$phase" in
        tiny1) run tiny1 --algorithm EAGLE3 --layouts nospec,sharded,split --draft-ranks 1 --steps 3 --live-steps 1,5 \
                   --prompts 4 --max-new-tokens 48 ;;
        tiny0) run tiny0 --algorithm EAGLE3 --layouts nospec,sharded,split --draft-ranks 0 --steps 3 --live-steps 1,5 \
                   --prompts 4 --max-new-tokens 48 ;;
        tree)  run tree --algorithm EAGLE3 --layouts nospec,sharded,split --draft-ranks 1 --steps 3 --topk 2 \
                   --num-draft-tokens 4 --prompts 4 --max-new-tokens 48 ;;
        shape8b) run shape8b --algorithm EAGLE3 --model-config "$shape8b_yaml" --load-format dummy \
                   --random-draft --layouts sharded,split --draft-ranks 1 --steps 3 --live-steps 1,5 --prompts 4 \
                   --max-new-tokens 32 --measure-cycles 1,8,32 --measure-tokens 64 \
                   ${gpu:+--sglang-arg cuda-graph-bs-decode=1,4,8,16,32} ;;
        *) echo "unknown phase $phase (tiny1, tiny0, tree, shape8b)"; exit 2 ;;
    esac
done
