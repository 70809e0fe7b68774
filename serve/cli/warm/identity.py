"""Which warm reader may answer an ask: the one holding the pool this ask would build, from the
same code. Its key digests what the pool is made of: the resolved config (reader, index,
pool, cache, voter section; not how long it stays warm), the folder relative paths resolve
from, $EOR_HOME, the interpreter, the environment the engine reads, and the modification times
of the code, the index and the prepared models, so an ask after `eor index`, `eor models
prepare` or a code change gets a fresh reader, never an answer from the old one."""
from __future__ import annotations

import hashlib
import json
import os
import sys
from dataclasses import replace
from pathlib import Path

from serve.paths import eor_home, indexes_dir, models_dir

# the environment the reader, the encoder and torch read (EOR_CPU_BF16, VLLM_*, ATEN_CPU_CAPABILITY, ...)
_ENV_PREFIXES = ("EOR_", "VLLM_", "ATEN_", "OMP_", "MKL_", "HF_", "TRANSFORMERS_", "TORCH", "CUDA_", "PYTHON")
_ENV_IGNORED = {"EOR_KEEP_WARM", "EOR_SERVE_TOKEN"}  # not what the pool is made of (and no secret in a digest)
_CODE = ("serve", "retrievers", "voter", "protos")


def code_root() -> Path:
    """The folder holding the `serve` package this process runs (a checkout or site-packages)."""
    import serve

    return Path(serve.__file__).resolve().parents[1]


def reader_key(config) -> str:
    from serve.config import AskConfig

    root = code_root()
    parts = {
        "config": repr(replace(config, ask=AskConfig())),
        "cwd": os.getcwd(),
        "home": str(eor_home().resolve()),
        "python": sys.executable,
        "env": {k: v for k, v in sorted(os.environ.items()) if k.startswith(_ENV_PREFIXES) and k not in _ENV_IGNORED},
        "code": _stamp([root / p for p in _CODE], "*.py"),
        "index": _stamp([indexes_dir() / config.index.name]),
        "models": _stamp([models_dir()]),
    }
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:16]


def about(config) -> dict:
    """What `eor status` says the reader holds: the default reader's model and every reader's
    its pool reads with (each engine starts on the first ask that needs it)."""
    from serve.config_readers import reader_models

    return {"model": config.reader.model, "readers": sorted(set(reader_models(config).values())),
            "index": config.index.name, "cwd": os.getcwd()}


def _stamp(roots: list[Path], pattern: str = "*") -> list:
    """(count, newest modification, total size) of the files under roots."""
    count = newest = size = 0
    for root in roots:
        for path in root.rglob(pattern) if root.is_dir() else ():
            try:
                st = path.stat()
            except OSError:
                continue
            count, newest, size = count + 1, max(newest, st.st_mtime_ns), size + st.st_size
    return [count, newest, size]
