"""A load run's files inside the common run directory (``latscope.rundir``).

    manifest.json    the config minus secrets, versions, host, start wall time + perf_counter origin
    requests.jsonl   one ``RequestRecord.to_dict()`` per finished request, appended and flushed as
                     each finishes (Ctrl-C or a crash keeps everything gathered so far)
    summary.json     the ``summarize`` output plus the client's own overhead figures
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson

from latscope.errors import ConfigError
from latscope.model import RequestRecord
from latscope.rundir import SCHEMA_VERSION, RunDir, default_run_dir, host_info, iter_jsonl, write_json

MANIFEST, REQUESTS, SUMMARY = "manifest.json", "requests.jsonl", "summary.json"


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
        write_json(self.run_dir / MANIFEST, {"schema_version": SCHEMA_VERSION, **manifest})

    def append(self, record: RequestRecord) -> None:
        # orjson serialises the (slotted) dataclass directly: same keys as to_dict(), ~20x faster.
        self._requests.write(orjson.dumps(record) + b"\n")
        self._requests.flush()

    def write_summary(self, summary: dict[str, Any]) -> None:
        write_json(self.run_dir / SUMMARY, summary)

    def close(self) -> None:
        self._requests.close()


def read_run(run_dir: str | Path) -> tuple[dict[str, Any], list[RequestRecord], dict[str, Any]]:
    """(manifest, records, summary) of a run directory; summary is {} while the run is going or
    if it was interrupted before writing one. A truncated last line (a crash mid-write) is
    skipped; any other bad line is an error."""
    run_dir = RunDir.open(run_dir).path
    manifest = orjson.loads((run_dir / MANIFEST).read_bytes())
    records = [RequestRecord.from_dict(obj) for obj in iter_jsonl(run_dir / REQUESTS)]
    summary_path = run_dir / SUMMARY
    summary = orjson.loads(summary_path.read_bytes()) if summary_path.is_file() else {}
    return manifest, records, summary


def rebuild_summary(run_dir: str | Path) -> dict[str, Any]:
    """The summary of a run that ended without one (SIGKILL, a crash), recomputed from
    ``requests.jsonl`` and the manifest: ``latscope.load.runner.rebuild_summary``."""
    from latscope.load.runner import rebuild_summary as rebuild  # runner imports this module

    return rebuild(run_dir)


__all__ = ["MANIFEST", "REQUESTS", "SUMMARY", "RunWriter", "default_run_dir", "host_info",
           "read_run", "rebuild_summary"]
