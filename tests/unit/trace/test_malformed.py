"""Bad input: one clear TraceFormatError naming the expected format and the byte offset."""

from __future__ import annotations

import gzip
import sqlite3

import pytest

from latscope.cli.main import main
from latscope.errors import TraceFormatError
from latscope.trace.readers import read_trace


def _decompressed(kineto_path) -> bytes:
    with gzip.open(kineto_path("mi250"), "rb") as f:
        return f.read()


def test_truncated_json_names_format_and_offset(kineto_path, tmp_path):
    data = _decompressed(kineto_path)
    path = tmp_path / "cut.json"
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(TraceFormatError) as err:
        read_trace(path)
    assert "Kineto" in str(err.value) and err.value.offset is not None
    assert 0 < err.value.offset <= len(data) // 2


def test_truncated_gzip_stream(kineto_path, tmp_path):
    raw = kineto_path("b200").read_bytes()
    path = tmp_path / "cut.json.gz"
    path.write_bytes(raw[: len(raw) // 3])
    with pytest.raises(TraceFormatError) as err:
        read_trace(path)
    assert err.value.offset is not None


def test_gzip_cut_inside_the_detection_head_is_not_called_empty(kineto_path, tmp_path):
    path = tmp_path / "cut.json.gz"
    path.write_bytes(kineto_path("mi250").read_bytes()[:5000])  # < 1 MiB once decompressed
    with pytest.raises(TraceFormatError) as err:
        read_trace(path)
    assert "empty" not in str(err.value) and "Kineto" in str(err.value)


def test_corrupt_gzip_data_is_a_format_error(tmp_path):
    path = tmp_path / "bad.json.gz"
    path.write_bytes(b"\x1f\x8b\x08\x00" + b"garbage" * 4)
    with pytest.raises(TraceFormatError, match="gzip"):
        read_trace(path)


def test_not_a_trace(tmp_path):
    path = tmp_path / "notes.txt"
    path.write_text("hello, this is not a trace\n")
    with pytest.raises(TraceFormatError, match="not a recognised trace"):
        read_trace(path)


def test_empty_file(tmp_path):
    path = tmp_path / "empty.json"
    path.write_bytes(b"")
    with pytest.raises(TraceFormatError, match="empty"):
        read_trace(path)


def test_csv_missing_columns(tmp_path):
    path = tmp_path / "1_kernel_trace.csv"
    path.write_text('"Kind","Kernel_Name"\n"KERNEL_DISPATCH","k"\n')
    with pytest.raises(TraceFormatError, match="lacks"):
        read_trace(path)


def test_csv_truncated_row(traces_dir, tmp_path):
    text = (traces_dir / "rocprofv3_csv_docs" / "kernel_trace.csv").read_text()
    path = tmp_path / "2_kernel_trace.csv"
    path.write_text(text[: len(text) - 40])
    with pytest.raises(TraceFormatError):
        read_trace(path)


def test_sqlite_without_trace_tables(tmp_path):
    path = tmp_path / "other.sqlite"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE t (x INTEGER)")
    conn.commit()
    conn.close()
    with pytest.raises(TraceFormatError, match="nsys"):
        read_trace(path)


def test_cli_prints_one_line_error(tmp_path, capsys):
    path = tmp_path / "bad.json"
    path.write_text('{"traceEvents": [{"ph": "X", "cat": "kernel"')
    assert main(["trace", str(path), "-o", str(tmp_path / "out.json")]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and "byte" in err[0]


def test_rocpd_database_without_timestamps_is_refused_with_a_convert_hint(tmp_path):
    path = tmp_path / "1_results.db"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE rocpd_kernel_dispatch (start INTEGER, end INTEGER)")
    conn.commit()
    conn.close()
    with pytest.raises(TraceFormatError, match="rocpd convert"):
        read_trace(path)


def test_a_gzip_bomb_of_whitespace_is_refused_with_bounded_memory(tmp_path, monkeypatch):
    # 96 MiB of whitespace inside the array (about 100 KB compressed): the reader once kept all
    # of it (1.3 GB for 400 MB); now it refuses past its bound, whatever the input's size
    import gzip
    import tracemalloc

    from latscope.errors import TraceFormatError
    from latscope.trace.readers import chunked
    from latscope.trace.readers.kineto import read_kineto

    monkeypatch.setattr(chunked, "MAX_UNCUT", 4 << 20)
    path = tmp_path / "bomb.json.gz"
    with gzip.open(path, "wb", compresslevel=1) as f:
        f.write(b'{"traceEvents": [')
        block = b" " * (1 << 20)
        for _ in range(96):
            f.write(block)
        f.write(b"]}")
    tracemalloc.start()
    try:
        with pytest.raises(TraceFormatError, match="no boundary between two events"):
            read_kineto(path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 48 << 20, peak  # the bound and a block or two, not the 96 MiB inflated
