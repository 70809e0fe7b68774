"""vLLM's arguments for a reader's settings (serve/engine/vllm_engine.py: `engine_args`); no
engine starts."""
from __future__ import annotations

from serve.engine.compile_cache import WORKER_EXTENSION
from serve.engine.vllm_engine import VLLMConfig, engine_args


def test_only_a_compiled_cpu_engine_loads_the_compile_cache():
    def extension(config, on_cpu=True):
        return engine_args(config, "/m", "bfloat16", on_cpu).get("worker_extension_cls")

    assert extension(VLLMConfig(enforce_eager=False)) == WORKER_EXTENSION
    assert extension(VLLMConfig()) == WORKER_EXTENSION  # None: compiled (fit, eval)
    assert extension(VLLMConfig(enforce_eager=True)) is None
    assert extension(VLLMConfig(enforce_eager=False, compile_cache=False)) is None
    assert extension(VLLMConfig(enforce_eager=False), on_cpu=False) is None


def test_engine_args_carry_the_settings():
    args = engine_args(VLLMConfig(enforce_eager=True, max_model_len=2048, seed=3), "/m", "float32", True)
    assert args == dict(model="/m", dtype="float32", max_model_len=2048, gpu_memory_utilization=0.2,
                        enable_prefix_caching=True, seed=3, enforce_eager=True)
