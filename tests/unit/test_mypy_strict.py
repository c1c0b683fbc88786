"""The strict override in pyproject.toml holds every flag that `mypy --strict` turns on.

A per-module `strict = true` would turn strict mode on for every module (python/mypy#11401),
so pyproject spells the flags out; a mypy release that adds one to --strict would otherwise
leave the ground and findings/ less strict than they claim, silently.
"""

import re
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
STRICT_MODULES = {"latscope.model", "latscope.errors", "latscope.slo", "latscope.rundir",
                  "latscope.redact", "latscope.results", "latscope.reliability",
                  "latscope.runfiles", "latscope.findings", "latscope.findings.*"}


def strict_flags_from_mypy_help(help_text: str) -> set[str]:
    """The option names --strict enables, as mypy --help wraps them over several lines."""
    lines = help_text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.lstrip().startswith("--strict "))
    text = lines[start].split("following flags:", 1)[1].strip()
    for line in lines[start + 1:]:
        if re.match(r"\s{2}-", line):  # the next option
            break
        text += ("" if text.endswith("-") else " ") + line.strip()
    return {flag.strip().removeprefix("--").replace("-", "_")
            for flag in text.split(",") if flag.strip()}


def strict_override() -> tuple[dict[str, object], dict[str, object]]:
    mypy = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["mypy"]
    overrides = [o for o in mypy["overrides"] if set(o["module"]) == STRICT_MODULES]
    assert len(overrides) == 1, "one override lists exactly the strict modules"
    return mypy, overrides[0]


def test_the_help_parser_reads_a_wrapped_flag_list():
    help_text = ("  --strict                  Strict mode; enables the following flags:\n"
                 "                            --disallow-any-generics, --disallow-subclassing-\n"
                 "                            any, --extra-checks\n"
                 "  --disable-error-code NAME\n")
    assert strict_flags_from_mypy_help(help_text) == {
        "disallow_any_generics", "disallow_subclassing_any", "extra_checks"}


def test_the_strict_override_sets_every_flag_of_mypy_strict():
    help_text = subprocess.run([sys.executable, "-m", "mypy", "--help"], check=True,
                               capture_output=True, text=True).stdout
    wanted = strict_flags_from_mypy_help(help_text)
    assert len(wanted) >= 10, f"mypy --help's --strict list not understood: {wanted}"
    global_section, override = strict_override()
    missing = {flag for flag in wanted
               if override.get(flag) is not True and global_section.get(flag) is not True}
    assert not missing, f"add to pyproject's strict override: {sorted(missing)}"
