"""Prometheus' recorded answers, served again over HTTP on 127.0.0.1 (tests/unit/fleet).

``tests/data/prometheus/<scenario>.json.gz`` holds every request the fleet window made to a real
Prometheus 2.42 (Debian's) scraping real vLLM CPU replicas, with its answer, recorded by
``scripts/fleet_lab.py record``. ``recorded_prometheus(scenario)`` starts a small HTTP server
that answers the same requests with the same bytes and status (anything else: HTTP 599 naming
the request, so a changed query fails loudly), and returns (url, the window spec, the server):
the client under test talks HTTP to it as it did to Prometheus.
"""

from __future__ import annotations

import gzip
import json
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qsl, urlsplit

from latscope.fleet.window import WindowSpec

DATA = Path(__file__).resolve().parents[2] / "data" / "prometheus"


def load_scenario(name: str) -> dict:
    return json.loads(gzip.decompress((DATA / f"{name}.json.gz").read_bytes()))


def spec_of(doc: dict) -> WindowSpec:
    s = doc["spec"]
    return WindowSpec(s["start"], s["end"], s["step"], s["selector"],
                      tuple(s["replica_labels"]))


@dataclass
class Replayer:
    exchanges: list[dict]
    seen_headers: list[dict] = field(default_factory=list)
    misses: list[str] = field(default_factory=list)

    def answer(self, path: str, params: dict[str, str]) -> tuple[int, bytes]:
        for ex in self.exchanges:
            if ex["path"] == path and ex["params"] == params:
                return ex["status"], ex["body"].encode()
        self.misses.append(f"{path} {params}")
        return 599, f"not recorded: {path} {params}".encode()


def serve(replayer: Replayer) -> tuple[ThreadingHTTPServer, str]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            parts = urlsplit(self.path)
            replayer.seen_headers.append(dict(self.headers))
            status, body = replayer.answer(parts.path, dict(parse_qsl(parts.query)))
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}"
