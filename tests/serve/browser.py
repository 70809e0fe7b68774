"""A headless Chromium driven through its driver (Debian `chromium` and `chromium-driver`,
installed by `./setup.sh --tests`), over the W3C WebDriver protocol: plain HTTP and JSON, so the
standard library speaks it and no WebDriver package joins the locked dependencies.

    with Browser() as b:
        b.open("http://127.0.0.1:8000/")
        b.run("document.getElementById('question').value = 'x'")
        b.wait("return document.body.dataset.state === 'done'", timeout_s=300)
        b.screenshot(path)
"""
from __future__ import annotations

import base64
import json
import shutil
import socket
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import Any

CHROMIUM = ("chromium", "chromium-browser", "google-chrome")
DRIVER = ("chromedriver", "chromium-driver")


def found(names: tuple[str, ...]) -> str | None:
    return next((p for p in map(shutil.which, names) if p), None)


def missing() -> str | None:
    """Why no browser can run here (None: one can)."""
    if not found(CHROMIUM) or not found(DRIVER):
        return "Chromium and its driver are not installed: ./setup.sh --tests (Debian: apt-get install chromium chromium-driver)"
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Browser:
    """One headless Chromium session through chromedriver."""

    def __init__(self, width: int = 1200, height: int = 1500):
        self.port = _free_port()
        self.driver = subprocess.Popen([found(DRIVER), f"--port={self.port}"], stdout=subprocess.DEVNULL,
                                       stderr=subprocess.DEVNULL)
        self.base = f"http://127.0.0.1:{self.port}"
        for _ in range(100):
            try:
                self._call("GET", "/status")
                break
            except OSError:
                time.sleep(0.1)
        args = ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                f"--window-size={width},{height}"]
        caps = {"capabilities": {"alwaysMatch": {"browserName": "chrome", "goog:chromeOptions": {
            "binary": found(CHROMIUM), "args": args}}}}
        self.session = self._call("POST", "/session", caps)["sessionId"]

    def _call(self, method: str, path: str, body: dict | None = None) -> Any:
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.base + path, data=data, method=method,
                                     headers={"content-type": "application/json"})
        with urllib.request.urlopen(req, timeout=120) as r:
            return json.loads(r.read() or b"{}").get("value")

    def _session(self, method: str, path: str, body: dict | None = None) -> Any:
        return self._call(method, f"/session/{self.session}{path}", body)

    def open(self, url: str) -> None:
        self._session("POST", "/url", {"url": url})

    def run(self, script: str, *args: Any) -> Any:
        """Run JavaScript in the page (a function body: `return` gives the value back)."""
        return self._session("POST", "/execute/sync", {"script": script, "args": list(args)})

    def wait(self, predicate: str, timeout_s: float = 120.0, every_s: float = 0.2) -> Any:
        """Poll `predicate` (a function body) until it returns something truthy; its value."""
        end = time.time() + timeout_s
        while True:
            value = self.run(predicate)
            if value:
                return value
            if time.time() > end:
                raise TimeoutError(f"the page never satisfied: {predicate}")
            time.sleep(every_s)

    def screenshot(self, path: Path, fit: bool = True) -> Path:
        """The viewport as a PNG; `fit`: the window's height first set to the page's, so all of it is in."""
        if fit:
            height = self.run("return document.body.scrollHeight + window.outerHeight - window.innerHeight + 16")
            rect = self._session("GET", "/window/rect")
            self._session("POST", "/window/rect", {"width": rect["width"], "height": int(height)})
        path.write_bytes(base64.b64decode(self._session("GET", "/screenshot")))
        return path

    def close(self) -> None:
        try:
            self._session("DELETE", "")
        except OSError:
            pass
        self.driver.terminate()
        try:
            self.driver.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.driver.kill()

    def __enter__(self) -> "Browser":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
