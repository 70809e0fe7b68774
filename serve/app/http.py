"""The HTTP/JSON front and the web page, served by the ingress replica itself through Ray Serve's
HTTP proxy (application.py wraps EorIngress as an ASGI ingress). Every route calls the ingress's
own `call` or `ask_stream`, the code path of both gRPC fronts, so the rules are the same: the
bearer token (`Authorization: Bearer ...`), the Ask's one Deadline (its `deadline_s`, and the
client's own timeout as the Connect protocol's `Connect-Timeout-Ms` header), typed errors as HTTP
statuses (serve/app/errors.py: HTTP_STATUS) with a one-line JSON body `{"error", "status"}`,
never a traceback, and the gRPC front's size limit on a body.

Bodies are the proto messages in proto3's JSON mapping (serve/app/wire.py); the OpenAPI schema is
made from the same descriptors (serve/app/openapi.py). /healthz and /readyz, the page and the
figures need no token (as grpc.health.v1 needs none); every /v1 route does.
"""
from __future__ import annotations

import asyncio
import json
import logging
from pathlib import Path
from typing import Any, AsyncIterator

import grpc
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from starlette.exceptions import HTTPException

from protos import eor_pb2
from serve.app import openapi
from serve.app.errors import (InvalidArgument, NotJson, TooLarge, http_error, http_headers, http_status, one_line,
                              pushback_of)
from serve.app.wire import MAX_REQUEST_BYTES, json_request, reply_json

log = logging.getLogger(__name__)

OK = grpc.StatusCode.OK
WEB = Path(__file__).with_name("web")  # the page: package data, no build step
DOCS = Path(__file__).resolve().parents[2] / "docs"  # what ships beside the voter (a checkout's; absent: none)
TIMEOUT_HEADER = "connect-timeout-ms"  # the Connect protocol's: the client's deadline, in milliseconds
PAGE_TYPES = {".html": "text/html; charset=utf-8", ".js": "text/javascript; charset=utf-8",
              ".css": "text/css; charset=utf-8", ".png": "image/png", ".md": "text/markdown; charset=utf-8"}
# POST path -> the rpc behind it; the JSON bodies are its request and reply messages
UNARY = {"/v1/ask": "Ask", "/v1/ask/batch": "AskBatch", "/v1/retrieve": "Retrieve", "/v1/generate": "Generate"}
RPCS = {m.name: (m.input_type, m.output_type) for m in eor_pb2.DESCRIPTOR.services_by_name["Eor"].methods}


def error_response(status: int, code: grpc.StatusCode, details: str, refusal: Any = None) -> JSONResponse:
    """The one shape of every error: one line of JSON, the gRPC status's name beside the text; a
    refused Ask's pushback (`refusal`, in the reply's place) as `Retry-After`."""
    return JSONResponse({"error": " ".join(str(details).split()), "status": code.name}, status_code=status,
                        headers=http_headers(refusal))


def event_kind(reply: eor_pb2.AskReply) -> str:
    """The SSE event an AskStream reply goes out as: the preview (stage 0), a round's provisional
    answer, or the final reply."""
    return "final" if reply.final else ("preview" if reply.stopped_at_stage == 0 else "round")


def sse(event: str, data: dict) -> str:
    return f"event: {event}\ndata: {json.dumps(data, ensure_ascii=False, separators=(',', ':'))}\n\n"


async def read_body(request: Request, limit: int = MAX_REQUEST_BYTES) -> bytes:
    """The body, refused past `limit` bytes: at once when Content-Length says so, else as it
    arrives (a chunked body); a body that does not say it is JSON is refused unread."""
    kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if kind != "application/json":
        raise NotJson(f"send JSON with Content-Type: application/json, not {kind or 'no content type'!r}")
    length = request.headers.get("content-length")
    if length is not None and (not length.isdigit() or int(length) > limit):
        raise TooLarge(f"body of {length} bytes over the limit of {limit}") if length.isdigit() else \
            InvalidArgument(f"bad Content-Length {length[:40]!r}")
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > limit:
            raise TooLarge(f"body over the limit of {limit} bytes")
    return bytes(body)


