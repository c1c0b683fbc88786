"""What ``latscope compare`` reads of a run directory besides its requests: the facts that decide
whether two runs can be compared (workload, load, model, server, hardware, client, prefix cache),
the server's own gauges over the run, and the layers of its TTFT / E2E decomposition.

Every fact names where it was read. A fact a run did not record is ``None`` ("not recorded"),
never guessed; the rules (``findings.compare``) decide what a difference means.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
from msgspec import UNSET, UnsetType

from latscope.analysis.decompfile import DecompositionFile, read_decomposition
from latscope.redact import redact_argv
from latscope.rundir import MANIFEST, SUMMARY, read_json
from latscope.runfiles import BenchSummary, HostInfo, Manifest, ServerFacts, manifest_of, summary_of
from latscope.telemetry.files import read_summary

# The facts' groups, in the order a difference list gives them
GROUPS = ("workload", "load", "model", "hardware", "host", "client", "cache", "server", "run")
# a bench run's workload keys (manifest config.workload), as the flags spell them
_WORKLOAD = (("input_len", "--input-len"), ("output_len", "--output-len"), ("mix", "--mix"),
             ("dataset", "--dataset"), ("prefix_len", "--prefix-len"),
             ("prefix_fraction", "--prefix-fraction"), ("ignore_eos", "ignore_eos"))
_CACHE_INFO = ("block_size", "num_gpu_blocks", "enable_prefix_caching", "cache_dtype",
               "gpu_memory_utilization", "kv_cache_memory_bytes")


@dataclass(frozen=True, slots=True)
class Measured:
    """A fact measured over the run's requests (a mean size), with its standard error: two
    runs of one workload drawn with other seeds differ by their sampling error."""

    value: float
    error: float

    def __str__(self) -> str:
        return f"{self.value:.1f}"


def measured_mean(values: Any) -> Measured | None:
    """The mean of per-request values (a numpy array) and its standard error."""
    n = len(values)
    if not n:
        return None
    mean = float(values.mean())
    return Measured(mean, float(values.std(ddof=1) / n ** 0.5) if n > 1 else 0.0)


@dataclass(frozen=True, slots=True)
class Fact:
    key: str  # "workload.input_len"
    label: str  # "--input-len"
    value: Any  # a str, number or bool as read; None: not recorded
    group: str  # one of GROUPS
    source: str = ""
    detail: str = ""  # shown beside the value where it differs (what made a host "busy")


@dataclass(slots=True)
class ServerState:
    """The server's own gauges and counters over one run (``metrics/snapshots.jsonl``)."""

    running_max: float | None = None
    running_queued: float | None = None  # the most requests running while some waited
    waiting_max: float | None = None
    kv_usage_max: float | None = None  # 0-1
    preemptions: float | None = None
    prefix_hit_rate: float | None = None
    scrapes: int = 0
    source: str = ""


@dataclass(slots=True)
class Layer:
    key: str  # "ttft.server.queue"
    label: str
    parent: str | None
    mean_ms: float | None
    source: str


@dataclass(slots=True)
class LoadRunInfo:
    """One load run's facts, server state and decomposition layers."""

    path: Path
    facts: dict[str, Fact] = field(default_factory=dict)
    state: ServerState = field(default_factory=ServerState)
    layers: list[Layer] = field(default_factory=list)
    summary: BenchSummary | None = None  # summary.json, where the run wrote one
    manifest: Manifest = field(default_factory=lambda: Manifest(schema_version=0, kind=""))
    decomposition: DecompositionFile | None = None


def read_load_run(run_dir: Path, root: Path | None = None) -> LoadRunInfo:
    """A load run's facts (``root``: the campaign directory around it, e.g. a diagnose run,
    whose doctor facts name the server and its GPUs)."""
    run_dir = Path(run_dir)
    manifest = (manifest_of(read_json(run_dir / MANIFEST), str(run_dir / MANIFEST))
                if (run_dir / MANIFEST).is_file() else Manifest(schema_version=0, kind=""))
    summary = (summary_of(read_json(run_dir / SUMMARY), str(run_dir / SUMMARY))
               if (run_dir / SUMMARY).is_file() else None)
    split = run_dir / "decomposition.json"
    decomposition = read_decomposition(split) if split.is_file() else None
    info = LoadRunInfo(run_dir, manifest=manifest, summary=summary, decomposition=decomposition)
    for fact in [*_workload_facts(manifest, summary), *_load_facts(manifest, summary),
                 *_hardware_facts(run_dir, manifest, root), *_server_facts(run_dir, root),
                 *_run_facts(manifest, summary)]:
        info.facts[fact.key] = fact
    info.state = read_server_state(run_dir)
    info.layers = layers_of(decomposition)
    return info


