"""The one run directory every verb writes, and every verb (and ``latscope show``) re-reads.

    latscope-runs/VERB-TIME/
      manifest.json    schema_version, kind (the verb), latscope version, the command line with
                       secrets redacted, start/end wall time, status, host, target
      findings.json    the verb's findings, in the one ``Finding`` form
      ...              the verb's own data files (requests.jsonl, trace.json, sweep.json, ...)

Writes of whole files are atomic (a temp file in the same directory, then ``rename``), so a reader
never sees half a file; appended JSONL files are read by ``iter_jsonl`` alone, which skips a torn
*last* line (a crash mid-write) and refuses a bad line anywhere else.
"""

from __future__ import annotations

import dataclasses
import operator
import os
import platform
import socket
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Iterator

import msgspec
import orjson

from latscope import native, twins
from latscope.errors import ConfigError, OutputError
from latscope.model import CHUNK_GAPS_KEY, Finding, RequestRecord
from latscope.runfiles import HostInfo
from latscope.twins import Gaps

# 2: requests.jsonl holds token times as gaps (``chunk_gaps_ns``); 1 held them as times, and
# is still read. An older latscope refuses a 2 rather than read its records without them.
SCHEMA_VERSION = 2
READABLE_SCHEMAS = (1, 2)
FINDINGS_SCHEMA_VERSION = 1  # findings.json's (latscope/findings/schema.json)
SUMMARY_SCHEMA_VERSION = 1  # summary.json's (latscope.runfiles.BenchSummary)
MANIFEST = "manifest.json"
REQUESTS, SUMMARY = "requests.jsonl", "summary.json"  # a load run's records and summary
_FLUSH_NS = 100_000_000  # records reach the file at most this late
_RECORD_BUFFER = 1 << 20
FINDINGS = "findings.json"
RUNS_ROOT = Path("latscope-runs")
_JSON_OPTIONS = orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_NON_STR_KEYS


def default_run_dir(kind: str = "bench") -> Path:
    """``./latscope-runs/KIND-YYYYMMDD-HHMMSS`` (UTC), suffixed ``-2``, ``-3``... if taken."""
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
    base = RUNS_ROOT / f"{kind}-{stamp}"
    path, n = base, 1
    while path.exists():
        n += 1
        path = base.with_name(f"{base.name}-{n}")
    return path


def host_info() -> HostInfo:
    return HostInfo(socket.gethostname(), platform.platform(), sys.version.split()[0],
                    os.cpu_count())


def write_json(path: Path, data: Any) -> None:
    """Write ``data`` as indented JSON atomically (temp file in the same directory + rename)."""
    write_bytes(path, orjson.dumps(data, option=_JSON_OPTIONS, default=_fallback))


