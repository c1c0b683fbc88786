"""Findings about the GPUs over a load run, from ``telemetry_facts`` (latscope.telemetry.facts):
the GPU telemetry joined with the server's ``/metrics`` scrapes of the same run.

Each rule is documented in docs/findings.md (one section per id) and fires only on values read.
The shares are of the scrapes in a state (requests waiting, requests running), not of a latency:
what a lower clock costs the latency depends on whether the steps are compute- or memory-bound,
and only an A/B measures it -- so these findings carry no ``impact`` and never rank above a
measured share of TTFT. The one exception is ``gpu.idle_time`` (``idle_time``): the share of the
time no kernel ran at all, a symptom whose causes (eager mode, launch blocking) the cause table
joins to it, as it joins a profile's idle time.
"""

from __future__ import annotations

from dataclasses import dataclass

from latscope.findings.impact import make_impact, severity_for_share
from latscope.model import Evidence, Finding, Severity
from latscope.telemetry.facts import TelemetryFacts

REF = "docs/findings.md"
NVML_DOC = "https://docs.nvidia.com/deploy/nvml-api/group__nvmlDeviceQueries.html"
# Thresholds, on the scrapes with requests waiting: a pattern, not one unlucky scrape.
MIN_SCRAPES = 2
LIMITED_WARNING = 0.5  # clocks held down by a limit in half the queued scrapes
LIMITED_INFO = 0.2
LOW_UTIL_PCT = 50.0  # NVML utilization.gpu: share of time a kernel ran
# vLLM takes --gpu-memory-utilization (0.9 by default) of the device: above this the rest of the
# headroom is gone too (CUDA graphs, NCCL buffers, another process).
MEMORY_FULL = 0.98
GIB = 2**30


def telemetry_findings(facts: TelemetryFacts) -> list[Finding]:
    """Every GPU telemetry finding of one run (its ``telemetry_facts``)."""
    if facts.status == "absent":
        return []
    if not facts.ok:
        return [_unavailable(facts)]
    rules = (_state, _clocks_limited, _underused, _memory_full, _pcie_link, _errors,
             _other_process)
    return [f for rule in rules for f in rule(facts) if f is not None]


# Mean utilisation while the server ran requests: at or above, the GPU is the limit at that load;
# below LOW_UTIL_PCT it is not (the host, the scheduler or the client is). Not 100: the scrapes
# at the edges of each load level (ramp-up, drain) pull the mean down -- on the H200 recording
# (tests/data/telemetry) saturated levels read 100% and the mean over busy scrapes is 90%.
GPU_BOUND_PCT = 85.0


@dataclass(frozen=True, slots=True)
class CapacityHint:
    """What the GPU says about the capacity verdict at one load: its busy share, the share of
    scrapes its clocks were held down by a power or thermal limit, whether it is the limit
    ("gpu", "not_gpu" or None: neither can be said) and that in words."""

    gpu_busy_pct: float
    power_or_thermal_limited_share: float
    limit: str | None
    text: str
    source: str


def capacity_hint(facts: TelemetryFacts) -> CapacityHint | None:
    """The GPU at one load (diagnose: at the knee); None without telemetry or a scrape with
    requests running."""
    util = facts.busy.util_pct_mean if facts.ok else None
    if util is None:
        return None
    limited = facts.busy.limited_share or 0.0
    limit: str | None
    if util >= GPU_BOUND_PCT:
        limit, text = "gpu", f"the GPU was busy {util:.0f}% of the time: it is the limit here"
        if limited >= LIMITED_INFO:
            text += f", its clocks held down by a limit in {limited:.0%} of the scrapes"
    elif util < LOW_UTIL_PCT:
        limit, text = "not_gpu", (f"the GPU was busy only {util:.0f}% of the time: the limit is "
                                  "the host, the scheduler or the client, not the GPU")
    else:
        limit, text = None, f"the GPU was busy {util:.0f}% of the time"
    return CapacityHint(round(util, 1), round(limited, 3), limit, text, facts.where)


def _unavailable(facts: TelemetryFacts) -> Finding:
    # the title is the whole message, one line: no evidence row repeating it
    return Finding("gpu.telemetry_unavailable", Severity.INFO,
                   f"No GPU telemetry: {facts.why or 'no reader answered'}", [],
                   reference=f"{REF}#gpu.telemetry_unavailable", layer="gpu")


