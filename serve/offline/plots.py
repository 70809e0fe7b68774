"""The paper's figures as PNGs: the RWR heatmap (Figure 1) and the retriever weights (Figure 6);
and ours: Match against reader tokens, and the reliability diagram of P(right).

Built on `matplotlib.figure.Figure` with the Agg canvas -- no pyplot, no display, no global
state -- so `eor eval` runs the same on a headless server.
"""
from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Sequence

import numpy as np

from voter.weights_io import SavedWeights


def _figure(width: float, height: float):
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), dpi=110)
    FigureCanvasAgg(fig)
    return fig


def safe_name(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text).strip("_") or "dataset"


def rwr_heatmap(matrix: np.ndarray, labels: Sequence[str], title: str, path: str | Path) -> Path:
    """Figure 1: cell (i, j) = share of the questions column j got wrong that row i got right.
    Undefined cells (column j got nothing wrong) are left blank."""
    m = len(labels)
    size = max(4.0, 0.55 * m + 2.0)
    fig = _figure(size + 1.0, size)
    ax = fig.add_subplot(1, 1, 1)
    data = np.array(matrix, dtype=float)
    np.fill_diagonal(data, np.nan)  # RWR(i, i) is 0 by definition: leave it blank, as the means do
    data = np.ma.masked_invalid(data)
    im = ax.imshow(data, cmap="Blues", vmin=0.0, vmax=1.0)
    ax.set_xticks(range(m), labels=list(labels), rotation=60, ha="right", fontsize=8)
    ax.set_yticks(range(m), labels=list(labels), fontsize=8)
    for i in range(m):
        for j in range(m):
            v = data[i, j]
            if v is not np.ma.masked and math.isfinite(v):
                ax.text(j, i, f"{v:.2f}", ha="center", va="center", fontsize=6,
                        color="white" if v > 0.6 else "black")
    ax.set_title(title, fontsize=10)
    ax.set_xlabel("column: answered wrong by", fontsize=8)
    ax.set_ylabel("row: answered right by", fontsize=8)
    fig.colorbar(im, ax=ax, fraction=0.046, pad=0.04)
    fig.tight_layout()
    fig.savefig(path)
    return Path(path)


def weights_plot(saved: SavedWeights, title: str, path: str | Path) -> Path:
    """Figure 6: one row of circles, larger and darker for a higher retriever weight omega_r;
    dropped retrievers (omega_r < t) are crossed out. Metric weights go in the caption."""
    w = np.asarray(saved.weights.retriever_weights, dtype=float)
    m = len(w)
    fig = _figure(max(5.0, 0.6 * m + 1.5), 2.8)
    ax = fig.add_subplot(1, 1, 1)
    top = max(saved.upper_bound, float(w.max()) if m else 0.0, 1e-9)
    x = np.arange(m)
    ax.scatter(x, np.zeros(m), s=60 + 900 * w / top, c=w, cmap="Blues", vmin=0.0, vmax=top, edgecolors="black")
    for i, (wi, kept) in enumerate(zip(w, saved.weights.kept)):
        ax.text(i, -0.55, f"{wi:.2f}", ha="center", fontsize=7)
        if not kept:
            ax.scatter([i], [0], marker="x", s=80, c="red")
    ax.set_xticks(x, labels=list(saved.pool), rotation=60, ha="right", fontsize=8)
    ax.set_yticks([])
    ax.set_ylim(-0.8, 0.8)
    ax.set_xlim(-0.7, m - 0.3)
    metric = ", ".join(f"{k} {v:.2f}" for k, v in zip(saved.metrics, saved.weights.metric_weights))
    ax.set_title(f"{title}\nmetric weights: {metric}", fontsize=9)
    fig.tight_layout()
    fig.savefig(path)
    return Path(path)


def cost_accuracy_plot(sweep: Sequence[dict], singles: dict[str, tuple[float, float]], title: str,
                       path: str | Path, curve: str = "adaptive EoR (threshold x scale)",
                       marked: dict[str, tuple[float, float]] | None = None) -> Path:
    """Match against reader tokens computed per question as the stop thresholds scale (0: stop
    at the first settled stage ... inf: run every kept retriever); single retrievers as dots,
    `marked` points (e.g. the fitted operating point) as stars."""
    fig = _figure(6.0, 4.2)
    ax = fig.add_subplot(1, 1, 1)
    xs = [p["computed_tokens"] for p in sweep]
    ys = [p["match"] for p in sweep]
    ax.plot(xs, ys, "-o", color="tab:blue", label=curve)
    for name, (x, y) in (marked or {}).items():
        ax.scatter([x], [y], s=90, marker="*", color="tab:red", zorder=3, label=name)
    for p in sweep:
        label = "inf" if not math.isfinite(p["scale"]) else f"{p['scale']:g}"
        ax.annotate(label, (p["computed_tokens"], p["match"]), fontsize=7, xytext=(3, 3), textcoords="offset points")
    for name, (x, y) in singles.items():
        ax.scatter([x], [y], s=18, color="gray")
        ax.annotate(name, (x, y), fontsize=6, color="gray", xytext=(2, -8), textcoords="offset points")
    ax.set_xlabel("reader tokens computed per question (prompt - prefix-cache hits + generated)")
    ax.set_ylabel("Match")
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    fig.savefig(path)
    return Path(path)


def reliability_plot(bins: Sequence[dict], ece: float | None, title: str, path: str | Path) -> Path:
    """The reliability diagram: per confidence bin, the share of answers right against the mean
    confidence (the diagonal is perfect calibration), and how many answers each bin holds."""
    fig = _figure(5.0, 5.6)
    ax, counts = fig.add_subplot(2, 1, 1), fig.add_subplot(2, 1, 2)
    fig.subplots_adjust(hspace=0.35)
    ax.plot([0, 1], [0, 1], "--", color="gray", label="perfectly calibrated")
    full = [b for b in bins if b["n"]]
    ax.bar([b["low"] for b in full], [b["accuracy"] for b in full], width=[b["high"] - b["low"] for b in full],
           align="edge", color="tab:blue", alpha=0.7, edgecolor="black", label="share right")
    ax.plot([b["confidence"] for b in full], [b["accuracy"] for b in full], "o", color="tab:red",
            label="(mean confidence, share right)")
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1)
    ax.set_xlabel("confidence (P(right) the answer carried)")
    ax.set_ylabel("share of answers right (Match)")
    ax.set_title(title + ("" if ece is None else f"\nECE {ece:.3f}"), fontsize=9)
    ax.legend(fontsize=7, loc="upper left")
    counts.bar([b["low"] for b in bins], [b["n"] for b in bins], width=[b["high"] - b["low"] for b in bins],
               align="edge", color="gray", edgecolor="black")
    counts.set_xlim(0, 1)
    counts.set_xlabel("confidence")
    counts.set_ylabel("answers")
    fig.savefig(path)
    return Path(path)
