"""Hostile HTTP requests for the HTTP front (serve/app/http.py), and what every answer to one must
be: never a 500, an error as one line of JSON `{"error", "status"}`. Shared by the fast test (the
ASGI app over the ingress with stand-in handles) and the live one (Ray Serve's proxy, a real reader)."""
from __future__ import annotations

import json
import random
from typing import Any, Iterator

TOKEN = "s3cret-token"
GOOD = {"authorization": f"Bearer {TOKEN}"}
MB = 2**20

MALFORMED = [b"{", b"}", b"{'question': 'x'}", b"nul", b"\xff\xfe\xfd", b'{"question": "x"', b"[" * 5000 + b"]" * 5000,
             b'{"question": "\xc3\x28"}', b"\x00" * 64, b'{"question": "x"}{"question": "y"}', b"1e999999"]
WRONG = [{"question": 5}, {"question": ["a"]}, {"question": None}, {"question": {"a": 1}}, {"top_k": -1},
         {"question": "x", "top_k": "many"}, {"question": "x", "top_k": 10**30}, {"question": "x", "retrievers": "SE@1"},
         {"question": "x", "retrievers": [1, 2]}, {"question": "x", "retrievers": ["Nope@3"]},
         {"question": "x", "min_confidence": "high"}, {"question": "x", "min_confidence": 2},
         {"question": "x", "min_confidence": "NaN"}, {"question": "x", "min_confidence": -0.1},
         {"question": "x", "deadline_s": -5}, {"question": "x", "deadline_s": 1e308}, {"question": "x", "deadline_s": "soon"},
         {"question": "x", "documents": "x"}, {"question": "x", "documents": [{"text": 5}]},
         {"question": "x", "documents": [{"text": ""}]}, {"question": "x", "unknown_field": 1}, [], "question", None, 17,
         {"question": ""}, {"question": "   "}, {"question": "x" * 100_000},
         {"questions": "x"}, {"questions": [None]}, {"questions": []}]
TOKENS = ["Bearer wrong", "Basic czNjcmV0", "", "Bearer", f"bearer {TOKEN}", "Bearer " + "x" * 8000,
          f"Bearer {TOKEN}x", f"Bearer  {TOKEN}"]
TIMEOUTS = ["abc", "-1", "0", "1.5", "99999999999", ""]
PATHS = [("GET", "/v1/ask"), ("PUT", "/v1/ask"), ("DELETE", "/v1/ask/stream"), ("POST", "/v1/nope"),
         ("GET", "/web/../http.py"), ("GET", "/web/%2e%2e%2fhttp.py"), ("GET", "/files/etc/passwd"),
         ("GET", "/files/img/..%2f..%2fREADME.md"), ("GET", "/files/img/.hidden.png"), ("POST", "/readyz")]
POSTS = ["/v1/ask", "/v1/ask/stream", "/v1/ask/batch", "/v1/retrieve", "/v1/generate"]


def requests(n: int, seed: int = 0) -> Iterator[tuple[str, str, dict[str, Any]]]:
    """`n` hostile requests as (method, path, httpx keyword arguments), mixed and reproducible."""
    rng = random.Random(seed)
    json_type = {"content-type": "application/json"}
    valid = json.dumps({"question": "who painted the mona lisa"}).encode()
    for i in range(n):
        kind = i % 8
        path = rng.choice(POSTS)
        if kind == 0:
            body = rng.choice(MALFORMED) if rng.random() < 0.6 else valid[:rng.randrange(len(valid))]
            yield "POST", path, {"content": body, "headers": {**json_type, **GOOD}}
        elif kind == 1:
            yield "POST", path, {"content": json.dumps(rng.choice(WRONG)).encode(), "headers": {**json_type, **GOOD}}
        elif kind == 2:
            yield "POST", path, {"content": valid, "headers": {**json_type, "authorization": rng.choice(TOKENS)}}
        elif kind == 3:
            yield "POST", path, {"content": valid, "headers": json_type}  # no token at all
        elif kind == 4:  # too large: said by Content-Length, or chunked without one
            size = rng.choice([4 * MB + 1, 6 * MB])
            if rng.random() < 0.5:
                yield "POST", path, {"content": b" " * size, "headers": {**json_type, **GOOD}}
            else:
                yield "POST", path, {"content": iter([b" " * MB] * (size // MB + 1)), "headers": {**json_type, **GOOD}}
        elif kind == 5:
            ctype = rng.choice(["text/plain", "application/x-www-form-urlencoded", "", "multipart/form-data; boundary=x"])
            yield "POST", path, {"content": valid, "headers": {"content-type": ctype, **GOOD}}
        elif kind == 6:
            yield "POST", path, {"content": valid, "headers": {**json_type, **GOOD,
                                                               "connect-timeout-ms": rng.choice(TIMEOUTS)}}
        else:
            method, where = rng.choice(PATHS)
            yield method, where, {"headers": GOOD}


def check(response: Any) -> None:
    """What every answer to a hostile request must be: no 500 (no 5xx but 503/504, the service's
    own statuses), and an error is one line of JSON naming the error and its gRPC status."""
    status = response.status_code
    assert status < 500 or status in (503, 504), (status, response.text[:300])
    if status >= 400:
        text = response.text
        assert "\n" not in text.strip() and "Traceback" not in text, text[:300]
        body = json.loads(text)
        assert set(body) == {"error", "status"} and body["error"] and body["status"].isupper(), body
