"""The facts doctor reads once: the server process (its pid, from --pid, a collected tree's
manifest or the port's listener; its environment and command line), the GPUs, and what the
server's endpoints, log and command line say about its settings. ``raw_facts`` is what doctor's
report shows of them (secrets redacted). The checks over them are in ``latscope.findings``.
"""

from __future__ import annotations

import os
from dataclasses import asdict
from typing import Any

import msgspec
import orjson

from latscope.env import gpu
from latscope.env.collect import BundleManifest
from latscope.env.facts import Facts, ServerFacts
from latscope.env.host import gather_sys_facts
from latscope.env.serverfacts import gather_server_facts, is_local, settings_from_cmdline
from latscope.errors import ConfigError
from latscope.redact import redact_argv, redact_env
from latscope.server.hostview import META_DIR, HostView, find_listening_pid, parse_environ, url_port


def gather_facts(view: HostView, url: str | None, pid: int | None, log: str | None,
                 headers: dict[str, str] | None) -> Facts:
    manifest = _manifest(view)
    facts = Facts(host=view)
    facts.pid, facts.pid_source = _resolve_pid(view, url, pid, manifest)
    _read_process(facts)
    facts.gpu = gpu.gather_gpu_facts(view, None if view.live else _captured_versions(view))
    facts.sys = gather_sys_facts(view, facts.pid, facts.gpu.vendor)
    log = log or _captured_log(view)
    facts.server = gather_server_facts(url, log, headers or {}) if (url or log) else ServerFacts()
    if facts.cmdline:
        facts.server.settings.update(settings_from_cmdline(
            facts.cmdline, view.source(f"/proc/{facts.pid}/cmdline")))
    return facts


def _manifest(view: HostView) -> BundleManifest:
    """The bundle's collect.json (an empty one for the live host or a bundle without it)."""
    raw = None if view.live else view.read_bytes(f"/{META_DIR}/collect.json")
    if not raw:
        return BundleManifest()
    try:
        return msgspec.json.decode(raw, type=BundleManifest)
    except msgspec.ValidationError as exc:
        raise ConfigError(f"--root {view.label}: {META_DIR}/collect.json: {exc}") from None
    except msgspec.DecodeError as exc:
        raise ConfigError(f"--root {view.label}: {META_DIR}/collect.json is not JSON") from exc


def _captured_versions(view: HostView) -> dict[str, str]:
    raw = view.read_bytes(f"/{META_DIR}/python.json")
    return orjson.loads(raw) if raw else {}


def _captured_log(view: HostView) -> str | None:
    path = view.path(f"/{META_DIR}/server.log")
    return None if view.live or not path.is_file() else str(path)


def _resolve_pid(view: HostView, url: str | None, pid: int | None,
                 manifest: BundleManifest) -> tuple[int | None, str]:
    if pid is not None:
        if not view.path(f"/proc/{pid}").is_dir():
            raise ConfigError(f"--pid {pid}: no such process" + ("" if view.live else " in --root"))
        return pid, "--pid"
    if manifest.pid is not None:
        return manifest.pid, f"{META_DIR}/collect.json"
    port = url_port(url) if url else None
    if view.live and url and is_local(url) and port:
        found = find_listening_pid(view, port)
        if found is not None:
            return found, f"listener of port {port} (/proc/net/tcp)"
    return None, ""


def _read_process(facts: Facts) -> None:
    view, pid = facts.host, facts.pid
    env = view.environ(pid) if pid is not None else None
    if env is not None:
        facts.env, facts.env_source = env, view.source(f"/proc/{pid}/environ")
    elif not view.live:
        captured = view.read_bytes(f"/{META_DIR}/environ")
        facts.env = parse_environ(captured) if captured else {}
        facts.env_source = view.source(f"/{META_DIR}/environ (collector's own environment)")
    else:
        facts.env = dict(os.environ)
        why = f"/proc/{pid}/environ not readable" if pid is not None else "no server pid"
        facts.env_source = f"latscope's own environment ({why})"
    if pid is not None:
        raw = view.read_bytes(f"/proc/{pid}/cmdline") or b""
        facts.cmdline = [a.decode(errors="replace") for a in raw.split(b"\0") if a]


def raw_facts(facts: Facts) -> dict[str, Any]:
    g = facts.gpu
    s = facts.server
    return {
        "root": None if facts.host.live else facts.host.label,
        "pid": facts.pid, "pid_source": facts.pid_source,
        "env_source": facts.env_source,
        "env": redact_env({k: v for k, v in facts.env.items() if _relevant_env(k)}),
        "cmdline": redact_argv(facts.cmdline),
        "gpu": {"vendor": g.vendor, "source": g.gpus_source, "gpus": [asdict(x) for x in g.gpus],
                "pci": [asdict(p) for p in g.pci], "versions": g.versions,
                "tools_found": g.tools_found, "tools_missing": g.tools_missing,
                "topology": None if g.topology is None else {
                    "source": g.topology_source,
                    "links": {f"{a}-{b}": v for (a, b), v in g.topology.links.items()},
                    "numa": g.topology.numa}},
        "server": {"url": s.url, "version": s.version, "version_source": s.version_source,
                   "endpoints": s.endpoints, "models": s.models, "log": s.log_path,
                   "settings": {k: {"value": v, "source": src} for k, (v, src) in s.settings.items()}},
    }


_ENV_PREFIXES = ("VLLM_", "CUDA_", "HIP_", "HSA_", "AMD_", "ROCM_", "PYTORCH_", "TORCH_", "NCCL_",
                 "RCCL_", "OMP_", "MKL_", "SAFETENSORS_")


def _relevant_env(name: str) -> bool:
    return name.startswith(_ENV_PREFIXES)
