"""A small client of Prometheus' HTTP API (``/api/v1/query_range``, ``/series``, ``/query``).

Every failure becomes one ``PrometheusError`` line naming the server (its password, if the URL
has one, redacted) and the cause: unreachable, a timeout, a refused token, a query Prometheus
rejected (its own ``errorType`` and ``error``), an answer that is not Prometheus' JSON. The
bearer token is sent in a header and never appears in a message, a log or a file.

Queries run concurrently over one aiohttp session (``Session``, an async context manager);
``PrometheusClient`` is the plain description of the server (URL, token, timeout).
API reference: https://prometheus.io/docs/prometheus/latest/querying/api/
"""

from __future__ import annotations

import asyncio
import base64
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit, urlunsplit

import aiohttp
import orjson

from latscope.errors import ConfigError, LatscopeError
from latscope.redact import redact_url_password

# Prometheus refuses a range query of more than 11,000 points per series
# (web/api/v1/api.go: "exceeded maximum resolution of 11,000 points per timeseries").
MAX_POINTS = 11_000
DEFAULT_TIMEOUT_S = 30.0
_MAX_CONCURRENT = 4  # queries in flight at once: polite to a server that serves dashboards too


class PrometheusError(LatscopeError):
    """Prometheus could not answer, or refused: the message is the one line the user sees."""


@dataclass(frozen=True, slots=True)
class Series:
    """One series of a query's answer: its labels (``__name__`` included when Prometheus
    returns it) and its points ``(unix seconds, value)``."""

    labels: dict[str, str]
    points: tuple[tuple[float, float], ...]