def write_bytes(path: Path, data: bytes) -> None:
    """Write ``data`` whole or not at all (temp file in the same directory + rename)."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        tmp.write_bytes(data)
        tmp.replace(path)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise ConfigError(f"cannot write {path}: {exc.strerror or exc}") from None


def _fallback(value: Any) -> Any:
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, msgspec.Struct):  # a typed section of a file (the manifest's host)
        return msgspec.to_builtins(value)
    if hasattr(value, "to_dict"):
        return value.to_dict()
    if isinstance(value, float):  # inf / nan: JSON has no such numbers
        return None
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")


def read_json(path: Path) -> Any:
    path = Path(path)
    try:
        return orjson.loads(path.read_bytes())
    except FileNotFoundError:
        raise ConfigError(f"{path}: no such file") from None
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror or exc}") from None
    except orjson.JSONDecodeError as exc:
        raise ConfigError(f"{path}: not valid JSON ({exc})") from None


def iter_jsonl(path: Path) -> Iterator[dict[str, Any]]:
    """The objects of an appended JSONL file. A torn last line (a crash mid-write) is skipped;
    a bad line anywhere else is an error: silently stopping there would hide later data."""
    path = Path(path)
    for lineno, line, last in jsonl_lines(path):
        try:
            obj = orjson.loads(line)
        except orjson.JSONDecodeError:
            if last:
                return
            raise ConfigError(f"{path}: line {lineno} is not JSON") from None
        if not isinstance(obj, dict):
            raise ConfigError(f"{path}: line {lineno} is not a JSON object")
        yield obj


def jsonl_lines(path: Path) -> Iterator[tuple[int, bytes, bool]]:
    """(number, line, whether it is the last) of a file's non-blank lines, read one at a time
    (a long run's file is never held whole): one line ahead, so that a reader can skip a torn
    last line and refuse a bad one anywhere else."""
    if not path.is_file():
        return
    with open(path, "rb") as f:
        ahead: tuple[int, bytes] | None = None
        for number, line in enumerate(f, 1):
            if not line.strip():
                continue
            if ahead is not None:
                yield ahead[0], ahead[1], False
            ahead = (number, line)
        if ahead is not None:
            yield ahead[0], ahead[1], True


_RECORD_START = b'{"index":'  # every requests.jsonl line starts so (``record_line``)


def mend_torn_lines(path: Path) -> int:
    """Blank out what a process killed in the middle of a write left of its last line in a
    requests.jsonl that other processes append to: the fragment before the next whole record
    on the same line is overwritten with spaces (JSON's whitespace: the line reads as that
    record), and a fragment at the end, with no newline, is cut off. Returns how many were
    mended. Without this the fragment would join another worker's line and make the file
    unreadable (``iter_jsonl`` refuses a bad line that is not the last)."""
    mended = 0
    with open(path, "r+b") as f:
        offset = 0
        for line in f:
            start = line.rfind(_RECORD_START)
            if line.endswith(b"\n") and start > 0 and line[:start].strip():
                os.pwrite(f.fileno(), b" " * start, offset)
                mended += 1
            elif not line.endswith(b"\n"):
                os.truncate(f.fileno(), offset)
                mended += 1
            offset += len(line)
    return mended


def redacted_command(argv: Iterable[str] | None = None) -> str:
    """The command line as typed, with secret-bearing flags and URL passwords redacted."""
    import shlex

    from latscope.redact import redact_argv, redact_url_password

    args = list(sys.argv[1:] if argv is None else argv)
    return "latscope " + " ".join(shlex.quote(redact_url_password(a)) for a in redact_argv(args))


@dataclass
class RunDir:
    """An open run directory: its path, kind and manifest (kept in memory, rewritten on change)."""

    path: Path
    manifest: dict[str, Any]

    @property
    def kind(self) -> str:
        return str(self.manifest.get("kind", ""))

    @classmethod
    def create(cls, kind: str, output_dir: str | Path | None = None, *,
               argv: Iterable[str] | None = None, target: dict[str, Any] | None = None,
               **extra: Any) -> RunDir:
        """Make (or reuse, emptied of an earlier manifest and findings) a run directory."""
        path = Path(output_dir) if output_dir else default_run_dir(kind)
        try:
            path.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ConfigError(f"cannot create output dir {path}: {exc.strerror or exc}") from None
        if not os.access(path, os.W_OK):
            raise ConfigError(f"output dir {path} is not writable")
        (path / FINDINGS).unlink(missing_ok=True)  # a reused dir must not mix two runs' findings
        from latscope import __version__

        manifest = {"schema_version": SCHEMA_VERSION, "kind": kind,
                    "latscope_version": __version__, "command": redacted_command(argv),
                    "started": _utc_now(), "ended": None, "status": "running",
                    "host": host_info(), "target": target or {}, **extra}
        run = cls(path, manifest)
        run.save_manifest()
        return run

    @classmethod
    def open(cls, path: str | Path) -> RunDir:
        """Open an existing run directory; refuse one this version cannot read."""
        path = Path(path)
        if not path.is_dir():
            raise ConfigError(f"{path}: not a directory")
        if not (path / MANIFEST).is_file():
            raise ConfigError(f"{path}: not a latscope run directory (no {MANIFEST})")
        manifest = read_json(path / MANIFEST)
        if not isinstance(manifest, dict):
            raise ConfigError(f"{path / MANIFEST}: not a JSON object")
        version = manifest.get("schema_version")
        if version is None and (path / "requests.jsonl").exists():
            manifest = {**manifest, "schema_version": 0, "kind": "bench"}  # before run dirs had one
        elif version not in READABLE_SCHEMAS:
            raise ConfigError(f"{path}: run directory schema_version {version!r} is not one this "
                              f"latscope ({SCHEMA_VERSION}) can read")
        return cls(path, manifest)

    def file(self, name: str) -> Path:
        return self.path / name

    def save_manifest(self) -> None:
        write_json(self.path / MANIFEST, self.manifest)

    def update(self, **fields: Any) -> None:
        self.manifest.update(fields)
        self.save_manifest()

    def write(self, name: str, data: Any) -> Path:
        target = self.path / name
        target.parent.mkdir(parents=True, exist_ok=True)
        write_json(target, data)
        return target

    def read(self, name: str, default: Any = None) -> Any:
        target = self.path / name
        return read_json(target) if target.is_file() else default

    def write_findings(self, findings: Iterable[Finding]) -> Path:
        return self.write(FINDINGS, {"schema_version": FINDINGS_SCHEMA_VERSION,
                                     "findings": [f.to_dict() for f in findings]})

    def read_findings(self) -> list[Finding]:
        data = self.read(FINDINGS, {"findings": []})
        try:
            return [Finding.from_dict(f) for f in data.get("findings", [])]
        except (KeyError, TypeError, ValueError) as exc:
            raise ConfigError(f"{self.path / FINDINGS}: not a findings file ({exc})") from None

    def finish(self, status: str = "ok", **fields: Any) -> None:
        """Record the end: status is "ok", "failed: why", or "interrupted"."""
        self.update(ended=_utc_now(), status=status, **fields)


def _utc_now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


# A load run (bench, and each step of sweep/tune/diagnose): its records and summary


def append_fresh(path: Path) -> int:
    """A file descriptor of ``path`` emptied and opened for appending only: writes of whole
    lines from several processes land one after another, never over each other."""
    return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o666)


class RunWriter:
    """Writes a run directory. Record lines are copied into one buffer and written out together
    at least every ``_FLUSH_NS`` (on an append, and on ``flush_if_due``, which a run calls as it
    goes) or when ``_RECORD_BUFFER`` bytes fill it: a killed process loses at most that much; a
    stopped one (Ctrl-C, SIGTERM, an error) nothing. A write per record cost ~2.5 us of a ~70 us
    response at the client's ceiling; a buffered file's write of each ~4 KB line ~1 us."""

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = Path(run_dir)
        try:
            self.run_dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ConfigError(f"cannot create output dir {self.run_dir}: {exc.strerror}") from None
        # A reused --output-dir starts clean: appending would mix an earlier run's records (and
        # leave its summary) into this run's directory, and every reader would average them.
        (self.run_dir / SUMMARY).unlink(missing_ok=True)
        # appended to (O_APPEND): a --workers run's local workers append their lines to the
        # same file (latscope.load.worker), and each write lands whole at its end
        self._requests = open(append_fresh(self.run_dir / REQUESTS), "wb", buffering=0)
        self._flushed_ns = time.perf_counter_ns()
        # one buffer for the whole run, lines copied in: a list of each line's bytes, joined
        # at every flush, left a 1 MiB block and ~1,100 small ones to free between the
        # responses' read buffers every ~50 ms, and glibc trimmed the heap's top that the next
        # reads then faulted in again (c=256 on the H100 host: +55% page faults, -14% tokens/s;
        # docs/bench.md, and latscope.load.heap for the other half of the fix)
        self._buffer = bytearray(_RECORD_BUFFER)
        self._view = memoryview(self._buffer)
        self._pending_bytes = 0
        # a write that failed (a full disk): raised once, then the writer writes nothing more,
        # so that the run's ending (the records in flight, the summary) does not fail again
        self.failure: OutputError | None = None

    def write_manifest(self, manifest: dict[str, Any]) -> None:
        self._write_whole(MANIFEST, {"schema_version": SCHEMA_VERSION, **manifest})

    def append(self, record: RequestRecord, line: bytes | None = None) -> None:
        """``line``: the record's line where the caller has it (``record_line``'s bytes)."""
        self.append_lines(line or record_line(record))

    def append_lines(self, lines: bytes) -> None:
        """Lines written as ``requests.jsonl`` holds them (a record's, a worker's batch)."""
        end = self._pending_bytes + len(lines)
        if end > len(self._buffer):  # no room left: what is kept goes first, then the lines
            self.flush()
            if len(lines) >= len(self._buffer):  # a worker's batch larger than the buffer
                self._write(memoryview(lines))
                self._flushed_ns = time.perf_counter_ns()
                return
            end = len(lines)
        self._view[self._pending_bytes:end] = lines
        self._pending_bytes = end
        if end >= len(self._buffer) or time.perf_counter_ns() - self._flushed_ns >= _FLUSH_NS:
            self.flush()

    def flush_if_due(self) -> None:
        if self._pending_bytes and time.perf_counter_ns() - self._flushed_ns >= _FLUSH_NS:
            self.flush()

    def flush(self) -> None:
        if self._pending_bytes:
            data, self._pending_bytes = self._view[:self._pending_bytes], 0
            self._write(data)
        self._flushed_ns = time.perf_counter_ns()

    def _write(self, data: memoryview) -> None:
        if self.failure is None:
            try:
                while data:  # an unbuffered write may take part of it (a signal, a pipe)
                    data = data[self._requests.write(data):]
            except OSError as exc:
                raise self._failed(REQUESTS, exc) from None

    def write_summary(self, summary: dict[str, Any]) -> None:
        """summary.json (``runfiles.BenchSummary``), its ``schema_version`` first; put in the
        caller's dict too, so that a later rewrite of it (diagnose records the prefix cache's
        hit rate in it) keeps the version."""
        if "schema_version" not in summary:
            rest = dict(summary)
            summary.clear()
            summary.update(schema_version=SUMMARY_SCHEMA_VERSION, **rest)
        self._write_whole(SUMMARY, summary)

    def _write_whole(self, name: str, data: dict[str, Any]) -> None:
        if self.failure is None:
            try:
                write_json(self.run_dir / name, data)
            except OSError as exc:
                raise self._failed(name, exc) from None

    def _failed(self, name: str, exc: OSError) -> OutputError:
        self.failure = OutputError(f"cannot write {self.run_dir / name}: "
                                   f"{exc.strerror or exc}; the records written before are kept")
        return self.failure

    def close(self) -> None:
        try:
            self.flush()
        finally:
            self._requests.close()
            self._view.release()  # the buffer's 1 MiB goes with the run, not with the writer
            self._buffer = bytearray()
            self._view = memoryview(self._buffer)


# a record's field names and a getter of their values, in the dataclass's order; its line's
# keys, the token times written as gaps under their own key (model.CHUNK_GAPS_KEY)
_RECORD_FIELDS = tuple(f.name for f in dataclasses.fields(RequestRecord))
_record_values = operator.attrgetter(*_RECORD_FIELDS)
_GAPS_AT = _RECORD_FIELDS.index("chunk_ns")
_LINE_KEYS = tuple(CHUNK_GAPS_KEY if i == _GAPS_AT else name
                   for i, name in enumerate(_RECORD_FIELDS))


def record_line(record: RequestRecord) -> bytes:
    """A record's ``requests.jsonl`` line: its fields in the dataclass's order, as orjson writes
    them, the token times as gaps (``chunk_gaps_ns``; ``RequestRecord.from_dict`` reads both
    forms). Where the C part is built it writes the usual line itself (``native.record_line``,
    the same bytes): orjson's dataclass path took ~4.6 us of a response at the client's
    ceiling, more than the C stream pass; its twin (orjson) writes the unusual ones (a str to
    escape, the server's fields)."""
    values = _record_values(record)
    return (native.record_line(_LINE_KEYS, values, _GAPS_AT)
            or twins.record_line(_LINE_KEYS, values, _GAPS_AT))


def _record_of(obj: dict[str, Any], path: Path) -> RequestRecord:
    """A requests.jsonl object as a record, or a one-line error naming the file and request
    (a field missing, gaps that do not add up as numbers) instead of a traceback."""
    try:
        record = RequestRecord.from_dict(obj)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"{path}: request {obj.get('index', '?')!r} is not a request record "
                          f"latscope can read ({exc})") from None
    return record


