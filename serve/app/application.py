"""Build and run the eor Serve application.

    build_app(settings)        -> the Serve Application (ingress + reader + sources + groups + voter)
    app_builder(args)          -> for `serve run deploy/serve.yaml` (args: config / settings)
    LocalService(settings)     -> `eor serve`: a local Ray (127.0.0.1), the app, the gRPC front, and
                                  Ray Serve's HTTP proxy for the HTTP front (serve/app/http.py)

Deployments (one replica each here, each queue bounded by `service.max_queued_requests`; the readers
autoscale with `service.reader_autoscaling`, KubeRay adds the nodes): Reader (vLLM, the default reader), one
Reader_<name> per other reader a pool member names (`Wiki@10~1.5B`: Reader_1.5B, its own engine),
Generator (only when no served reader runs the generator's model), one Source_<name> per
configured knowledge source (index.sources: Source_Wiki, encoder + faiss, also the @RR encoder;
Source_SE, Lucene), one RetrieverGroup per group of specs (service.retriever_actors), Voter
(weights in user_config), EorIngress.
"""
from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import os
import re
import shutil
import tempfile
import threading
from dataclasses import replace
from pathlib import Path
from typing import Any

from serve.app.errors import StartFailed
from serve.config import EorConfig, actor_groups, config_from_dict, load_config

log = logging.getLogger(__name__)

APP_NAME = "eor"
INGRESS = "EorIngress"
REPO_ROOT = Path(__file__).resolve().parents[1]
# what actors inherit from the driver, besides every EOR_* variable (models load offline;
# EOR_HOME locates indexes + cache)
PASS_ENV = ("EOR_HOME", "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "TOKENIZERS_PARALLELISM", "VLLM_LOGGING_LEVEL",
            "VLLM_CPU_OMP_THREADS_BIND", "VLLM_CPU_NUM_OF_RESERVED_CPU", "VLLM_CPU_KVCACHE_SPACE",
            "VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS", "JAVA_HOME",
            "RAY_SERVE_METRICS_EXPORT_INTERVAL_MS", "RAY_SERVE_CONTROL_LOOP_INTERVAL_S")


# Ray on a small machine that serves only eor. Ray starts its workers at nice 15 (so the
# actors -- vLLM's engine among them -- yield the CPU to Ray's own daemons), every Serve replica
# exports its metrics every 100 ms, the controller loops every 100 ms, the raylet keeps idle
# worker processes for tasks eor never sends, and the dashboard agent scans every process each
# 5 s: on 2 cores every process that wakes stalls the reader's bound OpenMP threads (docs/benchmarks.md,
# "serving overhead"). The caller's environment wins (setdefault).
RAY_ENV_DEFAULTS = {"RAY_worker_niceness": "0", "RAY_SERVE_METRICS_EXPORT_INTERVAL_MS": "1000",
                    "RAY_SERVE_CONTROL_LOOP_INTERVAL_S": "1", "RAY_num_workers_soft_limit": "0",
                    "RAY_enable_worker_prestart": "0", "RAY_prestart_worker_first_driver": "0",
                    "REPORTER_UPDATE_INTERVAL_MS": "30000"}


def _pin_version(deployment: Any, version: str) -> Any:
    """Give a deployment a fixed version. `serve.run` otherwise versions every deployment at
    random, so re-running the app (to push new voter weights into the Voter's user_config)
    would restart every replica, vLLM included; with the version fixed, a user_config change
    is Serve's lightweight update (reconfigure() on the live replica). Ray 2.60 keeps the
    version in the private `_version` (the public `version=` option was removed); the
    push test (tests/serve/test_service_fake.py) checks no replica restarts."""
    deployment._version = version
    return deployment


