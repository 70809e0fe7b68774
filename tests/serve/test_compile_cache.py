"""The compile cache of CPU engines (serve/engine/compile_cache.py): where it lives, and the fix
that lets vLLM 0.32's loader take a stock inductor artifact."""
from __future__ import annotations

import sys
from types import SimpleNamespace

import pytest

from serve.engine import compile_cache


def _bundled():
    """What torch deserializes a stock inductor AOT artifact's compiled part into: a wrapper that
    passes attribute lookups on to a plain function (what vLLM 0.32's loader trips on)."""
    from torch._dynamo.aot_compile_types import BundledAOTAutogradSerializableCallable

    def compiled(*args):
        return "ran"

    compiled.serialize = lambda: b""
    return BundledAOTAutogradSerializableCallable(compiled)


def vllm_finishes_loading(loaded):
    """As vLLM 0.32 finishes a load (vllm/compilation/decorators.py, `_try_load_aot_compiled_fn`)."""
    return loaded._artifacts.compiled_fn.finalize_loading(object())


def test_a_stock_artifact_gets_a_finalize_loading_that_does_nothing():
    bundled = _bundled()
    loaded = SimpleNamespace(_artifacts=SimpleNamespace(compiled_fn=bundled))
    with pytest.raises(AttributeError, match="'function' object has no attribute 'finalize_loading'"):
        bundled.finalize_loading  # the failure the Reader's log shows at every compiled start
    assert vllm_finishes_loading(compile_cache.finalizable(loaded)) is None
    assert bundled() == "ran"


def test_an_artifact_that_has_finalize_loading_keeps_it():
    calls = []
    own = SimpleNamespace(finalize_loading=calls.append)
    vllm_finishes_loading(compile_cache.finalizable(SimpleNamespace(_artifacts=SimpleNamespace(compiled_fn=own))))
    assert len(calls) == 1


def test_install_wraps_torchs_loader_once(monkeypatch):
    import torch.compiler

    bundled = _bundled()
    loads = []

    def load(file, *, f_globals=None, external_data=None):
        loads.append(file)
        return SimpleNamespace(_artifacts=SimpleNamespace(compiled_fn=bundled))

    monkeypatch.setattr(torch.compiler, "load_compiled_function", load)
    compile_cache.install()
    compile_cache.install()
    loaded = torch.compiler.load_compiled_function("f", f_globals={})
    assert vllm_finishes_loading(loaded) is None and loads == ["f"]
    assert torch.compiler.load_compiled_function.__closure__[0].cell_contents is load  # wrapped once


def test_the_cache_is_kept_per_cpu_kind_under_eor_home_or_the_callers_root(monkeypatch, tmp_path):
    monkeypatch.setenv("EOR_HOME", str(tmp_path))
    monkeypatch.setattr(compile_cache, "_CALLER_ROOT", "")
    monkeypatch.delenv("ATEN_CPU_CAPABILITY", raising=False)
    root = compile_cache.cache_root()
    assert root.parent == tmp_path / "cache" / "vllm" and root.name.startswith("cpu-native-")
    monkeypatch.setenv("ATEN_CPU_CAPABILITY", "avx2")  # the emulated class never reuses the native code
    assert compile_cache.cache_root().name.startswith("cpu-avx2-")
    monkeypatch.setattr(compile_cache, "_CALLER_ROOT", str(tmp_path / "mine"))
    assert compile_cache.cache_root().parent == tmp_path / "mine"
    monkeypatch.setattr(compile_cache, "_CALLER_ROOT", str(compile_cache.cache_root()))  # a child process
    assert compile_cache.cache_root().parent == tmp_path / "mine"


def test_vllms_worker_imports_the_fix():
    import importlib

    import torch.compiler

    original = torch.compiler.load_compiled_function
    sys.modules.pop(compile_cache.WORKER_EXTENSION.rpartition(".")[0], None)  # import it afresh, as a worker does
    try:
        module = importlib.import_module(compile_cache.WORKER_EXTENSION.rpartition(".")[0])
        assert isinstance(getattr(module, compile_cache.WORKER_EXTENSION.rpartition(".")[2]), type)
        assert getattr(torch.compiler.load_compiled_function, "finalizable", False)
        # vLLM makes the class a base of its worker: it must add no name that could clash
        assert not [a for a in vars(module.CompileCacheLoader) if not a.startswith("__")]
    finally:
        torch.compiler.load_compiled_function = original