def _state(facts: TelemetryFacts) -> list[Finding]:
    """What each of the server's GPUs did while it served: the figures the verdict reads."""
    busy = facts.busy
    ev = [Evidence("server GPUs", ",".join(map(str, facts.gpus)), "", facts.gpus_from)]
    # while it served (idle samples sit at the lowest clock and say nothing about the load)
    ev += [e for e in (
        _ev("SM clock mean while serving", busy.sm_clock_mhz_mean,
            f"MHz of {_fmt(busy.sm_clock_max_mhz)} max", facts),
        _ev("power mean while serving", busy.power_w_mean,
            f"W of {_fmt(busy.power_limit_w)} W limit", facts),
        _ev("scrapes while serving with clocks held down by a limit",
            None if busy.limited_share is None else 100 * busy.limited_share, "%",
            facts)) if e]
    for gpu, g in facts.per_gpu.items():
        ev += [e for e in (
            _ev(f"GPU{gpu} utilisation mean over the run", g.util_pct_mean, "%", facts),
            _ev(f"GPU{gpu} temperature max", g.temp_c_max, "C", facts)) if e]
    util = busy.util_pct_mean
    title = (f"GPU busy {util:.0f}% of the time while the server ran requests "
             f"({busy.scrapes} scrapes)" if util is not None else
             "GPU telemetry recorded (no scrape with requests running to join it to)")
    return [Finding("gpu.busy", Severity.INFO, title, ev,
                    reference=f"{REF}#gpu.busy", layer="gpu", role="symptom")]


def _clocks_limited(facts: TelemetryFacts) -> list[Finding]:
    q = facts.queued
    share = q.limited_share
    if q.scrapes < MIN_SCRAPES or share is None or share < LIMITED_INFO:
        return []
    cause = ("power" if (q.power_limited_share or 0) >= (q.thermal_limited_share or 0)
             else "thermal")
    ev = [Evidence("queued scrapes with clocks held down", round(share, 3),
                   f"of {q.scrapes} with requests waiting", facts.where),
          Evidence("clock-event reasons", ", ".join(q.reasons), "", facts.where)]
    ev += [e for e in (_ev("SM clock mean while queued", q.sm_clock_mhz_mean,
                           f"MHz of {_fmt(q.sm_clock_max_mhz)} max", facts),
                       _ev("power mean while queued", q.power_w_mean,
                           f"W of {_fmt(q.power_limit_w)} W limit", facts)) if e]
    for gpu, g in facts.per_gpu.items():
        for policy, seconds in g.violation_s.items():
            if seconds > 0 and policy in ("power", "thermal"):
                ev.append(Evidence(f"GPU{gpu} {policy} violation time over the run",
                                   round(seconds, 2), "s", "nvmlDeviceGetViolationStatus"))
    clock = q.clock_ratio_mean
    lowered = _lowered_limits(facts)
    ev += [Evidence(f"GPU{gpu} power limit", limit, f"W, below its default {default:.0f} W",
                    "nvmlDeviceGetEnforcedPowerLimit / PowerManagementDefaultLimit")
           for gpu, limit, default in lowered]
    # At the board's own power limit a loaded GPU caps its clock by design (a 700 W H200 under
    # sustained load does): worth knowing, nothing to restore. A lowered limit or a thermal
    # limit is a fault someone can remove.
    fault = bool(lowered) or cause == "thermal"
    return [Finding(
        "gpu.clocks_limited",
        Severity.WARNING if fault and share >= LIMITED_WARNING else Severity.INFO,
        f"GPU clocks held below max by the {cause} limit in {share:.0%} of the scrapes with "
        f"requests queued" + (f" (SM clock at {clock:.0%} of max)" if clock else "")
        + ("; the power limit is lowered" if lowered else ""), ev,
        why=("A capped clock lengthens every engine step, so the queue drains slower; how much "
             "latency that costs depends on how compute-bound the steps are (decode is mostly "
             "memory-bound and loses less than the clock does)."),
        fix=("Restore the power limit (nvidia-smi -pl to the default) and check cooling "
             if fault else "At the board's default power limit this is the GPU's design "
             "ceiling: more throughput needs more GPUs, not a setting; ")
            + ("(nvidia-smi -q -d POWER,PERFORMANCE; AMD: amd-smi metric --power); measure any "
               "change with an A/B: the clock deficit is not the latency gained."),
        reference=f"{REF}#gpu.clocks_limited; {NVML_DOC}", layer="gpu")]


