"""The deployed path with abstention: its second row, scored from the replies of its first.

`--min-confidence P` asks the deployed path at P. Its reply carries the voted answer (shown,
or withheld as `guess`), P(right) and the service's abstention, so the same Ask scores both
rows: `deployed` (the voted answer: what the path says at min_confidence 0, as before) and
`deployed, abstains below P` (an empty answer where it abstained). The service abstains when
P(right) is below the bar or unknown (voter/decision.py `abstains`, AskReply.abstained); a
record asked at another bar (a resumed run) is judged by that rule from its confidence, and
one recorded before the service reported a confidence has no answer in the second row.

How the suites score an abstention, as their papers score a refusal: RARE's judge counts it a
safe refusal (robust where Table 3 accepts one: answer-deleted documents, real retrieval);
SURE (Y = Match, §3.6) and the query-level suite (Match) never credit a refusal: an
abstention is not correct, exactly like SURE's "NO-RES".
"""
from __future__ import annotations

from typing import Any, Callable, Mapping, Sequence

from bench.robust.client import DEPLOYED, abstaining

#: the answers field of a record -> the field of the deployed reply behind its `deployed` answer
DEPLOYED_FIELDS = {"answers": "deployed"}
#: the record field `with_row` adds: answers field -> the systems that abstained there
ABSTENTIONS = "abstentions"


def abstains(deployed: Mapping[str, Any], min_confidence: float) -> bool | None:
    """Did (or would) the deployed reply abstain at `min_confidence`? The service's own flag when
    it was asked at that bar, else its rule on the recorded confidence; None: no confidence recorded."""
    if min_confidence <= 0:
        return False
    if "abstained" in deployed and deployed.get("min_confidence") == min_confidence:
        return bool(deployed["abstained"])
    if "confidence" not in deployed:
        return None
    return deployed["confidence"] is None or deployed["confidence"] < min_confidence


def with_row(records: Sequence[dict], min_confidence: float | None,
             fields: Mapping[str, str] = DEPLOYED_FIELDS) -> list[dict]:
    """The records, each answers field given the abstaining row beside `deployed` (the voted
    answer, or "" where it abstained) and `ABSTENTIONS` naming where it abstained. Copies: the
    stored records are unchanged. No `min_confidence`: the records as they are."""
    if not min_confidence:
        return list(records)
    row = abstaining(min_confidence)
    out = []
    for r in records:
        new, withheld = dict(r), {}
        for answers, deployed in fields.items():
            ans = r.get(answers) or {}
            said = abstains(r[deployed], min_confidence) if DEPLOYED in ans and r.get(deployed) else None
            if said is None:
                continue
            new[answers] = {**ans, row: "" if said else ans[DEPLOYED]}
            withheld[answers] = [row] if said else []
        new[ABSTENTIONS] = withheld
        out.append(new)
    return out


def abstained(r: Mapping[str, Any], system: str, answers: str = "answers") -> bool:
    """Did `system` abstain on record `r` (a record from `with_row`)?"""
    return system in r.get(ABSTENTIONS, {}).get(answers, ())


def rate(records: Sequence[Mapping[str, Any]], min_confidence: float | None, group: Callable[[Mapping], str],
         deployed: str = "deployed") -> dict | None:
    """How often the deployed path abstains at `min_confidence` over the asked records, in total
    and per `group` (RARE: the document setting; SURE: Known/Unknown × Golden/Noise), and how
    many records have no confidence to judge by."""
    if not min_confidence:
        return None
    tally: dict[str, list[int]] = {}
    total, blind = [0, 0], 0
    for r in records:
        if not r.get(deployed):
            continue
        said = abstains(r[deployed], min_confidence)
        if said is None:
            blind += 1
            continue
        for t in (total, tally.setdefault(group(r), [0, 0])):
            t[0] += 1
            t[1] += said

    def share(t: list[int]) -> dict:
        return {"asked": t[0], "abstained": t[1], "rate": t[1] / t[0] if t[0] else None}

    return {"min_confidence": min_confidence, "system": abstaining(min_confidence), **share(total),
            "no_confidence": blind, "by": {g: share(t) for g, t in sorted(tally.items())}}
