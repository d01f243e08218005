#!/usr/bin/env bash
# GPU truth on one H200 at TP 1: the patched SGLang 0.5.23 through `specdecode-runtime selftest --device cuda`.
# Runs ON the GPU machine from the repository root, after the kit is installed (docs/gpu-testbed.md):
#
#   source bench/gpu/kit/install_kit.sh && bench/gpu/campaigns/tp1.sh OUTDIR [tiny] [live8b] [stock]
#
#   tiny    nospec vs sharded EAGLE-3 with the agreeing tiny models on CUDA, Live steps 3 -> 1 -> 5: identical
#           greedy tokens, drafts accepted (the correctness record)
#   live8b  Llama-3-8B shape (dummy bf16 weights) with an EAGLE-3 head, Live tiers 1, 3, 5 under CUDA graphs: the
#           start-up cost probe on the served path vs the served cycle at batch 1, 8, 32 x steps 1, 3, 5, capture
#           time and graph memory per tier, and the switch latency of a step-table PUT
#   stock   the same 8B shape at static steps 1, 3, 5: stock SGLang (no runtime patch) vs the runtime's launch path,
#           same SGLang arguments, served tok/s at batch 1, 8, 32
# Each phase writes OUTDIR/<phase>.json (the self-test's JSON report) and OUTDIR/<phase>.log (its output's tail).
# `python bench/renderer.py report gpu_h200_tp1` turns them into bench/results/gpu_h200_tp1.{json,md}.
set -uo pipefail
out="${1:?usage: tp1.sh OUTDIR [tiny] [live8b] [stock]}"; shift
phases=("$@"); [ ${#phases[@]} -eq 0 ] && phases=(tiny live8b stock)
mkdir -p "$out"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# the Llama-3-8B shape, from the one home of model shapes (bench/shapes.py), next to the run's reports
shape8b_yaml="$(python3 "$here/../../shapes.py" llama3-8b "$out/llama3-8b-shape.yaml")" || exit 1
export PYTHONUNBUFFERED=1
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
# SGLang arguments that keep to the kernels the kit carries (triton attention, torch sampling) and bound the pools.
common=(--device cuda --tp 1 --algorithm EAGLE3 --json --timeout 300
        --sglang-arg attention-backend=triton --sglang-arg sampling-backend=pytorch
        --sglang-arg max-running-requests=32 --sglang-arg max-total-tokens=131072
        --sglang-arg disable-prefill-cuda-graph --sglang-arg cuda-graph-max-bs-decode=32)
shape8b=(--model-config "$shape8b_yaml" --load-format dummy --random-draft)

run() {  # phase, then selftest flags
    local phase="$1"; shift
    local t0=$SECONDS
    python3 -m specdecode_runtime selftest "${common[@]}" "$@" >"$out/$phase.json" 2>"$out/$phase.err"
    local rc=$?
    tail -c 200000 "$out/$phase.err" >"$out/$phase.log"; rm -f "$out/$phase.err"
    echo "phase $phase: exit $rc in $((SECONDS - t0)) s"
}

for phase in "${phases[@]}"; do
    case "$phase" in
        tiny)   run tiny --layouts nospec,sharded --steps 3 --live-steps 1,5 --prompts 4 --max-new-tokens 48 ;;
        live8b) run live8b "${shape8b[@]}" --layouts sharded --steps 3 --live-steps 1,5 --prompts 4 \
                    --max-new-tokens 32 --measure-cycles 1,8,32 --measure-tokens 64 \
                    --sglang-arg cuda-graph-bs-decode=1,4,8,16,32 ;;
        stock)  for k in ${STOCK_STEPS:-1 3 5}; do
                    run "stock_k$k" "${shape8b[@]}" --layouts stock,sharded --steps "$k" --prompts 4 \
                        --max-new-tokens 16 --measure-cycles 1,8,32 --measure-tokens 64 \
                        --sglang-arg cuda-graph-bs-decode=1,8,32
                done ;;
        *) echo "unknown phase $phase (tiny, live8b, stock)"; exit 2 ;;
    esac
done
