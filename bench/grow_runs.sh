#!/usr/bin/env bash
# Grow run logs by steps, in the background, resumably:
#   bench/grow_runs.sh [STEP] [MAX]        (default 20 and 800 questions per split)
#   EOR_FROM=420 EOR_SPLITS=eval bench/grow_runs.sh 40 500  (start at 420, skipping the steps already in the log)
#   EOR_CONFIG=deploy/eor-15b.yaml EOR_SPLITS=eval bench/grow_runs.sh 40 380      (the 1.5B's part only)
#   EOR_CONFIG=deploy/eor-paper16.yaml EOR_SPLITS=eval bench/grow_runs.sh 40 380  (the 0.5B's 16 only)
#   EOR_BATCH=16 ...   questions per pool run (default: eor run's); a larger batch shares the long-form
#                      reads' (PK, @CP) last decode steps, where a batch waits for its longest
# Each step runs the whole pool (the default: the paper's 16 through the 0.5B and 7 through the
# 1.5B; EOR_CONFIG names another; EOR_MODELS runs it once per listed model as the default reader,
# the `~NAME` members staying on their own reader)
# over STEP more questions of each split in EOR_SPLITS (default: eval, then fit) of
# ../shared/data/questions.dev.jsonl over the shared index (`eor index --corpus
# ../shared/data/corpus.jsonl --index shared` first). Finished questions are never run again (run log +
# reader cache under $EOR_HOME, one log per reader), so stopping it at any time loses at most one
# batch; `eor fit` / `eor eval` with the same --limit reuse it all.
set -euo pipefail
cd "$(dirname "$0")/.."
step=${1:-20}
max=${2:-800}
questions=${EOR_QUESTIONS:-../shared/data/questions.dev.jsonl}
read -r -a models <<<"${EOR_MODELS:-}"
read -r -a splits <<<"${EOR_SPLITS:-eval fit}"
home=${EOR_HOME:-var}
mkdir -p "$home/logs"
for ((n = ${EOR_FROM:-$step}; n <= max; n += step)); do
  for split in "${splits[@]}"; do
    for model in "${models[@]:-}"; do
      echo "$(date -u +%FT%TZ) $split --limit $n ${model:-(shipped reader)}"
      .venv/bin/eor run --questions "$questions" --split "$split" --limit "$n" --index shared --no-progress --json --keep \
        ${model:+--model "$model"} ${EOR_CONFIG:+--config "$EOR_CONFIG"} ${EOR_BATCH:+--batch-size "$EOR_BATCH"} \
        || { echo "step failed (exit $?); its finished questions are kept, the next step retries the rest"; sleep 30; }
    done
  done
done
