#!/usr/bin/env bash
# Grow the fit and eval run logs by steps, in the background, resumably:
#   bench/grow_runs.sh [STEP] [MAX]        (default 20 and 800 questions per split)
# Each step runs the whole pool (all 16 retrievers, the shipped reader) over STEP more questions
# of the eval split, then of the fit split, of ../shared/data/questions.dev.jsonl over the shared
# index (`eor index --corpus ../shared/data/corpus.jsonl --index shared` first). Finished
# questions are never run again (run log + reader cache under $EOR_HOME), so stopping it at any
# time loses at most one batch; `eor fit` / `eor eval` with the same --limit reuse it all.
set -euo pipefail
cd "$(dirname "$0")/.."
step=${1:-20}
max=${2:-800}
questions=${EOR_QUESTIONS:-../shared/data/questions.dev.jsonl}
home=${EOR_HOME:-var}
mkdir -p "$home/logs"
for ((n = step; n <= max; n += step)); do
  for split in eval fit; do
    echo "$(date -u +%FT%TZ) $split --limit $n"
    .venv/bin/eor run --questions "$questions" --split "$split" --limit "$n" --index shared --no-progress --json \
      || { echo "step failed (exit $?); its finished questions are kept, the next step retries the rest"; sleep 30; }
  done
done
