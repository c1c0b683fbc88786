"""A/B results as the findings engine takes them (``latscope.results.ABResult``), from the few
fields a test cares about; the rest get the values of an A/B that measured nothing. And a real
A/B against a fake server (``gateway_ab``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from latscope.results import ABResult, section

_EMPTY: dict[str, Any] = {
    "finding_id": "f", "change": "c", "metric": "ttft_mean_ms", "load": 1, "arms": [],
    "a_values": [], "b_values": [], "a_mean": None, "b_mean": None, "change_pct": None,
    "ci95_pct": None, "helped": False, "verdict": None, "warmup_excluded": True,
    "prefix_cache_hit_rate": {}, "run_dirs": [], "note": ""}


def ab(**fields: Any) -> ABResult:
    """An ``ABResult`` with ``fields`` over the empty one (a dict's other keys are refused)."""
    return section({**_EMPTY, **fields}, ABResult)


def gateway_ab(url: str, mix: str, out_dir: Path, *, requests: int, warmup: int,
               pairs: int = 2) -> Any:
    """``campaign.experiment.run_experiment`` at c=4 under ``mix``: A straight to the server at
    ``url``, B through latscope's gateway (sjf, two in flight), the A/B that needs no server
    restart; the ``Experiment``."""
    from latscope.campaign.experiment import run_experiment
    from latscope.campaign.proofs import _NoControl
    from latscope.campaign.proposals import Proposal
    from latscope.campaign.servers import Change, Running
    from latscope.load import BenchConfig, WorkloadSpec
    from latscope.load.config import parse_mix

    base = BenchConfig(url=url, workload=WorkloadSpec(mix=parse_mix(mix)))
    current = Running(url=url, model=None, pid=None, log_path=None, tokenizer_dir=None,
                      start_s=0.0)
    proposal = Proposal("latency.queue", Change(), metric="short_ttft_mean_ms",
                        guard="long_e2e_mean_ms", gateway={"policy": "sjf", "max_inflight": 2},
                        requests=requests, warmup=warmup)
    return run_experiment(proposal, _NoControl(), current, base, 4, out_dir, pairs=pairs,
                          scrape_interval_s=0)
