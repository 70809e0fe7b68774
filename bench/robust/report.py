"""Reports of a suite run: `report.json` (all metrics), `report.md` (headline tables) and plots
(`radar.png`: a robustness radar like SURE's Figure 4; `bars.png`: EoR against every single
retriever on the suite's headline score).

    paths = write_report(metrics, out_dir, meta={"server": ..., "seed": ...})
"""
from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Callable, Sequence

from bench.robust.client import DEPLOYED, EOR, is_ensemble

SUITE_TITLES = {"sure": "SURE", "rare": "RARE", "query": "Query-level"}
RADAR_TITLES = {"sure": "mean RR per spurious-feature category", "rare": "RARE robustness scores",
                "query": "RAG Match per query perturbation"}


def _label(metrics: dict, system: str) -> str:
    """A system's name, marked † when it reads no given document (PK, ReFree)."""
    return f"{system} †" if system in metrics.get("doc_blind", ()) else system


def lead(metrics: dict) -> str:
    """The report's headline system: the deployed path when the run asked it, else EoR."""
    return DEPLOYED if DEPLOYED in metrics.get("systems", ()) else EOR


def _bold(metrics: dict, system: str) -> str:
    return f"**{system}**" if is_ensemble(system) else _label(metrics, system)


def _detailed(metrics: dict) -> list[str]:
    """The systems a report details: every ensemble row the run scored, then the best single."""
    return [s for s in metrics["systems"] if is_ensemble(s)] + [s for s in [metrics.get("best_single")] if s]


def write_report(metrics: dict, out_dir: str | Path, meta: dict | None = None, plots: bool = True) -> dict[str, str]:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = {"json": str(out / "report.json"), "markdown": str(out / "report.md")}
    Path(paths["json"]).write_text(json.dumps({"meta": meta or {}, "metrics": metrics}, indent=2, default=str) + "\n",
                                   encoding="utf-8")
    Path(paths["markdown"]).write_text(markdown(metrics, meta or {}), encoding="utf-8")
    if plots:
        paths.update(write_plots(metrics, out))
    return paths


# ---------------------------------------------------------------------------- headline scores
def headline(metrics: dict) -> tuple[str, dict[str, float | None]]:
    """The suite's one-number-per-system score (for bars and "best single")."""
    suite = metrics["suite"]
    if suite == "sure":
        return "mean RR over perturbations", metrics["mean_rr"]
    if suite == "rare":
        return "overall robustness", {s: v["overall"] for s, v in metrics["per_system"].items()}
    if suite == "query":
        return "RAG Match, perturbed queries", metrics["mean_rag_perturbed"]
    raise ValueError(f"unknown suite {suite!r}")


def radar_axes(metrics: dict) -> tuple[list[str], Callable[[str], list[float | None]]]:
    suite = metrics["suite"]
    if suite == "sure":
        cats = [c for c in ("style", "source", "logic", "format", "meta")
                if any(c in v for v in metrics["category_rr"].values())]
        return cats, lambda s: [metrics["category_rr"][s].get(c) for c in cats]
    if suite == "rare":
        axes = ["overall", "query", "document", "retrieval"]
        return axes, lambda s: [metrics["per_system"][s][a] for a in axes]
    perts = metrics["perturbations"]
    return perts, lambda s: [metrics["by_perturbation"][p]["rag"].get(s) for p in perts]


# ---------------------------------------------------------------------------- markdown
def _pct(v: float | None) -> str:
    return "–" if v is None else f"{100 * v:.1f}"


def _num(v: float | None) -> str:
    return "–" if v is None else f"{v:+.2f}"


def _table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def _delta(a: float | None, b: float | None) -> str:
    return "–" if a is None or b is None else f"{100 * (a - b):+.1f}"


def _row_best(values: dict[str, float | None], exclude: Sequence[str] = ()) -> str:
    """The best single system on one row ("SE@1 36.7", "+2 tied" when others score the same):
    the run-wide best single can lose a row that another retriever wins."""
    scored = sorted(((v, s) for s, v in values.items() if not is_ensemble(s) and s not in exclude and v is not None),
                    key=lambda vs: (-vs[0], vs[1]))
    if not scored:
        return "–"
    top, name = scored[0]
    ties = sum(1 for v, _ in scored[1:] if math.isclose(v, top))
    return f"{name} {_pct(top)}" + (f" (+{ties} tied)" if ties else "")


