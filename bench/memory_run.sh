#!/usr/bin/env bash
# Issue 54: what a running `eor serve` holds in memory over an index, by role (bench/service_memory.py):
#   bench/memory_run.sh INDEX OFFSET [CONFIG] [OUT] [SPLIT]
# Starts `eor serve --index INDEX --config CONFIG` (default bench/configs/memory-lean.yaml; - for none: the shipped
# settings), asks 4 questions
# by 2 clients (SPLIT's rows OFFSET.., default the fit split: never asked by a fit or a benchmark, say which; the
# fit split's 1,582 are all asked by session 47; of the eval split's, 1,049-1,054 are left), measures the PSS of
# every process under the service, and stops it. Report: OUT (default var/bench/scale/memory-INDEX.json).
set -euo pipefail
cd "$(dirname "$0")/.."
index=$1; offset=$2; config=${3:-bench/configs/memory-lean.yaml}; out=${4:-var/bench/scale/memory-$index.json}
split=${5:-fit}
log=var/logs/memory-$index.log
mkdir -p var/logs "$(dirname "$out")"
with_config=(--config "$config"); [ "$config" = - ] && with_config=()  # "-": the shipped settings
.venv/bin/eor serve "${with_config[@]}" --index "$index" --no-http >"$log" 2>&1 &
pid=$!
stop() {  # this service only: its own Ray goes with it; `ray stop` only if it did not end in 120 s
  kill -TERM "$pid" 2>/dev/null || true
  for _ in $(seq 120); do kill -0 "$pid" 2>/dev/null || return 0; sleep 1; done
  kill -KILL "$pid" 2>/dev/null || true
  .venv/bin/ray stop --force >/dev/null 2>&1 || true
}
trap stop EXIT
ready=0
for _ in $(seq 900); do
  grep -q "^eor gRPC:" "$log" 2>/dev/null && { ready=1; break; }
  kill -0 "$pid" 2>/dev/null || { tail -5 "$log"; exit 1; }
  sleep 1
done
[ "$ready" = 1 ] || { echo "eor serve not ready after 900 s: $log"; exit 1; }
.venv/bin/python -m bench.load_curve capacity --server 127.0.0.1:50051 -n 4 -c 2 --split "$split" --offset "$offset" \
  --out "$(dirname "$out")/$(basename "$out" .json | sed 's/^memory-/memory-asks-/')"  # memory-asks-INDEX[-...]
.venv/bin/python -m bench.service_memory --pid $pid --out "$out"