def _lowered_limits(facts: TelemetryFacts) -> list[tuple[int, float, float]]:
    """(gpu, enforced limit, default) for the GPUs whose power limit was set below default."""
    out = []
    for gpu, g in facts.per_gpu.items():
        limit, default = g.power_limit_w, g.power_default_limit_w
        if limit is not None and default and limit < default - 1.0:
            out.append((gpu, round(limit, 1), default))
    return out


def _underused(facts: TelemetryFacts) -> list[Finding]:
    q = facts.queued
    util = q.util_pct_mean
    if q.scrapes < MIN_SCRAPES or util is None or util >= LOW_UTIL_PCT:
        return []
    ev = [Evidence("GPU utilisation mean while requests waited", round(util, 1), "%",
                   facts.where),
          Evidence("scrapes with requests waiting", q.scrapes, f"of {q.of}",
                   "vllm:num_requests_waiting > 0, /metrics of the run"),
          Evidence("of them below 50% utilisation", round(q.low_util_share or 0, 3),
                   "share", facts.where)]
    return [Finding(
        "gpu.underused_while_queued",
        Severity.WARNING,
        f"GPU busy only {util:.0f}% of the time while requests waited: the GPU is not the "
        "limit", ev,
        why=("Requests queue although the GPU idles most of the time: what limits the server is "
             "on the host (the engine's CPU work per step, tokenisation, the API server) or the "
             "scheduler's per-step budget, not the GPU's speed."),
        fix=("Look at the host and the scheduler: latscope doctor (CPU governor, affinity), "
             "--max-num-batched-tokens / --max-num-seqs, a trace's idle gaps "
             "(latscope trace); a faster GPU would not help."),
        # it says where the limit is not; the cause (host, scheduler) is another finding's
        reference=f"{REF}#gpu.underused_while_queued; {NVML_DOC}", layer="gpu", role="symptom")]


def _memory_full(facts: TelemetryFacts) -> list[Finding]:
    out = []
    for gpu, g in facts.per_gpu.items():
        frac = g.mem_used_frac_max
        if frac is None or frac < MEMORY_FULL:
            continue
        used, total = (g.mem_used_bytes_max or 0) / GIB, (g.mem_total_bytes or 0) / GIB
        ev = [Evidence(f"GPU{gpu} memory used at peak", round(used, 2), f"GiB of {total:.2f}",
                       facts.where)]
        out.append(Finding(
            "gpu.memory_full", Severity.WARNING,
            f"GPU{gpu} memory {frac:.1%} full at its peak", ev,
            why=("No headroom left beyond vLLM's --gpu-memory-utilization share: CUDA graph "
                 "capture, a larger batch or another process fails with out-of-memory, and "
                 "memory another process holds shrinks the KV cache vLLM can allocate."),
            fix=("Lower --gpu-memory-utilization, or move other processes off the GPU "
                 "(gpu.other_process lists them)."),
            reference=f"{REF}#gpu.memory_full", layer="gpu"))
    return out


def _pcie_link(facts: TelemetryFacts) -> list[Finding]:
    out = []
    for gpu, p in facts.pcie.items():
        if not p.under_load_samples:
            continue  # links drop to a lower generation when idle: only a loaded one counts
        slow_gen = p.gen is not None and p.max_gen and p.gen < p.max_gen
        narrow = p.width is not None and p.max_width and p.width < p.max_width
        if not (slow_gen or narrow):
            continue
        ev = [Evidence(f"GPU{gpu} PCIe link under load", f"gen {p.gen} x{p.width}", "",
                       facts.where),
              Evidence(f"GPU{gpu} PCIe link maximum", f"gen {p.max_gen} x{p.max_width}",
                       "", "nvmlDeviceGetMaxPcieLinkGeneration / MaxPcieLinkWidth")]
        out.append(Finding(
            "gpu.pcie_degraded", Severity.WARNING,
            f"GPU{gpu} PCIe link below its maximum under load (gen {p.gen} x{p.width} of "
            f"gen {p.max_gen} x{p.max_width})", ev,
            why=("Host-device copies (inputs, sampled tokens, swapped or offloaded KV blocks) "
                 "move slower; a degraded link also hints at a seating or riser fault."),
            fix=("Check the slot, riser and BIOS PCIe settings (lspci -vv: LnkSta against "
                 "LnkCap); measure a copy-heavy run before and after."),
            reference=f"{REF}#gpu.pcie_degraded", layer="gpu"))
    return out