def markdown(metrics: dict, meta: dict) -> str:
    suite = metrics["suite"]
    title = {"sure": "SURE — spurious features in grounding documents",
             "rare": "RARE — retrieval-aware robustness",
             "query": "Query-level robustness"}[suite]
    parts = [f"# {title}\n"]
    facts = [f"{metrics['questions']} questions", f"{metrics['instances']} instances",
             f"reader time {metrics['cost']['total']['reader_s']:.0f} s"]
    facts += [f"{k}: {v}" for k, v in meta.items() if k in ("server", "seed", "dataset", "split", "started", "finished")]
    parts.append("; ".join(facts) + ". Scores in %.\n")
    parts.append({"sure": _md_sure, "rare": _md_rare, "query": _md_query}[suite](metrics))
    name, scores = headline(metrics)
    rows = sorted(((s, v) for s, v in scores.items() if v is not None), key=lambda sv: -sv[1])
    parts.append(f"\n## The deployed path, EoR and every single retriever: {name}\n\n")
    parts.append(_table(["system", name], [(_bold(metrics, s), _pct(v)) for s, v in rows]))
    if DEPLOYED in scores:
        parts.append(f"\n**{DEPLOYED}**: the question asked as production asks it (no retrievers named: the live "
                     f"voter's cascade); **{EOR}**: the vote over every retriever the run named.\n")
    parts.append(_md_abstention(metrics))
    if metrics.get("doc_blind"):
        parts.append(f"\n† {', '.join(metrics['doc_blind'])} read no given document (the service leaves them "
                     "unchanged): their scores under document perturbations do not measure document robustness.\n")
    parts.append(_md_cost(metrics["cost"]))
    parts.append(_md_deployed_cost(metrics["cost"].get("deployed")))
    return "".join(parts)


def _secs(v: float | None) -> str:
    return "–" if v is None else f"{v:.1f}"


def _md_cost(cost: dict) -> str:
    """The run's cost table (`runner.run_cost`), per perturbation and in total."""
    rows = [(p, c["instances"], c["asked"], f"{c['reader_s']:.0f}", _secs(c["reader_s_per_asked"]),
             _secs(c["wall_s_per_asked"])) for p, c in [*cost["per_perturbation"].items(), ("**total**", cost["total"])]]
    return ("\n## Cost: reader seconds per instance\n\n"
            + _table(["perturbation", "instances", "asked", "reader s", "reader s / asked", "wall s / asked"], rows)
            + "\nReader seconds add up the reader waits of the retriever groups, which run in parallel, so they "
              "exceed wall time. Per-instance figures include the Generate time of dropped instances.\n")


_HOW_SCORED = {"rare": "RARE's judge counts an abstention a safe refusal: robust on answer-deleted documents and "
                        "real retrieval (Table 3), never correct",
               "sure": "SURE's Y is Match and credits no refusal (its NO-RES scores 0): an abstention is Y = 0",
               "query": "Match credits no refusal: an abstention is no match"}
_GROUPED_BY = {"rare": "document setting", "sure": "subset", "query": "perturbation"}


def _md_abstention(m: dict) -> str:
    """The deployed path's abstaining row: what it is, how the suite scores it, how often it abstained."""
    a = m.get("abstention")
    if not a:
        return ""
    rows = [(g, t["asked"], t["abstained"], _pct(t["rate"])) for g, t in a["by"].items()]
    rows.append(("**total**", a["asked"], a["abstained"], _pct(a["rate"])))
    out = (f"\n**{a['system']}**: the same replies, the answer withheld where its P(right) is below "
           f"{a['min_confidence']:g} (AskReply.abstained); {_HOW_SCORED[m['suite']]}.\n\n"
           f"## Abstention of the deployed path below P(right) {a['min_confidence']:g}\n\n"
           + _table([_GROUPED_BY[m["suite"]], "asked", "abstained", "rate"], rows))
    if a["no_confidence"]:
        out += (f"\n{a['no_confidence']} asked instances were recorded before the service reported a confidence: "
                f"they are not in the {a['system']} row.\n")
    return out


def _md_deployed_cost(d: dict | None) -> str:
    if not d:
        return ""
    return ("\n## Cost of the deployed path, per asked instance\n\n"
            + _table(["voter", "instances", "reader tokens (cold)", "rounds", "retrievers run", "stopped after round 1",
                      "latency s"], [(d["voter"], d["asked"], f"{d['tokens']:.0f}", f"{d['rounds']:.2f}",
                                      f"{d['retrievers_ran']:.1f}", _pct(d["first_round_share"]), _secs(d["latency_s"]))])
            + "\nTokens are what a cold run computes (prompt tokens less prefix-cache hits, plus generated), "
              "whether or not the service's reader cache served them.\n")


