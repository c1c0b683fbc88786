"""One findings model: every id latscope can produce is made by exactly one rule (one function,
or one table), is documented in docs/findings.md, and cites what ships with latscope or a public
source -- never the development-only ../shared material.

The ids are read from the shipped code itself (its AST), so a new rule is caught without anyone
remembering to list it here: a string passed as the id of ``Finding(...)`` (first argument or
``id=``), of ``skipped(...)`` and doctor's ``_flag(...)`` helpers, an ``EnvRule`` or latency
``Rule`` table row, or the constant prefix of an f-string id (``f"host.pcie_link.{bdf}"``).
"""

from __future__ import annotations

import ast
import re
import tomllib
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from latscope.findings.envvars import ENV_RULES
from latscope.findings.checkbase import ev
from latscope.model import Severity

REPO = Path(__file__).resolve().parents[3]
SRC = REPO / "src" / "latscope"
# Calls that make a finding, and the position of the id among their arguments.
PRODUCERS = {"Finding": 0, "skipped": 0, "_flag": 1, "EnvRule": 0, "Rule": 0}
# "could not run here" findings carry no diagnosis and no advice: they may share an id with the
# rule that runs when the input is there.
NOT_A_RULE = {"skipped"}
# Position of the reference among the arguments, where it is not passed as reference=.
REF_POS = {"_flag": 8, "EnvRule": 7}
REF_NAMES = {"REF", "_REF", "FINDINGS_REF"}  # module constants holding "docs/findings.md"
DOC_REF = re.compile(r"docs/findings\.md#([a-z][a-z0-9_.]*[a-z0-9_])")
BANNED = re.compile(r"\.\./shared|shared/docs|shared/fixtures|vllm-facts|trace-formats|"
                    r"peers\.md|style-anchors")


@dataclass
class Produced:
    by_rule: dict[str, set[str]] = field(default_factory=lambda: defaultdict(set))
    all_ids: dict[str, set[str]] = field(default_factory=lambda: defaultdict(set))
    references: list[tuple[str, str | None, str]] = field(default_factory=list)  # where, id, anchor
    unresolved: list[str] = field(default_factory=list)


def _call_name(node: ast.Call) -> str:
    f = node.func
    return f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else ""


def _id_from(expr: ast.AST | None, local: dict[str, ast.AST]) -> str | None:
    """A literal id, an f-string's constant prefix (its family, without the trailing dot), or
    None when the expression is not a literal (a parameter, ``rule.id``)."""
    if isinstance(expr, ast.Name) and expr.id in local:
        expr = local[expr.id]
    if isinstance(expr, ast.Constant) and isinstance(expr.value, str):
        return expr.value
    if isinstance(expr, ast.JoinedStr) and expr.values and isinstance(expr.values[0], ast.Constant):
        return str(expr.values[0].value).rstrip(".")
    return None


def _anchor_from(expr: ast.AST | None, local: dict[str, ast.AST]) -> str | None:
    """The docs/findings.md anchor a ``reference=`` expression names, when it can be read."""
    if isinstance(expr, ast.Call) and _call_name(expr) == "_ref" and expr.args:
        return _id_from(expr.args[0], local)
    if isinstance(expr, ast.JoinedStr):
        text = "".join(v.value if isinstance(v, ast.Constant) else
                       "docs/findings.md" if isinstance(v.value, ast.Name) and v.value.id in REF_NAMES
                       else "{}" for v in expr.values)
        m = DOC_REF.search(text)
        return m.group(1) if m else None
    if isinstance(expr, ast.Constant) and isinstance(expr.value, str):
        m = DOC_REF.search(expr.value)
        return m.group(1) if m else None
    return None


def _id_arg(node: ast.Call, pos: int) -> ast.AST | None:
    for kw in node.keywords:
        if kw.arg in ("id", "check_id"):
            return kw.value
    return node.args[pos] if len(node.args) > pos else None


