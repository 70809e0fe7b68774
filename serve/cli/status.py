"""`eor status`: what eor keeps running on this machine (the warm reader `eor ask` left, a local
`eor serve`); `eor stop`: end the warm reader."""
from __future__ import annotations

import json
import os
import signal
import sys
import time

from serve.cli.warm.client import format_duration, request
from serve.cli.warm.place import WarmPlace

STOP_S = 60.0  # for the reader to stop its engine and exit


def warm_status(place: WarmPlace) -> dict:
    """{"running": ...} and the reader's own account, or what a killed one left ("removed")."""
    reply = request(place, "status")
    if reply is not None and "pid" in reply:
        return {"running": True, **reply}
    pid = place.holder()
    if pid is not None:  # alive, not listening: ending, or finishing its questions before it ends
        return {"running": True, "pid": pid, "ending": True}
    removed = place.clear_stale()
    return {"running": False, **({"removed": removed} if removed else {})}


def cmd_status(args) -> int:
    from serve.cli.ask import serving_address
    from serve.cli.common import _config

    config = _config(args)
    warm = warm_status(WarmPlace.of_home())
    address = serving_address(config)
    doc = {"warm_reader": warm, "serve": {"address": f"{config.service.host}:{config.service.port}",
                                          "serving": address is not None, **(engines(address) if address else {})}}
    if args.json:
        print(json.dumps(doc, indent=2))
        return 0
    print(describe(warm))
    print(describe_serve(doc["serve"]))
    return 0


def engines(address: str) -> dict:
    """The running service's reader deployments and Generate's model, from its Health ({} when it
    does not answer in time)."""
    from protos.client import EorClient

    try:
        with EorClient(address, timeout_s=2.0) as client:
            h = client.health(timeout_s=2.0)
    except Exception:  # it stopped since it answered, or is busy: the status line says serving
        return {}
    return {"readers": [{"deployment": r.deployment, "model": r.model, "prompts": r.prompts} for r in h.readers],
            "generator_model": h.generator_model}


def describe_serve(svc: dict) -> str:
    if not svc["serving"]:
        return f"eor serve: none at {svc['address']}"
    readers = ", ".join(f"{r['deployment']} {r['model']} ({r['prompts']} prompts)" for r in svc.get("readers", ()))
    about = f"; readers: {readers}; Generate: {svc['generator_model']}" if readers else ""
    return f"eor serve: serving at {svc['address']}{about}"


def describe(warm: dict) -> str:
    if not warm["running"]:
        removed = f" (removed {warm['removed']})" if warm.get("removed") else ""
        return f"warm reader: none{removed}; the next `eor ask` starts one"
    if warm.get("ending"):
        return f"warm reader: pid {warm['pid']}, ending (finishing its questions, then stopping its engine)"
    about = warm.get("about", {})
    if warm.get("busy_s") is not None:
        state = f"answering for {warm['busy_s']:.0f} s" + (f", {warm['queued']} more queued" if warm["queued"] else "")
    else:
        state = f"idle, ends in {format_duration(round(warm['idle_left_s']))}"
    loaded = "" if warm.get("warm") else " (loading its pool)"
    readers = about.get("readers") or [about.get("model")]  # a reader from before `readers` names its one
    return (f"warm reader: pid {warm['pid']}, reader{'s' if len(readers) > 1 else ''} {', '.join(map(str, readers))}, "
            f"index {about.get('index')}{loaded}; "
            f"{state} (kept warm {format_duration(warm['keep_warm_s'])} after each ask); "
            f"{warm['answered']} asks answered since {time.strftime('%H:%M', time.localtime(warm['started']))}; "
            f"memory {_size(warm['memory_bytes'])} with its engine; `eor stop` ends it")


def _size(n: int) -> str:
    return f"{n / 2**30:.1f} GiB" if n >= 2**30 else f"{n / 2**20:.0f} MiB"


def cmd_stop(args) -> int:
    """End the warm reader (SIGTERM's path: it stops its engine and removes its files); wait for it."""
    place = WarmPlace.of_home()
    pid = place.holder()
    if pid is None:
        removed = place.clear_stale()
        print("no warm reader running" + (f" (removed {removed})" if removed else ""))
        return 0
    reply = request(place, "stop")
    if reply is None or reply.get("stopping") != pid:  # not listening (ending): the signal does the same
        try:
            os.kill(pid, signal.SIGTERM)  # the holder of its lock is the reader
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + STOP_S
    while place.holder() == pid:
        if time.monotonic() > deadline:
            print(f"eor: error: the warm reader (pid {pid}) did not stop in {STOP_S:.0f} s; `kill -9 {pid}` ends it",
                  file=sys.stderr)
            return 1
        time.sleep(0.05)
    print(f"stopped the warm reader (pid {pid})")
    return 0