def _md_sure(m: dict) -> str:
    best = m["best_single"]
    top = lead(m)
    ps = m["per_system"]
    out = [f"Known (closed-book correct): {m['known']}, Unknown: {m['unknown']}. "
           f"Best single retriever (mean RR; PK and ReFree excluded): **{best or '–'}**.\n\n",
           "## Robustness rate (RR, total) per perturbation\n\n"]
    rows = []
    for t in m["types"]:
        e = ps.get(top, {}).get(t, {}).get("Total", {})
        b = ps.get(best, {}).get(t, {}).get("Total", {}) if best else {}
        pres = m["preservation"].get(t, {})
        row_rr = {s: ps[s].get(t, {}).get("Total", {}).get("RR") for s in ps}
        rows.append((t, _pct(e.get("RR")), _pct(b.get("RR")), _delta(e.get("RR"), b.get("RR")),
                     _row_best(row_rr, m.get("doc_blind", ())),
                     e.get("n", 0), f"{pres.get('kept', 0)}/{pres.get('kept', 0) + pres.get('dropped', 0)}"))
    out.append(_table(["perturbation", f"{top} RR", f"{best or 'best single'} RR", f"{top} − best (pts)",
                       "best single on this row", "pairs", "kept"], rows))
    same, compared = m.get("same_source_docs", (0, 0))
    if compared and same == compared:
        out.append(f"\nsource_llm and source_self gave the same document in all {compared} instances: one model "
                   "wrote both (SURE means two different LLMs), so the two rows measure one perturbation.\n")
    elif same:
        out.append(f"\nsource_llm and source_self gave the same document in {same} of {compared} instances.\n")
    for sysname in _detailed(m):
        if sysname not in ps:
            continue
        out.append(f"\n## {sysname}: LR / RR / WR per subset (SURE Table 2)\n\n")
        header = ["perturbation"] + [f"{sub} {x}" for sub in ("K-G", "K-N", "U-G", "U-N", "Total") for x in ("LR", "RR", "WR")]
        rows = [[t] + [_pct(ps[sysname][t][sub][x]) for sub in ("K-G", "K-N", "U-G", "U-N", "Total")
                       for x in ("LR", "RR", "WR")] for t in m["types"]]
        out.append(_table(header, rows))
    cats = [c for c in ("style", "source", "logic", "format", "meta") if any(c in v for v in m["category_rr"].values())]
    out.append("\n## Mean RR per spurious-feature category (radar)\n\n")
    out.append(_table(["system", *cats], [(_label(m, s), *(_pct(m["category_rr"][s].get(c)) for c in cats))
                                         for s in m["systems"]]))
    return "".join(out)


def _md_rare(m: dict) -> str:
    best = m["best_single"]
    ps = m["per_system"]
    out = [f"Closed-book correct (g(q,∅)=1): {m['closed_book_correct']} of {m['questions']} questions. "
           f"Best single retriever (overall): **{best or '–'}**.\n\n", "## Robustness scores (RARE Table 4)\n\n"]
    rows = []
    for s in m["systems"]:
        v = ps[s]
        label = f"{_label(m, s)} (best)" if s == best else _bold(m, s)
        rows.append((label, *(_pct(v[w]) for w in ("overall", "query", "document", "retrieval")),
                     _pct(v["correct"]), _pct(v["refusal"])))
    out.append(_table(["system", "overall", "query", "document", "real retrieval", "correct", "refusal"], rows))
    for setting, reasons in m.get("dropped", {}).items():
        out.append(f"\nDropped {setting} documents: " + ", ".join(f"{n} {why}" for why, n in reasons.items()) + ".\n")
    for sysname in _detailed(m):
        if sysname not in ps:
            continue
        grid = ps[sysname]["grid"]
        settings = ["gt", "no_answer", "back_translate", "retrieval"]
        out.append(f"\n## {sysname}: robustness per query × document setting\n\n")
        out.append(_table(["query", *settings], [(q, *(_pct(grid[q].get(d)) for d in settings)) for q in grid]))
    return "".join(out)


