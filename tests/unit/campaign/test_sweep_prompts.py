"""A sweep's steps each send prompts of their own: with one seed for every step, each step
resent the one before's prompts and a server's prefix cache served every later step."""

from __future__ import annotations

import json

import pytest

from fakeserver import FakeServer
from latscope.campaign.sweep import step_seed
from latscope.cli.main import main


@pytest.mark.slow
def test_every_sweep_step_sends_prompts_of_its_own(tmp_path):
    out = tmp_path / "sweep"
    with FakeServer(ttft_ms=2, itl_ms=1) as srv:
        assert main(["sweep", "--url", srv.url, "--concurrency", "1,2,4", "-n", "20",
                     "--input-len", "16", "--output-len", "4", "-o", str(out)]) == 0
        sent = [t.prompt for t in srv.truth().values()]
    assert len(sent) >= 60 and len(set(sent)) == len(sent)  # warm-ups included
    seeds = [json.loads(m.read_text())["config"]["seed"] for m in out.glob("step-*/manifest.json")]
    assert len(seeds) == 3 == len(set(seeds))


def test_a_steps_seed_follows_the_sweep_seed_the_mode_and_the_load():
    assert step_seed(0, "concurrency", 8) == step_seed(0, "concurrency", 8)  # tune's trials
    others = {step_seed(0, "concurrency", 16), step_seed(1, "concurrency", 8),
              step_seed(0, "rate", 8), step_seed(0, "rate", 8.5)}
    assert len(others) == 4 and step_seed(0, "concurrency", 8) not in others
