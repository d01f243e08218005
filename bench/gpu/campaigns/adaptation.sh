#!/usr/bin/env bash
# A draft that learns from its own traffic, measured on one GPU (issue 40 part 4): one live runtime pod serves a
# target that knows two workloads with an EAGLE-3 head trained on workload A, the traffic shifts to workload B, and
# the operator's adaptation loop (its own code, an in-memory stand-in for the API server, the training Job's
# rendered commands run as local processes) captures, trains, gates, canaries and promotes a head for B, with no
# restart and every request counted; then a deliberately broken candidate goes to the gate. Runs ON the GPU machine
# from the repository root after the kit is installed (docs/gpu-testbed.md, "The adaptation campaign"):
#
#   source bench/gpu/kit/install_kit.sh && bench/gpu/campaigns/adaptation.sh WORKDIR OUTDIR [PHASE ...]
#
#   train  corpora (A: the machine's Python sources; B: C/C++ headers under /usr/include, else licence and package
#          texts), a target trained on A and B interleaved, head A on A and the offline reference head B on B
#          (the two heads at once); each piece skipped when WORKDIR holds it
#   run    bench/gpu/campaigns/adaptation_campaign.py run: the campaign itself -> OUTDIR/adaptation_run.json
#   all    train, then run (the default)
# The run writes OUTDIR/meta.json (commit, device, date, commands) and a first summary under OUTDIR/summary
# (`bench/renderer.py report gpu_adaptation`); the committed one is made from the raw files afterwards.
#
# Knobs (environment): DEVICE (cuda; cpu for the CPU test bed), SMOKE (0; 1: tiny CPU model sizes), DTYPE (float32:
# greedy identity is exact only in float32), A_ROOTS (default: site-packages), A_BYTES (20000000), B_ROOTS,
# B_SUFFIXES, B_BYTES (10000000), B_MIN_BYTES (1000000), B_FALLBACK_ROOTS, HELDOUT_PERCENT (5), TARGET_MINUTES (1.5), HEAD_MINUTES (0.5),
# HEAD_BYTES (8000000), TARGET_ARGS / HEAD_ARGS (more flags for train_target.py / train_eagle3.py), and the run's:
# STEPS (5), CLIENTS (8), A_SECONDS (20), CAPTURE_SECONDS (45), PROMPT_CHARS (1500), NEW_TOKENS (64),
# CANDIDATE_MINUTES (1), MEASURE_PROMPTS (8), MEASURE_CHARS (600), MEASURE_TOKENS (128), ROUNDS (3),
# IDENTITY_PROMPTS (4), TICK_SECONDS (3), MIN_RATIO (1.02), MEM_FRACTION (0.3), DEADLINE_S (0: none; the run's own
# bound: the loop's waits shrink and measurement rounds stop when time runs short) or END_AT (epoch seconds the
# whole call must end by; the run's deadline is derived from it), TRAIN_ARGS / GATE_ARGS (flags appended to the Job's
# train / gate command, one string each), RUN_ARGS (more flags for the run).
set -uo pipefail
work="${1:?usage: adaptation.sh WORKDIR OUTDIR [train|run|all ...]}"; out="${2:?usage: adaptation.sh WORKDIR OUTDIR [train|run|all ...]}"
shift 2
phases=("$@"); [ ${#phases[@]} -eq 0 ] && phases=(all)
for ph in "${phases[@]}"; do
  case "$ph" in train|run|all) ;; *) echo "unknown phase '$ph' (allowed: train run all)" >&2; exit 2 ;; esac
done
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
trained="$here/../trained"
mkdir -p "$work" "$out"
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONPATH="$PWD/runtime:$PWD/operator${PYTHONPATH:+:$PYTHONPATH}"
PY="${PYTHON:-python3}"
device="${DEVICE:-cuda}"
smoke=(); [ "${SMOKE:-0}" = 1 ] && smoke=(--smoke)
read -r -a b_suffix_list <<<"${B_SUFFIXES:-.h .hpp .hh .hxx .cuh}"
b_suffixes=(); for s in "${b_suffix_list[@]}"; do b_suffixes+=(--suffix "$s"); done
commands=()
note() { commands+=("$*"); echo "+ $*"; }

roots_args() {  # directories that exist, each as --root DIR
  local r; for r in "$@"; do [ -d "$r" ] && printf -- '--root\n%s\n' "$r"; done
}