def build_app(settings: EorConfig, voter_config: dict | None = None):
    """The application; `voter_config` (the Voter's user_config) defaults to the settings'
    weights file, or equal weights."""
    from retrievers.spec import DEFAULT_READER_NAME
    from serve.app.deployments import IndexShard, RetrieverGroup, Source, Voter, asked_readers
    from serve.app.ingress import EorIngress
    from serve.app.placement import actor_options
    from serve.config import reader_deployment, source_deployment
    from serve.app.reader import Reader
    from serve.config_readers import generator_reader, reader_config, used_readers

    # every deployment is handed the config as validated here, typed (it never re-reads plain data)
    version = hashlib.sha256(json.dumps(settings.to_dict(), sort_keys=True).encode()).hexdigest()[:16]
    svc = settings.service
    reader_opts: dict[str, Any] = {"num_cpus": 0,
                                   "runtime_env": {"env_vars": {"OMP_NUM_THREADS": str(os.cpu_count() or 1)}}}
    if svc.reader_memory_gib:
        reader_opts["memory"] = int(svc.reader_memory_gib * 2**30)
    placed = svc.placement

    def pin(dep: Any, name: str, base: dict | None = None, **more: Any) -> Any:  # named, placed, bounded, versioned
        return _pin_version(dep.options(name=name, ray_actor_options=actor_options(placed, name, base),
                                        max_queued_requests=svc.max_queued_requests, **more), version)

    readers = {}  # every reader a pool member names, its own engine and deployment ("": the default)
    asked = asked_readers(settings)  # one the voter's rounds never ask starts on its first request
    scaling = {"autoscaling_config": dict(svc.reader_autoscaling)} if svc.reader_autoscaling else {}
    for name in used_readers(settings):
        own = replace(settings, reader=reader_config(settings, name))  # its own engine settings as `reader`
        lazy = asked is not None and name not in asked
        readers[name] = pin(Reader, reader_deployment(name), reader_opts, **scaling).bind(own, lazy=lazy)
    reader, others = readers[DEFAULT_READER_NAME], {n: h for n, h in readers.items() if n}
    gen = generator_reader(settings)  # a served reader of its model serves Generate, else its own engine
    generator = readers[gen.reader] if gen.reader is not None else \
        pin(Reader, gen.deployment, reader_opts).bind(replace(settings, reader=gen.settings),
                                                      lazy=True)  # on first Generate
    sources = {}
    for name, n_shards in index_shards(settings).items():  # a dense index in several files: an actor each
        shards = tuple(pin(IndexShard, f"{source_deployment(name)}_shard{k}").bind(settings, name, k)
                       for k in range(n_shards)) if n_shards > 1 else ()
        sources[name] = pin(Source, source_deployment(name)).bind(settings, name, shards)
    group_specs = actor_groups(settings)
    groups = [pin(RetrieverGroup, f"Retrievers_{i}").bind(settings, list(g), sources, reader, others)
              for i, g in enumerate(group_specs)]
    if voter_config is None:
        voter_config = {"weights_file": settings.voter.weights} if settings.voter.weights else {}
    voter = pin(Voter.options(user_config=voter_config), "Voter").bind(settings, reader)  # NLI: the default reader
    return pin(http_ingress(EorIngress), INGRESS).bind(settings, groups, [list(g) for g in group_specs], voter, reader,
                                                       sources, generator, others)


def http_ingress(deployment: Any) -> Any:
    """The ingress deployment as an ASGI ingress too: Ray Serve's HTTP proxy reaches its HTTP/JSON
    routes and web page (EorIngress.__serve_build_asgi_app__), its rpc methods stay what both gRPC
    fronts call. The class itself stays plain, so tests build it without Ray."""
    from ray import serve

    return deployment.options(func_or_class=serve.ingress()(deployment.func_or_class))


def index_shards(settings: EorConfig) -> dict[str, int]:
    """Each configured source's index shards to serve as actors of their own (0 or 1: none)."""
    from retrievers.registry import source_class
    from serve.builder import index_path

    root = index_path(settings.index.name)
    return {name: source_class(s.backend).index_shards(str(root / name.lower()))
            for name, s in settings.index.sources.items()}


def app_builder(args: dict[str, Any]):
    """`serve run deploy/serve.yaml`: args {config: eor.yaml path} and/or {settings: {...}}."""
    from serve.builder import runnable_config

    args = dict(args or {})
    settings = config_from_dict(args["settings"]) if args.get("settings") else load_config(args.get("config") or None)
    settings, notes = runnable_config(settings)  # as `eor serve`: a reader not prepared here, its members left out
    for note in notes:
        log.warning("eor: %s", note)
    return build_app(settings)


