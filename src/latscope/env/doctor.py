"""``run_doctor``: gather the facts once (host, server process, GPUs, server config), run every
check over them, merge findings that two sources gave the same id (e.g. DEBUG logging seen in the
process environment and in the log) and return a ``DoctorReport`` with the findings and the raw
facts read, for ``latscope doctor`` and, later, ``diagnose``.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field
from typing import Any, Callable

import orjson

from latscope.env import envrules, gpu, host, server, servermetrics
from latscope.env.facts import Facts, ServerFacts
from latscope.env.serverfacts import gather_server_facts, is_local, settings_from_cmdline
from latscope.errors import ConfigError, HostCheckError
from latscope.findings.rank import sort_findings
from latscope.model import Finding, Severity
from latscope.redact import redact_argv, redact_env
from latscope.server.hostview import META_DIR, HostView, find_listening_pid, parse_environ, url_port

Check = Callable[[Facts], list[Finding]]
ALL_CHECKS: tuple[Check, ...] = (*host.HOST_CHECKS, envrules.check_env_rules, *gpu.GPU_CHECKS,
                                 *server.SERVER_CHECKS, servermetrics.check_metrics)


@dataclass(slots=True)
class DoctorReport:
    findings: list[Finding]
    facts: dict[str, Any] = field(default_factory=dict)  # raw values read (secrets redacted)

    def to_dict(self) -> dict[str, Any]:
        return {"findings": [f.to_dict() for f in sort_findings(self.findings)],
                "facts": self.facts}

    def to_json(self) -> bytes:
        return orjson.dumps(self.to_dict(), option=orjson.OPT_INDENT_2, default=str)


def run_doctor(url: str | None = None, pid: int | None = None, log: str | None = None,
               root: str | None = None, headers: dict[str, str] | None = None) -> DoctorReport:
    from latscope.env.collect import open_root

    with open_root(root) as tree:
        return _run(HostView(tree, label=root), url, pid, log, headers)


def _run(view: HostView, url: str | None, pid: int | None, log: str | None,
         headers: dict[str, str] | None) -> DoctorReport:
    manifest = _manifest(view)
    facts = Facts(host=view)
    facts.pid, facts.pid_source = _resolve_pid(view, url, pid, manifest)
    _read_process(facts, manifest)
    facts.gpu = gpu.gather_gpu_facts(view, None if view.live else _captured_versions(view))
    log = log or _captured_log(view)
    facts.server = gather_server_facts(url, log, headers or {}) if (url or log) else ServerFacts()
    if facts.cmdline:
        facts.server.settings.update(settings_from_cmdline(
            facts.cmdline, view.source(f"/proc/{facts.pid}/cmdline")))
    findings = merge_findings([f for check in ALL_CHECKS for f in _run_check(check, facts)])
    return DoctorReport(findings, raw_facts(facts))


def _manifest(view: HostView) -> dict[str, Any]:
    if view.live:
        return {}
    raw = view.read_bytes(f"/{META_DIR}/collect.json")
    try:
        return orjson.loads(raw) if raw else {}
    except orjson.JSONDecodeError as exc:
        raise ConfigError(f"--root {view.root}: {META_DIR}/collect.json is not JSON") from exc


def _captured_versions(view: HostView) -> dict[str, str]:
    raw = view.read_bytes(f"/{META_DIR}/python.json")
    return orjson.loads(raw) if raw else {}


def _captured_log(view: HostView) -> str | None:
    path = view.path(f"/{META_DIR}/server.log")
    return None if view.live or not path.is_file() else str(path)


def _resolve_pid(view: HostView, url: str | None, pid: int | None,
                 manifest: dict[str, Any]) -> tuple[int | None, str]:
    if pid is not None:
        if not view.path(f"/proc/{pid}").is_dir():
            raise ConfigError(f"--pid {pid}: no such process" + ("" if view.live else " in --root"))
        return pid, "--pid"
    if manifest.get("pid") is not None:
        return int(manifest["pid"]), f"{META_DIR}/collect.json"
    port = url_port(url) if url else None
    if view.live and url and is_local(url) and port:
        found = find_listening_pid(view, port)
        if found is not None:
            return found, f"listener of port {port} (/proc/net/tcp)"
    return None, ""


def _read_process(facts: Facts, manifest: dict[str, Any]) -> None:
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


def _run_check(check: Check, facts: Facts) -> list[Finding]:
    try:
        return check(facts)
    except (OSError, ValueError, HostCheckError) as exc:
        # One unreadable or malformed input must not lose every other check's result.
        name = check.__name__.removeprefix("check_")
        return [Finding(f"doctor.{name}", Severity.SKIPPED,
                        f"skipped: {name} failed on its input: {type(exc).__name__}: {exc}",
                        reference="docs/findings.md#doctor")]


def merge_findings(findings: list[Finding]) -> list[Finding]:
    """One finding per id: the most severe that ran; others' evidence joins a bad one."""
    by_id: dict[str, list[Finding]] = {}
    for f in findings:
        by_id.setdefault(f.id, []).append(f)
    merged = []
    for group in by_id.values():
        ordered = sorted(group, key=lambda f: f.severity.rank)
        best = ordered[0]
        if best.severity not in (Severity.OK, Severity.SKIPPED, Severity.INFO):
            for other in ordered[1:]:
                if other.severity == best.severity or other.severity.rank < Severity.OK.rank:
                    best.evidence.extend(e for e in other.evidence if e not in best.evidence)
        merged.append(best)
    return merged


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
