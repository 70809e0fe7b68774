"""The service's errors, typed, and the one table that maps them to gRPC status codes (and those
to HTTP statuses, for the HTTP front); what a caller is told is one line, never a traceback (the
log keeps the traceback)."""
from __future__ import annotations

import math
import re
import sys
from dataclasses import dataclass
from typing import Any

import grpc


class ServiceError(Exception):
    """An error with the status it answers with; `details` goes to the caller as it is."""

    code = grpc.StatusCode.INTERNAL

    def __init__(self, details: str, code: grpc.StatusCode | None = None):
        super().__init__(details)
        self.details = details
        if code is not None:
            self.code = code


class InvalidArgument(ServiceError, ValueError):
    """A malformed request or an input-limit violation."""

    code = grpc.StatusCode.INVALID_ARGUMENT


class ReaderUnavailable(ServiceError):
    """The reader engine is down (and restarting): callers get UNAVAILABLE with this one line."""

    code = grpc.StatusCode.UNAVAILABLE


class NothingAnswered(ServiceError):
    """Every retriever the Ask's rounds asked failed or missed the deadline (a lost node, actors
    restarting): there is no answer, and an OK with an empty one would look like one."""

    code = grpc.StatusCode.UNAVAILABLE


class DeadlineExceeded(ServiceError):
    code = grpc.StatusCode.DEADLINE_EXCEEDED


class Unauthenticated(ServiceError):
    code = grpc.StatusCode.UNAUTHENTICATED


class Unimplemented(ServiceError):
    code = grpc.StatusCode.UNIMPLEMENTED


class FailedPrecondition(ServiceError):
    code = grpc.StatusCode.FAILED_PRECONDITION


class StartFailed(ServiceError):
    """`eor serve` could not start the application: a deployment's replicas failed to start; the
    details name each and the last line of its error, not Ray's traceback."""

    code = grpc.StatusCode.UNAVAILABLE


class TooLarge(ServiceError):
    """A request body over the front's limit: RESOURCE_EXHAUSTED, as gRPC answers an over-size
    message; over HTTP 413, not 429 (the caller must send less, not wait)."""

    code = grpc.StatusCode.RESOURCE_EXHAUSTED
    http_status = 413


class Overloaded(ServiceError):
    """Refused before it ran (admission control, serve/app/admission.py): the queue is full, its
    wait would pass service.max_wait_s, or it could not finish before its deadline behind the Asks
    already waiting. RESOURCE_EXHAUSTED
    with a retry pushback (gRPC A6: trailing metadata `grpc-retry-pushback-ms`; HTTP 429 with
    `Retry-After`), so a client waits instead of retrying blindly. `reason`: the metric's label."""

    code = grpc.StatusCode.RESOURCE_EXHAUSTED  # HTTP 429 by the table below, with Pushback.headers

    def __init__(self, details: str, retry_after_s: float, reason: str = "queue_full"):
        super().__init__(details)
        self.retry_after_s = float(retry_after_s)
        self.reason = reason

    def __reduce__(self):  # raised in another actor: kept whole across the pickle
        return type(self), (self.details, self.retry_after_s, self.reason)


class NotJson(InvalidArgument):
    """A body that does not say it is JSON: 415 over HTTP. Requiring `Content-Type:
    application/json` also keeps another site's plain form post from running an Ask (a
    cross-origin JSON post needs a preflight, which the front does not grant)."""

    http_status = 415


S = grpc.StatusCode
# gRPC status -> HTTP status, as google.rpc.Code documents them (and grpc-gateway answers); the
# HTTP front's only table: its replies are the ingress's (reply, code, details)
HTTP_STATUS = {S.OK: 200, S.CANCELLED: 499, S.UNKNOWN: 500, S.INVALID_ARGUMENT: 400, S.DEADLINE_EXCEEDED: 504,
               S.NOT_FOUND: 404, S.ALREADY_EXISTS: 409, S.PERMISSION_DENIED: 403, S.RESOURCE_EXHAUSTED: 429,
               S.FAILED_PRECONDITION: 400, S.ABORTED: 409, S.OUT_OF_RANGE: 400, S.UNIMPLEMENTED: 501,
               S.INTERNAL: 500, S.UNAVAILABLE: 503, S.DATA_LOSS: 500, S.UNAUTHENTICATED: 401}


PUSHBACK_KEY = "grpc-retry-pushback-ms"  # gRPC A6: the client waits this long before it retries


@dataclass(frozen=True)
class Pushback:
    """How long a refused caller should wait before it asks again: what the ingress hands the fronts
    beside an error status (in the reply's place), each front in its own protocol's words."""

    seconds: float

    @property
    def metadata(self) -> tuple[tuple[str, str], ...]:
        """gRPC trailing metadata (A6: milliseconds, a decimal integer)."""
        return ((PUSHBACK_KEY, str(max(0, int(math.ceil(self.seconds * 1000))))),)

    @property
    def headers(self) -> dict[str, str]:
        """HTTP: `Retry-After` in whole seconds (RFC 9110), at least 1."""
        return {"Retry-After": str(max(1, int(math.ceil(self.seconds))))}


