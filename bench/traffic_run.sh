#!/usr/bin/env bash
# Issue 57's acceptance measurements against a real `eor serve`, one phase after another, each phase
# skipped when its report exists (run it again to resume):
#   bench/traffic_run.sh [OUT]          (default var/bench/traffic)
# 1 the readers' speeds (`eor models speed`: the physical limit the curve compares with)
# 2 `eor serve --config bench/configs/traffic.yaml`, then at once 24 Asks by 4 clients (a fresh
#   service's first minutes), the capacity (16 Asks by 4 clients), the open-loop curve for the cascade
#   (0.25, 1, 1.5, 2, 3 x capacity, 300 s each) and for Wiki@10 through the 0.5B (1 and 3 x)
# 3 a fresh `eor serve` again: 2x capacity and 1.5x (fixed depth) for 300 s each, replies awaited past the
#   Asks' deadline (--grace 130), then the 1.5B's engine SIGKILLed under 4 clients
# 4 `eor serve --config bench/configs/traffic-load-aware-in-flight.yaml`: the cascade at 1.5x capacity
# 5 the bounded wait, fixed then load-aware depth (below)
# 6 the shipped settings: a fresh service's first 5 minutes against its next 5; the kill again (below)
# 7 the kill once more, with admission's service times started afresh when Asks turn degraded or whole
# 8 Wiki@10's curve at 0.25, 1.5 and 2x (eval rows 960 on)
# Questions: the fit split (by question, seed 0) from row 1000 on: never fitted on, never asked by a
# benchmark (the eval split's first 700 were scored by evals; the fit split's first 400 fitted on).
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-var/bench/traffic}
mkdir -p "$out"
py=.venv/bin/python
server=127.0.0.1:50051
step() { echo "$(date -u +%FT%TZ) $*"; }

serve() {  # $1: config; waits until the gRPC front answers
  .venv/bin/eor serve --config "$1" --no-http >"$out/serve-$(basename "$1" .yaml).log" 2>&1 &
  echo $! >"$out/serve.pid"
  for _ in $(seq 900); do
    grep -q "^eor gRPC:" "$out/serve-$(basename "$1" .yaml).log" 2>/dev/null && { step "serving $1"; return 0; }
    kill -0 "$(cat "$out/serve.pid")" 2>/dev/null || { step "eor serve exited"; tail -5 "$out/serve-$(basename "$1" .yaml).log"; exit 1; }
    sleep 1
  done
  step "eor serve not ready after 900 s"; exit 1
}
unserve() {
  [ -f "$out/serve.pid" ] && kill -TERM "$(cat "$out/serve.pid")" 2>/dev/null || true
  for _ in $(seq 120); do kill -0 "$(cat "$out/serve.pid")" 2>/dev/null || break; sleep 1; done
  .venv/bin/ray stop --force >/dev/null 2>&1 || true
}
trap unserve EXIT
capacity() { $py -c "import json; print(json.load(open('$out/capacity/load-capacity.json'))['capacity_per_s'])"; }
past() {  # the row after a curve that began at row $1 and offered $2 x capacity for 300 s (with room for Poisson's spread)
  $py -c "import math; print($1 + math.ceil(1.3 * $2 * 300 * $(capacity)) + 5)"; }
at_rate() {  # $1 x capacity (comma-separated: one 300 s window each) from row $2 into $out/$3: the cascade, replies awaited past the deadline
  $py -m bench.load_curve curve --server $server --capacity "$(capacity)" --multiples "$1" --seconds 300 --grace 130 \
    --systems cascade --split fit --offset "$2" --out "$out/$3"; }
kill_15b() {  # the 1.5B's engine SIGKILLed under 4 clients, 60 s in, into $out/$1
  step "the 1.5B's engine SIGKILLed under 4 clients"
  $py -m bench.load_test reader-fault --server $server --kill-reader Reader_1.5B -c 4 --fault-n 24 \
    --distinct 12 --kill-after 60 --out "$out/$1"; }
warm() {  # a fresh service's 4 warm-up Asks by 2 clients (fit rows 1415-1418) into $out/$1
  $py -m bench.load_curve capacity --server $server -n 4 -c 2 --split fit --offset 1415 --out "$out/$1"; }

[ -f "$out/speed.done" ] || { step "reader speeds"; .venv/bin/eor models speed && touch "$out/speed.done"; }

if [ ! -f "$out/fault.json" ] || [ ! -f "$out/curve-wiki/load-curve.json" ]; then
  serve bench/configs/traffic.yaml
  [ -f "$out/fresh/load-capacity.json" ] || { step "a fresh service: 24 Asks by 4 clients"
    $py -m bench.load_curve capacity --server $server -n 24 -c 4 --split fit --offset 1000 --out "$out/fresh"; }
  [ -f "$out/capacity/load-capacity.json" ] || { step "capacity: 16 Asks by 4 clients"
    $py -m bench.load_curve capacity --server $server -n 16 -c 4 --split fit --offset 1064 --out "$out/capacity"; }
  c=$(capacity)
  [ -f "$out/curve-cascade/load-curve.json" ] || { step "the cascade's curve at capacity $c"
    $py -m bench.load_curve curve --server $server --capacity "$c" --multiples 0.25,1,1.5,2,3 --seconds 300 \
      --systems cascade --split fit --offset 1080 --out "$out/curve-cascade"; }
  [ -f "$out/curve-wiki/load-curve.json" ] || { step "Wiki@10's curve"
    $py -m bench.load_curve curve --server $server --capacity "$c" --multiples 1,3 --seconds 300 \
      --systems Wiki@10 --split fit --offset "$(past 1080 7.75)" --out "$out/curve-wiki"; }
  unserve
