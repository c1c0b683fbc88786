"""Where the tests find the real fixtures, and scripts/fetch-fixtures.sh: its checksum check on
the local copies, and its download path with a stand-in for curl that serves those copies (the
real download needs the internet, which the test machines do not have)."""

from __future__ import annotations

import gzip
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
SCRIPT = REPO / "scripts" / "fetch-fixtures.sh"


def _manifest() -> list[list[str]]:
    text = SCRIPT.read_text()
    body = text.split("<<'EOF'\n", 1)[1].split("\nEOF\n", 1)[0]
    return [line.split("|") for line in body.splitlines()]


def _script(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True,
                          env=env, timeout=120)


def _copy_traces(traces_dir: Path, root: Path) -> Path:
    shutil.copytree(traces_dir, root / "traces")
    for path in (root / "traces").rglob("*"):
        path.chmod(0o755 if path.is_dir() else 0o644)
    return root


def test_manifest_covers_every_trace_fixture(traces_dir):
    listed = {row[1] for row in _manifest()}
    present = {str(p.relative_to(traces_dir)) for p in traces_dir.rglob("*")
               if p.is_file() and p.name != "SOURCES.md"}
    assert listed == present


def test_verify_accepts_the_local_copies(traces_dir):
    done = _script("--verify", str(traces_dir.parent))
    assert done.returncode == 0, done.stderr
    assert f"all {len(_manifest())} fixtures match their sha256" in done.stdout


def test_verify_names_a_changed_and_a_missing_file(traces_dir, tmp_path):
    root = _copy_traces(traces_dir, tmp_path)
    with open(root / "traces" / "rocprofv3_csv_docs" / "kernel_trace.csv", "a") as f:
        f.write("extra\n")
    (root / "traces" / "LICENSES" / "pipit-LICENSE").unlink()
    done = _script("--verify", str(root))
    assert done.returncode == 1
    assert "MISMATCH rocprofv3_csv_docs/kernel_trace.csv" in done.stdout
    assert "missing  LICENSES/pipit-LICENSE" in done.stdout
    assert done.stderr.strip().splitlines() == [
        f"error: 2 of {len(_manifest())} fixtures missing or not matching their sha256 in "
        f"{root / 'traces'}"]


def _fake_curl(bin_dir: Path, served: Path, traces_dir: Path) -> None:
    """A `curl -fsSL --retry 3 -o OUT URL` that serves the local copies by URL, as published
    (the nsys export uncompressed)."""
    served.mkdir()
    for sha, rel, repo, commit, remote, stored in _manifest():
        repo = "AMD-AGI/TraceLens" if repo == "TL" else repo
        target = served / repo / commit / remote
        target.parent.mkdir(parents=True, exist_ok=True)
        data = (traces_dir / rel).read_bytes()
        target.write_bytes(gzip.decompress(data) if stored == "gzip" else data)
    curl = bin_dir / "curl"
    curl.write_text(f"""#!{sys.executable}
import shutil, sys
args = sys.argv[1:]
out, url = args[args.index("-o") + 1], args[-1]
src = {str(served)!r} + "/" + url.split("raw.githubusercontent.com/", 1)[1]
try:
    shutil.copyfile(src, out)
except FileNotFoundError:
    sys.exit(22)  # curl -f: HTTP error
""")
    curl.chmod(0o755)


@pytest.mark.slow
def test_fetch_downloads_checks_and_places_every_file(traces_dir, tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    _fake_curl(bin_dir, tmp_path / "served", traces_dir)
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}
    dest = tmp_path / "fixtures"
    done = _script(str(dest), env=env)
    assert done.returncode == 0, done.stderr
    assert done.stdout.count("fetched  ") == len(_manifest())
    # the gzip'ed nsys export holds the published bytes, and the reader takes it
    name = "nvidia_a100_nsys2022.2_saxpy.sqlite.gz"
    assert gzip.decompress((dest / "traces" / name).read_bytes()) == \
        gzip.decompress((traces_dir / name).read_bytes())
    again = _script(str(dest), env=env)  # a second run downloads nothing
    assert again.returncode == 0 and "fetched" not in again.stdout


def test_fetch_refuses_a_file_whose_checksum_differs(traces_dir, tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    served = tmp_path / "served"
    _fake_curl(bin_dir, served, traces_dir)
    first = _manifest()[0]
    (served / "AMD-AGI/TraceLens" / first[3] / first[4]).write_bytes(b"version https://git-lfs")
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}
    done = _script(str(tmp_path / "fixtures"), env=env)
    assert done.returncode == 1 and "expected " + first[0] in done.stderr
    assert not (tmp_path / "fixtures" / "traces" / first[1]).exists()
    assert not list((tmp_path / "fixtures" / "traces").glob(".fetch.*"))


@pytest.mark.slow
def test_tests_skip_with_how_to_get_the_fixtures_when_they_are_missing(tmp_path):
    env = {**os.environ, "LATSCOPE_FIXTURES": str(tmp_path / "none")}
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider",
         "tests/unit/trace/test_readers.py::test_rocprofv3_csv_folder_counts_rows",
         "tests/unit/server/test_logs.py::test_cpu_032_startup_config"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "2 skipped" in done.stdout
    assert "fetch-fixtures.sh" in done.stdout and "LATSCOPE_FIXTURES" in done.stdout


@pytest.mark.slow
def test_fixtures_are_found_through_latscope_fixtures(traces_dir, tmp_path):
    root = _copy_traces(traces_dir, tmp_path)
    env = {**os.environ, "LATSCOPE_FIXTURES": str(root)}
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
         "tests/unit/trace/test_readers.py::test_rocprofv3_csv_folder_counts_rows"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and "1 passed" in done.stdout, done.stdout
