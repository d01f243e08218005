#!/usr/bin/env bash
# A speedup on a trained model on one H200: make the target and its EAGLE-3 head (run_training.sh), then serve them
# with the patched SGLang through `specdecode-runtime selftest --device cuda`: no speculation vs EAGLE-3 with Live
# tiers, greedy tokens compared, the served cycle and tok/s per tier and batch on held-out prompts.
# Runs ON the GPU machine from the repository root after the kit is installed (docs/gpu-testbed.md):
#
#   source bench/gpu/kit/install_kit.sh && bench/gpu/campaigns/trained_serve.sh WORKDIR OUTDIR
#
# WORKDIR holds the corpus and models (never committed); OUTDIR gets train_report.json, head_report.json,
# acceptance.json, serve.json (the self-test's report) and the logs.
set -uo pipefail
work="${1:?usage: trained_serve.sh WORKDIR OUTDIR}"; out="${2:?usage: trained_serve.sh WORKDIR OUTDIR}"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
mkdir -p "$work" "$out"
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
TARGET_MINUTES="${TARGET_MINUTES:-2.5}" HEAD_MINUTES="${HEAD_MINUTES:-1}" CORPUS_BYTES="${CORPUS_BYTES:-100000000}" \
    "$here/../trained/run_training.sh" "$work" corpus target eagle3 acceptance >"$out/training.log" 2>&1
echo "training: exit $?"; grep "^=== " "$out/training.log"
cp "$work/target/train_report.json" "$out/train_report.json" 2>/dev/null
cp "$work/eagle3/train_report.json" "$out/head_report.json" 2>/dev/null
cp "$work/acceptance.json" "$out/acceptance.json" 2>/dev/null
[ -f "$work/eagle3/config.json" ] || { tail -40 "$out/training.log"; exit 1; }
python3 -m specdecode_runtime selftest --device cuda --tp 1 --algorithm EAGLE3 --json --timeout 300 \
    --model-path "$work/target" --draft-model-path "$work/eagle3" --prompt-file "$work/corpus/heldout.txt" \
    --layouts nospec,sharded --steps 3 --live-steps 1,5,7 --prompts 8 --max-new-tokens 128 \
    --measure-cycles 1,8,32 --measure-tokens 96 \
    --sglang-arg attention-backend=triton --sglang-arg sampling-backend=pytorch \
    --sglang-arg max-running-requests=32 --sglang-arg max-total-tokens=131072 \
    --sglang-arg disable-prefill-cuda-graph --sglang-arg cuda-graph-max-bs-decode=32 \
    --sglang-arg cuda-graph-bs-decode=1,4,8,16,32 >"$out/serve.json" 2>"$out/serve.err"
echo "serve: exit $?"; tail -c 150000 "$out/serve.err" >"$out/serve.log"; rm -f "$out/serve.err"
