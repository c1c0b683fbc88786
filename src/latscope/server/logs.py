"""vLLM server logs, read: the startup configuration, the periodic stats lines, and how much it logs.

Covers the line formats of vLLM 0.10 through 0.33 (``vllm/logger.py`` and the stats logger in
``vllm/v1/metrics/loggers.py`` of each version; the fixtures in tests/ are real logs):
ANSI colour (always on in 0.10) and carriage returns are stripped, an optional ``(Proc pid=N)``
prefix is accepted, stats lines are split into their ``Key: value`` parts (so the optional
``Preemptions``, ``Deferred``, ``Corrupted`` parts and "GPU"/"CPU" KV cache usage all parse), and
uvicorn access-log lines are counted as per-request lines. Every value keeps the line number it
came from, so findings can cite it.
"""

from __future__ import annotations

import ast
import gzip
import re
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Iterable

from latscope.errors import ConfigError

_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_PROC = r"(?:\((?P<proc>[\w.-]+) pid=(?P<pid>\d+)\)\s+)?"
_VLLM_LINE = re.compile(
    r"^.*?" + _PROC + r"(?P<level>DEBUG|INFO|WARNING|ERROR|CRITICAL)\s+"
    r"(?P<date>\d\d-\d\d) (?P<time>\d\d:\d\d:\d\d)(?:\.\d+)?\s+\[(?P<src>[^\]]+)\]\s?(?P<msg>.*)$")
_ACCESS_LINE = re.compile(r"^" + _PROC + r"INFO:\s+\S+ - \"(?P<method>[A-Z]+) (?P<path>\S+) ")
_STATS_HEAD = re.compile(
    r"^(?:Engine (?P<engine>\d+)|(?P<agg>\d+) Engines Aggregated): (?P<body>.*)$")
_SECRET_ARG = re.compile(r"(?:^|_)(?:api_key|token|password|secret)$", re.IGNORECASE)
_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?")

# startup lines: regex -> config key (first group is the value)
_CONFIG_PATTERNS: list[tuple[str, re.Pattern[str]]] = [
    ("version", re.compile(r"Initializing a V1 LLM engine \(v([^)]+)\)")),
    ("version", re.compile(r"vLLM (?:API )?server version ([\w.+-]+)")),
    ("version", re.compile(r"\bversion (\d+\.\d+\.\d+[\w.+-]*)\s*$")),  # 0.2x banner
    ("max_num_batched_tokens",
     re.compile(r"Chunked prefill is enabled with max_num_batched_tokens=(\d+)")),
    ("max_num_batched_tokens", re.compile(r"Defaulting max_num_batched_tokens to (\d+)")),
    ("max_num_seqs", re.compile(r"Defaulting max_num_seqs to (\d+)")),
    ("kv_cache_tokens", re.compile(r"(?:GPU|CPU|XPU|TPU) KV cache size: ([\d,]+) tokens")),
    ("max_concurrency",
     re.compile(r"Maximum concurrency for [\d,]+ tokens per request: ([\d.,]+)x")),
    ("max_concurrency_tokens_per_request",
     re.compile(r"Maximum concurrency for ([\d,]+) tokens per request")),
    ("attention_backend", re.compile(r"Using (\S+) attention backend out of potential backends")),
    ("attention_backend", re.compile(r"Using (.+?) backend out of potential backends")),
    ("attention_backend", re.compile(r"Using (.+?) backend on V1 engine")),
    ("enforce_eager", re.compile(r"\benforce_eager=(True|False)")),
    ("chunked_prefill", re.compile(r"\benable_chunked_prefill=(True|False)")),
    ("prefix_caching", re.compile(r"\benable_prefix_caching=(True|False)")),
    ("max_model_len", re.compile(r"\bmax_seq_len=(\d+)")),
    ("tensor_parallel_size", re.compile(r"\btensor_parallel_size=(\d+)")),
    ("cudagraph_mode", re.compile(r"'cudagraph_mode': <CUDAGraphMode\.(\w+)")),
    ("cudagraph_mode", re.compile(r"\"cudagraph_mode\":\s*\"?(\w+)")),
    ("device_memory_gib", re.compile(r"Free memory on device \([\d.]+/([\d.]+) GiB\)")),
    ("graph_capture_gib", re.compile(r"Graph capturing finished in \d+ secs, took ([\d.]+) GiB")),
]
# every config line contains one of these words (a cheap filter before the regexes)
_CONFIG_WORDS = ("version", "Initializing", "max_num", "KV cache size", "Maximum concurrency",
                 "backend", "enforce_eager", "enable_", "max_seq_len", "parallel_size", "cudagraph",
                 "Cudagraph", "Free memory", "Graph capturing", "Asynchronous", "rofiler")
