"""The resumable suite runner: plan instances, run the unfinished ones in batches, record them.

    stats = run_suite(suite, client, ResultStore(out_dir), batch_size=8)

A suite plans every instance up front (cheap, no model calls), groups them (instances of one
group share a perturbation, so a batch of them is one Generate call and one AskBatch call)
and executes one batch at a time. Batches are cut from the *full* plan, not from what is left
to do, and a batch always perturbs all of its texts (the perturbations are seeded per batch
position), so an instance's perturbed text is the same in a fresh run and a resumed one; only
the unfinished instances are asked. Each record carries the reader seconds it cost: the
service's `reader_s` of its asks plus an even share of the Generate time of its batch.
"""
from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Hashable, Mapping, Protocol, Sequence

from bench.robust.client import DEPLOYED, EOR, is_ensemble
from bench.robust.store import Instance, ResultStore

#: a perturbation as the suites name it: label -> (registry name, constructor kwargs)
PerturbationSpecs = Mapping[str, tuple[str, Mapping[str, Any]]]


class Suite(Protocol):
    name: str

    def plan(self) -> list[Instance]: ...

    def group(self, inst: Instance) -> Hashable: ...

    def execute(self, batch: list[Instance], pending: set[str], client: Any) -> list[dict]: ...

    def score(self, records: list[dict]) -> dict: ...


@dataclass
class RunStats:
    planned: int = 0
    skipped: int = 0  # already finished in the store
    ran: int = 0
    seconds: float = 0.0
    reader_s: float = 0.0


def batches(plan: Sequence[Instance], group: Callable[[Instance], Hashable], size: int) -> list[list[Instance]]:
    """Instances grouped by `group` (groups in first-seen order, plan order inside a group),
    each group cut into consecutive batches of `size`."""
    groups: dict[Hashable, list[Instance]] = {}
    for inst in plan:
        groups.setdefault(group(inst), []).append(inst)
    return [g[i:i + size] for g in groups.values() for i in range(0, len(g), size)]


def run_suite(suite: Suite, client: Any, store: ResultStore, batch_size: int = 8,
              progress: bool = True) -> RunStats:
    from tqdm import tqdm

    if batch_size < 1:
        raise ValueError("batch_size must be >= 1")
    plan = suite.plan()
    ids = [i.id for i in plan]
    if len(set(ids)) != len(ids):
        raise ValueError(f"suite {suite.name}: two planned instances share an id")
    stats = RunStats(planned=len(plan), skipped=sum(1 for i in ids if i in store))
    t0 = time.perf_counter()
    with tqdm(total=len(plan), initial=stats.skipped, desc=suite.name, unit="inst",
              disable=not progress, dynamic_ncols=True) as bar:
        for batch in batches(plan, suite.group, batch_size):
            pending = {i.id for i in batch if i.id not in store}
            if not pending:
                continue
            gen0 = float(getattr(client, "generate_seconds", 0.0))
            tb = time.perf_counter()
            records = suite.execute(batch, pending, client)
            got = {r["id"] for r in records}
            if got != pending:
                raise RuntimeError(f"suite {suite.name} returned records for {sorted(got)} "
                                   f"but {sorted(pending)} were pending")
            share = (float(getattr(client, "generate_seconds", 0.0)) - gen0) / len(records)
            wall = (time.perf_counter() - tb) / len(records)
            for r in records:
                r["generate_s"] = round(share, 4)
                r["reader_s"] = round(r.get("ask_reader_s", 0.0) + share, 4)
                r["wall_s"] = round(wall, 4)
                stats.reader_s += r["reader_s"]
            store.add(records)
            stats.ran += len(records)
            bar.update(len(records))
    stats.seconds = time.perf_counter() - t0
    return stats


def systems_of(answer_maps: Sequence[Mapping[str, Any]]) -> list[str]:
    """Every system the records answer for, the ensembles first (the deployed path, then its
    abstaining row, then EoR over the named retrievers), the retrievers in the order they first appear."""
    seen: dict[str, None] = {}
    for m in answer_maps:
        seen.update(dict.fromkeys(m))
    head = [DEPLOYED] if DEPLOYED in seen else []
    head += sorted(s for s in seen if is_ensemble(s) and s not in (DEPLOYED, EOR))
    return head + [EOR] + [s for s in seen if not is_ensemble(s)]


def is_single(system: str) -> bool:
    return not is_ensemble(system)


def reply_fields(r: Any) -> dict:
    """What every suite records of one question's `AskResult` (None: it was not asked)."""
    if r is None:
        return {"answers": {}, "missing": [], "latency_s": 0.0, "ask_reader_s": 0.0}
    out = {"answers": r.by_system(), "missing": list(r.missing), "latency_s": r.latency_s, "ask_reader_s": r.reader_s}
    if r.deployed is not None:
        out["deployed"] = r.deployed.to_dict()
    return out


def deployed_cost(records: Sequence[Mapping[str, Any]]) -> dict | None:
    """The production path's cost per asked instance: reader tokens a cold run computes,
    rounds, retrievers run and latency (None: the run did not ask it)."""
    ds = [r["deployed"] for r in records if r.get("deployed")]
    if not ds:
        return None
    n = len(ds)
    voters = sorted({d.get("voter", "") for d in ds})
    return {"asked": n, "tokens": sum(d["tokens"] for d in ds) / n, "rounds": sum(d["rounds"] for d in ds) / n,
            "retrievers_ran": sum(len(d["ran"]) for d in ds) / n, "latency_s": sum(d["latency_s"] for d in ds) / n,
            "first_round_share": sum(d["rounds"] == 1 for d in ds) / n, "voter": voters[0] if len(voters) == 1 else voters}


