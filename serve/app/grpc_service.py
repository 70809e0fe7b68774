"""gRPC ingress for eor.v1.Eor, two ways, one handler (EorIngress.call):

1. Ray Serve's gRPC proxy: `gRPCOptions(grpc_servicer_functions=["serve.app.grpc_service.add_eor_servicer"])`
   (deploy/serve.yaml, `eor serve --ray-grpc-port`). Reflection is Ray's. Limits of Ray
   2.60's proxy: it binds every interface ("[::]:port") and has no TLS option.
2. The front (`EorFront`, what `eor serve` listens on): a plain grpc.aio server in the
   driver that binds 127.0.0.1 by default, serves TLS when given a cert and key, has
   reflection, and forwards every rpc to the ingress deployment through a Serve handle.

Both register the rpcs with a lenient request deserializer (serve/app/wire.py), so a message
with invalid UTF-8 or wrong field types is answered INVALID_ARGUMENT, not INTERNAL.
"""
from __future__ import annotations

import asyncio
import json
import logging
from pathlib import Path
from typing import Any, Awaitable, Callable

import grpc

from protos import eor_pb2
from serve.app.errors import grpc_trailers
from serve.app.wire import MAX_REQUEST_BYTES, BadRequest
from serve.deadline import MAX_DEADLINE_S, Deadline

log = logging.getLogger(__name__)

SERVICE = eor_pb2.DESCRIPTOR.services_by_name["Eor"].full_name  # "eor.v1.Eor"
RPCS = {m.name: (m.input_type.name, m.output_type.name)
        for m in eor_pb2.DESCRIPTOR.services_by_name["Eor"].methods}
STREAMING = {m.name for m in eor_pb2.DESCRIPTOR.services_by_name["Eor"].methods if m.server_streaming}


def _handlers(servicer: Any) -> dict[str, grpc.RpcMethodHandler]:
    from serve.app.wire import lenient

    out = {}
    for name, (req, rep) in RPCS.items():
        make = grpc.unary_stream_rpc_method_handler if name in STREAMING else grpc.unary_unary_rpc_method_handler
        out[name] = make(getattr(servicer, name), request_deserializer=lenient(getattr(eor_pb2, req)),
                         response_serializer=getattr(eor_pb2, rep).SerializeToString)
    return out


def add_eor_servicer(servicer: Any, server: Any) -> None:
    """Like the generated add_EorServicer_to_server, with the lenient deserializer."""
    handlers = _handlers(servicer)
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE, handlers),))
    if hasattr(server, "add_registered_method_handlers"):
        server.add_registered_method_handlers(SERVICE, handlers)


ApplyWeights = Callable[[dict], Awaitable[str]]


class _Forward:
    """Servicer of the front: every rpc goes to EorIngress.call through the Serve handle.

    SetVoterWeights is the exception: the ingress only checks the weights (and the token,
    as "CheckVoterWeights"); then `apply_weights` (the app's owner) redeploys the Voter's
    user_config."""

    def __init__(self, ingress: Any, apply_weights: ApplyWeights | None = None):
        self.ingress = ingress
        self.apply_weights = apply_weights
        for name in RPCS:
            setattr(self, name, self._stream(name) if name in STREAMING else self._rpc(name))

    def _stream(self, name: str):
        async def handle(request, context: grpc.aio.ServicerContext):
            """The ingress's `ask_stream` through a streaming Serve handle; when the client goes
            away, grpc cancels this handler and Serve cancels the Ask with it."""
            stream = self.ingress.options(stream=True).ask_stream.remote(request, list(context.invocation_metadata()),
                                                                         client_deadline(context.time_remaining()))
            try:
                async for reply, code, details in stream:
                    if code != grpc.StatusCode.OK:
                        await context.abort(code, details, trailing_metadata=grpc_trailers(reply))
                    yield reply
            except (grpc.aio.AbortError, asyncio.CancelledError):
                raise
            except Exception as exc:  # the ingress itself is down
                log.exception("ingress stream failed")
                await context.abort(grpc.StatusCode.UNAVAILABLE, f"ingress unavailable: {type(exc).__name__}")
            finally:
                stream.cancel()
        return handle

    def _rpc(self, name: str):
        async def handle(request, context: grpc.aio.ServicerContext):
            method = "CheckVoterWeights" if name == "SetVoterWeights" else name
            try:
                reply, code, details = await self.ingress.call.remote(method, request,
                                                                      list(context.invocation_metadata()),
                                                                      client_deadline(context.time_remaining()))
            except Exception as exc:  # the ingress itself is down
                log.exception("ingress call failed")
                await context.abort(grpc.StatusCode.UNAVAILABLE, f"ingress unavailable: {type(exc).__name__}")
            if code != grpc.StatusCode.OK:  # a refusal's retry pushback rides in the trailers (gRPC A6)
                await context.abort(code, details, trailing_metadata=grpc_trailers(reply))
            if name == "SetVoterWeights":
                reply.source = await self._apply(request, context)
            return reply
        return handle

    async def _apply(self, request, context) -> str:
        if self.apply_weights is None:
            await context.abort(grpc.StatusCode.FAILED_PRECONDITION, "this front cannot redeploy the voter")
        try:
            return await self.apply_weights(json.loads(request.weights_json))
        except Exception as exc:
            log.exception("applying pushed weights failed")
            from serve.app.errors import one_line

            await context.abort(grpc.StatusCode.INTERNAL, f"applying the weights failed: {one_line(exc)}")


#: the reply needs this long after the work stops (vote, encode, send)
REPLY_MARGIN_S = 0.5


