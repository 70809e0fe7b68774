"""Which engines a service runs for a reader's settings, and vLLM's arguments for each
(serve/engine/vllm_engine.py: `service_stages`, `engine_args`); no engine starts."""
from __future__ import annotations

import pytest

from serve.engine.compile_cache import WORKER_EXTENSION
from serve.engine.vllm_engine import (EngineStages, VLLMConfig, compile_factors, cpu_engine_env, engine_args,
                                      service_stages)


def test_by_the_job_a_cpu_service_runs_eager_then_compiled(eor_home):  # no compiled start recorded
    config = VLLMConfig(device="cpu")
    assert service_stages(config) == EngineStages(VLLMConfig(device="cpu", enforce_eager=True),
                                                  VLLMConfig(device="cpu", enforce_eager=False))


def test_a_set_enforce_eager_or_a_gpu_runs_one_engine():
    for config in (VLLMConfig(device="cpu", enforce_eager=True), VLLMConfig(device="cpu", enforce_eager=False),
                   VLLMConfig(device="cuda")):
        assert service_stages(config) == EngineStages(config)


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
                        enable_prefix_caching=True, seed=3, enforce_eager=True, block_size=32)


def test_the_kv_block_is_32_tokens_on_cpu_and_vllms_own_on_gpu():
    assert engine_args(VLLMConfig(), "/m", "bfloat16", True)["block_size"] == 32
    assert "block_size" not in engine_args(VLLMConfig(), "/m", "bfloat16", False)
    assert engine_args(VLLMConfig(kv_block_tokens=64), "/m", "bfloat16", False)["block_size"] == 64


def test_once_a_compiled_engine_started_its_cache_is_warm_and_it_starts_alone(eor_home, monkeypatch):
    from dataclasses import replace

    monkeypatch.delenv("VLLM_CPU_OMP_THREADS_BIND", raising=False)  # a real engine started earlier sets it

    from serve.engine.compile_cache import compiled_before, mark_compiled, start_key
    from serve.engine.vllm_engine import quickest_start

    config = VLLMConfig(device="cpu", dtype="bfloat16")
    compiled = replace(config, enforce_eager=False)
    assert quickest_start(config) == replace(config, enforce_eager=True)  # nothing compiled yet: eager
    key = start_key("AsyncVLLMEngine", compile_factors(compiled, "bfloat16", True))
    assert start_key("VLLMEngine", compile_factors(compiled, "bfloat16", True)) != key  # other warm-up
    assert start_key("AsyncVLLMEngine", compile_factors(replace(compiled, cpu_threads="0"), "bfloat16", True)) != key
    mark_compiled(key, 30.4)
    assert compiled_before(key) and service_stages(config) == EngineStages(compiled)  # the service: compiled alone
    assert quickest_start(config) == replace(config, enforce_eager=True)  # the offline engine's cache is still cold
    other = VLLMConfig(device="cpu", dtype="bfloat16", max_model_len=2048)  # another graph: cold again
    assert service_stages(other).then is not None
    assert service_stages(replace(config, compile_cache=False)).then is not None  # without the fix nothing loads
    assert service_stages(replace(config, enforce_eager=True)) == EngineStages(replace(config, enforce_eager=True))


def test_eor_ask_picks_each_readers_quickest_engine_on_its_own(eor_home):
    from dataclasses import replace

    from serve.cli.ask import _quickest_engines
    from serve.config import config_from_dict
    from serve.config_readers import reader_config
    from serve.engine.compile_cache import mark_compiled, start_key

    config = config_from_dict({"reader": {"device": "cpu", "dtype": "bfloat16"},
                               "readers": {"1.5B": {"model": "qwen2.5-coder-1.5b", "cpu_kv_cache_gib": 1}},
                               "pool": {"specs": ["SE@1", "SE@1~1.5B"]}})
    small = replace(config.reader, enforce_eager=False)
    mark_compiled(start_key("VLLMEngine", compile_factors(small, "bfloat16", True)), 30.0)  # 0.5B warm only
    fast = _quickest_engines(config)
    assert fast.reader.enforce_eager is False  # the 0.5B: compiled, its cache is warm
    strong = reader_config(fast, "1.5B")
    assert strong.enforce_eager is True and strong.cpu_kv_cache_gib == 1 and strong.model == "qwen2.5-coder-1.5b"


def test_a_cpu_engine_gives_a_step_an_hour_unless_its_caller_set_the_timeout(eor_home, monkeypatch):
    """vLLM kills an engine whose step passes VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS (300 s): a
    1.5B fp32 batch beside a second engine did, and the fit grow of 2026-11-28 died of it."""
    from serve.engine import vllm_engine

    assert cpu_engine_env(VLLMConfig())["VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS"] == "3600"
    assert cpu_engine_env(VLLMConfig(cpu_step_timeout_s=900))["VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS"] == "900"
    monkeypatch.setattr(vllm_engine, "_STEP_TIMEOUT_FROM_CALLER", True)
    assert "VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS" not in cpu_engine_env(VLLMConfig())
    for bad in (0, -5, 3600.5, True, "3600"):  # vLLM reads it with int(): a config's float or bool fails here, in our words
        with pytest.raises(ValueError, match="cpu_step_timeout_s"):
            VLLMConfig(cpu_step_timeout_s=bad)
