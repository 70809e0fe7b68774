#!/usr/bin/env bash
# Grow run logs by steps, in the background, resumably:
#   bench/grow_runs.sh [STEP] [MAX]        (default 20 and 800 questions per split)
#   EOR_MODELS="qwen2.5-coder-0.5b qwen2.5-coder-1.5b" EOR_SPLITS=fit bench/grow_runs.sh 20 400
#   EOR_CONFIG=deploy/eor-cascade-fit.yaml EOR_SPLITS=fit bench/grow_runs.sh 40 400   (a pool of two readers)
# Each step runs the whole pool (all 16 retrievers) through each reader in EOR_MODELS (default: the
# shipped reader) over STEP more questions of each split in EOR_SPLITS (default: eval, then fit) of
# ../shared/data/questions.dev.jsonl over the shared index (`eor index --corpus
# ../shared/data/corpus.jsonl --index shared` first). Finished questions are never run again (run log +
# reader cache under $EOR_HOME, one log per reader), so stopping it at any time loses at most one
# batch; `eor fit` / `eor eval` with the same --limit and --model reuse it all.
set -euo pipefail
cd "$(dirname "$0")/.."
step=${1:-20}
max=${2:-800}
questions=${EOR_QUESTIONS:-../shared/data/questions.dev.jsonl}
read -r -a models <<<"${EOR_MODELS:-}"
read -r -a splits <<<"${EOR_SPLITS:-eval fit}"
home=${EOR_HOME:-var}
mkdir -p "$home/logs"
for ((n = step; n <= max; n += step)); do
  for split in "${splits[@]}"; do
    for model in "${models[@]:-}"; do
      echo "$(date -u +%FT%TZ) $split --limit $n ${model:-(shipped reader)}"
      .venv/bin/eor run --questions "$questions" --split "$split" --limit "$n" --index shared --no-progress --json \
        ${model:+--model "$model"} ${EOR_CONFIG:+--config "$EOR_CONFIG"} \
        || { echo "step failed (exit $?); its finished questions are kept, the next step retries the rest"; sleep 30; }
    done
  done
done
