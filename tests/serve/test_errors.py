"""The one table from errors to gRPC status: every kind reaches the caller with its code and
one line, also when raised inside another Ray actor; candidates say why they failed by kind."""
from __future__ import annotations

import grpc
import pytest
from ray.exceptions import RayTaskError

from retrievers.types import ERROR, TIMEOUT, Candidate, Failure
from serve.app.errors import (DeadlineExceeded, FailedPrecondition, InvalidArgument, ReaderUnavailable,
                              Unauthenticated, Unimplemented, engine_died, engine_down, reader_unavailable,
                              status_of)


@pytest.mark.parametrize("exc, code", [
    (InvalidArgument("question is empty"), grpc.StatusCode.INVALID_ARGUMENT),
    (ReaderUnavailable("reader engine down (EngineDeadError: x); restarting"), grpc.StatusCode.UNAVAILABLE),
    (DeadlineExceeded("deadline of 5 s passed"), grpc.StatusCode.DEADLINE_EXCEEDED),
    (Unauthenticated("missing or wrong bearer token"), grpc.StatusCode.UNAUTHENTICATED),
    (Unimplemented("no rpc 'X'"), grpc.StatusCode.UNIMPLEMENTED),
    (FailedPrecondition("this front cannot redeploy the voter"), grpc.StatusCode.FAILED_PRECONDITION),
])
def test_each_error_kind_has_its_status_and_its_own_line(exc, code):
    assert status_of(exc) == (code, exc.details)
    wrapped = RayTaskError("run", "Traceback (most recent call last):\n  ...", exc)  # raised in another actor
    assert status_of(wrapped) == (code, exc.details)
    assert reader_unavailable(wrapped) == isinstance(exc, ReaderUnavailable)


def test_anything_else_is_internal_with_one_line_and_no_traceback():
    code, details = status_of(RuntimeError("\x1b[1mbad\x1b[0m thing\nTraceback (most recent call last):"))
    assert code == grpc.StatusCode.INTERNAL and details == "RuntimeError: bad thing"


def test_engine_death_is_recognised_by_type_not_by_name():
    from vllm.v1.engine.exceptions import EngineDeadError, EngineGenerateError

    assert engine_died(EngineDeadError())
    try:
        try:
            raise BrokenPipeError("pipe")
        except BrokenPipeError as inner:
            raise RuntimeError("wrapped") from inner
    except RuntimeError as outer:
        assert engine_died(outer)
    assert not engine_died(EngineGenerateError("one bad request"))

    class EngineDeadErrorLookalike(RuntimeError):
        pass
    assert not engine_died(EngineDeadErrorLookalike("named like it, but is not it"))


def test_a_dead_engine_is_told_in_our_words_never_vllms():
    """vLLM's EngineDeadError says "See stack trace (above) for the root cause": the log's business."""
    from vllm.v1.engine.exceptions import EngineDeadError

    ours = "reader engine down (EngineDeadError: its engine process stopped); restarting, try again shortly"
    assert engine_down(EngineDeadError()) == ours
    try:
        try:
            raise EngineDeadError()
        except EngineDeadError as inner:
            raise RuntimeError("the request failed") from inner
    except RuntimeError as outer:
        assert engine_down(outer) == ours
        assert status_of(RayTaskError("run", "Traceback ...", outer)) == (grpc.StatusCode.UNAVAILABLE, ours)
    assert status_of(EngineDeadError()) == (grpc.StatusCode.UNAVAILABLE, ours)  # however it reached the front
    code, details = status_of(BrokenPipeError("client went away"))  # a pipe, not known to be the engine's
    assert code == grpc.StatusCode.INTERNAL and details == "BrokenPipeError: client went away"


def test_failed_candidates_carry_their_kind():
    c = Candidate.failed("SE@1", Failure(TIMEOUT, "SE search timed out after 5 s"))
    assert (c.answer, c.error, c.error_kind) == ("", "SE search timed out after 5 s", TIMEOUT)
    with pytest.raises(ValueError, match="kind"):
        Failure("slow", "?")
    assert Candidate.failed("Wiki@10", Failure(ERROR, "Wiki search failed: x")).error_kind == ERROR


def test_mapping_an_error_never_imports_vllm():
    """The ingress maps a failed search's error with `status_of`; importing vLLM there would
    stall its event loop for seconds on its first error (every Ask in flight would time out)."""
    import subprocess
    import sys

    code = ("import sys; from serve.app.errors import status_of, engine_died; "
            "status_of(RuntimeError('simulated search outage')); engine_died(BrokenPipeError()); "
            "print('vllm' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False", out.stderr
