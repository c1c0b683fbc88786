"""The fleet tests' fixture: a recorded Prometheus scenario served over HTTP (prom_replay)."""

from __future__ import annotations

import pytest
from prom_replay import Replayer, WindowSpec, load_scenario, serve, spec_of


@pytest.fixture
def recorded_prometheus():
    servers = []

    def start(name: str) -> tuple[str, WindowSpec, Replayer]:
        doc = load_scenario(name)
        replayer = Replayer(doc["exchanges"])
        server, url = serve(replayer)
        servers.append(server)
        return url, spec_of(doc), replayer

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()
