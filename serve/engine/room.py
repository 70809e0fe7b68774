"""Room for one more reader engine on this machine, and one such start at a time.

The service's Reader starts a compiled engine beside the eager one that answers (the first
start on a CPU kind, serve/engine/vllm_engine.py: `service_stages`): for a while it holds two
engines of one reader. With two readers (the cascade) both would upgrade at once: four engines,
~24 GiB for the 0.5B and the 1.5B, more than a 24 GiB machine has. So an upgrade waits for any
other on this machine (a lock file beside the compile cache) and starts only where the memory
it needs is available; else the eager engine goes on answering, and the log says why. Engines
that start outside an upgrade (a replica's first engine, a restart) hold no lock: an upgrade
that checks while another reader's first engine is still allocating can overestimate the room.
"""
from __future__ import annotations

import contextlib
import fcntl
from pathlib import Path
from typing import Iterator

from serve.engine.compile_cache import cache_root
from serve.engine.vllm_engine import VLLMConfig, resolve_dtype

# Beyond its weights and KV cache, an engine's worker runtime and its EngineCore process: measured
# 4.5 GiB worker + 0.9 GiB core for the 0.5B in bf16 (1.0 GiB weights, 2 GiB KV cache), 2026-11-26.
ENGINE_OVERHEAD_GIB = 2.4
MARGIN_GIB = 1.0  # what the rest of the process tree may still grow by meanwhile


def engine_gib(config: VLLMConfig) -> float | None:
    """The memory one engine of these settings holds: weights in its dtype (the converted model
    is stored in fp32), its KV cache and the runtime; None when its model is not found here."""
    from serve.engine.models import resolve_model

    try:
        path = resolve_model(config.model)
    except FileNotFoundError:
        return None
    stored = sum(f.stat().st_size for f in path.glob("*.safetensors"))
    share = {"float32": 1.0, "float16": 0.5, "bfloat16": 0.5}.get(resolve_dtype(config)[1], 1.0)
    return stored * share / 2**30 + config.cpu_kv_cache_gib + ENGINE_OVERHEAD_GIB


def available_gib() -> float:
    """Memory available now: the machine's, or less where a cgroup (a container, a KubeRay pod)
    limits this process (cgroup v2: memory.max - memory.current)."""
    import psutil

    free = psutil.virtual_memory().available
    try:
        limit = Path("/sys/fs/cgroup/memory.max").read_text().strip()
        if limit != "max":
            free = min(free, int(limit) - int(Path("/sys/fs/cgroup/memory.current").read_text()))
    except (OSError, ValueError):
        pass
    return free / 2**30


def room_for(config: VLLMConfig) -> tuple[bool, str]:
    """(whether one more engine of `config` fits in the memory available now, why not)."""
    need = engine_gib(config)
    free = available_gib()
    if need is None or free >= need + MARGIN_GIB:
        return True, ""
    return False, f"{free:.1f} GiB available, the engine needs ~{need:.1f} GiB (+{MARGIN_GIB:g} GiB margin)"


@contextlib.contextmanager
def one_start_at_a_time() -> Iterator[None]:
    """Hold the machine's engine-upgrade lock (a file lock: every Reader replica on this machine,
    whatever process it runs in)."""
    path = cache_root() / "engine-upgrade.lock"
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)
