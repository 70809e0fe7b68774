"""The gate on `eor fit --push`: a candidate voter is judged against the live one before it
replaces it, on the same questions and the path production runs.

The slice: held-out questions (the eval split of the fit's question file, never fitted on)
and, optionally, the kept perturbed questions of a query-level bench round (`--gate-slice`).
The live voter's answers are the service's own: each question asked as production asks it
(no retrievers named: the live cascade). The candidate's answers are its cascade replayed
over the same service's answers from every retriever (one Ask naming the pool; the service's
reader cache serves what the first Ask read, so the pool is paid once). Paired Match; the push
is refused when the candidate loses more than the margin.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from serve.offline.dataset import Question

DEFAULT_MARGIN_PTS = 2.0


@dataclass(frozen=True)
class GateVerdict:
    questions: int
    live_voter: str
    candidate_voter: str
    live_match: float
    candidate_match: float
    candidate_only_right: int
    live_only_right: int
    p_value: float  # two-sided sign test over the questions only one of them got right
    margin_pts: float
    passed: bool

    @property
    def points(self) -> float:
        return 100.0 * (self.candidate_match - self.live_match)

    def line(self) -> str:
        verdict = "passes" if self.passed else f"REFUSED: it loses more than the {self.margin_pts:g}-pt margin"
        return (f"push gate on {self.questions} questions (the deployed path): candidate Match "
                f"{self.candidate_match:.3f} vs live {self.live_match:.3f} ({self.points:+.1f} pts; right only "
                f"with the candidate {self.candidate_only_right}, only with the live voter {self.live_only_right}, "
                f"sign test p = {self.p_value:.3f}): {verdict}")

    def to_dict(self) -> dict:
        return {**self.__dict__, "points": self.points}


def bench_slice(run_dir: str | Path) -> list[Question]:
    """The kept perturbed questions of a query-level bench round (its results.jsonl)."""
    path = Path(run_dir) / "results.jsonl"
    if not path.is_file():
        raise ValueError(f"--gate-slice: {run_dir} holds no bench round (results.jsonl)")
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            r = json.loads(line)
        except json.JSONDecodeError:
            continue  # a line cut short by an interrupted round
        if r.get("suite") == "query" and r.get("kept") and r.get("perturbation") != "original":
            out.append(Question(f"bench-{r['id']}", "bench:" + str(r["perturbation"]), r["question"], tuple(r["gold"])))
    if not out:
        raise ValueError(f"--gate-slice: {run_dir} has no kept perturbed query-level instance")
    return out


def result_of(reply: Any) -> Any:
    """A service's AskReply as the QuestionResult the offline replay reads."""
    from retrievers.types import Candidate, Context, QuestionResult

    cands = tuple(Candidate(c.retriever, c.answer, Context(c.retriever), error=c.error or None,
                            logprobs=tuple(c.token_logprobs) or None, error_kind=c.error_kind or None)
                  for c in reply.candidates)
    return QuestionResult(reply.question, cands)


def judge_push(client: Any, saved: Any, metrics: Sequence[Any], questions: Sequence[Question],
               margin_pts: float = DEFAULT_MARGIN_PTS, batch: int = 8) -> GateVerdict:
    """Ask `questions` of the live service twice (as production asks; naming the candidate's
    pool) and compare the live answers with the candidate's replayed cascade."""
    from fitting.evaluation import EOR
    from fitting.replay import replay_ensembles
    from fitting.questions import right as match  # whole-token Match, as the fit
    from fitting.paired import paired_counts, sign_test

    pool = list(saved.pool)
    live, named = [], []
    for i in range(0, len(questions), batch):
        qs = [q.question for q in questions[i:i + batch]]
        live += list(client.ask_batch(qs).replies)
        named += list(client.ask_batch(qs, retrievers=pool).replies)
    replay = replay_ensembles([(q, result_of(r)) for q, r in zip(questions, named)], saved, metrics)
    cand_ok = [match(a, q.answers) > 0 for a, q in zip(replay.answers[EOR], questions)]
    live_ok = [match(r.answer, q.answers) > 0 for r, q in zip(live, questions)]
    wins, losses = paired_counts(cand_ok, live_ok)
    n = max(len(questions), 1)
    cm, lm = sum(cand_ok) / n, sum(live_ok) / n
    voters = sorted({r.voter for r in live})
    return GateVerdict(len(questions), voters[0] if len(voters) == 1 else " / ".join(voters), saved.describe(),
                       lm, cm, wins, losses, sign_test(wins, losses), margin_pts,
                       100.0 * (cm - lm) >= -margin_pts)