corpus_b() {  # C/C++ headers when the image has enough of them, else texts; prints what it used
  local args
  mapfile -t args < <(roots_args ${B_ROOTS:-/usr/include /usr/local/cuda/include /usr/local/include})
  if [ ${#args[@]} -gt 0 ] && "$PY" "$trained/corpus.py" --out "$work/corpus_b" "${args[@]}" "${b_suffixes[@]}" \
        --max-bytes "${B_BYTES:-10000000}" --heldout-percent ${HELDOUT_PERCENT:-5} >"$out/corpus_b.log" 2>&1 \
     && "$PY" -c 'import json,sys; r=json.load(open(sys.argv[1])); sys.exit(0 if r["train_bytes"]>=int(sys.argv[2]) else 1)' \
        "$work/corpus_b/corpus.json" "${B_MIN_BYTES:-1000000}"; then
    note "corpus.py --out $work/corpus_b ${args[*]} ${b_suffixes[*]} --max-bytes ${B_BYTES:-10000000} --heldout-percent ${HELDOUT_PERCENT:-5}"
    return 0
  fi
  echo "corpus B: too few C/C++ headers, falling back to texts"; tail -n 3 "$out/corpus_b.log"
  mapfile -t args < <(roots_args ${B_FALLBACK_ROOTS:-/usr/share/common-licenses /usr/share/doc /usr/share/man})
  [ ${#args[@]} -gt 0 ] || { echo "corpus B: none of the fallback roots exists" >&2; return 1; }
  note "corpus.py --out $work/corpus_b ${args[*]} --suffix '*' --max-bytes ${B_BYTES:-10000000} --heldout-percent ${HELDOUT_PERCENT:-5}"
  "$PY" "$trained/corpus.py" --out "$work/corpus_b" "${args[@]}" --suffix '*' --max-bytes "${B_BYTES:-10000000}" \
      --heldout-percent ${HELDOUT_PERCENT:-5} >"$out/corpus_b.log" 2>&1
}

train() {  # each piece unless WORKDIR already holds it (a warm machine, or a test bed that brings its own)
  local t0=$SECONDS args w pids=()
  if [ ! -f "$work/corpus_a/train.txt" ]; then
    mapfile -t args < <(roots_args ${A_ROOTS:-})
    note "corpus.py --out $work/corpus_a ${args[*]} --max-bytes ${A_BYTES:-20000000} --heldout-percent ${HELDOUT_PERCENT:-5}"
    "$PY" "$trained/corpus.py" --out "$work/corpus_a" "${args[@]}" --max-bytes "${A_BYTES:-20000000}" \
        --heldout-percent "${HELDOUT_PERCENT:-5}" >"$out/corpus_a.log" 2>&1 || { echo "corpus A failed"; tail "$out/corpus_a.log"; return 1; }
  fi
  if [ ! -f "$work/corpus_b/train.txt" ]; then
    corpus_b || { echo "corpus B failed"; tail "$out/corpus_b.log"; return 1; }
  fi
  if [ ! -f "$work/target/config.json" ]; then
    note "adaptation_campaign.py mix --a $work/corpus_a --b $work/corpus_b --out $work/corpus_ab"
    "$PY" "$here/adaptation_campaign.py" mix --a "$work/corpus_a" --b "$work/corpus_b" --out "$work/corpus_ab" || return 1
    echo "corpora: $((SECONDS - t0)) s"
    # shellcheck disable=SC2086 # TARGET_ARGS is a list of flags
    note "train_target.py --data $work/corpus_ab --out $work/target --minutes ${TARGET_MINUTES:-1.5} --device $device ${smoke[*]} ${TARGET_ARGS:-}"
    # shellcheck disable=SC2086
    "$PY" "$trained/train_target.py" --data "$work/corpus_ab" --out "$work/target" --minutes "${TARGET_MINUTES:-1.5}" \
        --device "$device" "${smoke[@]}" ${TARGET_ARGS:-} >"$out/target.log" 2>&1 || { echo "target failed"; tail "$out/target.log"; return 1; }
    echo "target: $((SECONDS - t0)) s"
  fi
  for w in a b; do
    [ -f "$work/head_$w/config.json" ] && continue
    note "adaptation_campaign.py encode --target $work/target --corpus $work/corpus_$w --max-bytes ${HEAD_BYTES:-8000000}"
    "$PY" "$here/adaptation_campaign.py" encode --target "$work/target" --corpus "$work/corpus_$w" \
        --max-bytes "${HEAD_BYTES:-8000000}" || return 1
    # the two heads at once: one GPU holds both trainings
    # shellcheck disable=SC2086 # HEAD_ARGS is a list of flags
    note "train_eagle3.py --target $work/target --data $work/corpus_$w --out $work/head_$w --minutes ${HEAD_MINUTES:-0.5} --device $device ${smoke[*]} ${HEAD_ARGS:-}"
    # shellcheck disable=SC2086
    "$PY" "$trained/train_eagle3.py" --target "$work/target" --data "$work/corpus_$w" --out "$work/head_$w" \
        --minutes "${HEAD_MINUTES:-0.5}" --device "$device" "${smoke[@]}" ${HEAD_ARGS:-} >"$out/head_$w.log" 2>&1 &
    pids+=($!)
  done
  local rc=0 p; for p in "${pids[@]}"; do wait "$p" || rc=1; done
  [ $rc -eq 0 ] || { echo "a head failed"; tail -n 5 "$out/head_a.log" "$out/head_b.log"; return 1; }
  echo "train: $((SECONDS - t0)) s"
}

copy_reports() {
  cp "$work/corpus_a/corpus.json" "$out/corpus_a.json" 2>/dev/null
  cp "$work/corpus_b/corpus.json" "$out/corpus_b.json" 2>/dev/null
  cp "$work/corpus_ab/mix.json" "$out/corpus_mix.json" 2>/dev/null
  cp "$work/target/train_report.json" "$out/target_report.json" 2>/dev/null
  cp "$work/head_a/train_report.json" "$out/head_a_report.json" 2>/dev/null
  cp "$work/head_b/train_report.json" "$out/head_b_report.json" 2>/dev/null
  return 0
}

write_meta() {
  local commit gpu
  commit="${COMMIT:-$(git rev-parse HEAD 2>/dev/null || echo unknown)}"
  gpu="$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)"
  [ -n "$gpu" ] || gpu="$device ($(uname -m))"
  "$PY" - "$out/meta.json" "$commit" "1x $gpu" "${commands[@]}" <<'PYEOF'
import datetime, json, sys
path, commit, device, *commands = sys.argv[1:]
json.dump({"commit": commit, "device": device, "date": datetime.date.today().isoformat(), "commands": commands},
          open(path, "w"), indent=1)
PYEOF
}

run() {
  local t0=$SECONDS deadline="${DEADLINE_S:-0}"
  # END_AT (epoch seconds): when the whole device call must be over; the run keeps 20 s for the meta and summary
  [ -n "${END_AT:-}" ] && deadline=$(( END_AT - $(date +%s) - 20 ))
  [ "$deadline" -lt 0 ] && deadline=1
  local cmd=("$PY" "$here/adaptation_campaign.py" run --target "$work/target" --head-a "$work/head_a"
             --head-b "$work/head_b" --corpus-a "$work/corpus_a" --corpus-b "$work/corpus_b" --work "$work/run"
             --out "$out" --device "$device" --dtype "${DTYPE:-float32}" --steps "${STEPS:-5}"
             --clients "${CLIENTS:-8}" --a-seconds "${A_SECONDS:-20}" --capture-seconds "${CAPTURE_SECONDS:-45}"
             --prompt-chars "${PROMPT_CHARS:-1500}" --new-tokens "${NEW_TOKENS:-64}"
             --candidate-minutes "${CANDIDATE_MINUTES:-1}" --measure-prompts "${MEASURE_PROMPTS:-8}"
             --measure-chars "${MEASURE_CHARS:-600}" --measure-tokens "${MEASURE_TOKENS:-128}"
             --rounds "${ROUNDS:-3}" --identity-prompts "${IDENTITY_PROMPTS:-4}" --tick-seconds "${TICK_SECONDS:-3}"
             --min-ratio "${MIN_RATIO:-1.02}" --mem-fraction "${MEM_FRACTION:-0.3}" --deadline-s "$deadline"
             --train-args "${TRAIN_ARGS:-}" --gate-args "${GATE_ARGS:-}")
  # shellcheck disable=SC2086 # RUN_ARGS is a list of flags
  cmd+=(${RUN_ARGS:-})
  note "${cmd[*]#"$PY "}"
  "${cmd[@]}" >"$out/adaptation_run.log" 2>&1
  local rc=$?
  echo "run: exit $rc in $((SECONDS - t0)) s"; tail -n 25 "$out/adaptation_run.log"
  write_meta
  "$PY" "$here/../../renderer.py" report gpu_adaptation --raw "$out" --out "$out/summary" >"$out/summary.log" 2>&1
  echo "summary: exit $?"; cat "$out/summary.log"
  return $rc
}

status=0
for ph in "${phases[@]}"; do
  t0=$SECONDS
  case "$ph" in
    train) train || status=1; copy_reports ;;
    run)   run || status=1 ;;
    all)   if train; then copy_reports; run || status=1; else copy_reports; status=1; fi ;;
  esac
  echo "$ph: $((SECONDS - t0)) s"
done
exit $status