def client_deadline(time_remaining: float | None) -> Deadline | None:
    """The client's gRPC deadline (None: it set none) as the transport's bound on an Ask, made
    when the call arrives: less the time the reply needs, so the work stops and the reply with
    what finished goes out before the client gives up. The request itself is never changed."""
    if time_remaining is None:
        return None
    return Deadline.after(min(max(time_remaining - REPLY_MARGIN_S, 0.05), MAX_DEADLINE_S))


HEALTH_CHECK_S = 10.0  # the longest a grpc.health.v1 Check waits for the ingress's answer


def health_refusal(request: Any) -> tuple[grpc.StatusCode, str] | None:
    """Why a grpc.health.v1 Check is refused (a request that does not parse; a service eor does
    not serve), or None; both fronts' Check reads it."""
    if isinstance(request, BadRequest):
        return grpc.StatusCode.INVALID_ARGUMENT, request.message
    if request.service not in ("", SERVICE):
        return grpc.StatusCode.NOT_FOUND, f"unknown service {request.service!r}"
    return None


async def health_check(serving: Awaitable[tuple[bool, str]]) -> Any:
    """The HealthCheckResponse for the ingress's `serving()`: NOT_SERVING when it fails or is late."""
    from grpc_health.v1 import health_pb2

    try:
        ok, _ = await asyncio.wait_for(serving, HEALTH_CHECK_S)
    except Exception:
        ok = False
    return health_pb2.HealthCheckResponse(
        status=health_pb2.HealthCheckResponse.SERVING if ok else health_pb2.HealthCheckResponse.NOT_SERVING)


def add_health_servicer(servicer: Any, server: Any) -> None:
    """grpc.health.v1's Check for Ray Serve's gRPC proxy (`grpc_servicer_functions`, beside
    `add_eor_servicer`): the proxy routes it to the ingress's `Check` (serve/app/health.py).
    Watch, a stream a probe does not use, is not registered there: UNIMPLEMENTED. A probe sends no
    `application` metadata, so Ray routes it while eor is the cluster's only Serve application."""
    _add_health_servicer(servicer, server, watch=False)


# what Ray Serve's gRPC proxy registers (`eor serve --ray-grpc-port`; deploy/serve.yaml and the RayService files)
PROXY_SERVICERS = tuple(f"{f.__module__}.{f.__name__}" for f in (add_eor_servicer, add_health_servicer))


def _health_servicer(ingress: Any) -> Any:
    """The standard grpc.health.v1 service (Kubernetes gRPC probes, grpc-health-probe): SERVING
    exactly when eor's own Health says so (reader engine up, voter answering)."""
    from grpc_health.v1 import health_pb2_grpc

    class Health(health_pb2_grpc.HealthServicer):
        async def Check(self, request, context):  # noqa: N802 (the rpc's name)
            refused = health_refusal(request)
            if refused is not None:
                await context.abort(*refused)
            return await health_check(ingress.serving.remote())

        async def Watch(self, request, context):  # noqa: N802
            await context.abort(grpc.StatusCode.UNIMPLEMENTED, "Watch is not served; poll Check")

    return Health()


def _add_health_servicer(servicer: Any, server: Any, watch: bool = True) -> None:
    """Like the generated add_HealthServicer_to_server, with the lenient deserializer (a
    request that does not parse is INVALID_ARGUMENT, not UNKNOWN)."""
    from grpc_health.v1 import health_pb2

    from serve.app.wire import lenient

    name = health_pb2.DESCRIPTOR.services_by_name["Health"].full_name
    handlers = {
        "Check": grpc.unary_unary_rpc_method_handler(
            servicer.Check, request_deserializer=lenient(health_pb2.HealthCheckRequest),
            response_serializer=health_pb2.HealthCheckResponse.SerializeToString),
    }
    if watch:
        handlers["Watch"] = grpc.unary_stream_rpc_method_handler(
            servicer.Watch, request_deserializer=lenient(health_pb2.HealthCheckRequest),
            response_serializer=health_pb2.HealthCheckResponse.SerializeToString)
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(name, handlers),))


class EorFront:
    """The standalone gRPC front: `await front.start()`, `front.address`, `await front.stop()`."""

    def __init__(self, ingress: Any, host: str = "127.0.0.1", port: int = 50051,
                 tls_cert: str = "", tls_key: str = "", max_message_bytes: int = MAX_REQUEST_BYTES,
                 apply_weights: ApplyWeights | None = None):
        if bool(tls_cert) != bool(tls_key):
            raise ValueError("TLS needs both tls_cert and tls_key")
        self.ingress = ingress
        self.host, self.port = host, port
        self.tls = (tls_cert, tls_key) if tls_cert else None
        opts = [("grpc.max_receive_message_length", max_message_bytes),
                ("grpc.so_reuseport", 0)]
        self.server = grpc.aio.server(options=opts)
        add_eor_servicer(_Forward(ingress, apply_weights), self.server)
        from grpc_health.v1 import health_pb2, health_pb2_grpc
        from grpc_reflection.v1alpha import reflection

        _add_health_servicer(_health_servicer(ingress), self.server)
        reflection.enable_server_reflection(
            [SERVICE, health_pb2.DESCRIPTOR.services_by_name["Health"].full_name, reflection.SERVICE_NAME], self.server)

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    async def start(self) -> "EorFront":
        addr = f"{self.host}:{self.port}"
        if self.tls:
            cert, key = (Path(p).read_bytes() for p in self.tls)
            self.port = self.server.add_secure_port(addr, grpc.ssl_server_credentials([(key, cert)]))
        else:
            self.port = self.server.add_insecure_port(addr)
        if not self.port:
            raise OSError(f"cannot bind {addr}")
        await self.server.start()
        return self

    async def stop(self, grace: float = 2.0) -> None:
        await self.server.stop(grace)

    async def wait(self) -> None:
        await self.server.wait_for_termination()