def _scan_scope(where: str, body: ast.AST, params: set[str], out: Produced) -> None:
    local = {t.id: n.value for n in ast.walk(body) if isinstance(n, ast.Assign)
             for t in n.targets if isinstance(t, ast.Name)}
    for node in ast.walk(body):
        if not isinstance(node, ast.Call) or _call_name(node) not in PRODUCERS:
            continue
        name = _call_name(node)
        expr = _id_arg(node, PRODUCERS[name])
        finding_id = _id_from(expr, local)
        ref = next((kw.value for kw in node.keywords if kw.arg == "reference"), None)
        if ref is None and len(node.args) > REF_POS.get(name, 99):
            ref = node.args[REF_POS[name]]
        if ref is not None:
            out.references.append((where, finding_id, _anchor_from(ref, local)))
        if finding_id is None:
            dynamic = isinstance(expr, ast.Attribute) or (isinstance(expr, ast.Name)
                                                         and expr.id in params)
            if not dynamic:
                out.unresolved.append(f"{where}: {ast.unparse(node)[:80]}")
            continue
        out.all_ids[finding_id].add(where)
        delegated = name == "EnvRule" and any(kw.arg == "build" for kw in node.keywords)
        if name not in NOT_A_RULE and not delegated:
            out.by_rule[finding_id].add(where)


def _scan_module(path: Path, out: Produced) -> None:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    module = path.relative_to(SRC).with_suffix("").as_posix().replace("/", ".")
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            params = {a.arg for a in node.args.args + node.args.kwonlyargs}
            _scan_scope(f"{module}:{node.name}", node, params, out)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            target = node.targets[0] if isinstance(node, ast.Assign) else node.target
            label = target.id if isinstance(target, ast.Name) else "?"
            _scan_scope(f"{module}:{label}", node, set(), out)
        elif isinstance(node, ast.ClassDef):
            for item in node.body:
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    params = {a.arg for a in item.args.args + item.args.kwonlyargs}
                    _scan_scope(f"{module}:{node.name}.{item.name}", item, params, out)


@pytest.fixture(scope="module")
def produced() -> Produced:
    out = Produced()
    for path in sorted(SRC.rglob("*.py")):
        _scan_module(path, out)
    return out


def test_the_scan_finds_the_known_rules(produced):
    # The scanner reads literals, tables and f-string families: if it ever stops seeing them,
    # the uniqueness test below would pass vacuously.
    ids = set(produced.all_ids)
    assert {"server.queue_max_num_seqs", "latency.network", "net.verdict", "trace.gpu_idle",
            "trace.generic_kernels", "host.pcie_link", "doctor", "server.debug_logging",
            "gpu.launch_blocking", "sweep.knee", "server.metrics"} <= ids
    assert len(ids) > 60
    assert produced.unresolved == [], "ids the scan cannot read: " + "; ".join(produced.unresolved)


def test_no_id_is_produced_by_two_rules(produced):
    twice = {i: sorted(w) for i, w in produced.by_rule.items() if len(w) > 1}
    assert twice == {}, "ids made by more than one function or table: " + str(twice)


def test_every_id_is_documented_and_every_section_is_an_id(produced, anchors, anchor_of):
    undocumented = sorted(i for i in produced.all_ids if anchor_of(i) != i)
    assert undocumented == [], f"no section with this anchor in docs/findings.md: {undocumented}"
    stale = sorted(anchors - set(produced.all_ids))
    assert stale == [], f"docs/findings.md documents ids no code produces: {stale}"


def test_each_fallback_rule_of_the_taxonomy_is_documented():
    taxonomy = tomllib.loads((SRC / "trace" / "taxonomy.toml").read_text(encoding="utf-8"))
    doc = (REPO / "docs" / "findings.md").read_text(encoding="utf-8")
    section = doc.split('<a id="trace.generic_kernels"></a>', 1)[1].split("<a id=", 1)[0]
    missing = [f["id"] for f in taxonomy["fallback"] if f"`{f['id']}`" not in section]
    assert missing == [], f"fallback rules not in docs/findings.md#trace.generic_kernels: {missing}"


def test_references_point_at_the_section_of_their_own_id(produced, anchors, anchor_of):
    read = [(w, i, a) for w, i, a in produced.references if a is not None]
    assert len(read) > 50  # the scan reads the references it checks
    unknown = [(w, a) for w, i, a in read if a not in anchors]
    assert unknown == [], f"references to sections docs/findings.md does not have: {unknown}"
    wrong = [(w, i, a) for w, i, a in read if i is not None and anchor_of(i) != a]
    assert wrong == [], f"references naming another id's section: {wrong}"