_CUDAGRAPH_INT = {"0": "NONE", "1": "PIECEWISE", "2": "FULL"}
# warnings worth flagging: regex -> kind (each kind's finding is in docs/findings.md)
_WARNING_PATTERNS = [
    ("unknown_env_var", re.compile(r"Unknown vLLM environment variable detected: (\S+)")),
    ("block_size_precluded_backend",
     re.compile(r"--block-size \d+ precluded higher-priority backend")),
    ("async_scheduling_disabled", re.compile(r"Async(?:hronous)? scheduling is disabled")),
    ("profiler_enabled", re.compile(r"Profiler .* is enabled in the API server")),
]
_REQUEST_MSG = re.compile(r"^(Received request|Added request|Aborted request|Finished request|"
                          r"Generated response)\S*\s+(?P<id>[^\s:,]+)")
_STEP_MSG = re.compile(r"^Running batch with")
_WINDOW_S = 10  # peak line rate is measured over windows this long (vLLM's stats interval)


@dataclass(slots=True)
class StatsPoint:
    """One periodic ``Engine NNN: Avg prompt throughput ...`` line."""

    line: int
    t_s: float  # seconds after the log's first timestamped line
    timestamp: str  # "MM-DD HH:MM:SS" as printed (vLLM logs carry no year)
    engine: str  # "000", or "all(N)" for --aggregate-engine-logging
    level: str
    prompt_tps: float | None = None
    generation_tps: float | None = None
    running: int | None = None
    waiting: int | None = None
    deferred: int | None = None
    preemptions: int | None = None  # this interval; vLLM prints the part only when > 0
    corrupted: int | None = None
    kv_usage_pct: float | None = None
    kv_device: str | None = None  # "GPU" | "CPU" as printed
    prefix_hit_pct: float | None = None


@dataclass(slots=True)
class LineRate:
    total_lines: int
    timestamped_lines: int
    span_s: float  # first to last timestamp
    lines_per_s: float | None
    by_level: dict[str, int]
    access_log_lines: int  # uvicorn "POST /v1/..." lines: one per HTTP request
    request_lines: int  # vLLM "Received/Added/Aborted/... request" lines
    step_lines: int  # DEBUG "Running batch with ..." lines: one per engine step
    requests: int  # requests seen (max of access-log POSTs and distinct request ids)
    lines_per_request: float | None  # (access + request + step lines) / requests
    request_lines_per_request: float | None  # (access + request lines) / requests: no step lines
    peak_lines_per_s: float | None  # busiest 10 s window of timestamped lines

    def to_dict(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.__slots__}


@dataclass(slots=True)
class ServerLog:
    path: str
    config: dict[str, Any]
    config_lines: dict[str, int]  # config key -> line number it was read from
    stats: list[StatsPoint]
    line_rate: LineRate
    warnings: list[dict[str, Any]] = field(default_factory=list)  # {kind, line, text}

    @property
    def name(self) -> str:
        """The file name, for evidence sources (the full path is in ``path``)."""
        return Path(self.path).name or self.path

    def source(self, key: str) -> str:
        line = self.config_lines.get(key)
        return f"{self.name}:{line}" if line else self.name

    def to_dict(self) -> dict[str, Any]:
        return {"path": self.path, "config": self.config, "config_lines": self.config_lines,
                "stats": [{k: getattr(p, k) for k in p.__slots__} for p in self.stats],
                "line_rate": self.line_rate.to_dict(), "warnings": self.warnings}


