"""SE (production): the Serper-style HTTP client against a local fake search API."""
from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from retrievers.registry import SOURCE_BACKENDS
from retrievers.sources.web_search import WebSearchSource, html_to_text

KEY_ENV = "EOR_SEARCH_API_KEY"
KEY = "test-key-123"

PAGE_0 = """<!doctype html><html><head><title>Mona</title><style>body { color: red; }</style>
<script type="text/javascript">var secret = "do not index";</script></head>
<body><h1>The Mona Lisa</h1><p>Painted by <b>Leonardo&nbsp;da Vinci</b> &amp; kept in the
Louvre.</p><SCRIPT>alert("x")</SCRIPT></body></html>"""


class FakeSearchAPI(BaseHTTPRequestHandler):
    requests: list = []  # (path, headers, body) of every POST; replaced per server

    def log_message(self, *args):  # keep test output clean
        pass

    def _send(self, code: int, body: bytes, ctype: str) -> None:
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self):
        raw = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self.requests.append((self.path, {k.lower(): v for k, v in self.headers.items()}, raw))
        if self.path != "/search":
            return self._send(404, b"{}", "application/json")
        if self.headers.get("X-API-KEY") != KEY:
            return self._send(403, b'{"message": "Unauthorized"}', "application/json")
        body = json.loads(raw)
        if set(body) != {"q", "num"} or not isinstance(body["num"], int):
            return self._send(400, b'{"message": "bad body"}', "application/json")
        base = f"http://127.0.0.1:{self.server.server_address[1]}"
        links = [f"{base}/page/0", f"{base}/missing", f"{base}/page/2", f"{base}/page/3", f"{base}/page/4"]
        organic = [{"title": f"{body['q']} #{i}", "link": link, "snippet": f"snippet {i} for {body['q']}",
                    "position": i + 1} for i, link in enumerate(links)]
        self._send(200, json.dumps({"searchParameters": body, "organic": organic[: body["num"]]}).encode(),
                   "application/json")

    def do_GET(self):
        if self.path == "/page/0":
            return self._send(200, PAGE_0.encode(), "text/html; charset=utf-8")
        if self.path.startswith("/page/"):
            n = self.path.rsplit("/", 1)[1]
            return self._send(200, f"<html><body><p>Page {n} text.</p></body></html>".encode(), "text/html")
        self._send(404, b"<html>not found</html>", "text/html")


@pytest.fixture
def api(monkeypatch):
    for var in ("http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv(KEY_ENV, KEY)
    handler = type("Handler", (FakeSearchAPI,), {"requests": []})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}", handler.requests
    server.shutdown()
    server.server_close()
    thread.join(5)


def test_snippet_mode_posts_the_query_and_reads_organic_results(api):
    base, requests = api
    src = WebSearchSource(url=f"{base}/search", timeout_s=5)
    (row,) = src.search(["who painted the mona lisa"], 3)
    assert [p.pid for p in row] == [f"{base}/page/0", f"{base}/missing", f"{base}/page/2"]
    assert [p.title for p in row] == [f"who painted the mona lisa #{i}" for i in range(3)]
    assert [p.text for p in row] == [f"snippet {i} for who painted the mona lisa" for i in range(3)]
    assert all(p.source == "SE" for p in row)
    assert [p.score for p in row] == sorted((p.score for p in row), reverse=True)
    ((path, headers, raw),) = requests
    assert path == "/search"
    assert headers["x-api-key"] == KEY and headers["content-type"] == "application/json"
    assert json.loads(raw) == {"q": "who painted the mona lisa", "num": 3}


def test_a_batch_of_queries_keeps_its_order(api):
    base, requests = api
    queries = [f"question {i}" for i in range(6)]
    rows = WebSearchSource(url=f"{base}/search", timeout_s=5, max_workers=3).search(queries, 2)
    assert [[p.title for p in row] for row in rows] == [[f"{q} #0", f"{q} #1"] for q in queries]
    assert sorted(json.loads(r[2])["q"] for r in requests) == queries
    assert WebSearchSource(url=f"{base}/search").search([], 2) == []