def _optional_json(path: Path) -> Any:
    return read_json(path) if path.is_file() else None


def _config(manifest: Manifest) -> dict[str, Any]:
    """The run's BenchConfig as its manifest recorded it ({} where it has none)."""
    return manifest.config if isinstance(manifest.config, dict) else {}


def _workload_facts(manifest: Manifest, summary: BenchSummary | None) -> list[Fact]:
    config = _config(manifest)
    work = config.get("workload") or {}
    src = "manifest.json config"
    facts = [Fact(f"workload.{key}", label, _setting(work.get(key)), "workload", src)
             for key, label in _WORKLOAD if key in work]
    facts += [Fact(f"workload.{key}", label, _setting(config.get(key)) if config else None,
                   "workload", src)
              for key, label in (("endpoint", "endpoint"), ("stream", "streaming"),
                                 ("seed", "--seed"))]
    done = summary.requests.completed if summary is not None else None
    for key, label, total in (("prompt_tokens", "mean prompt tokens",
                               summary.tokens.input_total if summary else None),
                              ("output_tokens", "mean output tokens",
                               summary.tokens.output_total if summary else None)):
        value = total / done if done and total is not None else None
        facts.append(Fact(f"workload.{key}", label, value, "workload",
                          "summary.json tokens / completed requests"))
    return facts


def _setting(value: Any) -> Any:
    """A setting of the run's config as one comparable value: a mix list as its JSON, and a
    setting left unset as "(not set)" (a value: another run may have set it)."""
    if isinstance(value, (list, dict)):
        return orjson.dumps(value, option=orjson.OPT_SORT_KEYS).decode() if value else "(none)"
    return "(not set)" if value is None else value


def _load_facts(manifest: Manifest, summary: BenchSummary | None) -> list[Fact]:
    config = _config(manifest)
    src = "manifest.json config"
    rate = config.get("rate")
    mode = "open loop" if rate else "closed loop" if config else None

    def setting(key: str) -> Any:
        return _setting(config.get(key)) if config else None

    return [Fact("load.mode", "load", mode, "load", src),
            Fact("load.concurrency", "--concurrency", setting("concurrency"), "load", src),
            Fact("load.rate", "--rate", setting("rate"), "load", src),
            Fact("load.burstiness", "--burstiness", setting("burstiness") if rate else None,
                 "load", src),
            Fact("model.name", "model", _text(manifest.model) or
                 (_text(summary.model) if summary else None), "model", "manifest.json model")]


def _text(value: str | None | UnsetType) -> str | None:
    return value if isinstance(value, str) else None


def _run_facts(manifest: Manifest, summary: BenchSummary | None) -> list[Fact]:
    config = _config(manifest)
    versions = manifest.versions if isinstance(manifest.versions, dict) else {}
    server = summary.server if summary is not None else UNSET
    return [Fact("run.num_requests", "requests", config.get("num_requests"), "run",
                 "manifest.json config"),
            Fact("run.duration_s", "--duration", config.get("duration_s"), "run",
                 "manifest.json config"),
            Fact("run.warmup", "--warmup", config.get("warmup"), "run", "manifest.json config"),
            Fact("run.latscope", "latscope version", versions.get("latscope")
                 or _text(manifest.latscope_version), "run", "manifest.json"),
            Fact("cache.prefix_hit_rate", "prefix-cache hit rate",
                 server.prefix_cache_hit_rate if isinstance(server, ServerFacts) else None,
                 "cache",
                 "summary.json server.prefix_cache_hit_rate (/metrics over the run)")]


def _hardware_facts(run_dir: Path, manifest: Manifest, root: Path | None) -> list[Fact]:
    host = manifest.host if isinstance(manifest.host, HostInfo) else None
    gpus, source = _gpu_names(run_dir, root)
    return [Fact("hardware.gpu", "GPU", ", ".join(gpus) if gpus else None, "hardware", source),
            Fact("hardware.cpus", "host CPUs", host.cpus if host else None, "hardware",
                 "manifest.json host"),
            Fact("hardware.hostname", "host", host.hostname if host else None, "hardware",
                 "manifest.json host")]


