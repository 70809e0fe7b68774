"""The service's metrics without Ray: what is recorded, and the series that exist from start."""
from __future__ import annotations

from serve.config import config_from_dict


class RecordedMetric:
    """Stands in for a Ray metric: what was recorded, by method."""

    def __init__(self):
        self.records: list[tuple[str, float, dict]] = []

    def _record(self, value, tags=None):
        self.records.append(("_record", value, dict(tags or {})))

    def inc(self, value, tags=None):
        if value <= 0:  # as Ray's Counter.inc
            raise ValueError(f"value must be >0, got {value}")
        self.records.append(("inc", value, dict(tags or {})))


def test_retriever_error_and_timeout_series_exist_at_zero_from_start(monkeypatch):
    """Before any error the ingress records 0 for every retriever of the configured pool, so
    Prometheus has a series per retriever (a panel reads 0, not "no data")."""
    from serve.app import metrics
    from serve.app.ingress import EorIngress

    made: dict[str, RecordedMetric] = {}
    monkeypatch.setattr(metrics, "_get", lambda name: made.setdefault(name, RecordedMetric()))
    settings = config_from_dict({"pool": {"specs": ["Wiki@10", "SE@1", "ReFree"]}})
    EorIngress.func_or_class(settings, [], [], None, None)
    for name in ("eor_retriever_errors", "eor_retriever_timeouts"):
        assert made[name].records == [("_record", 0.0, {"retriever": s}) for s in ("Wiki@10", "SE@1", "ReFree")]
    metrics.inc("eor_retriever_errors", retriever="SE@1")
    assert made["eor_retriever_errors"].records[-1] == ("inc", 1.0, {"retriever": "SE@1"})
