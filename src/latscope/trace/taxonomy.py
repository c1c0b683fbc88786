"""Kernel names: normalisation (demangling, ``.kd`` suffixes), categories, generic-fallback rules,
families and the template arguments display names skip (``latscope.trace.names``), all driven
by ``taxonomy.toml`` (package data) so that a rule is a table row.

Classification runs once per *unique* name, then is broadcast to events with numpy indexing.
"""

from __future__ import annotations

import functools
import re
import shutil
import subprocess
import tomllib
from dataclasses import dataclass
from importlib import resources

import numpy as np

OTHER = "other"
CATEGORIES = ("gemm", "attention", "moe", "norm/activation", "elementwise", "communication",
              "copy-as-kernel", OTHER)
_CLONE_KD = re.compile(r"\s*\[clone \.kd\]$|\.kd$")


@dataclass(frozen=True)
class FallbackRule:
    id: str
    vendor: str
    pattern: re.Pattern[str]
    why: str


@dataclass(frozen=True)
class Taxonomy:
    categories: tuple[tuple[str, re.Pattern[str]], ...]
    fallbacks: tuple[FallbackRule, ...]
    families: tuple[tuple[re.Pattern[str], str], ...]
    # template arguments that carry others but never say what a kernel is (latscope.trace.names)
    carriers: re.Pattern[str]

    def category(self, name: str) -> str:
        for label, pattern in self.categories:
            if pattern.search(name):
                return label
        return OTHER

    def fallback(self, name: str, vendor: str) -> FallbackRule | None:
        for rule in self.fallbacks:
            if rule.vendor in ("any", vendor) and rule.pattern.search(name):
                return rule
        return None

    def family(self, name: str) -> str:
        for pattern, label in self.families:
            if pattern.search(name):
                return label
        return function_name(name)


def function_name(name: str) -> str:
    """``void ns::(anonymous namespace)::f<T, 4>(int)`` -> ``ns::f``: the C++ function without
    template arguments, parameters or return type; plain (C/Triton) names are returned as is."""
    text = name.replace("(anonymous namespace)::", "")
    depth, parens, out = 0, 0, []
    for ch in text:  # drop template arguments at every depth ('>' inside (...) is a comparison)
        if depth and ch in "()":
            parens += 1 if ch == "(" else -1
        elif ch == "<" and not parens:
            depth += 1
        elif ch == ">" and depth and not parens:
            depth -= 1
        elif not depth:
            out.append(ch)
    head = "".join(out).split("(", 1)[0].strip()
    return head.rsplit(" ", 1)[-1] if head else name


@functools.lru_cache(maxsize=1)
def load_taxonomy() -> Taxonomy:
    data = tomllib.loads(resources.files("latscope.trace").joinpath("taxonomy.toml").read_text())
    categories = tuple((c["name"], re.compile("|".join(f"(?:{p})" for p in c["patterns"])))
                       for c in data["category"])
    fallbacks = tuple(FallbackRule(f["id"], f["vendor"], re.compile(f["pattern"]), f["why"])
                      for f in data["fallback"])
    families = tuple((re.compile(f["pattern"]), f["name"]) for f in data["family"])
    carriers = re.compile("|".join(f"(?:{p})" for p in data["names"]["carriers"]))
    return Taxonomy(categories, fallbacks, families, carriers)


def strip_suffix(name: str) -> str:
    return _CLONE_KD.sub("", name.strip())


def demangle_all(names: list[str]) -> list[str]:
    """Demangle Itanium names (``_Z...``, common for CK/aiter on ROCm) in one batch.

    binutils' ``c++filt`` is tried first (it knows newer manglings such as ``DF16b``, which the
    libstdc++ behind the ``cxxfilt`` package may not), then ``cxxfilt``; names that neither
    can demangle stay as they are (they are still classified).
    """
    mangled = sorted({n for n in names if n.startswith("_Z")})
    if not mangled:
        return names
    table = _demangle_cxxfilt_binary(mangled) or {}
    missing = [m for m in mangled if table.get(m, m) == m]
    table.update(_demangle_cxxfilt_package(missing))
    return [table.get(n, n) for n in names]


def _demangle_cxxfilt_binary(mangled: list[str]) -> dict[str, str] | None:
    exe = shutil.which("c++filt")
    if exe is None:
        return None
    try:
        out = subprocess.run([exe], input="\n".join(mangled) + "\n", capture_output=True,
                             text=True, timeout=30, check=True).stdout.splitlines()
    except (OSError, subprocess.SubprocessError):
        return None
    return dict(zip(mangled, out)) if len(out) == len(mangled) else None


def _demangle_cxxfilt_package(mangled: list[str]) -> dict[str, str]:
    try:
        import cxxfilt
    except ImportError:
        return {}
    table = {}
    for name in mangled:
        try:
            table[name] = cxxfilt.demangle(name)
        except Exception:  # noqa: BLE001 - cxxfilt raises its own InvalidName
            continue
    return table


@dataclass
class NameTable:
    """Per unique name id: normalised name, category index, fallback rule index (-1 = none)."""

    display: list[str]
    category: np.ndarray  # int8 index into CATEGORIES
    fallback: np.ndarray  # int16 index into Taxonomy.fallbacks, -1 if not generic


def classify_names(names: list[str], vendor: str) -> NameTable:
    tax = load_taxonomy()
    display = demangle_all([strip_suffix(n) for n in names])
    cat_index = {c: i for i, c in enumerate(CATEGORIES)}
    rule_index = {r.id: i for i, r in enumerate(tax.fallbacks)}
    category = np.fromiter((cat_index[tax.category(n)] for n in display), dtype=np.int8,
                           count=len(display))
    fallback = np.full(len(display), -1, dtype=np.int16)
    for i, n in enumerate(display):
        rule = tax.fallback(n, vendor)
        if rule is not None:
            fallback[i] = rule_index[rule.id]
    return NameTable(display, category, fallback)