def caller(request: Request) -> tuple[list[tuple[str, str]], Any]:
    """What the ingress's `call` reads of the transport: the token (as gRPC metadata) and the
    client's deadline (serve/app/grpc_service.py: client_deadline, as the gRPC front makes it)."""
    from serve.app.grpc_service import client_deadline

    auth = request.headers.get("authorization")
    metadata = [("authorization", auth)] if auth is not None else []
    timeout = request.headers.get(TIMEOUT_HEADER)
    if timeout is None:
        return metadata, None
    if not timeout.isdigit() or len(timeout) > 10 or int(timeout) == 0:
        raise InvalidArgument(f"{TIMEOUT_HEADER} must be a positive whole number of milliseconds, got {timeout[:40]!r}")
    return metadata, client_deadline(int(timeout) / 1000)


def shipped_files(voter_id: str, docs: Path = DOCS) -> dict[str, list[str]]:
    """What ships beside a voter, as the page's links: its reliability diagram(s) and the
    robustness reports run against it (docs/robustness/<suite>-<first 4 of its id>.md) with their
    plots where there are any."""
    def names(folder: str, pattern: str) -> list[str]:
        where = docs / folder
        return sorted(f"/files/{folder}/{p.name}" for p in where.glob(pattern)) if where.is_dir() else []
    short = voter_id[:4]
    return {"reliability": names("img", f"reliability-{voter_id}-*.png"),
            "reports": names("robustness", f"*-{short}.md"),
            "plots": names("robustness", f"*-{short}*.png") + names("img", f"robustness-*{short}*.png")}


def build_http_app(ingress: Any) -> FastAPI:
    """The ASGI app over `ingress`: anything with EorIngress's `call`, `ask_stream` and `serving`."""
    app = FastAPI(title="eor", version="1", docs_url=None, redoc_url=None, openapi_url="/openapi.json",
                  description="Ensemble-of-Retrievers QA over HTTP/JSON: the eor.v1.Eor rpcs (protos/eor.proto) "
                              "in proto3's JSON mapping. Errors: {\"error\": one line, \"status\": gRPC status name}.")

    async def unary(request: Request, rpc: str, message: Any = None, read: bool = True) -> Response:
        """One rpc: `message`, else (`read`) the body as its request message."""
        try:
            metadata, transport = caller(request)
            if read:
                message = json_request(await read_body(request), getattr(eor_pb2, RPCS[rpc][0].name))
            reply, code, details = await ingress.call(rpc, message, metadata, transport)
        except Exception as exc:  # the front's own refusals (size, type, timeout header); anything else: one line
            return _refused(exc)
        if code != OK:
            return error_response(http_status(code), code, details, reply)
        return JSONResponse(reply if isinstance(reply, dict) else reply_json(reply))

    for path, rpc in UNARY.items():
        request_name, reply_name = (d.name for d in RPCS[rpc])

        def route(rpc: str = rpc):
            async def handle(request: Request) -> Response:
                return await unary(request, rpc)
            return handle
        app.add_api_route(path, route(), methods=["POST"], name=rpc, summary=f"the {rpc} rpc",
                          openapi_extra=openapi.route_doc(request_name, reply_name,
                                                          errors=(400, 401, 413, 415, 429, 503, 504)))

    async def ask_stream(request: Request) -> Response:
        """AskStream as server-sent events. What fails before the first reply (a bad token, a
        malformed question, a first vote past the deadline) is a plain HTTP error; later, an
        `error` event ends the stream. A client that goes away cancels the Ask."""
        try:
            metadata, transport = caller(request)
            message = json_request(await read_body(request), eor_pb2.AskRequest)
        except Exception as exc:
            return _refused(exc)
        replies = ingress.ask_stream(message, metadata, transport)
        try:
            first = await replies.__anext__()
        except Exception as exc:
            await replies.aclose()
            return _refused(exc)
        if first[1] != OK:
            await replies.aclose()
            return error_response(http_status(first[1]), first[1], first[2], first[0])
        return StreamingResponse(events(first, replies), media_type="text/event-stream",
                                 headers={"cache-control": "no-cache", "x-accel-buffering": "no"})

    app.add_api_route("/v1/ask/stream", ask_stream, methods=["POST"], name="AskStream",
                      summary="the AskStream rpc as server-sent events",
                      openapi_extra=openapi.route_doc("AskRequest", "AskReply", stream=True,
                                                      errors=(400, 401, 413, 415, 429, 503, 504)))

    async def health(request: Request) -> Response:
        return await unary(request, "Health", eor_pb2.HealthRequest(), read=False)

    app.add_api_route("/v1/health", health, methods=["GET"], name="Health", summary="the Health rpc: readers, "
                      "counters, parts down", openapi_extra=openapi.route_doc(None, "HealthReply", errors=(401, 503)))

    async def voter(request: Request) -> Response:
        response = await unary(request, "VoterInfo", read=False)
        if response.status_code == 200:
            info = json.loads(response.body)
            info["files"] = shipped_files(info["id"])
            return JSONResponse(info)
        return response

    app.add_api_route("/v1/voter", voter, methods=["GET"], name="Voter", summary="the voter the next Ask runs "
                      "with: rounds, stop thresholds, preview; its reliability diagram and robustness reports",
                      openapi_extra=openapi.route_doc(None, None, errors=(401, 503)))

    @app.get("/healthz", summary="liveness: the ingress answers (no token)")
    async def healthz() -> dict:
        return {"status": "SERVING"}

    @app.get("/readyz", summary="readiness: every reader serves and the voter answers (no token)",
             openapi_extra=openapi.route_doc(None, None, errors=(503,)))
    async def readyz() -> Response:
        from serve.app.grpc_service import HEALTH_CHECK_S

        try:
            ok, why = await asyncio.wait_for(ingress.serving(), HEALTH_CHECK_S)
        except Exception as exc:
            ok, why = False, f"health check failed: {one_line(exc)}"
        if not ok:
            return error_response(503, grpc.StatusCode.UNAVAILABLE, why or "not serving")
        return JSONResponse({"status": "SERVING"})

    @app.get("/", include_in_schema=False)
    async def page() -> Response:
        return _file(WEB / "index.html")

    @app.get("/web/{name}", include_in_schema=False)
    async def web(name: str) -> Response:
        return _file(WEB / name, within=WEB)

    @app.get("/files/{folder}/{name}", include_in_schema=False)
    async def shipped(folder: str, name: str) -> Response:
        return _file(DOCS / folder / name, within=DOCS / folder) if folder in ("img", "robustness") else _missing()

    @app.exception_handler(HTTPException)
    async def http_exception(request: Request, exc: HTTPException) -> Response:
        code = {404: grpc.StatusCode.NOT_FOUND, 405: grpc.StatusCode.UNIMPLEMENTED}.get(exc.status_code,
                                                                                        grpc.StatusCode.INVALID_ARGUMENT)
        path = request.url.path[:200]
        what = {404: f"no route {path}", 405: f"{request.method} is not served on {path}"}.get(exc.status_code,
                                                                                               str(exc.detail))
        return error_response(exc.status_code, code, what)

    @app.exception_handler(Exception)
    async def anything_else(request: Request, exc: Exception) -> Response:
        return _refused(exc)

    schema = app.openapi

    def with_messages() -> dict:
        """FastAPI's schema of the routes, with the proto messages' schemas as its components."""
        if app.openapi_schema is None:
            doc = schema()
            doc.setdefault("components", {}).update(openapi.components(*(d for pair in RPCS.values() for d in pair)))
            app.openapi_schema = doc
        return app.openapi_schema
    app.openapi = with_messages
    return app


