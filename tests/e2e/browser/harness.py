"""What the browser proofs share besides fixtures: ports, the CLI as a child process, a
second origin that serves an attacker's page, and screenshots saved where people look.

    shots = Screenshots(ARTIFACTS / "test_x")
    page.goto(front_door.url + "/")
    shots.take(page, "landing")          # artifacts/screenshots/test_x/01-landing.png
"""

from __future__ import annotations

import re
import socket
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")

ROOT = Path(__file__).resolve().parents[3]
ARTIFACTS = ROOT / "artifacts" / "screenshots"
"""Where every page a browser proof visits is saved (git-ignored; the README names it)."""

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"]


def free_port(host: str = "127.0.0.1") -> int:
    """A port nothing listens on at the moment (a race, as every such helper is)."""
    with socket.socket() as sock:
        sock.bind((host, 0))
        port: int = sock.getsockname()[1]
        return port


def off_loop(call: Callable[[], T]) -> T:
    """``call()`` in a thread of its own, for code that runs ``asyncio.run`` (store reads,
    provisioning) while the sync Playwright API holds an event loop in this thread."""
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(call).result()


def fairgate_cli(
    config: Path, *args: str, timeout: float = 60.0
) -> subprocess.CompletedProcess[str]:
    """``fairgate ARGS -c CONFIG`` as its own process against the same store as the gateway."""
    return subprocess.run(
        [sys.executable, "-m", "fairgate", *args, "-c", str(config)],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


@dataclass
class Screenshots:
    """Numbered full-page screenshots of one test, ``<folder>/<NN>-<step>.png``."""

    folder: Path
    taken: list[Path] = field(default_factory=list)

    def take(self, page: Any, step: str) -> Path:
        """Save ``page`` (a Playwright Page) as the next step; returns the file written."""
        self.folder.mkdir(parents=True, exist_ok=True)
        name = re.sub(r"[^A-Za-z0-9_.-]+", "-", step).strip("-") or "page"
        path = self.folder / f"{len(self.taken) + 1:02d}-{name}.png"
        page.screenshot(path=str(path), full_page=True)
        self.taken.append(path)
        return path


def clear_folder(folder: Path) -> None:
    """Remove the PNGs a previous run of the same test left (so the folder shows this run)."""
    if folder.is_dir():
        for old in folder.glob("*.png"):
            old.unlink()


@dataclass
class SecondOrigin:
    """A plain HTTP server on another origin; ``pages`` maps a path to the HTML it serves.

    ``seen`` records each request as (path, its headers with lower-case names), so a test can
    show the page was loaded and what the browser sent.
    """

    url: str
    pages: dict[str, str]
    seen: list[tuple[str, dict[str, str]]]


@contextmanager
def second_origin(
    host: str, pages: dict[str, str], headers: dict[str, dict[str, str]] | None = None
) -> Iterator[SecondOrigin]:
    """Serve ``pages`` on ``http://host:<free port>`` in a thread for the block's duration;
    ``headers`` adds response headers per path."""
    seen: list[tuple[str, dict[str, str]]] = []
    extra = headers or {}

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            seen.append((self.path, {k.lower(): v for k, v in self.headers.items()}))
            body = pages.get(self.path)
            status = 200 if body is not None else 404
            data = (body or "not here").encode()
            self.send_response(status)
            self.send_header("content-type", "text/html; charset=utf-8")
            for name, value in extra.get(self.path, {}).items():
                self.send_header(name, value)
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: Any) -> None:
            return

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield SecondOrigin(f"http://{host}:{server.server_address[1]}", pages, seen)
    finally:
        server.shutdown()
        server.server_close()