def _runtime_env() -> dict:
    env = {k: v for k, v in os.environ.items() if k in PASS_ENV or k.startswith("EOR_")}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO_ROOT), os.environ.get("PYTHONPATH", "")) if p)
    return {"env_vars": env}


class LocalService:
    """Ray on this machine (127.0.0.1), the Serve app, and the gRPC front in a background thread."""

    def __init__(self, settings: EorConfig, ray_memory_mb: int = 300):
        self.settings = settings
        self.ray_memory_mb = ray_memory_mb
        self.front = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._temp_dir = ""
        self.metrics_address = ""

    def start(self) -> "LocalService":
        import ray
        from ray import serve
        from ray.serve.config import gRPCOptions

        from serve.app.grpc_service import PROXY_SERVICERS

        svc = self.settings.service
        env = _runtime_env()
        if svc.token_env and svc.token_env in os.environ:
            env["env_vars"][svc.token_env] = os.environ[svc.token_env]
        if svc.ray_address:  # a running cluster (`ray start` on each node): deploy onto it
            ray.init(address=svc.ray_address, runtime_env=env, configure_logging=True, logging_level="WARNING",
                     log_to_driver=False, namespace="eor")
        else:
            # short path: Ray's Unix sockets live under it (108-byte limit)
            self._temp_dir = svc.ray_temp_dir or tempfile.mkdtemp(prefix="eor-ray-", dir="/tmp")
            for k, v in RAY_ENV_DEFAULTS.items():  # read by the raylet and every worker it starts
                os.environ.setdefault(k, v)
            ray.init(_node_ip_address="127.0.0.1", _temp_dir=self._temp_dir, include_dashboard=False,
                     object_store_memory=self.ray_memory_mb * 2**20, _metrics_export_port=svc.metrics_port or None,
                     runtime_env=env, configure_logging=True, logging_level="WARNING", log_to_driver=False,
                     namespace="eor")
        self.metrics_address = f"127.0.0.1:{_metrics_port(svc)}"
        if svc.ray_grpc_port or svc.http_port:
            grpc = {"grpc_options": gRPCOptions(port=svc.ray_grpc_port, grpc_servicer_functions=list(PROXY_SERVICERS))} \
                if svc.ray_grpc_port else {}
            serve.start(proxy_location="HeadOnly", http_options=http_options(svc), **grpc)
        else:
            serve.start(proxy_location="Disabled")
        try:
            handle = self._deploy(None)
        except RuntimeError as exc:
            failed = start_failure(exc)
            if failed is None:
                raise  # not a deployment that failed to start: a bug, with its traceback
            log.error("the eor application did not start", exc_info=exc)  # the traceback: the log only
            try:
                self.stop()
            except Exception:  # noqa: BLE001 - the failed start is what the caller must hear
                log.exception("stopping Ray after the failed start")
            raise failed from None
        self._start_front(handle)
        return self

    def _deploy(self, voter_config: dict | None) -> Any:
        from ray import serve

        # a route prefix makes the app routable through Ray's proxies (None: handles only)
        svc = self.settings.service
        return serve.run(build_app(self.settings, voter_config), name=APP_NAME, blocking=False,
                         route_prefix="/" if svc.ray_grpc_port or svc.http_port else None)

    async def apply_weights(self, weights: dict) -> str:
        """`eor fit --push`: the pushed weights become the Voter's user_config (a lightweight
        update: the live replica's reconfigure(), nothing restarts)."""
        await asyncio.get_running_loop().run_in_executor(None, self._deploy, {"weights": weights})
        return "user_config weights (pushed)"

    def _start_front(self, handle: Any) -> None:
        from serve.app.grpc_service import EorFront

        svc = self.settings.service
        self._loop = asyncio.new_event_loop()
        ready = threading.Event()
        err: list[BaseException] = []

        async def boot():
            self.front = EorFront(handle, svc.host, svc.port, svc.tls_cert, svc.tls_key,
                                  apply_weights=self.apply_weights)
            await self.front.start()

        def run():
            asyncio.set_event_loop(self._loop)
            try:
                self._loop.run_until_complete(boot())
            except BaseException as exc:  # noqa: BLE001 - reported to the starting thread
                err.append(exc)
                ready.set()
                return
            ready.set()
            self._loop.run_forever()

        self._thread = threading.Thread(target=run, name="eor-grpc-front", daemon=True)
        self._thread.start()
        ready.wait()
        if err:
            raise err[0]

    @property
    def address(self) -> str:
        return self.front.address if self.front else ""

    @property
    def http_address(self) -> str:
        """The HTTP front's base URL ("" when off)."""
        svc = self.settings.service
        if not svc.http_port:
            return ""
        return f"{'https' if svc.tls_cert else 'http'}://{svc.host}:{svc.http_port}"

    def stop(self) -> None:
        import ray
        from ray import serve

        if self.front is not None and self._loop is not None:
            asyncio.run_coroutine_threadsafe(self.front.stop(0.5), self._loop).result(timeout=10)
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=10)
            self.front = None
        try:
            serve.shutdown()
        finally:
            ray.shutdown()
            if self._temp_dir and not self.settings.service.ray_temp_dir:
                shutil.rmtree(self._temp_dir, ignore_errors=True)

    def __enter__(self) -> "LocalService":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def start_failure(exc: RuntimeError) -> StartFailed | None:
    """Ray Serve's "Deploying application eor failed: ..." as one line naming each failed deployment and its
    error; None for any other RuntimeError."""
    if not str(exc).startswith(f"Deploying application {APP_NAME} failed"):
        return None
    return StartFailed(f"the service did not start: {deploy_failures(APP_NAME) or exc}")


