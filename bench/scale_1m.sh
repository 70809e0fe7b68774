#!/usr/bin/env bash
# Issue 54 at 1M, every step in order, each skipped once its report exists (run it again to go on):
#   bench/scale_1m.sh [N]      (N: the quality eval's NQ questions, default 100)
# 1. the corpus (bench.scale_corpus, seeded) and its build (`eor index`: resumes from its last whole shard;
#    /usr/bin/time's log is the last run's, the one that ends with the index step; build-1m-tree.json the same run's
#    processes' PSS summed at its peak); 2. bench.scale_index
#    (recall@10, search p50/p99 with the query's encoding, peak RSS); 3. the service's PSS by role, both slots
#    on the 0.5B, then the shipped settings (bench/memory_run.sh: fit rows 1572-1579, never asked before);
#    4. answer quality at 14k and at 1M (bench/scale_quality.sh). Steps 3-4 start services and readers: run
#    nothing else beside them (the shipped settings take ~22 GiB of 24 on a CPU without bf16).
set -euo pipefail
cd "$(dirname "$0")/.."
n=${1:-100}
index=scale-1m; out=var/bench/scale; home=${EOR_HOME:-var}  # eor keeps its indexes under $EOR_HOME
corpus=var/corpora/$index.jsonl.gz
mkdir -p "$out" var/logs var/corpora
say() { echo "$(date -u +%FT%TZ) $*"; }
[ -f "$corpus" ] || { say "the 1M corpus"; .venv/bin/python -m bench.scale_corpus --size 1000000 --out "$corpus"; }
[ -f "$home/indexes/$index/index.json" ] || { say "building $index (log: var/logs/index-1m.log)"
  # one build at a time: a second would write the same shards and the same time log
  flock -n var/logs/index-1m.lock /usr/bin/time -v -o "$out/build-1m-final.time" .venv/bin/eor index \
    --corpus "$corpus" --index "$index" --json >>var/logs/index-1m.log 2>&1 &
  build=$!  # its processes' summed PSS at its peak (the indexer's JVM beside it): time's log has the largest one's
  .venv/bin/python -m bench.service_memory --pid "$build" --watch 10 --out "$out/build-1m-tree.json" >/dev/null 2>&1 &
  wait "$build" || { say "the build stopped or another holds var/logs/index-1m.lock: var/logs/index-1m.log"; exit 1; }; }
[ -f "$out/$index.json" ] || { say "search and recall at 1M"
  [ -s "$out/build-1m-final.time" ] || say "no build time log ($out/build-1m-final.time): no peak RSS in the report"
  .venv/bin/python -m bench.scale_index --index "$index" --time-log "$out/build-1m-final.time" --out "$out/$index.json"; }
[ -f "$out/memory-$index.json" ] || { say "PSS by role, both slots on the 0.5B"; bench/memory_run.sh "$index" 1572; }
[ -f "$out/memory-$index-shipped.json" ] || { say "PSS by role, the shipped settings"
  bench/memory_run.sh "$index" 1576 - "$out/memory-$index-shipped.json"; }
bench/scale_quality.sh "$n" shared "$index"
say "issue 54 at 1M: every step done"
