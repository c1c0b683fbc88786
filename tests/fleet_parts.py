"""Real fleet parts for the tests: Debian's ``prometheus`` scraping the replicas and Debian's
``nginx`` balancing them round robin, each started on 127.0.0.1 from a generated config in a
temporary directory and stopped by its own process group (`bash scripts/install.sh test`
installs both; their packaged services are never started).

    with PrometheusServer(["127.0.0.1:8001", "127.0.0.1:8002"], interval_s=1) as prom:
        prom.url                         # http://127.0.0.1:PORT
    with NginxBalancer(["127.0.0.1:8001", "127.0.0.1:8002"]) as lb:
        lb.url                           # round robin over the replicas
    NginxBalancer(..., auth_front=(prom.url, token))   # also serves Prometheus behind a token

Both wait for their own readiness (Prometheus: ``/-/ready``; nginx: a TCP connect), with a
deadline, and raise with the tail of their log when they do not come up.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path

READY_TIMEOUT_S = 60.0


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _binary(name: str, *extra: str) -> str:
    for candidate in (shutil.which(name), *extra):
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    raise RuntimeError(f"{name} not found: run `bash scripts/install.sh test`")


class _Process:
    """A child in its own session, its log in the temporary directory, stopped by its group."""

    name = "process"

    def __init__(self) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix=f"latscope-{self.name}-"))
        self.proc: subprocess.Popen[bytes] | None = None

    def _spawn(self, argv: list[str]) -> None:
        log = (self.dir / "stdout.log").open("wb")
        self.proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, start_new_session=True)

    def _wait(self, ready) -> None:
        deadline = time.monotonic() + READY_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.proc is not None and self.proc.poll() is not None:
                break
            if ready():
                return
            time.sleep(0.1)
        tail = self.log_tail()
        self.stop()
        raise RuntimeError(f"{self.name} did not come up: {tail}")

    def log_tail(self, lines: int = 20) -> str:
        found = sorted(self.dir.glob("*.log"))
        return " | ".join(line for p in found for line in
                          p.read_text(errors="replace").splitlines()[-lines:])

    def stop(self) -> None:
        proc = self.proc
        if proc is not None and proc.poll() is None:
            for sig, wait_s in ((signal.SIGTERM, 10.0), (signal.SIGKILL, 5.0)):
                try:
                    os.killpg(proc.pid, sig)
                except ProcessLookupError:
                    break
                try:
                    proc.wait(timeout=wait_s)
                    break
                except subprocess.TimeoutExpired:
                    continue
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self):
        raise NotImplementedError


class PrometheusServer(_Process):
    """Prometheus on 127.0.0.1 scraping ``targets`` (host:port) every ``interval_s`` as job
    ``job``; ``extra_labels`` are added to every target (e.g. a model name)."""

    name = "prometheus"

    def __init__(self, targets: list[str], *, interval_s: float = 1.0, job: str = "vllm",
                 port: int | None = None) -> None:
        super().__init__()
        self.targets = list(targets)
        self.interval_s = interval_s
        self.job = job
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"

    def config_text(self) -> str:
        targets = ", ".join(f"'{t}'" for t in self.targets)
        return (f"global:\n  scrape_interval: {self.interval_s:g}s\n"
                f"  evaluation_interval: {self.interval_s:g}s\n"
                f"scrape_configs:\n  - job_name: {self.job}\n"
                f"    scrape_interval: {self.interval_s:g}s\n"
                f"    scrape_timeout: {self.interval_s:g}s\n"
                f"    static_configs:\n      - targets: [{targets}]\n")

    def start(self) -> PrometheusServer:
        config = self.dir / "prometheus.yml"
        config.write_text(self.config_text())
        self._spawn([_binary("prometheus"), f"--config.file={config}",
                     f"--storage.tsdb.path={self.dir / 'data'}",
                     f"--web.listen-address=127.0.0.1:{self.port}",
                     "--log.level=warn"])
        (self.dir / "stdout.log").touch()
        self._wait(self._ready)
        return self

    def _ready(self) -> bool:
        try:
            with urllib.request.urlopen(self.url + "/-/ready", timeout=2) as resp:
                return resp.status == 200
        except OSError:
            return False

    def scraped(self, timeout_s: float = 30.0) -> None:
        """Wait until every target has been scraped successfully at least once."""
        import json

        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            with urllib.request.urlopen(self.url + "/api/v1/targets?state=active",
                                        timeout=5) as resp:
                active = json.load(resp)["data"]["activeTargets"]
            if len(active) == len(self.targets) and all(t["health"] == "up" for t in active):
                return
            time.sleep(0.2)
        raise RuntimeError(f"Prometheus did not scrape every target within {timeout_s:g} s")


class NginxBalancer(_Process):
    """nginx on 127.0.0.1, round robin over ``upstreams`` (host:port), streaming unbuffered;
    with ``auth_front=(url, token)`` a second server on ``auth_port`` proxies ``url`` (e.g.
    Prometheus) only to requests carrying ``Authorization: Bearer token``."""

    name = "nginx"

    def __init__(self, upstreams: list[str], *, port: int | None = None,
                 auth_front: tuple[str, str] | None = None) -> None:
        super().__init__()
        self.upstreams = list(upstreams)
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.auth_front = auth_front
        self.auth_port = free_port() if auth_front else None
        self.auth_url = f"http://127.0.0.1:{self.auth_port}" if auth_front else None

    def config_text(self) -> str:
        d = self.dir
        servers = "".join(f"    server {u} max_fails=0;\n" for u in self.upstreams)
        user = "user root;\n" if os.geteuid() == 0 else ""
        temps = "".join(f"  {kind}_temp_path {d}/tmp_{kind};\n"
                        for kind in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi"))
        front = ""
        if self.auth_front:
            url, token = self.auth_front
            front = (f"  server {{\n    listen 127.0.0.1:{self.auth_port};\n"
                     f"    location / {{\n"
                     f"      if ($http_authorization != \"Bearer {token}\") {{ return 401; }}\n"
                     f"      proxy_pass {url};\n    }}\n  }}\n")
        return (f"{user}daemon off;\nworker_processes 1;\npid {d}/nginx.pid;\n"
                f"error_log {d}/error.log warn;\nevents {{ worker_connections 512; }}\n"
                f"http {{\n  access_log {d}/access.log;\n{temps}"
                f"  upstream replicas {{\n{servers}    keepalive 32;\n  }}\n"
                f"  server {{\n    listen 127.0.0.1:{self.port};\n"
                f"    location / {{\n      proxy_pass http://replicas;\n"
                f"      proxy_http_version 1.1;\n      proxy_set_header Connection \"\";\n"
                f"      proxy_buffering off;\n      proxy_read_timeout 600s;\n    }}\n  }}\n"
                f"{front}}}\n")

    def start(self) -> NginxBalancer:
        config = self.dir / "nginx.conf"
        config.write_text(self.config_text())
        self._spawn([_binary("nginx", "/usr/sbin/nginx"), "-p", str(self.dir), "-c",
                     str(config), "-e", str(self.dir / "error.log")])
        self._wait(self._ready)
        return self

    def _ready(self) -> bool:
        with socket.socket() as sock:
            sock.settimeout(1)
            return sock.connect_ex(("127.0.0.1", self.port)) == 0