def deploy_failures(app: str) -> str:
    """Each failed deployment of `app` and the last line of its replicas' error ("Voter: the weights were
    fitted for ..."), from Ray Serve's status; "" when it cannot be read."""
    from ray import serve

    try:
        status = serve.status().applications.get(app)
    except Exception:  # noqa: BLE001 - the start already failed: say what is known
        return ""
    reasons = []
    for name, d in (status.deployments.items() if status else []):
        if "UNHEALTHY" in str(d.status) or "FAIL" in str(d.status):
            lines = [line.strip() for line in (d.message or "").splitlines() if line.strip()]
            last = re.sub(r"^[\w.]+(Error|Exception): ", "", lines[-1]) if lines else str(d.status)
            reasons.append(f"{name}: {last}")
    return "; ".join(reasons)


def http_options(svc) -> dict:
    """Ray Serve's HTTP proxy: the HTTP front on the gRPC front's host, with its TLS; when only Ray's gRPC
    proxy is wanted, an HTTP proxy on a port nobody asked for is not opened (port 0)."""
    if not svc.http_port:
        return {"host": "127.0.0.1", "port": 0}
    if not svc.ray_address:  # on a cluster the proxy binds on the head node, not necessarily here
        check_port_free(svc.host, svc.http_port)
    tls = {"ssl_certfile": svc.tls_cert, "ssl_keyfile": svc.tls_key} if svc.tls_cert else {}
    return {"host": svc.host, "port": svc.http_port, **tls}


def check_port_free(host: str, port: int) -> None:
    """Ray's proxy that cannot bind its port only logs it and retries; say it at start instead."""
    import socket

    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # a listener refuses it; a closed one's TIME_WAIT not
        try:
            s.bind((host, port))
        except OSError as exc:
            raise OSError(f"cannot open the HTTP front on {host}:{port} ({exc.strerror}): another --http-port, "
                          "or --no-http") from None


def _metrics_port(svc) -> int:
    """This node's Prometheus port: the configured one when eor started Ray, else Ray's."""
    if svc.metrics_port and not svc.ray_address:
        return svc.metrics_port
    import ray

    here = ray.get_runtime_context().get_node_id()  # the public view of this node: ray.nodes()
    return next((int(n.get("MetricsExportPort") or 0) for n in ray.nodes() if n.get("NodeID") == here), 0)
