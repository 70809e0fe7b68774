"""Imported by vLLM in its worker process, before the model is built there, because a compiled
CPU engine names `CompileCacheLoader` as its `worker_extension_cls` (vllm/v1/worker/worker_base.py,
`init_worker`): the import installs serve/engine/compile_cache.py's fix in that process, where
vLLM loads the compiled graph. The class itself adds nothing to the worker."""
from __future__ import annotations

from serve.engine.compile_cache import install

install()


class CompileCacheLoader:
    """Empty on purpose: vLLM makes it a base of its worker class, and a name it adds could
    clash with the worker's."""
