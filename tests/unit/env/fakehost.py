"""Helpers that build fake /proc and /sys trees for the doctor tests (imported by name: a module
called ``conftest`` would clash with the other test folders' conftest files)."""

from __future__ import annotations

from pathlib import Path

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
