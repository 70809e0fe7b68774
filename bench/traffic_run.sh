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
# 4 `eor serve --config bench/configs/traffic-load-aware.yaml`: the cascade at 1.5x capacity
# 5 the bounded wait (max_wait_s 20), fixed depth: 2x, then 1.5x (rows 1462 on, never asked before); then
# with depth that follows the load (under_load_asks 2: every slot taken), 1.5x on the same questions. Each
# service warmed by 4 Asks first. (Session 41 ran the first two with `under_load_waiting: 1`, a rule that
# never fired with the wait bounded: fixed depth, as here.)
if [ ! -f "$out/wait-twice/load-curve.json" ] || [ ! -f "$out/wait-15x/load-curve.json" ]; then
  serve bench/configs/traffic-wait.yaml
  c=$(capacity)
  $py -m bench.load_curve capacity --server $server -n 4 -c 2 --split fit --offset 1415 --out "$out/wait-warm"
  [ -f "$out/wait-twice/load-curve.json" ] || { step "2x capacity, wait bound, fixed depth"
    $py -m bench.load_curve curve --server $server --capacity "$c" --multiples 2 --seconds 300 --grace 130 \
      --systems cascade --split fit --offset 1420 --out "$out/wait-twice"; }
  [ -f "$out/wait-15x/load-curve.json" ] || { step "1.5x capacity, wait bound, fixed depth"
    $py -m bench.load_curve curve --server $server --capacity "$c" --multiples 1.5 --seconds 300 --grace 130 \
      --systems cascade --split fit --offset 1462 --out "$out/wait-15x"; }
  unserve
fi
if [ ! -f "$out/wait-load-aware-15x/load-curve.json" ]; then
  serve bench/configs/traffic-load-aware.yaml
  c=$(capacity)
  $py -m bench.load_curve capacity --server $server -n 4 -c 2 --split fit --offset 1415 --out "$out/wait-warm-load-aware"
  step "1.5x capacity, wait bound, load-aware depth, the same questions"
  $py -m bench.load_curve curve --server $server --capacity "$c" --multiples 1.5 --seconds 300 --grace 130 \
    --systems cascade --split fit --offset 1462 --out "$out/wait-load-aware-15x"
  unserve
fi
step "done: $out"
