"""SE (production): a Serper-style HTTP search API client.

POST {"q": query, "num": n} with the key in the `X-API-KEY` header (read from the
environment, never from code or config files); results come from the JSON `organic` list.
The paper fetched the pages behind the result URLs; with `fetch_pages` the client does the
same (plain-text extraction), otherwise it uses the result snippets.
"""
from __future__ import annotations

import html
import json
import os
import re
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Sequence

from retrievers.sources.base import PAGES, KnowledgeSource
from retrievers.types import Passage

_TAGS = re.compile(r"<(script|style)[^>]*>.*?</\1>|<[^>]+>", re.S | re.I)


def html_to_text(raw: str) -> str:
    return re.sub(r"\s+", " ", html.unescape(_TAGS.sub(" ", raw))).strip()


@dataclass
class WebSearchSource(KnowledgeSource):
    """Configured as `SE: {backend: http, options: {url: ..., fetch_pages: true}}` (its fields)."""

    url: str = "https://google.serper.dev/search"
    api_key_env: str = "EOR_SEARCH_API_KEY"
    fetch_pages: bool = False
    timeout_s: float = 10.0
    max_workers: int = 8
    name: str = "SE"
    shape = PAGES

    def load(self) -> "WebSearchSource":
        if not os.environ.get(self.api_key_env):
            raise RuntimeError(f"the HTTP search source needs an API key in ${self.api_key_env}")
        return self

    def _post(self, query: str, n: int) -> dict:
        req = urllib.request.Request(
            self.url, data=json.dumps({"q": query, "num": n}).encode(), method="POST",
            headers={"X-API-KEY": os.environ.get(self.api_key_env, ""), "Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=self.timeout_s) as resp:
            return json.loads(resp.read().decode("utf-8"))

    def _page_text(self, link: str, fallback: str) -> str:
        try:
            with urllib.request.urlopen(link, timeout=self.timeout_s) as resp:
                text = html_to_text(resp.read().decode("utf-8", "replace"))
            return text or fallback
        except Exception:
            return fallback  # an unreachable page keeps the snippet, as a browser user would

    def _one(self, query: str, k: int) -> list[Passage]:
        results = self._post(query, k).get("organic", [])[:k]
        out = []
        for rank, r in enumerate(results):
            link = str(r.get("link", f"result-{rank}"))
            snippet = str(r.get("snippet", ""))
            text = self._page_text(link, snippet) if self.fetch_pages else snippet
            out.append(Passage(link, str(r.get("title", "")), text, self.name, float(k - rank)))
        return out

    def search(self, queries: Sequence[str], k: int) -> list[list[Passage]]:
        self.load()
        with ThreadPoolExecutor(max_workers=self.max_workers) as ex:
            return list(ex.map(lambda q: self._one(q, k), queries))