def run_cost(records: Sequence[Mapping[str, Any]]) -> dict:
    """What a run cost, per perturbation and in total: instances, how many were asked (kept),
    reader seconds and wall seconds, and both per asked instance. A dropped instance was
    never asked; it costs only its share of its batch's Generate time, which the per-asked
    figures include, so they are what one more usable instance costs."""
    def tally(recs: list[Mapping[str, Any]]) -> dict:
        asked = sum(1 for r in recs if r.get("kept", True))
        reader = sum(float(r.get("reader_s", 0.0)) for r in recs)
        wall = sum(float(r.get("wall_s", 0.0)) for r in recs)
        return {"instances": len(recs), "asked": asked, "reader_s": reader, "wall_s": wall,
                "reader_s_per_asked": reader / asked if asked else None,
                "wall_s_per_asked": wall / asked if asked else None}

    groups: dict[str, list[Mapping[str, Any]]] = {}
    for r in records:
        groups.setdefault(str(r.get("perturbation", "")), []).append(r)
    return {"per_perturbation": {p: tally(rs) for p, rs in groups.items()}, "total": tally(list(records)),
            "deployed": deployed_cost(records)}


# ---------------------------------------------------------------------------- perturbations
def default_get(name: str, **kwargs: Any):
    from bench.robust.perturb import get

    return get(name, **kwargs)


def default_names() -> list[str]:
    from bench.robust.perturb import names

    return names()


def unknown_labels(labels: Sequence[str], known: Mapping[str, Any], perturber: "Perturber | None") -> list[str]:
    """The labels a suite was asked for that it defines nowhere: not in its own table
    (`known`) and not in a custom perturber's specs (tests and extensions pass one)."""
    extra = perturber.specs if perturber is not None else {}
    return [label for label in labels if label not in known and label not in extra]


def unregistered(specs: PerturbationSpecs) -> list[str]:
    """The registry names in `specs` that no perturbation module registers."""
    known = set(default_names())
    return sorted({name for name, _ in specs.values() if name not in known})


_SAMPLE_QUERY = "who wrote the first declaration of human rights"
_SAMPLE_DOC = ("The Cyrus Cylinder is an ancient clay cylinder. Its text has been called the first "
               "declaration of human rights. It was written in 539 BC.")
_SAMPLE_CONTEXT = {"question": _SAMPLE_QUERY, "answers": ["Cyrus"], "title": "Cyrus Cylinder"}


@dataclass
class Perturber:
    """Builds the suites' perturbations by label and applies them, memoised in-process (a
    query perturbed once serves every document setting it is asked with).

    `get` is the registry lookup (`bench.robust.perturb.get`; tests pass their own). Every
    perturbation is offered the client as `generator=`; one whose constructor refuses it
    (a rule-based one) is built without it.
    """

    specs: PerturbationSpecs
    generator: Any = None
    get: Callable[..., Any] | None = None  # None: the registry's `get`
    _built: dict[str, Any] = field(default_factory=dict, init=False)
    _memo: dict[str, tuple[list[str], list[bool]]] = field(default_factory=dict, init=False)

    def labels(self) -> list[str]:
        return list(self.specs)

    def build(self, label: str):
        if label not in self._built:
            if label not in self.specs:
                raise KeyError(f"no perturbation labelled {label!r}; known: {', '.join(self.specs)}")
            name, kwargs = self.specs[label]
            get = self.get or default_get
            try:
                self._built[label] = get(name, generator=self.generator, **kwargs)
            except TypeError as with_generator:  # a rule-based one takes no generator
                try:
                    self._built[label] = get(name, **kwargs)
                except TypeError:
                    raise with_generator from None
        return self._built[label]

    def preflight(self) -> None:
        """Build every perturbation and run each one that needs no LLM on a sample text, so a
        missing backend (TextAttack outside .venv-bench) fails before any instance runs."""
        for label in self.specs:
            pert = self.build(label)
            if hasattr(pert, "generator"):  # written by the service's reader: checked on use
                continue
            sample = _SAMPLE_DOC if getattr(pert, "target", "query") == "document" else _SAMPLE_QUERY
            pert.apply([sample], seed=0, context=[_SAMPLE_CONTEXT])

    def apply(self, label: str, texts: Sequence[str], seed: int,
              context: Sequence[Mapping[str, Any]] | None = None) -> list[str]:
        return self.apply_flagged(label, texts, seed, context)[0]

    def apply_flagged(self, label: str, texts: Sequence[str], seed: int,
                      context: Sequence[Mapping[str, Any]] | None = None) -> tuple[list[str], list[bool]]:
        """The perturbed texts and, per text, whether it came back unchanged (the perturbation
        could not apply: its `last_fallbacks` flag, or an identical output)."""
        key = json.dumps([label, seed, list(texts), list(context or [])], sort_keys=True, default=str)
        if key not in self._memo:
            pert = self.build(label)
            out = [str(t) for t in pert.apply(list(texts), seed=seed, context=context)]
            if len(out) != len(texts):
                raise RuntimeError(f"perturbation {label} returned {len(out)} texts for {len(texts)}")
            flags = list(getattr(pert, "last_fallbacks", None) or [])
            if len(flags) != len(out):
                flags = [False] * len(out)
            self._memo[key] = (out, [bool(f) or o.strip() == t.strip() for f, o, t in zip(flags, out, texts)])
        out, flags = self._memo[key]
        return list(out), list(flags)


def with_readers(retrievers: Sequence[str], needed: Sequence[str] = ("ReFree",)) -> tuple[str, ...]:
    """A retriever subset plus the ones a suite's metric needs (ReFree: the closed-book
    answer); the empty subset means the whole pool and stays empty."""
    if not retrievers:
        return ()
    return tuple(retrievers) + tuple(n for n in needed if n not in retrievers)