async def events(first: tuple, replies: AsyncIterator) -> AsyncIterator[str]:
    """The stream's events, first to last; closing `replies` (also when the client leaves and
    this generator is cancelled) cancels the Ask's work (EorIngress.ask_stream)."""
    item = first
    try:
        while True:
            reply, code, details = item
            if code != OK:
                yield sse("error", {"error": " ".join(details.split()), "status": code.name})
                return
            yield sse(event_kind(reply), reply_json(reply))
            if reply.final:
                return
            item = await replies.__anext__()
    except StopAsyncIteration:
        return
    except Exception as exc:  # never a traceback, not even mid-stream
        status, code, details = http_error(exc)
        log.exception("AskStream over HTTP failed")
        yield sse("error", {"error": details, "status": code.name})
    finally:
        await replies.aclose()


def _refused(exc: BaseException) -> JSONResponse:
    status, code, details = http_error(exc)
    if status >= 500:
        log.exception("HTTP front: %s", details, exc_info=exc)
    return error_response(status, code, details, pushback_of(exc))


def _missing() -> JSONResponse:
    return error_response(404, grpc.StatusCode.NOT_FOUND, "no such file")


def _file(path: Path, within: Path | None = None) -> Response:
    """A file of the page or of docs/, by its exact name in its folder (no path leaves it)."""
    if within is not None and (path.parent != within or path.name.startswith(".")):
        return _missing()
    kind = PAGE_TYPES.get(path.suffix)
    if kind is None or not path.is_file():
        return _missing()
    return Response(path.read_bytes(), media_type=kind, headers={"cache-control": "no-cache"})
