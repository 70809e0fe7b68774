"""The bf16 and VNNI checks and their override (EOR_CPU_BF16), used by the reader and the encoder."""
from __future__ import annotations

import pytest

from retrievers import hardware


def test_override_forces_either_class(monkeypatch):
    monkeypatch.setenv(hardware.BF16_ENV, "0")
    assert hardware.cpu_has_bf16() is False
    monkeypatch.setenv(hardware.BF16_ENV, "1")
    assert hardware.cpu_has_bf16() is True


def test_without_override_the_cpu_decides(monkeypatch):
    monkeypatch.delenv(hardware.BF16_ENV, raising=False)
    assert hardware.cpu_has_bf16() is hardware.cpu_flags_have_bf16()


def test_a_bad_override_is_one_clear_error(monkeypatch):
    monkeypatch.setenv(hardware.BF16_ENV, "yes")
    with pytest.raises(ValueError, match="EOR_CPU_BF16 must be 0 or 1"):
        hardware.cpu_has_bf16()


def test_reader_and_encoder_follow_the_override(monkeypatch):
    from serve.engine.vllm_engine import VLLMConfig, resolve_dtype

    monkeypatch.setenv(hardware.BF16_ENV, "0")
    assert resolve_dtype(VLLMConfig(device="cpu")) == (True, "float32")
    assert resolve_dtype(VLLMConfig(device="cpu", dtype="bfloat16")) == (True, "bfloat16")  # explicit wins
    monkeypatch.setenv(hardware.BF16_ENV, "1")
    assert resolve_dtype(VLLMConfig(device="cpu")) == (True, "bfloat16")


def test_the_cpu_signature_names_torchs_kernel_choice(monkeypatch):
    monkeypatch.delenv("ATEN_CPU_CAPABILITY", raising=False)
    native = hardware.cpu_signature()
    assert native.startswith("native-") and hardware.cpu_signature() == native
    monkeypatch.setenv("ATEN_CPU_CAPABILITY", "AVX2")
    assert hardware.cpu_signature() == "avx2-" + native.split("-", 1)[1]


def test_vnni_is_read_from_the_cpu_flags_and_the_fp32_class_emulation_says_no(monkeypatch):
    monkeypatch.setattr(hardware, "cpu_flags", lambda: frozenset({"avx2", "avx512f", "avx512_vnni"}))
    monkeypatch.delenv(hardware.BF16_ENV, raising=False)
    assert hardware.cpu_has_vnni()
    monkeypatch.setenv(hardware.BF16_ENV, "0")
    assert not hardware.cpu_has_vnni()
    monkeypatch.setattr(hardware, "cpu_flags", lambda: frozenset({"avx2", "fma"}))
    monkeypatch.delenv(hardware.BF16_ENV)
    assert not hardware.cpu_has_vnni()
