"""What this CPU can do fast, for the choices models make at load time (one home for the check)."""
from __future__ import annotations

import hashlib
import os
from functools import lru_cache
from pathlib import Path

BF16_ENV = "EOR_CPU_BF16"  # "0": act as a CPU without bf16 hardware (fp32 reader and encoder); "1": force bf16


@lru_cache(maxsize=1)
def cpu_flags() -> frozenset[str]:
    """The CPU's feature flags as /proc/cpuinfo lists them (none where it cannot be read)."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return frozenset()
    line = next((x for x in text.splitlines() if x.startswith(("flags", "Features"))), "")
    return frozenset(line.partition(":")[2].split())


def cpu_flags_have_bf16() -> bool:
    """AVX512-BF16 or AMX in /proc/cpuinfo."""
    return bool({"avx512_bf16", "amx_bf16"} & cpu_flags())


def cpu_signature() -> str:
    """Which machine code compiled here may run: torch's kernel choice (ATEN_CPU_CAPABILITY, as
    the emulation of a CPU class sets it) and a short hash of the CPU's flags. Machines with the
    same signature run each other's compiled code."""
    capability = os.environ.get("ATEN_CPU_CAPABILITY", "").strip().lower() or "native"
    digest = hashlib.sha256(" ".join(sorted(cpu_flags())).encode()).hexdigest()[:10]
    return f"{capability}-{digest}"


def cpu_has_bf16() -> bool:
    """AVX512-BF16 or AMX: bf16 matrix maths in hardware. Measured here: the reader prefills
    1.9x and the encoder embeds 2.6x faster in bf16 than fp32, with the same answers and
    embeddings (cosine >= 0.99997). Without them bf16 is emulated and slower (../shared/ARCHITECTURE.md:
    4x on AVX2). `EOR_CPU_BF16=0` overrides the check, so a bf16 machine can stand in for the
    fp32 class (with `ATEN_CPU_CAPABILITY=avx2`, torch's AVX2 kernels too)."""
    forced = os.environ.get(BF16_ENV, "").strip()
    if forced in ("0", "1"):
        return forced == "1"
    if forced:
        raise ValueError(f"{BF16_ENV} must be 0 or 1, got {forced!r}")
    return cpu_flags_have_bf16()


def cpu_has_vnni() -> bool:
    """AVX512-VNNI or AMX-INT8: int8 dot products in hardware, where static int8 (OpenVINO) beats
    onnxruntime's dynamic int8 (1.4-1.6x measured; without them 0.59x). `EOR_CPU_BF16=0`, which stands a
    machine in for the class without AVX512, says no here too."""
    forced = os.environ.get(BF16_ENV, "").strip()
    if forced not in ("", "0", "1"):
        raise ValueError(f"{BF16_ENV} must be 0 or 1, got {forced!r}")
    return forced != "0" and bool({"avx512_vnni", "amx_int8"} & cpu_flags())
