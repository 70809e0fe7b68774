"""`eor serve`: Ray on this machine (or a running cluster: --ray-address), the Serve
application, the gRPC front and the HTTP front (Ray Serve's HTTP proxy)."""
from __future__ import annotations

import os
import sys
import time

from serve.cli.common import stop_on_sigterm


def cmd_serve(args) -> int:
    """`eor serve`: Ray on this machine, the Serve app, the gRPC and HTTP fronts; Ctrl-C stops it."""
    from serve.app.application import LocalService
    from serve.config import actor_groups, actor_layout, load_config

    overrides = {"reader": {"model": args.model}, "index": {"name": args.index},
                 "service": {"host": args.host, "port": args.port, "ray_grpc_port": args.ray_grpc_port,
                             "http_port": 0 if args.no_http else args.http_port,
                             "metrics_port": args.metrics_port, "tls_cert": args.tls_cert, "tls_key": args.tls_key,
                             "ray_address": args.ray_address},
                 "voter": {"weights": args.weights}}
    settings = load_config(args.config, overrides)
    from serve.builder import runnable_config

    settings, notes = runnable_config(settings)  # a reader not prepared here: its members left out, said
    for note in notes:
        print(f"eor: warning: {note}", file=sys.stderr)
    svc = settings.service
    if svc.host not in ("127.0.0.1", "localhost", "::1") and not (svc.tls_cert and os.environ.get(svc.token_env)):
        print(f"eor: warning: listening on {svc.host} without TLS and a bearer token (${svc.token_env})",
              file=sys.stderr)
    if settings.voter.weights != "equal" and not svc.ray_address:
        # a voter that does not fit is said before Ray starts, in one line (on a cluster the Voter reads its
        # files on a node, which may hold what this machine does not: it says so there)
        from serve.app.deployments import voter_from_files
        from serve.config_readers import reader_models

        voter_from_files(list(settings.pool.specs), reader_models(settings), settings.voter.weights)
    t = time.time()
    n_actors = len(actor_groups(settings))
    layout = f"service.retriever_actors: {actor_layout(settings)}"
    print(f"starting Ray and the eor application ({len(settings.pool.specs)} retrievers in {n_actors} "
          f"actor{'s' if n_actors != 1 else ''}, {layout}; "
          f"the readers load their models first)...", file=sys.stderr)
    print(engines_line(settings), file=sys.stderr)
    service = LocalService(settings).start()
    stop_on_sigterm()  # main() did too; the service's own startup may have reset it
    try:
        tls = " (TLS)" if svc.tls_cert else ""
        print(f"eor gRPC: {service.address}{tls}", flush=True)
        if svc.ray_grpc_port:
            print(f"Ray Serve gRPC proxy: 0.0.0.0:{svc.ray_grpc_port} (no TLS)", flush=True)
        if service.http_address:
            print(f"eor HTTP: {service.http_address} (the web page; JSON API /v1/..., schema /openapi.json)", flush=True)
        print(f"metrics: http://{service.metrics_address}/metrics", flush=True)
        print(f"ready in {time.time() - t:.0f} s; Ctrl-C stops", file=sys.stderr, flush=True)
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        print("stopping...", file=sys.stderr)
    finally:
        service.stop()
    return 0



def engines_line(settings) -> str:
    """Which model each engine runs: "readers: Reader qwen2.5-coder-0.5b, Reader_1.5B
    qwen2.5-coder-1.5b; Generate: qwen2.5-coder-1.5b (Reader_1.5B's engine)"; with generator.model
    "auto", why Generate got its model."""
    from serve.config import GENERATOR_AUTO, reader_deployment
    from serve.config_readers import generator_reader, reader_config, used_readers
    from serve.engine.models import STRONG_READER

    readers = ", ".join(f"{reader_deployment(n)} {reader_config(settings, n).model}" for n in used_readers(settings))
    gen = generator_reader(settings)
    why = ""
    if settings.generator.model == GENERATOR_AUTO:
        why = "; generator.model auto: the strong reader" if gen.model == STRONG_READER else \
            f"; generator.model auto: {STRONG_READER} is not prepared (eor models prepare {STRONG_READER})"
    how = f"{gen.deployment}'s engine" if gen.reader is not None else f"its own engine, {gen.deployment}"
    return f"readers: {readers}; Generate: {gen.model} ({how}){why}"