def _errors(facts: TelemetryFacts) -> list[Finding]:
    out = []
    for gpu, e in facts.errors.items():
        xids, unc, cor = e.xids, e.ecc_uncorrected, e.ecc_corrected
        if not xids and not unc and not cor:
            continue
        ev = [Evidence(f"GPU{gpu} XID events during the run", ",".join(map(str, xids)) or "none",
                       "", "nvmlEventSetWait (XID critical errors)"),
              Evidence(f"GPU{gpu} ECC uncorrected during the run", unc, "errors", facts.where),
              Evidence(f"GPU{gpu} ECC corrected during the run", cor, "errors", facts.where)]
        severe = bool(xids or unc)
        out.append(Finding(
            "gpu.errors", Severity.CRITICAL if severe else Severity.INFO,
            f"GPU{gpu} reported " + ", ".join(p for p in (
                f"XID {','.join(map(str, xids))}" if xids else "",
                f"{unc} uncorrected ECC error(s)" if unc else "",
                f"{cor} corrected ECC error(s)" if cor else "") if p) + " during the run", ev,
            why=("XIDs and uncorrected ECC errors are GPU faults: work is retried or killed, "
                 "and the GPU may need a reset; corrected errors cost little but can precede "
                 "page retirement."),
            fix=("Read the XID's meaning (NVIDIA's XID catalog), check dmesg, drain the GPU and "
                 "reset or replace it if errors repeat."),
            reference=f"{REF}#gpu.errors; "
                      "https://docs.nvidia.com/deploy/xid-errors/index.html", layer="gpu"))
    return out


def _other_process(facts: TelemetryFacts) -> list[Finding]:
    found = [(gpu, p) for gpu, procs in (facts.others or {}).items() for p in procs]
    if not found:
        return []
    ev = [Evidence(f"GPU{gpu} pid {p.pid}",
                   "?" if p.used_bytes is None else round(p.used_bytes / GIB, 2),
                   "GiB", facts.where) for gpu, p in found[:8]]
    return [Finding(
        "gpu.other_process", Severity.WARNING,
        f"{len(found)} other process(es) held the server's GPU(s) during the run", ev,
        why=("Another tenant takes SMs, memory bandwidth and memory the server counted on; its "
             "kernels interleave with the server's steps."),
        fix="Give the server GPUs of its own (CUDA_VISIBLE_DEVICES, a scheduler's GPU request).",
        reference=f"{REF}#gpu.other_process", layer="gpu")]


def _ev(name: str, value: float | None, unit: str, facts: TelemetryFacts) -> Evidence | None:
    return None if value is None else Evidence(name, round(value, 1), unit, facts.where)


def _fmt(value: float | None) -> str:
    return "?" if value is None else f"{value:.0f}"


def idle_time(hint: CapacityHint | None, where: str) -> Finding | None:
    """``gpu.idle_time``: no kernel ran for most of the time the server ran requests at
    ``where`` (``capacity_hint`` of that run: NVML's utilisation below ``LOW_UTIL_PCT``). NVML
    counts a sample period as busy if any kernel ran in it, so 1 - utilisation is time the GPU
    was wholly idle: on the H200 with --enforce-eager 69-75% at every load, with CUDA graphs
    2-22% at c=1 (tests/data/gpu-matrix/eager-telemetry). A symptom: its cause comes from
    the cause table (docs/findings.md#gpu.idle_time)."""
    if hint is None or hint.gpu_busy_pct >= LOW_UTIL_PCT:
        return None
    busy = hint.gpu_busy_pct
    idle = 1.0 - busy / 100.0
    return Finding(
        "gpu.idle_time", severity_for_share(idle),
        f"GPU idle {idle:.0%} of the time while the server ran requests at {where} (GPU "
        "telemetry: no kernel running)",
        [Evidence(f"GPU busy at {where}", round(busy, 1), "% of the time (utilisation)",
                  hint.source)],
        why=("The GPU waited for work: the host launched kernels too slowly (eager mode, launch "
             "blocking, a busy CPU) or the scheduler and API server fed it too little."),
        fix=("Find what the host does between kernels: a profile (diagnose --profile) joins the "
             "idle time to its cause; check --enforce-eager, CUDA_LAUNCH_BLOCKING and the "
             "server's CPUs."),
        reference=f"{REF}#gpu.idle_time", layer="gpu",
        impact=make_impact("gpu_time", idle, measured_at=where), role="symptom")