def pushback_of(exc: BaseException) -> Pushback | None:
    """The retry pushback an error carries: an Overloaded refusal's, or Ray Serve's own back-pressure
    (a deployment's `max_queued_requests` reached: BackPressureError, retry_after_s when it says)."""
    err = unwrapped(exc)
    if isinstance(err, Overloaded):
        return Pushback(err.retry_after_s)
    if _back_pressure(err):
        return Pushback(float(getattr(err, "_retry_after_s", None) or BACK_PRESSURE_RETRY_S))
    return None


BACK_PRESSURE_RETRY_S = 1.0  # Ray Serve's back-pressure names no wait: ask again after this


def _back_pressure(err: BaseException) -> bool:
    """Ray Serve's BackPressureError, told by its class name: importing Ray here would load it into
    every process that maps an error."""
    return any(c.__name__ == "BackPressureError" for c in type(err).__mro__)


def http_status(code: grpc.StatusCode) -> int:
    return HTTP_STATUS.get(code, 500)


def http_headers(refusal: Any) -> dict[str, str]:
    """The headers an error reply carries: `Retry-After` where the ingress handed a Pushback in the
    reply's place (a refused Ask, 429), none otherwise."""
    return refusal.headers if isinstance(refusal, Pushback) else {}


def grpc_trailers(refusal: Any) -> tuple[tuple[str, str], ...]:
    """The trailing metadata an error status carries: `grpc-retry-pushback-ms` for a Pushback."""
    return refusal.metadata if isinstance(refusal, Pushback) else ()


def http_error(exc: BaseException) -> tuple[int, grpc.StatusCode, str]:
    """(HTTP status, gRPC status, one line) for an error raised at the HTTP front itself: the
    gRPC table, then the HTTP status a ServiceError names (TooLarge: 413)."""
    code, details = status_of(exc)
    err = unwrapped(exc)
    return getattr(err, "http_status", None) or http_status(code), code, details


def unwrapped(exc: BaseException) -> BaseException:
    """The error a remote actor raised: Ray's RayTaskError keeps it as `cause` (and subclasses
    its type, so isinstance also holds on the wrapper)."""
    cause = getattr(exc, "cause", None)
    return cause if isinstance(cause, BaseException) else exc


def reader_unavailable(exc: BaseException) -> bool:
    return isinstance(exc, ReaderUnavailable) or isinstance(unwrapped(exc), ReaderUnavailable)


def status_of(exc: BaseException) -> tuple[grpc.StatusCode, str]:
    """The one table: a ServiceError answers with its own code and details, also when raised in
    another actor; a dead engine is UNAVAILABLE in our words; anything else is INTERNAL with
    its first line."""
    err = unwrapped(exc)
    if isinstance(err, ServiceError):
        return err.code, err.details
    if isinstance(exc, ServiceError):
        return exc.code, exc.details
    if _back_pressure(err):  # a deployment's bounded queue (max_queued_requests) is full
        return grpc.StatusCode.RESOURCE_EXHAUSTED, "the service is at capacity (a deployment's queue is full); " \
            "try again after the retry pushback"
    if _dead(err, pipes=False) is not None:  # an engine death no Reader turned into ReaderUnavailable
        return grpc.StatusCode.UNAVAILABLE, engine_down(err)
    return grpc.StatusCode.INTERNAL, one_line(err)


def _dead(exc: BaseException | None, pipes: bool = True) -> BaseException | None:
    """The error in `exc` or what it wraps that says the engine is gone: vLLM's own signal that
    its engine core is gone (EngineDeadError; a worker killed under it surfaces the same way),
    or the pipe to it broke (`pipes`: only where the error came from the engine). EngineGenerateError
    is not: vLLM calls it recoverable (one bad request), and it must not restart the engine for
    everyone. vLLM is never imported here: an EngineDeadError exists only in a process that has
    loaded vLLM's module (raised there, or unpickled from another actor), and importing it takes
    seconds, which would stall the ingress's event loop on its first error (a failed search)."""
    dead: tuple[type[BaseException], ...] = (BrokenPipeError, ConnectionResetError) if pipes else ()
    vllm_errors = sys.modules.get("vllm.v1.engine.exceptions")
    if vllm_errors is not None:
        dead += (vllm_errors.EngineDeadError,)
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:  # the error itself, or what it wraps
        seen.add(id(exc))
        if isinstance(exc, dead):
            return exc
        exc = exc.__cause__ or exc.__context__
    return None


def engine_died(exc: BaseException, pipes: bool = True) -> bool:
    """Whether `exc` says the reader engine is gone (see `_dead`; `pipes`: a broken pipe counts,
    only where the error came from the engine)."""
    return _dead(exc, pipes) is not None


def engine_stopped(exc: BaseException) -> str:
    """A dead engine in the project's words and the error's kind; the engine's own message
    ("See stack trace (above) ...") is for the log only."""
    dead = _dead(exc) or exc
    return f"reader engine down ({type(dead).__name__}: its engine process stopped)"


def engine_down(exc: BaseException) -> str:
    """What the service's callers are told while a dead engine restarts."""
    return f"{engine_stopped(exc)}; restarting, try again shortly"


def one_line(exc: BaseException) -> str:
    """A message a user can read: the first line, no terminal colour codes, no traceback."""
    text = re.sub(r"\x1b\[[0-9;]*m", "", str(exc)).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}".strip()[:300]