def _md_query(m: dict) -> str:
    best = m["best_single"]
    top = lead(m)
    bp = m["by_perturbation"]
    srcs = m["sources"]
    out = [f"Best single retriever (mean RAG Match over perturbed queries): **{best or '–'}**.\n\n",
           "## Retrieval Recall@5 per perturbation\n\n"]
    out.append(_table(["perturbation", *srcs, "n", "unchanged (dropped)", "repeated variant (dropped)"],
                      [(p, *(_pct(bp[p]["recall"][s].get("@5")) for s in srcs), bp[p]["n"],
                        m.get("unchanged", {}).get(p, 0), m.get("repeated", {}).get(p, 0))
                       for p in m["perturbations"]]))
    for s in srcs:
        out.append(f"\n### {s}: Recall@k\n\n")
        out.append(_table(["perturbation", *(f"@{k}" for k in m["ks"])],
                          [(p, *(_pct(bp[p]["recall"][s].get(f"@{k}")) for k in m["ks"])) for p in m["perturbations"]]))
    out.append("\n## Match per perturbation: closed-book, oracle, RAG\n\n")
    rows = []
    for p in m["perturbations"]:
        e, b = bp[p]["rag"].get(top), bp[p]["rag"].get(best) if best else None
        rows.append((p, _pct(bp[p]["closed_book"]), _pct(bp[p]["oracle"].get(top)), _pct(e),
                     _pct(bp[p]["oracle"].get(best)) if best else "–", _pct(b), _delta(e, b),
                     _row_best(bp[p]["rag"])))
    out.append(_table(["perturbation", "closed-book", f"{top} oracle", f"{top} RAG", f"{best or 'best'} oracle",
                       f"{best or 'best'} RAG", f"{top} − best RAG (pts)", "best single RAG on this row"], rows))
    for sysname in _detailed(m):
        perts = m["perturbations"][1:]
        out.append(f"\n## {sysname}: Pearson r of per-sample deltas with RAG Match (paper Table 2)\n\n")
        out.append(_table(["module", *perts], [(mod, *(_num(m["correlations"][p].get(sysname, {}).get(mod))
                                                       for p in perts)) for mod in ("RET", "CB", "OR")]))
    out.append("\n## RAG Match of every system per perturbation\n\n")
    out.append(_table(["system", *m["perturbations"]],
                      [(s, *(_pct(bp[p]["rag"].get(s)) for p in m["perturbations"])) for s in m["systems"]]))
    return "".join(out)


# ---------------------------------------------------------------------------- plots
def write_plots(metrics: dict, out: Path) -> dict[str, str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    paths = {}
    axes, values = radar_axes(metrics)
    best = metrics.get("best_single")
    shown = [s for s in (lead(metrics), best) if s and s in metrics["systems"]]
    if len(axes) >= 3 and shown:
        angles = [2 * math.pi * i / len(axes) for i in range(len(axes))] + [0.0]
        fig = plt.figure(figsize=(6, 6))
        ax = fig.add_subplot(projection="polar")
        for s in metrics["systems"]:
            if s in shown:
                continue
            vs = [v if v is not None else 0.0 for v in values(s)]
            ax.plot(angles, vs + vs[:1], color="grey", alpha=0.25, linewidth=0.8)
        for s, color in zip(shown, ("tab:red", "tab:blue")):
            vs = [v if v is not None else 0.0 for v in values(s)]
            ax.plot(angles, vs + vs[:1], color=color, linewidth=2, label=s)
            ax.fill(angles, vs + vs[:1], color=color, alpha=0.1)
        ax.set_xticks(angles[:-1])
        ax.set_xticklabels(axes)
        ax.set_ylim(0, 1)
        ax.set_title(f"{SUITE_TITLES[metrics['suite']]}: {RADAR_TITLES[metrics['suite']]}\n(grey: other retrievers)")
        ax.legend(loc="lower right", bbox_to_anchor=(1.25, -0.1))
        fig.tight_layout()
        paths["radar"] = str(out / "radar.png")
        fig.savefig(paths["radar"], dpi=110)
        plt.close(fig)
    name, scores = headline(metrics)
    rows = sorted(((s, v) for s, v in scores.items() if v is not None), key=lambda sv: -sv[1])
    if rows:
        fig, ax = plt.subplots(figsize=(7, 0.35 * len(rows) + 1.2))
        systems = [s for s, _ in rows]
        colors = ["tab:red" if s == lead(metrics) else "tab:orange" if is_ensemble(s) else "tab:blue" if s == best else
                  "lightgrey" if s in metrics.get("doc_blind", ()) else "tab:grey" for s in systems]
        ax.barh([_label(metrics, s) for s in systems], [v for _, v in rows], color=colors)
        ax.invert_yaxis()
        ax.set_xlim(0, 1)
        ax.set_xlabel(name + (" († reads no given document)" if metrics.get("doc_blind") else ""))
        ax.set_title(f"{SUITE_TITLES[metrics['suite']]}: {lead(metrics)} and EoR vs single retrievers")
        fig.tight_layout()
        paths["bars"] = str(out / "bars.png")
        fig.savefig(paths["bars"], dpi=110)
        plt.close(fig)
    return paths