fi
if [ ! -f "$out/fault.json" ]; then
  serve bench/configs/traffic.yaml
  o=$(past "$(past 1080 7.75)" 4)
  [ -f "$out/twice/load-curve.json" ] || { step "2x capacity for 300 s"
    at_rate 2 "$o" twice; }
  [ -f "$out/fixed-15x/load-curve.json" ] || { step "1.5x capacity, fixed depth"
    at_rate 1.5 "$(past "$o" 2)" fixed-15x; }
  kill_15b fault.json
  unserve
fi
if [ ! -f "$out/load-aware/load-curve.json" ]; then
  serve bench/configs/traffic-load-aware-in-flight.yaml
  step "load-aware depth at 1.5x capacity ($(capacity))"
  at_rate 1.5 "$(past "$(past "$(past "$(past 1080 7.75)" 4)" 2)" 1.5)" load-aware
  unserve
fi
# 5 the bounded wait (max_wait_s 20), fixed depth: 2x, then 1.5x (rows 1462 on, never asked before); then
# with depth that follows the load (on overflow, as shipped), 1.5x on the same questions. Each service
# warmed by 4 Asks first. (Session 41 ran the first two with a rule on waiting Asks, which never fired with
# the wait bounded: fixed depth, as here; and a rule on every slot taken: wait-load-aware-15x.)
# Phases 2-4 ran in session 40, before max_wait_s and the load rule on overflow (their configs keep both off).
# Phase 5's rows start past those phase 4 asked (rows 1387-1403 at capacity 0.054: 17 Asks). The "every slot
# taken" rule of the first try is at commit abc5e92 (service.under_load_asks: 2).
if [ ! -f "$out/wait-twice/load-curve.json" ] || [ ! -f "$out/wait-15x/load-curve.json" ]; then
  serve bench/configs/traffic-wait.yaml
  warm wait-warm
  [ -f "$out/wait-twice/load-curve.json" ] || { step "2x capacity, wait bound, fixed depth"
    at_rate 2 1420 wait-twice; }
  [ -f "$out/wait-15x/load-curve.json" ] || { step "1.5x capacity, wait bound, fixed depth"
    at_rate 1.5 1462 wait-15x; }
  unserve
fi
if [ ! -f "$out/wait-overflow-15x/load-curve.json" ]; then
  serve bench/configs/traffic-load-aware.yaml
  warm wait-warm-overflow
  step "1.5x capacity, wait bound, load-aware depth (on overflow), the same questions"
  at_rate 1.5 1462 wait-overflow-15x
  unserve
fi
# 6 acceptance 4 with the shipped service settings (session 42): a fresh `eor serve`, the cascade at 1x
# capacity from the moment it answers, 300 s (its first 5 minutes), then 300 s more (warm), fit rows 1500 on
# (never asked); then the 1.5B's engine SIGKILLed under 4 clients on the same service.
if [ ! -f "$out/fresh-fault.json" ]; then
  serve bench/configs/traffic-fresh.yaml
  [ -f "$out/fresh-then-warm/load-curve.json" ] || { step "a fresh service's first 5 minutes, then 5 more, at 1x"
    at_rate 1,1 1500 fresh-then-warm; }
  kill_15b fresh-fault.json
  unserve
fi
# 7 the kill again on a fresh service, after Admission's service times started afresh on a change between
# degraded and whole Asks (session 42: in phase 6, an Ask let in 206 s after the kill missed its deadline)
if [ ! -f "$out/fault-afresh.json" ]; then
  serve bench/configs/traffic-fresh.yaml
  kill_15b fault-afresh.json
  unserve
fi
# 8 Wiki@10's curve from 0.25x (session 40 ran it at 1x and 3x only): 0.25, 1.5 and 2x of the same capacity,
# eval-split rows 960 on (rows 1000-1040 were asked once before, by issue 55's swap; no cache carries over)
if [ ! -f "$out/curve-wiki-more/load-curve.json" ]; then
  serve bench/configs/traffic.yaml
  step "Wiki@10 at 0.25, 1.5 and 2x capacity ($(capacity))"
  $py -m bench.load_curve curve --server $server --capacity "$(capacity)" --multiples 0.25,1.5,2 --seconds 300 \
    --grace 130 --systems Wiki@10 --split eval --offset 960 --out "$out/curve-wiki-more"
  unserve
fi
step "done: $out"