def test_hooked_env_rules_are_worded_by_their_one_rule():
    hooked = [r for r in ENV_RULES if r.build is not None]
    assert hooked  # server.debug_logging is read from the environment through findings.server
    for rule in hooked:
        bad = rule.build([ev(rule.variables[0], "DEBUG", "test")], True)
        good = rule.build([ev(rule.variables[0], "INFO", "test")], False)
        assert bad.id == good.id == rule.id
        assert bad.severity == rule.severity and good.severity == Severity.OK
        assert bad.reference.startswith(f"docs/findings.md#{rule.id}")


def _shipped_files() -> list[Path]:
    files = [REPO / "README.md", *sorted((REPO / "docs").rglob("*"))]
    files += [p for p in sorted(SRC.rglob("*")) if p.suffix in (".py", ".toml", ".json", ".yaml",
                                                                  ".j2", ".txt", ".css", ".md")]
    return [p for p in files if p.is_file()]


def test_no_shipped_file_cites_development_only_material():
    files = _shipped_files()
    assert len(files) > 50 and REPO / "docs" / "findings.md" in files
    hits = [f"{p.relative_to(REPO)}:{n}: {line.strip()[:90]}"
            for p in files for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1)
            if BANNED.search(line)]
    assert hits == [], "users do not have ../shared: cite docs/ or a public source\n" + \
        "\n".join(hits)


def test_the_banned_pattern_catches_what_it_must():
    for text in ("see ../shared/docs/vllm-facts.md", "vllm-facts.md section 6",
                 "trace-formats.md s4", "shared/fixtures/vllm"):
        assert BANNED.search(text), text
    assert not BANNED.search("docs/findings.md#server.kv_saturation; https://docs.vllm.ai/")


def test_debug_logging_reads_the_same_from_log_environment_and_command_line(fixtures_dir):
    from latscope.findings.envvars import check_env_rules
    from latscope.env.facts import Facts
    from latscope.server.hostview import HostView
    from latscope.findings.serverconfig import check_log_level
    from latscope.findings.server import findings_from_log
    from latscope.server.logs import parse_log

    log = parse_log(fixtures_dir / "vllm/cpu-vllm0.32/server_debug.log")
    from_log = next(f for f in findings_from_log(log) if f.id == "server.debug_logging")
    facts = Facts(host=HostView(), env={"VLLM_LOGGING_LEVEL": "debug"},
                  env_source="test environ")
    from_env = next(f for f in check_env_rules(facts) if f.id == "server.debug_logging")
    facts.server.settings["log_level"] = ("DEBUG", "/proc/1/cmdline")
    from_cmdline = check_log_level(facts)[0]
    assert from_log.id == from_env.id == from_cmdline.id == "server.debug_logging"
    for f in (from_env, from_cmdline):
        assert (f.severity, f.title, f.why, f.fix, f.reference) == \
            (from_log.severity, from_log.title, from_log.why, from_log.fix, from_log.reference)
    assert from_env.evidence[0].value == "debug" and from_env.evidence[0].source == "test environ"


def test_request_logging_reads_the_same_from_log_and_command_line():
    from latscope.env.facts import Facts
    from latscope.server.hostview import HostView
    from latscope.findings.serverconfig import check_request_logging
    from latscope.findings.server import findings_from_log
    from latscope.server.logs import parse_log

    # vLLM 0.32's lines with --enable-log-requests (no fixture log has them)
    lines = ["(APIServer pid=1) INFO 01-01 00:00:00 [api_utils.py:1] non-default args: "
             "{'model': '/m', 'enable_log_requests': True}"]
    for i in range(3):
        lines.append(f"(APIServer pid=1) INFO 01-01 00:00:0{i} [logger.py:1] Received request "
                     f"cmpl-{i}: params: SamplingParams(n=1), lora_request: None.")
        lines.append(f"(APIServer pid=1) INFO 01-01 00:00:0{i} [async_llm.py:1] Added request "
                     f"cmpl-{i}.")
    log = parse_log(lines)
    from_log = next(f for f in findings_from_log(log) if f.id == "server.request_logging")
    facts = Facts(host=HostView())
    facts.server.settings["request_logging"] = (True, "/proc/1/cmdline")
    from_cmdline = check_request_logging(facts)[0]
    assert from_cmdline.severity == Severity.WARNING
    assert (from_cmdline.why, from_cmdline.fix, from_cmdline.reference) == \
        (from_log.why, from_log.fix, from_log.reference)
    facts.server.settings["request_logging"] = (False, "/proc/1/cmdline")
    assert check_request_logging(facts)[0].severity == Severity.OK
