"""Room for one more reader engine (serve/engine/room.py): its memory from the converted model's
size, its dtype and KV cache; the check against what is available; one upgrade at a time."""
from __future__ import annotations

import threading
import time

import pytest

import serve.engine.models
import serve.engine.room as room
from serve.engine.vllm_engine import VLLMConfig


@pytest.fixture
def model_folder(tmp_path, monkeypatch):
    folder = tmp_path / "m"
    folder.mkdir()
    (folder / "model.safetensors").write_bytes(b"\0" * (2 * 2**20))  # 2 MiB "fp32" weights
    monkeypatch.setattr(serve.engine.models, "resolve_model", lambda name: folder)
    return folder


def test_an_engines_memory_is_its_weights_in_its_dtype_its_kv_cache_and_the_runtime(model_folder):
    fp32 = room.engine_gib(VLLMConfig(device="cpu", dtype="float32", cpu_kv_cache_gib=1))
    bf16 = room.engine_gib(VLLMConfig(device="cpu", dtype="bfloat16", cpu_kv_cache_gib=1))
    assert fp32 == pytest.approx(2 / 1024 + 1 + room.ENGINE_OVERHEAD_GIB)
    assert bf16 == pytest.approx(1 / 1024 + 1 + room.ENGINE_OVERHEAD_GIB)


def test_no_room_says_what_is_available_and_what_it_needs(model_folder, monkeypatch):
    config = VLLMConfig(device="cpu", dtype="bfloat16", cpu_kv_cache_gib=2)
    monkeypatch.setattr(room, "available_gib", lambda: 3.0)
    fits, why = room.room_for(config)
    assert not fits and why.startswith("3.0 GiB available, the engine needs ~4.4 GiB")
    monkeypatch.setattr(room, "available_gib", lambda: 6.0)
    assert room.room_for(config) == (True, "")


def test_an_unknown_model_never_blocks(monkeypatch, eor_home):
    monkeypatch.setattr(room, "available_gib", lambda: 0.0)
    assert room.room_for(VLLMConfig(model="/nowhere")) == (True, "")


def test_one_upgrade_at_a_time_on_a_machine(eor_home):
    order: list[str] = []
    a_holds = threading.Event()

    def upgrade(name: str) -> None:
        with room.one_start_at_a_time():
            order.append(f"{name} in")
            a_holds.set()
            time.sleep(0.2)
            order.append(f"{name} out")

    a = threading.Thread(target=upgrade, args=("a",))
    a.start()
    assert a_holds.wait(5)
    b = threading.Thread(target=upgrade, args=("b",))
    b.start()
    a.join()
    b.join()
    assert order == ["a in", "a out", "b in", "b out"]