def _gpu_names(run_dir: Path, root: Path | None) -> tuple[list[str], str]:
    """The server's GPUs by name: the run's own telemetry, else the doctor facts around it."""
    telemetry = read_summary(run_dir / "telemetry" / "telemetry.json")
    names = [d.name for d in (telemetry.devices or [] if telemetry else []) if d.name]
    if names:
        return sorted(names), "telemetry/telemetry.json devices"
    for where in (run_dir, root):
        doctor = _optional_json(where / "doctor.json") if where else None
        gpus = (((doctor or {}).get("facts") or {}).get("gpu") or {}).get("gpus") or []
        names = [g.get("name") for g in gpus if g.get("name")]
        if names:
            return sorted(names), f"{where.name}/doctor.json facts.gpu"  # type: ignore[union-attr]
    return [], "no GPU recorded (telemetry or doctor facts)"


def _server_facts(run_dir: Path, root: Path | None) -> list[Fact]:
    facts = []
    doctor = _optional_json(root / "doctor.json") if root else None
    server = ((doctor or {}).get("facts") or {}).get("server") or {}
    facts.append(Fact("server.version", "server version", server.get("version"), "server",
                      server.get("version_source") or "doctor.json facts.server"))
    top = _optional_json(root / MANIFEST) if root else None
    target = (top or {}).get("target") or {}
    args = target.get("server_args") or ((doctor or {}).get("facts") or {}).get("cmdline")
    # redacted again: an --api-key on the server's command line never reaches a report
    facts.append(Fact("server.flags", "server command line",
                      shlex.join(redact_argv(list(map(str, args)))) if args else None, "server",
                      "manifest.json target.server_args / doctor.json facts.cmdline"))
    cache = _cache_config(run_dir / "metrics" / "first.prom")
    for key in _CACHE_INFO:
        facts.append(Fact(f"server.{key}", key, cache.get(key), "server",
                          "metrics/first.prom vllm:cache_config_info"))
    return facts


def _cache_config(path: Path) -> dict[str, str]:
    """vLLM's cache configuration labels (``vllm:cache_config_info``) of a /metrics page."""
    if not path.is_file():
        return {}
    from latscope.server.metrics import parse_metrics_text

    try:
        page = parse_metrics_text(path.read_text(errors="replace"))
    except ValueError:
        return {}
    found = page.get("vllm:cache_config_info")
    return dict(found[0].labels) if found else {}


def read_server_state(run_dir: Path) -> ServerState:
    """The server's gauges over the run: the most running (and the most running while some
    waited: the batch's cap when a queue formed), waiting, KV use, preemptions, prefix hits."""
    from latscope.server.metrics import counter_delta, gauge_series
    from latscope.server.scrape import read_snapshots

    snaps = read_snapshots(Path(run_dir))
    if not snaps:
        return ServerState(source="no /metrics scrapes in this run")
    running = [v for _, v in gauge_series(snaps, "vllm:num_requests_running")]
    waiting = [v for _, v in gauge_series(snaps, "vllm:num_requests_waiting")]
    kv = [v for _, v in gauge_series(snaps, "vllm:kv_cache_usage_perc", combine=max)]
    queued = [r for r, w in zip(running, waiting) if w > 0] if len(running) == len(waiting) \
        else []
    pre = counter_delta(snaps[0], snaps[-1], "vllm:num_preemptions_total")
    queries = counter_delta(snaps[0], snaps[-1], "vllm:prefix_cache_queries_total")
    hits = counter_delta(snaps[0], snaps[-1], "vllm:prefix_cache_hits_total")
    hit_rate = (max(0.0, min(1.0, hits.delta / queries.delta))
                if queries and hits and queries.delta > 0 else None)
    return ServerState(running_max=max(running, default=None),
                       running_queued=max(queued, default=None),
                       waiting_max=max(waiting, default=None),
                       kv_usage_max=max(kv, default=None),
                       preemptions=pre.delta if pre else None, prefix_hit_rate=hit_rate,
                       scrapes=len(snaps), source=f"metrics/snapshots.jsonl ({len(snaps)} "
                       "scrapes)")


def layers_of(decomposition: DecompositionFile | None) -> list[Layer]:
    """The decomposition's rows (``decomposition.json``), as the comparison reads them."""
    rows = decomposition.components if decomposition is not None else []
    return [Layer(c.key, c.label or c.key, c.parent, c.mean_ms, c.source) for c in rows]