def server_log_from_dict(data: dict[str, Any]) -> ServerLog:
    """The inverse of ``ServerLog.to_dict`` (``diagnose --replay`` reads the parsed log back)."""
    return ServerLog(path=data["path"], config=data.get("config") or {},
                     config_lines=data.get("config_lines") or {},
                     stats=[StatsPoint(**p) for p in data.get("stats") or []],
                     line_rate=LineRate(**data["line_rate"]),
                     warnings=data.get("warnings") or [])


def strip_ansi(text: str) -> str:
    return _ANSI.sub("", text).replace("\r", "")


def parse_log(path_or_lines: str | Path | Iterable[str], *, name: str = "") -> ServerLog:
    """Parse a vLLM server log (a path, ``.gz`` too, or any iterable of lines)."""
    if isinstance(path_or_lines, (str, Path)):
        path = Path(path_or_lines)
        label = name or str(path)
        opener = gzip.open if path.suffix == ".gz" else open  # rotated logs are often gzipped
        try:
            # newline="\n": a progress bar's bare "\r" is not a line end, so the line numbers
            # cited are the ones grep -n and an editor show
            with opener(path, "rt", encoding="utf-8", errors="replace", newline="\n") as fh:
                return _parse(fh, label)
        except (OSError, EOFError) as exc:  # unreadable, not gzip, or a gzip cut short
            reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
            raise ConfigError(f"{path}: cannot read log: {reason}") from None
    return _parse(path_or_lines, name or "<lines>")


def _parse(lines: Iterable[str], label: str) -> ServerLog:
    state = _State(label)
    for number, raw in enumerate(lines, start=1):
        # a tqdm bar redraws with "\r" inside one line; a log record may follow it there
        segments = [s for s in raw.rstrip("\n").split("\r") if s] or [""]
        for segment in segments:
            state.feed(number, strip_ansi(segment))
    return state.finish()