def test_fetch_pages_mode_reads_the_pages_as_plain_text(api):
    base, _ = api
    src = WebSearchSource(url=f"{base}/search", fetch_pages=True, timeout_s=5)
    (row,) = src.search(["mona lisa"], 5)
    first = row[0].text
    assert first == "Mona The Mona Lisa Painted by Leonardo da Vinci & kept in the Louvre."  # &nbsp; too
    assert "<" not in first and "secret" not in first and "alert" not in first and "color" not in first
    assert row[2].text == "Page 2 text." and row[4].text == "Page 4 text."
    assert row[0].title == "mona lisa #0"


def test_a_page_that_fails_keeps_its_snippet(api):
    base, _ = api
    (row,) = WebSearchSource(url=f"{base}/search", fetch_pages=True, timeout_s=5).search(["q"], 2)
    assert row[1].pid == f"{base}/missing"
    assert row[1].text == "snippet 1 for q"  # the 404 page fell back to the snippet


def test_missing_api_key_is_an_error_naming_the_variable(api, monkeypatch):
    base, requests = api
    monkeypatch.delenv(KEY_ENV)
    src = WebSearchSource(url=f"{base}/search")
    with pytest.raises(RuntimeError, match=KEY_ENV):
        src.load()
    with pytest.raises(RuntimeError, match=KEY_ENV):
        src.search(["q"], 3)
    assert requests == []  # nothing was sent without a key


def test_a_rejected_key_raises(api, monkeypatch):
    import urllib.error

    base, requests = api
    monkeypatch.setenv(KEY_ENV, "wrong")
    with pytest.raises(urllib.error.HTTPError) as err:
        WebSearchSource(url=f"{base}/search", timeout_s=5).search(["q"], 3)
    assert err.value.code == 403
    assert requests[0][1]["x-api-key"] == "wrong"


def test_the_key_env_var_is_configurable(api, monkeypatch):
    base, requests = api
    monkeypatch.delenv(KEY_ENV)
    monkeypatch.setenv("MY_SEARCH_KEY", KEY)
    (row,) = WebSearchSource(url=f"{base}/search", api_key_env="MY_SEARCH_KEY", timeout_s=5).search(["q"], 1)
    assert len(row) == 1


def test_registered_as_the_http_backend(api):
    base, _ = api
    src = SOURCE_BACKENDS.create("http", url=f"{base}/search", fetch_pages=True)
    assert isinstance(src, WebSearchSource) and src.fetch_pages and src.name == "SE"
    assert src.load() is src


def test_html_to_text():
    assert html_to_text("<p>a<br/>b</p>\n\n<i>c</i> &lt;d&gt;") == "a b c <d>"
    assert html_to_text("<style>x{}</style><Script src='s.js'></Script>ok") == "ok"
    assert html_to_text("") == ""


def test_the_pool_runs_over_the_http_source(api, memo_encoder):
    from retrievers.pool import PoolConfig, RetrieverPool
    from retrievers.reader import CachedReader

    from tests.retrievers.fakes import FakeEngine

    base, requests = api
    se = WebSearchSource(url=f"{base}/search", fetch_pages=True, timeout_s=5)
    pool = RetrieverPool(PoolConfig(specs=("SE@1", "SE@4", "SE@RR@3")), {"SE": se}, memo_encoder,
                         CachedReader(FakeEngine()))
    (result,) = pool.run(["mona lisa"])
    cands = {c.retriever: c for c in result.candidates}
    assert result.failed == []
    assert [p.text for p in cands["SE@1"].context.passages] == [
        "Mona The Mona Lisa Painted by Leonardo da Vinci & kept in the Louvre."]
    assert [p.pid for p in cands["SE@4"].context.passages] == [
        f"{base}/page/0", f"{base}/missing", f"{base}/page/2", f"{base}/page/3"]
    assert len(cands["SE@RR@3"].context.passages) == 3
    assert [json.loads(r[2])["num"] for r in requests] == [10]  # one search, as deep as @RR needs
