#!/usr/bin/env bash
# Issue 54's answer quality against corpus size: the same NQ questions (the eval split's first N of the
# dataset, by question as the shipped voter's fit split, seed 0) over each index, for SE@1~1.5B,
# Wiki@10~1.5B and the shipped cascade:
#   bench/scale_quality.sh [N] [INDEX...]     (default 100; shared scale-1m)
# The shared corpus's index is built first where it is missing (the 1M one by bench/scale_1m.sh). Each index's
# two evals are skipped once their report exists; an interrupted eval keeps what it read (the
# reader cache under $EOR_HOME): run it again to go on. Reports: var/bench/scale-quality/INDEX/{singles,cascade};
# then each index beside the first, question by question (bench.paired_evals): INDEX/paired-with-FIRST.json.
set -euo pipefail
cd "$(dirname "$0")/.."
n=${1:-100}
shift || true
indexes=("$@")
[ ${#indexes[@]} -gt 0 ] || indexes=(shared scale-1m)
questions=${EOR_QUESTIONS:-../shared/data/questions.dev.jsonl}
home=${EOR_HOME:-var}
for index in "${indexes[@]}"; do
  out=var/bench/scale-quality/$index
  mkdir -p "$out" var/logs
  if [ "$index" = shared ] && [ ! -f "$home/indexes/shared/index.json" ]; then  # the 14k index: built here, once
    echo "$(date -u +%FT%TZ) building the shared corpus's index (log: var/logs/index-shared.log)"
    .venv/bin/eor index --corpus ../shared/data/corpus.jsonl --index shared --json >>var/logs/index-shared.log 2>&1
  fi
  # --split-by question: the shipped voter's own fit split, which its cascade eval keeps whatever is asked; the
  # singles then read the same 100 questions (grouped by passage they were another 100: session 45)
  common=(--questions "$questions" --dataset nq-open-oracle --split-by question --limit "$n" --index "$index"
          --no-progress --json)
  [ -f "$out/singles/questions.jsonl" ] || { echo "$(date -u +%FT%TZ) $index: SE@1~1.5B and Wiki@10~1.5B on $n NQ"
    .venv/bin/eor eval "${common[@]}" --config bench/configs/scale-singles.yaml --equal-weights --reads pool \
      --out-dir "$out/singles" >"$out/singles.json"; }
  [ -f "$out/cascade/questions.jsonl" ] || { echo "$(date -u +%FT%TZ) $index: the shipped cascade on $n NQ"
    .venv/bin/eor eval "${common[@]}" --reads cascade --out-dir "$out/cascade" >"$out/cascade.json"; }
done
first=var/bench/scale-quality/${indexes[0]}
for index in "${indexes[@]:1}"; do  # the same questions: each system's figures at both sizes, paired
  out=var/bench/scale-quality/$index
  .venv/bin/python -m bench.paired_evals "$first/singles/questions.jsonl" "$out/singles/questions.jsonl" \
    --system 'SE@1~1.5B' --system 'Wiki@10~1.5B' --out "$out/paired-singles-with-${indexes[0]}.json" >/dev/null
  .venv/bin/python -m bench.paired_evals "$first/cascade/questions.jsonl" "$out/cascade/questions.jsonl" \
    --system EoR --out "$out/paired-cascade-with-${indexes[0]}.json" >/dev/null
done
echo "$(date -u +%FT%TZ) done"