@dataclass(slots=True, repr=False)
class PrometheusClient:
    """Where Prometheus is and how to authenticate: ``token`` is a bearer token, and a
    ``user:password@`` in the URL is sent as basic authentication; neither is ever shown."""

    url: str
    token: str | None = None
    timeout_s: float = DEFAULT_TIMEOUT_S

    def __post_init__(self) -> None:
        parts = urlsplit(self.url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ConfigError(f"--prometheus {self.shown}: give an http(s) URL, e.g. "
                              "http://127.0.0.1:9090")
        self.url = urlunsplit((parts.scheme, parts.netloc, parts.path.rstrip("/"), "", ""))

    def __repr__(self) -> str:
        return f"PrometheusClient({self.shown!r}, timeout_s={self.timeout_s:g})"

    @property
    def shown(self) -> str:
        """The URL as it may be printed: a password in it redacted."""
        return redact_url_password(self.url)

    def base_and_headers(self) -> tuple[str, dict[str, str]]:
        """The URL without credentials, and the headers that carry them."""
        parts = urlsplit(self.url)
        headers = {"Accept": "application/json"}
        if parts.password is not None:
            pair = f"{unquote(parts.username or '')}:{unquote(parts.password)}"
            headers["Authorization"] = "Basic " + base64.b64encode(pair.encode()).decode()
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        host = parts.hostname or ""
        netloc = f"[{host}]" if ":" in host else host
        netloc += f":{parts.port}" if parts.port else ""
        return urlunsplit((parts.scheme, netloc, parts.path, "", "")), headers

    def session(self) -> Session:
        return Session(self)


def read_token_file(path: str | Path) -> str:
    """A bearer token from a file (surrounding whitespace dropped); the token is never shown."""
    try:
        token = Path(path).read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else type(exc).__name__
        raise ConfigError(f"--prometheus-bearer-token-file {path}: {reason}") from None
    if not token:
        raise ConfigError(f"--prometheus-bearer-token-file {path}: the file is empty")
    if any(c.isspace() for c in token):
        raise ConfigError(f"--prometheus-bearer-token-file {path}: the token has whitespace "
                          "inside (one token, one line)")
    return token


class Session:
    """One aiohttp session to Prometheus for a batch of queries (``async with``)."""

    def __init__(self, client: PrometheusClient) -> None:
        self.client = client
        self.warnings: list[str] = []
        self._http: aiohttp.ClientSession | None = None
        self._base = client.url
        self._slots = asyncio.Semaphore(_MAX_CONCURRENT)

    async def __aenter__(self) -> Session:
        self._base, headers = self.client.base_and_headers()
        self._http = aiohttp.ClientSession(
            headers=headers, timeout=aiohttp.ClientTimeout(total=self.client.timeout_s))
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._http is not None:
            await self._http.close()

    async def query_range(self, expr: str, start: float, end: float, step: float) -> list[Series]:
        """``expr`` evaluated at ``start``, ``start + step``, ... ``<= end`` (a matrix)."""
        points = math.floor((end - start) / step) + 1 if step > 0 else MAX_POINTS + 1
        if points > MAX_POINTS:
            raise ConfigError(f"a step of {step:g} s over {end - start:g} s is {points} points per "
                              f"series; Prometheus answers at most {MAX_POINTS}: use a larger step")
        data = await self._get("/api/v1/query_range", {"query": expr, "start": _ts(start),
                                                       "end": _ts(end), "step": f"{step:g}"})
        return _matrix(data, expr)

    async def query(self, expr: str, time: float) -> list[Series]:
        """``expr`` at one instant: one point a series (a vector; a scalar as one series)."""
        data = await self._get("/api/v1/query", {"query": expr, "time": _ts(time)})
        return _vector(data, expr)

    async def series(self, match: str, start: float, end: float) -> list[dict[str, str]]:
        """The label sets of the series ``match`` selects that have samples in the window."""
        data = await self._get("/api/v1/series", {"match[]": match, "start": _ts(start),
                                                  "end": _ts(end)})
        if not isinstance(data, list):
            raise self._odd("/api/v1/series", "data is not a list")
        return [dict(labels) for labels in data]

    async def label_values(self, label: str) -> list[str]:
        data = await self._get(f"/api/v1/label/{label}/values", {})
        return [str(v) for v in data] if isinstance(data, list) else []

    async def _get(self, path: str, params: dict[str, str]) -> Any:
        assert self._http is not None, "use `async with client.session()`"
        url = self._base + path
        async with self._slots:
            try:
                async with self._http.get(url, params=params) as resp:
                    body = await resp.read()
                    status = resp.status
            except asyncio.TimeoutError:
                raise PrometheusError(f"Prometheus at {self.client.shown} did not answer "
                                      f"{path} within {self.client.timeout_s:g} s") from None
            except (aiohttp.ClientError, OSError) as exc:
                raise PrometheusError(f"Prometheus at {self.client.shown} is unreachable: "
                                      f"{_reason(exc)}") from None
        return self._data(path, params, status, body)

    def _data(self, path: str, params: dict[str, str], status: int, body: bytes) -> Any:
        if status in (401, 403):
            how = ("the bearer token was refused" if self.client.token else
                   "it needs credentials: --prometheus-bearer-token-file FILE")
            raise PrometheusError(f"Prometheus at {self.client.shown} answered HTTP {status} to "
                                  f"{path}: {how}")
        try:
            doc = orjson.loads(body)
        except orjson.JSONDecodeError:
            doc = None
        if not isinstance(doc, dict) or doc.get("status") not in ("success", "error"):
            raise self._odd(path, f"HTTP {status}, {len(body)} bytes that are not its JSON "
                            "(is this a Prometheus server, with its path prefix?)")
        if doc["status"] == "error":
            what = params.get("query") or params.get("match[]") or path
            raise PrometheusError(f"Prometheus refused {_short(what)}: {doc.get('errorType')}: "
                                  f"{_short(str(doc.get('error')), 200)}")
        self.warnings.extend(str(w) for w in doc.get("warnings") or ())
        return doc.get("data")

    def _odd(self, path: str, why: str) -> PrometheusError:
        return PrometheusError(f"{self.client.shown}{path} answered {why}")


def _ts(t: float) -> str:
    return f"{t:.3f}"


def _short(text: str, limit: int = 120) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _reason(exc: BaseException) -> str:
    """The innermost OS reason of a connection failure ("Connection refused"), one line."""
    os_error = getattr(exc, "os_error", None)
    if isinstance(os_error, OSError) and (os_error.errno or 0) > 0:
        return os.strerror(os_error.errno or 0).lower()  # "connection refused", "no route ..."
    if isinstance(os_error, OSError) and os_error.strerror:
        return os_error.strerror
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    return _short(str(exc) or type(exc).__name__)


def _matrix(data: Any, expr: str) -> list[Series]:
    if not isinstance(data, dict) or data.get("resultType") != "matrix":
        raise PrometheusError(f"Prometheus answered {_short(expr)} with no matrix")
    out = []
    for item in data.get("result") or ():
        points = tuple((float(t), _value(v)) for t, v in item.get("values") or ())
        out.append(Series(dict(item.get("metric") or {}), points))
    return out


def _vector(data: Any, expr: str) -> list[Series]:
    if not isinstance(data, dict):
        raise PrometheusError(f"Prometheus answered {_short(expr)} with no result")
    kind, result = data.get("resultType"), data.get("result")
    if kind == "scalar" and isinstance(result, list):
        return [Series({}, ((float(result[0]), _value(result[1])),))]
    if kind != "vector":
        raise PrometheusError(f"Prometheus answered {_short(expr)} with a {kind}, not a vector")
    return [Series(dict(item.get("metric") or {}),
                   ((float(item["value"][0]), _value(item["value"][1])),))
            for item in result or ()]


def _value(text: Any) -> float:
    """A sample value as Prometheus writes it: a string, "NaN" and "+Inf" included."""
    return float(text)
