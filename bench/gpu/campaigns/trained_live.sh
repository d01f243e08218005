#!/usr/bin/env bash
# Served throughput of the trained target on one H200 under a steady load: no speculation, stock SGLang EAGLE-3 at
# fixed step counts, and the patched runtime in Live mode (static tiers side by side with the operator's tuner
# driving it). Runs ON the GPU machine from the repository root after the kit is installed (docs/gpu-testbed.md):
#
#   source bench/gpu/kit/install_kit.sh && bench/gpu/campaigns/trained_live.sh WORKDIR OUTDIR [PHASE ...]
#
# PHASE: train (make the models unless WORKDIR already holds them), nospec, live, stock (STOCK_STEPS, default
# "3 5 7"). Default: all four in that order. Each phase writes OUTDIR/<phase>*.json (live_tune.py's report).
# REPLAY=N (default 0, the recorded run): measure each point on one fixed set of N requests per client thread.
# LIVE_ARGS: more live_tune.py flags for the live phase, e.g. "--served-calibration 1,8,32 --pairs 8".
set -uo pipefail
work="${1:?usage: trained_live.sh WORKDIR OUTDIR [PHASE ...]}"; out="${2:?usage: trained_live.sh WORKDIR OUTDIR [PHASE ...]}"
shift 2
phases="${*:-train nospec live stock}"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
mkdir -p "$work" "$out"
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONPATH="$PWD/runtime:$PWD/operator${PYTHONPATH:+:$PYTHONPATH}"
tune() { python3 "$here/live_tune.py" --target "$work/target" --draft "$work/eagle3" \
             --heldout "$work/corpus/heldout.txt" "$@"; }
for ph in $phases; do
  t0=$(date +%s)
  case $ph in
    train)
      if [ -f "$work/eagle3/config.json" ] && [ -f "$work/acceptance.json" ]; then
        echo "train: models present in $work"
      else
        TARGET_MINUTES="${TARGET_MINUTES:-2.5}" HEAD_MINUTES="${HEAD_MINUTES:-1}" CORPUS_BYTES="${CORPUS_BYTES:-100000000}" \
            "$here/../trained/run_training.sh" "$work" corpus target eagle3 acceptance >"$out/training.log" 2>&1
        echo "train: exit $?"; grep "^=== " "$out/training.log"
      fi
      cp "$work/target/train_report.json" "$out/train_report.json" 2>/dev/null
      cp "$work/eagle3/train_report.json" "$out/head_report.json" 2>/dev/null
      cp "$work/acceptance.json" "$out/acceptance.json" 2>/dev/null ;;
    nospec) tune --server nospec --replay "${REPLAY:-0}" --out "$out/nospec.json" ;;
    # shellcheck disable=SC2086 # LIVE_ARGS is a list of flags
    live) tune --server live --replay "${REPLAY:-0}" ${LIVE_ARGS:-} --out "$out/live.json" ;;
    stock) for k in ${STOCK_STEPS:-3 5 7}; do tune --server "stock:$k" --replay "${REPLAY:-0}" --out "$out/stock_$k.json"; done ;;
    *) echo "unknown phase '$ph' (allowed: train nospec live stock)" >&2; exit 2 ;;
  esac
  echo "$ph: $(( $(date +%s) - t0 )) s"
done
