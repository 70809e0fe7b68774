"""A service whose deployments fail to start: `eor serve` names each and the last line of its error,
never Ray's traceback (serve/app/application.py: deploy_failures, StartFailed)."""
from __future__ import annotations

from types import SimpleNamespace

import ray.serve

from serve.app.application import deploy_failures, start_failure
from serve.app.errors import StartFailed


def test_each_failed_deployment_is_named_with_the_last_line_of_its_error(monkeypatch):
    voter = SimpleNamespace(status="DeploymentStatus.DEPLOY_FAILED", message=(
        "The deployment failed to start 3 times in a row.\nTraceback (most recent call last):\n  File \"x.py\"\n"
        "ValueError: the shipped voter does not fit this service: reader 1.5B is ...\n"))
    healthy = SimpleNamespace(status="DeploymentStatus.HEALTHY", message="")
    app = SimpleNamespace(deployments={"Voter": voter, "Reader": healthy})
    monkeypatch.setattr(ray.serve, "status", lambda: SimpleNamespace(applications={"eor": app}))
    assert deploy_failures("eor") == "Voter: the shipped voter does not fit this service: reader 1.5B is ..."
    assert deploy_failures("other") == ""


def test_a_status_that_cannot_be_read_says_nothing_rather_than_fail(monkeypatch):
    monkeypatch.setattr(ray.serve, "status", lambda: (_ for _ in ()).throw(RuntimeError("no cluster")))
    assert deploy_failures("eor") == ""


def test_a_start_failure_is_one_line_for_the_cli():
    from serve.cli import run_reporting_errors

    def fail():
        raise StartFailed("the service did not start: Voter: it does not fit")
    assert run_reporting_errors(fail) == 2


def test_only_rays_deploy_failure_becomes_a_start_failure(monkeypatch):
    monkeypatch.setattr(ray.serve, "status", lambda: SimpleNamespace(applications={}))
    failed = start_failure(RuntimeError("Deploying application eor failed: Failed to update the deployments ['Voter']."))
    assert isinstance(failed, StartFailed) and str(failed).startswith("the service did not start: Deploying application")
    assert start_failure(RuntimeError("faiss: something else broke")) is None  # a bug keeps its traceback
