"""Shared test setup: offline model loading, GPU-only tests skipped without a GPU."""
from __future__ import annotations

import os
import sys

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")


def pytest_sessionfinish(session, exitstatus):
    session.config.stash[_EXIT_STATUS] = int(exitstatus)


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config):
    """End the test process with pytest's own exit status and without Python's finalization.
    The tests load native runtimes that outlive them (Lucene's JVM through pyjnius, torch's
    OpenMP pool, Ray's core worker, gRPC); CI saw the interpreter's finalization segfault
    after every test had passed (stop 51: "1009 passed", then exit 139), which once in a
    while refuses a green run. Every result and report is written by now (the summary, the
    cache); only the process's teardown is skipped."""
    status = config.stash.get(_EXIT_STATUS, None)
    if status is None:  # pytest ended before the session ran (a usage error): its own exit
        return
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)


_EXIT_STATUS = pytest.StashKey[int]()


def _has_gpu() -> bool:
    try:
        import torch

        return torch.cuda.is_available()
    except ImportError:
        return False


def pytest_collection_modifyitems(config, items):
    if _has_gpu():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def one_torch_thread():
    """Model tests here are tiny: keep one of the machine's two cores free."""
    try:
        import torch
    except ImportError:
        yield
        return
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
