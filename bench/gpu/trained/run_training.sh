#!/usr/bin/env bash
# Make the trained target and its EAGLE-3 head on one GPU, everything under OUTDIR, with each stage's wall time:
#   corpus      Python sources of this image's site-packages -> OUTDIR/corpus (train / held-out split)   <= 60 s
#   target      BPE tokenizer + ~300M Llama code LM, TARGET_MINUTES of training -> OUTDIR/target        <= ~5 min
#   eagle3      EAGLE-3 head on the target's hidden states, HEAD_MINUTES -> OUTDIR/eagle3                <= 2 min
#   acceptance  per-position acceptance, k=7, on held-out prompts -> OUTDIR/acceptance.json             <= 30 s
#   check       the head loaded by SGLang's own LlamaForCausalLMEagle3 (skipped when sglang is absent)
# Usage: bench/gpu/trained/run_training.sh OUTDIR [STAGE ...]      (default: all stages, in that order)
# Environment: PYTHON (python3), TARGET_MINUTES (4), HEAD_MINUTES (1.5), CORPUS_BYTES (200000000), PROMPTS (64),
#              DRAFT_VOCAB (0: the target's whole vocabulary), SMOKE (1: tiny CPU sizes).
set -euo pipefail
if [ $# -lt 1 ]; then
  echo "usage: $0 OUTDIR [corpus|target|eagle3|acceptance|check ...]" >&2
  exit 2
fi
OUT=$1; shift
STAGES=${*:-corpus target eagle3 acceptance check}
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/../../.." && pwd)
PY=${PYTHON:-python3}
SMOKE_FLAG=()
[ "${SMOKE:-0}" = 1 ] && SMOKE_FLAG=(--smoke)
mkdir -p "$OUT"

stage() {
  local name=$1; shift
  local t0; t0=$(date +%s%N)
  echo "=== $name: $*"
  "$@"
  local ms=$(( ($(date +%s%N) - t0) / 1000000 ))
  echo "=== $name took $((ms / 1000)).$(printf %03d $((ms % 1000))) s"
}

for s in $STAGES; do
  case $s in
    corpus|target|eagle3|acceptance|check) ;;
    *) echo "unknown stage '$s' (allowed: corpus target eagle3 acceptance check)" >&2; exit 2 ;;
  esac
done

for s in $STAGES; do
  case $s in
    corpus)
      stage corpus "$PY" "$HERE/corpus.py" --out "$OUT/corpus" --max-bytes "${CORPUS_BYTES:-200000000}" ;;
    target)
      stage target "$PY" "$HERE/train_target.py" --data "$OUT/corpus" --out "$OUT/target" \
        --minutes "${TARGET_MINUTES:-4}" "${SMOKE_FLAG[@]}" ;;
    eagle3)
      stage eagle3 "$PY" "$HERE/train_eagle3.py" --target "$OUT/target" --data "$OUT/corpus" --out "$OUT/eagle3" \
        --minutes "${HEAD_MINUTES:-1.5}" --draft-vocab "${DRAFT_VOCAB:-0}" "${SMOKE_FLAG[@]}" ;;
    acceptance)
      stage acceptance "$PY" "$HERE/acceptance.py" --target "$OUT/target" --draft "$OUT/eagle3" --data "$OUT/corpus" \
        --prompts "${PROMPTS:-64}" --k 7 --out "$OUT/acceptance.json" "${SMOKE_FLAG[@]}" ;;
    check)
      if "$PY" -c "import sglang" 2>/dev/null; then
        stage check env PYTHONPATH="$REPO/runtime${PYTHONPATH:+:$PYTHONPATH}" "$PY" "$HERE/sglang_check.py" "$OUT/eagle3"
      else
        echo "=== check skipped: sglang is not importable by $PY"
      fi ;;
  esac
done
