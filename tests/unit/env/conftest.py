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

from fakehost import DATA, write_tree


@pytest.fixture
def make_tree(tmp_path: Path) -> Callable[[dict[str, str | bytes]], Path]:
    count = iter(range(1000))

    def build(files: dict[str, str | bytes]) -> Path:
        return write_tree(tmp_path / f"tree{next(count)}", files)  # a fresh tree per call
    return build


@pytest.fixture
def h200_capture() -> Path:
    return DATA / "h200_collect.tar.gz"
