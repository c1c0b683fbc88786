"""The run directory: what any latscope verb re-reads after (or during) a load run.

    manifest.json    the config minus secrets, versions, host, start wall time + perf_counter origin
    requests.jsonl   one ``RequestRecord.to_dict()`` per finished request, appended and flushed as
                     each finishes (Ctrl-C or a crash keeps everything gathered so far)
    summary.json     the ``summarize`` output plus the client's own overhead figures
"""

from __future__ import annotations

import platform
import socket
import sys
import time
from pathlib import Path
from typing import Any

import orjson

from latscope.errors import ConfigError
from latscope.model import RequestRecord

MANIFEST, REQUESTS, SUMMARY = "manifest.json", "requests.jsonl", "summary.json"


def default_run_dir(prefix: str = "bench") -> Path:
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
    base = Path("latscope-runs") / f"{prefix}-{stamp}"
    path, n = base, 1
    while path.exists():
        n += 1
        path = base.with_name(f"{base.name}-{n}")
    return path


def host_info() -> dict[str, Any]:
    import os

    return {"hostname": socket.gethostname(), "platform": platform.platform(),
            "python": sys.version.split()[0], "cpus": os.cpu_count()}


class RunWriter:
    """Writes a run directory; records are appended and flushed one by one."""

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = Path(run_dir)
        try:
            self.run_dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ConfigError(f"cannot create output dir {self.run_dir}: {exc.strerror}") from None
        # A reused --output-dir starts clean: appending would mix an earlier run's records (and
        # leave its summary) into this run's directory, and every reader would average them.
        (self.run_dir / SUMMARY).unlink(missing_ok=True)
        self._requests = open(self.run_dir / REQUESTS, "wb")

    def write_manifest(self, manifest: dict[str, Any]) -> None:
        _write_json(self.run_dir / MANIFEST, manifest)

    def append(self, record: RequestRecord) -> None:
        # orjson serialises the (slotted) dataclass directly: same keys as to_dict(), ~20x faster.
        self._requests.write(orjson.dumps(record) + b"\n")
        self._requests.flush()

    def write_summary(self, summary: dict[str, Any]) -> None:
        _write_json(self.run_dir / SUMMARY, summary)

    def close(self) -> None:
        self._requests.close()


def _write_json(path: Path, data: dict[str, Any]) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_bytes(orjson.dumps(data, option=orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY))
    tmp.replace(path)


def read_run(run_dir: str | Path) -> tuple[dict[str, Any], list[RequestRecord], dict[str, Any]]:
    """(manifest, records, summary) of a run directory; summary is {} while the run is going or
    if it was interrupted before writing one. A truncated last line (a crash mid-write) is
    skipped; any other bad line is an error."""
    run_dir = Path(run_dir)
    if not (run_dir / MANIFEST).is_file():
        raise ConfigError(f"{run_dir}: not a latscope run directory (no {MANIFEST})")
    manifest = orjson.loads((run_dir / MANIFEST).read_bytes())
    records = []
    lines = (run_dir / REQUESTS).read_bytes().split(b"\n") if (run_dir / REQUESTS).exists() else []
    for lineno, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            records.append(RequestRecord.from_dict(orjson.loads(line)))
        except orjson.JSONDecodeError:
            if lineno == len(lines):
                break
            raise ConfigError(f"{run_dir / REQUESTS}:{lineno}: not a JSON record") from None
    summary_path = run_dir / SUMMARY
    summary = orjson.loads(summary_path.read_bytes()) if summary_path.is_file() else {}
    return manifest, records, summary
