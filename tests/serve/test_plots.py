"""serve/offline/plots.py: the Match-vs-cost plot, with a marked operating point."""
from __future__ import annotations

import math

from serve.offline.plots import cost_accuracy_plot


def test_cost_accuracy_plot_writes_a_png_with_a_marked_point(tmp_path):
    sweep = [{"scale": 0.0, "match": 0.41, "computed_tokens": 1700.0},
             {"scale": 0.5, "match": 0.43, "computed_tokens": 4700.0},
             {"scale": math.inf, "match": 0.427, "computed_tokens": 9291.0}]
    out = cost_accuracy_plot(sweep, {"SE@1": (450.0, 0.375)}, "title", tmp_path / "f.png",
                             curve="one threshold", marked={"fitted": (2340.0, 0.453)})
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and out.stat().st_size > 10_000


def test_the_ask_line_names_the_early_answer():
    from serve.cli.ask import _provisional_line

    assert _provisional_line(0, 3, "Paris", "SE@1", 0.7).startswith("early in stage 1/3: provisional answer 'Paris'")
    assert _provisional_line(2, 3, "Paris", "SE@1", 0.7).startswith("after stage 2/3:")
