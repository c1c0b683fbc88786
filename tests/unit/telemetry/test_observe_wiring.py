"""Which runs get a GPU sampler: the server on this host, unless told otherwise."""

from __future__ import annotations

from latscope.campaign.observe import gpu_sampler
from latscope.telemetry.sampler import TelemetrySampler


def test_local_server_gets_a_sampler_at_the_scrape_interval_on_its_port():
    [sampler] = gpu_sampler("http://127.0.0.1:8123", 1.5, None, None)
    assert isinstance(sampler, TelemetrySampler)
    assert sampler.interval_s == 1.5 and sampler.server_port == 8123


def test_remote_server_gets_none_unless_asked_or_known_to_share_the_host():
    assert gpu_sampler("http://10.1.2.3:8000", 2.0, None, None) == []
    assert len(gpu_sampler("http://10.1.2.3:8000", 2.0, True, None)) == 1
    assert len(gpu_sampler("http://10.1.2.3:8000", 2.0, None, True)) == 1


def test_off_when_turned_off_or_when_nothing_is_scraped():
    assert gpu_sampler("http://127.0.0.1:8000", 2.0, False, None) == []
    assert gpu_sampler("http://127.0.0.1:8000", 0, True, None) == []
