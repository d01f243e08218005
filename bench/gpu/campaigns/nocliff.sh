#!/usr/bin/env bash
# Never slower than no speculation, measured on one GPU: tier 0 as plain decoding against a server without
# speculation, and the Live pod driven by the operator's tuner against the better of that server and the best static
# tier. Runs ON the GPU machine from the repository root, after the kit is installed (docs/gpu-testbed.md):
#
#   source bench/gpu/kit/install_kit.sh && bench/gpu/campaigns/nocliff.sh WORKDIR OUTDIR [PHASE ...]
#
#   smoke     the agreeing tiny models in float32 (CUDA graphs, overlap scheduler): nospec against the runtime with
#             Live tiers 0, 3, 7 switching 3 -> 0 -> 7 -> 0 -> 3 while requests decode: identical greedy tokens, no
#             draft call at tier 0, every self-test check (the `selftest --device cuda` record)
#   cycles8b  Llama-3-8B shape (dummy bf16 weights, EAGLE-3 head), Live tiers 0 and 3: the served decode cycle of
#             tier 0 against the same engine without speculation at batch 1, 8, 32, 64 (GPU-bound)
#   train     the trained 304M code LM and its EAGLE-3 head (trained_live.sh's train phase), unless WORKDIR has them
#   cycles    the same served-cycle comparison on the trained model (host-bound)
#   prefill   the trained model, prefill before/after: the same short load (static tiers 0 and 3 and the server without
#             speculation, PREFILL_BATCHES, default 32,64) with eager prefill, then with SGLang's prefill CUDA graphs for
#             extends up to PREFILL_GRAPH_TOKENS (default 512) tokens: prefill_eager.json, prefill_graphs.json. When the
#             graphs run served every point, the live phase that follows runs with them too
#   live      the trained model: a server without speculation beside the Live pod (same GPU, same arguments); per
#             batch (BATCHES, default 1,8,32,64) the static tiers, the operator's tuner for LIVE_SECONDS, then
#             PAIRS alternating rounds of its table against the better of no speculation and the best static tier;
#             every point records the pod's prefill parts (specdecode_prefill_phase_seconds) and SGLang's queue time
# The served-cycle phases time each (tier, batch) MEASURE_REPEATS times (default 3) and report the median.
# Each phase writes OUTDIR/<phase>.json; `bench/renderer.py report gpu_h200_nocliff --raw OUTDIR --name NAME` turns them into
# bench/results/gpu_h200_nocliff.{json,md}.
set -uo pipefail
work="${1:?usage: nocliff.sh WORKDIR OUTDIR [PHASE ...]}"; out="${2:?usage: nocliff.sh WORKDIR OUTDIR [PHASE ...]}"
shift 2
phases=("$@"); [ ${#phases[@]} -eq 0 ] && phases=(smoke cycles8b train cycles live)
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# the Llama-3-8B shape, from the one home of model shapes (bench/shapes.py), next to the run's reports
shape8b_yaml="$(python3 "$here/../../shapes.py" llama3-8b "$out/llama3-8b-shape.yaml")" || exit 1
mkdir -p "$work" "$out"
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONPATH="$PWD/runtime:$PWD/operator${PYTHONPATH:+:$PYTHONPATH}"
batches="${BATCHES:-1,8,32,64}"
# SGLang arguments that keep to the kernels the kit carries (triton attention, torch sampling); graphs up to batch 64
common=(--device cuda --tp 1 --algorithm EAGLE3 --json --timeout 420
        --sglang-arg attention-backend=triton --sglang-arg sampling-backend=pytorch
        --sglang-arg max-running-requests=64 --sglang-arg max-total-tokens=131072
        --sglang-arg disable-prefill-cuda-graph --sglang-arg cuda-graph-max-bs-decode=64
        --sglang-arg cuda-graph-bs-decode=1,2,4,8,16,32,64)
# the live phase's prefill graphs: on only after the prefill phase served every point with them (kept in WORKDIR,
# so a later call on the same machine finds it)
served_all() {
    python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); b=r.get("batches") or {}
sys.exit(0 if b and all(x.get("nospec") and {"0","3"} <= set(x.get("static") or {}) for x in b.values()) else 1)' "$1"
}
prefill_run() {  # mode, graph tokens
    python3 "$here/live_tune.py" --server live --target "$work/target" --draft "$work/eagle3" \
        --heldout "$work/corpus/heldout.txt" --nospec-alongside --mem-fraction 0.4 --max-batch 64 \
        --replay "${REPLAY:-4}" --pairs 0 --batches "${PREFILL_BATCHES:-32,64}" --statics 0,3 --live-seconds 5 \
        --check-prompts 2 --prefill-graph-tokens "$2" --out "$out/prefill_$1.json" >"$out/prefill_$1.log" 2>&1
    local rc=$?
    echo "prefill $1: exit $rc"; tail -n 8 "$out/prefill_$1.log"
    return $rc
}
selftest() {  # phase, then selftest flags
    local phase="$1"; shift
    local t0=$SECONDS
    python3 -m specdecode_runtime selftest "${common[@]}" "$@" --keep "$work/keep-$phase" >"$out/$phase.json" 2>"$out/$phase.err"
    local rc=$?
    tail -c 150000 "$out/$phase.err" >"$out/$phase.log"; rm -f "$out/$phase.err"
    echo "phase $phase: exit $rc in $((SECONDS - t0)) s"
}
for phase in "${phases[@]}"; do
  t0=$SECONDS
  case "$phase" in
    smoke)    selftest smoke --layouts nospec,sharded --steps 3 --live-steps 0,7,0,3 --prompts 4 --max-new-tokens 96 ;;
    cycles8b) selftest cycles8b --model-config "$shape8b_yaml" --load-format dummy --random-draft \
                  --layouts nospec,sharded --steps 3 --live-steps 0 --prompts 2 --max-new-tokens 16 \
                  --measure-cycles "$batches" --measure-tokens 48 --measure-repeats "${MEASURE_REPEATS:-3}" ;;
    train)    "$here/trained_live.sh" "$work" "$out" train ;;  # the trained campaign's own training phase
    cycles)   selftest cycles --model-path "$work/target" --draft-model-path "$work/eagle3" \
                  --prompt-file "$work/corpus/heldout.txt" --layouts nospec,sharded --steps 3 --live-steps 0 \
                  --prompts 2 --max-new-tokens 16 --measure-cycles "$batches" --measure-tokens 96 \
                  --measure-repeats "${MEASURE_REPEATS:-3}" ;;
    prefill)  prefill_run eager 0
              echo 0 >"$work/prefill-graph-tokens"
              if prefill_run graphs "${PREFILL_GRAPH_TOKENS:-512}" && served_all "$out/prefill_graphs.json"; then
                  echo "${PREFILL_GRAPH_TOKENS:-512}" >"$work/prefill-graph-tokens"
              fi
              echo "live phase prefill graph tokens: $(cat "$work/prefill-graph-tokens")" ;;
    live)     python3 "$here/live_tune.py" --server live --target "$work/target" --draft "$work/eagle3" \
                  --heldout "$work/corpus/heldout.txt" --nospec-alongside --mem-fraction 0.4 --max-batch 64 \
                  --replay "${REPLAY:-4}" --pairs "${PAIRS:-6}" --pair-replay "${PAIR_REPLAY:-2}" \
                  --batches "$batches" --statics "${STATICS:-0,1,3,5,7}" --live-seconds "${LIVE_SECONDS:-30}" \
                  --tier0-pairs "${TIER0_PAIRS:-6}" --check-steps 0,7 --prefill-graph-tokens "${LIVE_PREFILL_GRAPH_TOKENS:-$(cat "$work/prefill-graph-tokens" 2>/dev/null || echo 0)}" \
                  --out "$out/live.json" >"$out/live.log" 2>&1
              echo "live: exit $?"; tail -n 30 "$out/live.log" ;;
    *) echo "unknown phase '$phase' (smoke, cycles8b, train, cycles, prefill, live)" >&2; exit 2 ;;
  esac
  echo "$phase: $((SECONDS - t0)) s"
done
