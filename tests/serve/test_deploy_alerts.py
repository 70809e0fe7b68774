"""The alert rules in deploy/: promtool checks them and runs their unit tests (each alert fires
on the series that should raise it, and stays quiet on the others), the local Prometheus
config loads them, and every series they name is one the service or the bench exports."""
from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
PROMTOOL = shutil.which("promtool")
needs_promtool = pytest.mark.skipif(PROMTOOL is None, reason="promtool is not installed (Debian package "
                                    "`prometheus`; `./setup.sh --tests` installs it)")


def _promtool(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([PROMTOOL, *args], cwd=DEPLOY, capture_output=True, text=True, timeout=120)


@needs_promtool
def test_promtool_checks_the_rules_and_the_local_config():
    for args in (("check", "rules", "alerts.yml"), ("check", "config", "prometheus.yml")):
        res = _promtool(*args)
        assert res.returncode == 0, res.stdout + res.stderr


@needs_promtool
def test_promtool_test_rules_passes():
    res = _promtool("test", "rules", "alerts.test.yml")
    assert res.returncode == 0 and "SUCCESS" in res.stdout, res.stdout + res.stderr


@needs_promtool
def test_promtool_test_rules_can_fail(tmp_path):
    """The rule tests are not vacuous: with the regression threshold removed, an alert fires
    where the tests expect none, and promtool says so."""
    rules = (DEPLOY / "alerts.yml").read_text().replace(" and on (suite, system) eor_bench_regression == 1", "")
    (tmp_path / "alerts.yml").write_text(rules)
    shutil.copy(DEPLOY / "alerts.test.yml", tmp_path / "alerts.test.yml")
    res = subprocess.run([PROMTOOL, "test", "rules", "alerts.test.yml"], cwd=tmp_path, capture_output=True, text=True,
                         timeout=120)
    assert res.returncode != 0 and "EorRobustnessRegression" in res.stdout + res.stderr


def test_every_alert_names_an_exported_series():
    from serve.app.metrics import METRIC_KINDS

    suffixes = {"counter": ("_total",), "gauge": ("",), "histogram": ("_bucket", "_sum", "_count")}
    exported = {f"ray_{name}{sfx}" for name, kind in METRIC_KINDS.items() for sfx in suffixes[kind]}
    bench_src = (DEPLOY.parent / "bench" / "robust" / "cli.py").read_text()
    bench = {m for m in re.findall(r'(?:Gauge|Counter)\("(eor_bench_\w+)"', bench_src)}
    bench |= {f"{m}_total" for m in re.findall(r'Counter\("(eor_bench_\w+)"', bench_src)}
    rules = yaml.safe_load((DEPLOY / "alerts.yml").read_text())
    exprs = [r["expr"] for g in rules["groups"] for r in g["rules"]]
    named = {n for e in exprs for n in re.findall(r"\b(?:ray_eor|eor_bench)_\w+", e)}
    assert named and named <= exported | bench, sorted(named - exported - bench)
    assert "eor_bench_regression" in bench and "eor_bench_failures_total" in bench
    prom = yaml.safe_load((DEPLOY / "prometheus.yml").read_text())
    assert prom["rule_files"] == ["alerts.yml"]
    assert {j["job_name"] for j in prom["scrape_configs"]} >= {"eor-local", "eor-bench"}