def read_run(run_dir: str | Path) -> tuple[dict[str, Any], list[RequestRecord], dict[str, Any]]:
    """(manifest, records, summary) of a run directory; summary is {} while the run is going or
    if it was interrupted before writing one. A truncated last line (a crash mid-write) is
    skipped; any other bad line is an error. It holds every record and its token times at
    once (~9 kB a 256-token record): for tests and small runs. The passes after a run read
    ``iter_records`` instead, one line at a time."""
    manifest, summary = read_meta(run_dir)
    return manifest, list(iter_records(run_dir)), summary


def read_meta(run_dir: str | Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """(manifest, summary) of a run directory, its records left on disk; summary as
    ``read_run`` gives it."""
    run_dir = RunDir.open(run_dir).path
    manifest = orjson.loads((run_dir / MANIFEST).read_bytes())
    summary_path = run_dir / SUMMARY
    summary = orjson.loads(summary_path.read_bytes()) if summary_path.is_file() else {}
    return manifest, summary


def iter_records(run_dir: str | Path, *, token_times: bool = True) -> Iterator[RequestRecord]:
    """The records of a run's ``requests.jsonl``, read one line at a time (memory holds one
    record, whatever the run's length); ``token_times=False`` leaves each record's
    ``chunk_ns`` empty, never decoding its token times (what a pass that needs no ITL reads:
    the decomposition, the join with the server's spans)."""
    for record, _ in iter_records_with_gaps(run_dir, token_times=token_times):
        yield record


def iter_records_with_gaps(run_dir: str | Path, *, token_times: bool = False
                           ) -> Iterator[tuple[RequestRecord, Gaps | None]]:
    """Each record with its ITL gaps (``Gaps``: None for fewer than two token times), its
    token times read where they lie in the line (``record_without_times``): what the
    statistics take (``RunStats.add(record, gaps)``). With ``token_times`` each record keeps
    its times and the gaps are None."""
    path = Path(run_dir) / REQUESTS
    for number, line, last in jsonl_lines(path):
        read = None if token_times else record_without_times(line)
        if read is not None:
            yield read
            continue
        try:
            obj = orjson.loads(line)
        except orjson.JSONDecodeError:
            if last:  # a torn last line: a crash mid-write
                return
            raise ConfigError(f"{path}: line {number} is not JSON") from None
        if not isinstance(obj, dict):
            raise ConfigError(f"{path}: line {number} is not a JSON object")
        record = _record_of(obj, path)
        if token_times:  # (the caller has the times: no gaps computed for it)
            yield record, None
            continue
        gaps = twins.gaps_of(record.chunk_ns)
        record.chunk_ns = []
        yield record, gaps


_RECORD_DECODER = msgspec.json.Decoder(RequestRecord)


def record_without_times(data: bytes, start: int = 0, end: int | None = None
                         ) -> tuple[RequestRecord, Gaps | None] | None:
    """A ``requests.jsonl`` line (``data[start:end]``) read without its token times: the
    record with ``chunk_ns`` empty, and the ITL gaps ``native.json_gaps`` read from the line's
    text (None for fewer than two times). Decoding the times made a Python int of each: ~10 of
    the ~31 us a 256-token record took (orjson.loads 15, from_dict 5, the statistics 9), and
    ~9 kB of memory a record. None where the line is not the usual form: the caller decodes
    it whole."""
    end = len(data) if end is None else end
    found = native.json_gaps(data, start, end)
    if found is None:
        return None
    times_start, times_end, gaps = found
    try:
        return _RECORD_DECODER.decode(data[start:times_start] + data[times_end:end]), gaps
    except msgspec.MsgspecError:
        return None
