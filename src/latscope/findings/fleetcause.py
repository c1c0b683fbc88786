"""Why one replica is slower than the others, in words, from its own figures: where its TTFT
goes (queue, prefill, the API server's part), what bound its queue (the batch cap, the KV
cache, preemptions, the token budget: its own diagnosis's cause), and what sets it apart (its
load, its settings). Used by ``findings.fleet``'s latency rule."""

from __future__ import annotations

import numpy as np

from latscope.fleet.facts import ReplicaFacts, upper_median
from latscope.fleet.model import FleetFacts

# the causes a replica's own diagnosis may name for its queue, in the words the fleet uses
_QUEUE_CAUSES = ("server.queue_max_num_seqs", "server.kv_saturation", "server.preemptions",
                 "server.queue_token_budget")


def load_ratio(facts: FleetFacts, name: str) -> float | None:
    """The replica's rate of finished requests over the median of the others' rates."""
    rates = {r.name: r.rate(r.finished) for r in facts.replicas}
    mine = rates.get(name)
    others = np.array([v for k, v in rates.items() if k != name and v is not None])
    if mine is None or not others.size or float(upper_median(others)) <= 0:
        return None
    return mine / float(upper_median(others))


def cause_words(facts: FleetFacts, r: ReplicaFacts, metric: str) -> tuple[str, str]:
    """Where the slow replica's extra time goes, and its layer: the part of its TTFT that grew
    most against the others' (queue, prefill, or the API server's own part), with the share it
    takes of its TTFT and of theirs: "96% of its TTFT is queueing (the others' 0%), behind its
    batch cap (...)"."""
    if metric == "itl":
        return _itl_words(facts, r), "decode"
    mine = _parts(r)
    if not mine:
        return "its own histograms do not split it", "queue"
    theirs = [p for o in facts.replicas if o.name != r.name and (p := _parts(o))]
    grew = max(mine, key=lambda k: mine[k][0] - _part_of(theirs, k))
    share = mine[grew][1]
    others = (f" (the others' {float(np.median([p[grew][1] for p in theirs])):.0%})"
              if theirs else "")
    extra = _apart(facts, r)
    if grew == "queue":
        return f"{share:.0%} of its TTFT is queueing{others}, {_queue_cause(facts, r)}{extra}", \
            "queue"
    if grew == "prefill":
        return (f"{share:.0%} of its TTFT is prefill{others}; {_per_request(r)}{extra}",
                "prefill")
    return (f"{share:.0%} of its TTFT is its API server's own part (tokenization, IPC, output "
            f"processing){others}{extra}", "frontend")


def _parts(r: ReplicaFacts) -> dict[str, tuple[float, float]]:
    """Queue, prefill and the rest of a replica's mean TTFT: (seconds, share of its TTFT)."""
    ttft = r.latency.get("ttft")
    queue, prefill = r.latency.get("queue"), r.latency.get("prefill")
    if ttft is None or ttft.mean is None or ttft.mean.value <= 0 or queue is None \
            or prefill is None or queue.mean is None or prefill.mean is None:
        return {}
    total = ttft.mean.value
    rest = max(0.0, total - queue.mean.value - prefill.mean.value)
    return {"queue": (queue.mean.value, queue.mean.value / total),
            "prefill": (prefill.mean.value, prefill.mean.value / total),
            "rest": (rest, rest / total)}


def _part_of(theirs: list[dict[str, tuple[float, float]]], key: str) -> float:
    """The others' median seconds of one part (0 without others)."""
    return float(np.median([p[key][0] for p in theirs])) if theirs else 0.0


def _queue_cause(facts: FleetFacts, r: ReplicaFacts) -> str:
    conclusion = facts.conclusions.get(r.name)
    named = next((f.id for f in conclusion.ranked if f.id in _QUEUE_CAUSES
                  and f.severity.rank <= 1), None) if conclusion else None
    others = [o for o in facts.replicas if o.name != r.name]
    if named == "server.kv_saturation":
        return (f"behind a full KV cache (peak {_pct(r.kv_peak)}; the others peaked at "
                f"{_pct(max((o.kv_peak or 0) for o in others))})")
    if named == "server.preemptions":
        return (f"behind {r.preemptions or 0:g} preemptions (the others "
                f"{sum(o.preemptions or 0 for o in others):g} in all)")
    if named == "server.queue_token_budget":
        return "behind its per-step token budget (max_num_batched_tokens)"
    cap = r.running_peak_queued if r.running_peak_queued is not None else r.running_peak
    peak_others = max((o.running_peak or 0) for o in others) if others else None
    if named == "server.queue_max_num_seqs" or (cap is not None and peak_others is not None
                                                and cap < peak_others):
        return (f"behind its batch cap (max_num_seqs): Running never above {cap:g} while up "
                f"to {r.waiting_peak or 0:g} waited; the others ran up to {peak_others:g} at "
                "once")
    if (load_ratio(facts, r.name) or 0.0) >= 1.5:
        return "under more requests than the others get"
    return "its limit not named by its own counters"


def _itl_words(facts: FleetFacts, r: ReplicaFacts) -> str:
    batch = r.mean_running
    others = [o.mean_running for o in facts.replicas if o.name != r.name and o.mean_running]
    if batch is not None and others and batch > 1.5 * float(np.median(others)):
        return (f"it decodes a larger batch ({batch:.1f} running on average against "
                f"{float(np.median(others)):.1f}){_apart(facts, r)}")
    return f"its decode steps are slower at a like batch{_apart(facts, r)}"


def _per_request(r: ReplicaFacts) -> str:
    if r.prompt_tokens and r.finished:
        return f"{r.prompt_tokens / r.finished:.0f} prompt tokens a request"
    return "prompt sizes not known"


def _apart(facts: FleetFacts, r: ReplicaFacts) -> str:
    """What else sets the replica apart: more load, other settings."""
    notes = []
    ratio = load_ratio(facts, r.name)
    if ratio is not None and ratio >= 1.5:
        notes.append(f"it finished {ratio:.1f}x the others' median request rate")
    keys = [key for family, key, groups in config_differences(facts)
            if any(r.name in names for names in groups.values()) and _odd_one(r.name, groups)]
    if keys:
        notes.append(f"its settings differ ({', '.join(keys[:4])})")
    return f"; {'; '.join(notes)}" if notes else ""


def _odd_one(name: str, groups: dict[str, list[str]]) -> bool:
    mine = next(v for v, names in groups.items() if name in names)
    return len(groups[mine]) < max(len(n) for n in groups.values()) or len(groups) == 2 \
        and len(groups[mine]) == 1


def config_differences(facts: FleetFacts) -> list[tuple[str, str, dict[str, list[str]]]]:
    """(info series, label, {value: replicas}) for every label whose value is not the same on
    every replica that publishes the series."""
    out = []
    families = sorted({f for r in facts.replicas for f in r.config})
    for family in families:
        having = [r for r in facts.replicas if family in r.config]
        if len(having) < 2:
            continue
        keys = sorted({k for r in having for k in r.config[family]})
        for key in keys:
            groups: dict[str, list[str]] = {}
            for r in having:
                groups.setdefault(r.config[family].get(key, "(absent)"), []).append(r.name)
            if len(groups) > 1:
                out.append((family, key, groups))
    return out


def _pct(v: float | None) -> str:
    return "?" if v is None else f"{v:.0%}"