class _State:
    def __init__(self, label: str) -> None:
        self.label = label
        self.config: dict[str, Any] = {}
        self.config_lines: dict[str, int] = {}
        self.stats: list[StatsPoint] = []
        self.warnings: list[dict[str, Any]] = []
        self.levels: dict[str, int] = {}
        self.total = self.timestamped = self.access = self.request_lines = self.steps = 0
        self.last_timestamped = 0
        self.request_ids: set[str] = set()
        self.per_window: dict[int, int] = {}  # 10 s window index -> timestamped lines
        self.first_ts: datetime | None = None
        self.last_ts: datetime | None = None

    def set(self, key: str, value: Any, line: int, *, override: bool = False) -> None:
        if override or key not in self.config:
            self.config[key] = value
            self.config_lines[key] = line

    def feed(self, number: int, text: str) -> None:
        """One record of physical line ``number`` (a line may hold several, split at "\r")."""
        self.total = number
        access = _ACCESS_LINE.match(text)
        if access:
            if access.group("method") == "POST" and access.group("path").startswith("/v1/"):
                self.access += 1
            return
        m = _VLLM_LINE.match(text)
        if not m:
            self._config_from_text(number, text)  # progress bars, banners without a prefix
            return
        if number != self.last_timestamped:  # lines are counted, not the records in them
            self.timestamped += 1
            self.last_timestamped = number
        level, msg = m.group("level"), m.group("msg")
        self.levels[level] = self.levels.get(level, 0) + 1
        ts = _timestamp(m.group("date"), m.group("time"))
        if ts is not None:
            self.first_ts = self.first_ts or ts
            self.last_ts = ts
            window = int((ts - self.first_ts).total_seconds() // _WINDOW_S)
            self.per_window[window] = self.per_window.get(window, 0) + 1
        if (req := _REQUEST_MSG.match(msg)):
            self.request_lines += 1
            self.request_ids.add(req.group("id").rstrip("."))
            return
        if _STEP_MSG.match(msg):
            self.steps += 1
            return
        head = _STATS_HEAD.match(msg)
        if head and "throughput" in msg:
            self.stats.append(self._stats_point(number, m, head, ts))
            return
        if msg.startswith("non-default args:"):
            self._non_default_args(number, msg.partition(":")[2].strip())
        if level == "WARNING":
            for kind, pattern in _WARNING_PATTERNS:
                if (w := pattern.search(msg)):
                    self.warnings.append({"kind": kind, "line": number, "text": msg.strip(),
                                          "value": w.group(1) if w.groups() else None})
        self._config_from_text(number, msg)

    def _config_from_text(self, number: int, msg: str) -> None:
        if not any(word in msg for word in _CONFIG_WORDS):
            return  # most lines (per-step DEBUG, progress bars) carry no config: skip the regexes
        for key, pattern in _CONFIG_PATTERNS:
            if key in self.config:
                continue
            if (found := pattern.search(msg)) and (value := _coerce(key, found.group(1))) \
                    is not None:
                self.set(key, value, number)
        if "Cudagraph is disabled under eager mode" in msg:
            self.set("cudagraph_mode", "NONE", number)
        if "Asynchronous scheduling is enabled" in msg:
            self.set("async_scheduling", True, number)
        if (m := re.search(r"\b(GPU|CPU|XPU|TPU) KV cache size", msg)):
            self.set("kv_device", m.group(1), number)
        if "Torch profiler enabled" in msg or "Profiler with mode" in msg:
            self.set("profiler_enabled", True, number)

    def _non_default_args(self, number: int, text: str) -> None:
        args = _parse_python_literal(text)
        if not isinstance(args, dict):
            return
        # vLLM prints --api-key / --hf-token values here: never keep them (output goes to JSON)
        args = {k: ("***" if isinstance(k, str) and _SECRET_ARG.search(k) else v)
                for k, v in args.items()}
        self.set("non_default_args", args, number, override=True)
        for key in ("max_num_seqs", "max_num_batched_tokens", "enforce_eager",
                    "enable_chunked_prefill", "enable_prefix_caching", "max_model_len",
                    "gpu_memory_utilization", "tensor_parallel_size", "attention_backend",
                    "enable_log_requests", "disable_log_stats", "async_scheduling"):
            if key in args:
                target = {"enable_chunked_prefill": "chunked_prefill",
                          "enable_prefix_caching": "prefix_caching"}.get(key, key)
                self.set(target, args[key], number, override=True)

    def _stats_point(self, number: int, m: re.Match[str], head: re.Match[str],
                     ts: datetime | None) -> StatsPoint:
        engine = head.group("engine") or f"all({head.group('agg')})"
        point = StatsPoint(line=number, t_s=0.0, timestamp=f"{m.group('date')} {m.group('time')}",
                           engine=engine, level=m.group("level"))
        if ts is not None and self.first_ts is not None:
            point.t_s = (ts - self.first_ts).total_seconds()
        for part in head.group("body").split(", "):
            key, _, value = part.partition(": ")
            _set_stat(point, key.strip(), value)
        return point

    def finish(self) -> ServerLog:
        cfg = self.config
        cfg["log_level"] = ("DEBUG" if self.levels.get("DEBUG")
                            else "INFO" if self.levels else None)
        cfg["request_logging"] = bool(cfg.get("enable_log_requests") or self.request_lines)
        cfg["unknown_env_vars"] = [w["value"] for w in self.warnings
                                   if w["kind"] == "unknown_env_var"]
        if cfg.get("cudagraph_mode") in _CUDAGRAPH_INT:
            cfg["cudagraph_mode"] = _CUDAGRAPH_INT[cfg["cudagraph_mode"]]
        cfg.setdefault("version", None)
        for key in ("max_num_seqs", "max_num_batched_tokens", "chunked_prefill", "prefix_caching",
                    "enforce_eager", "cudagraph_mode", "attention_backend", "kv_cache_tokens",
                    "max_concurrency"):
            cfg.setdefault(key, None)  # None = not found in this log
        span = ((self.last_ts - self.first_ts).total_seconds()
                if self.first_ts and self.last_ts else 0.0)
        requests = max(self.access, len(self.request_ids))
        per_request = self.access + self.request_lines + self.steps
        rate = LineRate(
            total_lines=self.total, timestamped_lines=self.timestamped, span_s=span,
            lines_per_s=self.total / span if span > 0 else None, by_level=dict(self.levels),
            access_log_lines=self.access, request_lines=self.request_lines,
            step_lines=self.steps, requests=requests,
            lines_per_request=per_request / requests if requests else None,
            request_lines_per_request=((self.access + self.request_lines) / requests
                                       if requests else None),
            peak_lines_per_s=(max(self.per_window.values()) / _WINDOW_S
                              if self.per_window else None))
        return ServerLog(self.label, cfg, self.config_lines, self.stats, rate, self.warnings)


def _set_stat(point: StatsPoint, key: str, value: str) -> None:
    number = _first_number(value)
    if number is None:
        return
    if key == "Avg prompt throughput":
        point.prompt_tps = number
    elif key == "Avg generation throughput":
        point.generation_tps = number
    elif key in ("Running", "Waiting", "Deferred", "Preemptions", "Corrupted"):
        setattr(point, key.lower() if key != "Preemptions" else "preemptions", int(number))
    elif key.endswith("KV cache usage"):
        point.kv_usage_pct = number
        point.kv_device = key.split()[0] if key.split()[0] in ("GPU", "CPU", "XPU", "TPU") else None
    elif key == "Prefix cache hit rate":
        point.prefix_hit_pct = number


def _first_number(text: str) -> float | None:
    m = _NUMBER.search(text)
    return float(m.group(0).replace(",", "")) if m else None


def _timestamp(date: str, time: str) -> datetime | None:
    try:  # a leap year, so that a "02-29" line parses; the year itself is never reported
        return datetime.strptime(f"2024-{date} {time}", "%Y-%m-%d %H:%M:%S")
    except ValueError:
        return None


def _coerce(key: str, text: str) -> Any:
    """The config value in its type; None when the text is no number where one belongs (a
    damaged line such as "1.2.3" or ","): the key stays unset, so a later line can set it."""
    if text in ("True", "False"):
        return text == "True"
    try:
        if key in ("max_num_batched_tokens", "max_num_seqs", "kv_cache_tokens", "max_model_len",
                   "tensor_parallel_size", "max_concurrency_tokens_per_request"):
            return int(text.replace(",", ""))
        if key in ("max_concurrency", "device_memory_gib", "graph_capture_gib"):
            return float(text.replace(",", ""))
    except ValueError:
        return None
    return text


def _parse_python_literal(text: str) -> Any:
    """``non-default args`` is a Python repr that may hold objects (``ProfilerConfig(...)``):
    literals become values, anything else becomes its source text."""
    try:
        tree = ast.parse(text, mode="eval")
    except SyntaxError:
        return None
    return _node_value(tree.body, text)


def _node_value(node: ast.AST, source: str) -> Any:
    if isinstance(node, ast.Constant):
        if type(node.value) is int and not -(1 << 63) <= node.value < (1 << 63):
            return str(node.value)  # JSON writers (orjson) refuse integers wider than 64 bits
        return node.value
    if isinstance(node, ast.Dict):
        return {_node_value(k, source): _node_value(v, source)
                for k, v in zip(node.keys, node.values) if k is not None}
    if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
        return [_node_value(e, source) for e in node.elts]
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        inner = _node_value(node.operand, source)
        return -inner if isinstance(inner, (int, float)) else ast.get_source_segment(source, node)
    return ast.get_source_segment(source, node)
