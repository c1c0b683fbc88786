"""Builders for fake host trees (the layout ``doctor --collect`` writes and ``--root`` reads).

File formats copied from their documentation: proc(5) for ``/proc/PID/{environ,status,stat}``,
``/proc/sys/kernel/numa_balancing`` and ``/proc/cmdline``; the kernel ABI files
``Documentation/ABI/testing/sysfs-bus-pci`` (``{current,max}_link_{speed,width}``, ``numa_node``,
``class``, ``vendor``) and ``sysfs-devices-system-cpu`` (``cpufreq/scaling_governor``,
``cpuidle/stateN/{name,latency,disable}``, ``node/nodeN/cpulist``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

import pytest

DATA = Path(__file__).parent / "data"


def write_tree(root: Path, files: dict[str, str | bytes]) -> Path:
    for rel, content in files.items():
        path = root / rel.lstrip("/")
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content)
    return root


def environ(env: dict[str, str]) -> bytes:
    return b"".join(f"{k}={v}".encode() + b"\0" for k, v in env.items())


def status(pid: int, cpus: str) -> str:
    # proc(5): "Cpus_allowed_list: List of CPUs on which this process may be scheduled"
    return f"Name:\tpython3\nState:\tS (sleeping)\nPid:\t{pid}\nCpus_allowed_list:\t{cpus}\n"


def stat(pid: int, ppid: int, comm: str = "python3") -> str:
    return f"{pid} ({comm}) S {ppid} {pid} {pid} 0 -1 4194560 0 0 0 0 0 0 0 0 20 0 1 0 100\n"


def pci_gpu(bdf: str, vendor: str, cls: str, node: int, speed: str, max_speed: str, width: int,
            max_width: int) -> dict[str, str]:
    base = f"/sys/bus/pci/devices/{bdf}"
    return {f"{base}/vendor": f"{vendor}\n", f"{base}/class": f"{cls}\n",
            f"{base}/numa_node": f"{node}\n", f"{base}/current_link_speed": f"{speed}\n",
            f"{base}/max_link_speed": f"{max_speed}\n", f"{base}/current_link_width": f"{width}\n",
            f"{base}/max_link_width": f"{max_width}\n"}


@pytest.fixture
def make_tree(tmp_path: Path) -> Callable[[dict[str, str | bytes]], Path]:
    count = iter(range(1000))

    def build(files: dict[str, str | bytes]) -> Path:
        return write_tree(tmp_path / f"tree{next(count)}", files)  # a fresh tree per call
    return build


@pytest.fixture
def h200_capture() -> Path:
    return DATA / "h200_collect.tar.gz"
