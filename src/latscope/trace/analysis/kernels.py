"""Top kernels, time per category, and generic-fallback kernels, inside the window.

Durations are clipped to the window. "share of busy" is the union of a kernel's (or category's)
intervals over the device's busy time (the union of all activity in the window), so it lies in
0-100 % by construction even when the same kernel runs on concurrent streams; ``total_ns`` is the
summed time. With concurrent streams the shares of different kernels can add up to more than
100 %, as they overlap.
"""

from __future__ import annotations

import numpy as np

from latscope.trace.analysis import intervals as iv
from latscope.trace.analysis.device import DeviceActivities
from latscope.trace.analysis.window import Window
from latscope.trace.model import GpuKind
from latscope.trace.results import (
    CategoryTime,
    FallbackKernels,
    FamilyTime,
    KernelTables,
    ShortKernels,
    TopKernel,
)
from latscope.trace.taxonomy import CATEGORIES, NameTable, load_taxonomy

SHORT_KERNEL_NS = 10_000  # TraceLens' short-kernel threshold (10 us)


def _clipped(dev: DeviceActivities, window: Window) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    s = np.clip(dev.gpu.start, window.start, window.end)
    e = np.clip(dev.gpu.end, window.start, window.end)
    inside = (e > s) | ((dev.gpu.start >= window.start) & (dev.gpu.start < window.end))
    return inside, s, e


def kernel_tables(dev: DeviceActivities, window: Window, names: NameTable, busy_ns: int,
                  top_n: int = 15) -> KernelTables:
    inside, s, e = _clipped(dev, window)
    kmask = inside & (dev.gpu.kind == GpuKind.KERNEL)
    dur = (e - s)[kmask]
    name_ids = dev.gpu.name[kmask]
    n_names = len(names.display)
    total = np.bincount(name_ids, weights=dur, minlength=n_names)
    count = np.bincount(name_ids, minlength=n_names)
    kernel_sum = int(dur.sum())
    order = [i for i in np.argsort(-total, kind="stable")[:top_n] if count[i] > 0]
    rules = load_taxonomy().fallbacks
    ks, ke = s[kmask], e[kmask]
    top_union = {i: iv.union_length(ks[name_ids == i], ke[name_ids == i]) for i in order}
    top = [TopKernel(
        name=names.display[i],
        category=CATEGORIES[names.category[i]],
        count=int(count[i]),
        total_ns=int(total[i]),
        mean_ns=float(total[i] / count[i]),
        union_ns=top_union[i],
        share_of_busy=top_union[i] / busy_ns if busy_ns else 0.0,
        share_of_kernel_time=float(total[i] / kernel_sum) if kernel_sum else 0.0,
        generic=rules[names.fallback[i]].id if names.fallback[i] >= 0 else None,
    ) for i in order]
    short = dur < SHORT_KERNEL_NS
    return KernelTables(
        kernel_count=int(kmask.sum()),
        kernel_time_sum_ns=kernel_sum,
        distinct_kernels=int(np.count_nonzero(count)),
        short_kernels=ShortKernels(threshold_ns=SHORT_KERNEL_NS, count=int(short.sum()),
                                   time_ns=int(dur[short].sum())),
        top=top,
        categories=_categories(dev, inside, s, e, busy_ns),
        fallbacks=_fallbacks(dev, kmask, s, e, names, kernel_sum, busy_ns),
        families=_families(total, count, names),
    )


def _families(total: np.ndarray, count: np.ndarray, names: NameTable) -> list[FamilyTime]:
    """Kernel time grouped by family (same op, other template/tile parameters): for --compare."""
    tax = load_taxonomy()
    rows: dict[str, FamilyTime] = {}
    for i in np.flatnonzero(count):
        family = tax.family(names.display[i])
        row = rows.setdefault(family, FamilyTime(family=family,
                                                 category=CATEGORIES[names.category[i]],
                                                 count=0, sum_ns=0))
        row.count += int(count[i])
        row.sum_ns += int(total[i])
    return sorted(rows.values(), key=lambda r: -r.sum_ns)


def _categories(dev: DeviceActivities, inside: np.ndarray, s: np.ndarray, e: np.ndarray,
                busy_ns: int) -> list[CategoryTime]:
    rows: list[CategoryTime] = []
    for index, label in enumerate(CATEGORIES):
        mask = inside & (dev.category == index)
        if label == "copy-as-kernel":
            label = "copy"  # memcpy/memset activities and copy kernels together
        if not mask.any():
            continue
        union_ns = iv.union_length(s[mask], e[mask])
        rows.append(CategoryTime(category=label, count=int(mask.sum()),
                                 sum_ns=int((e - s)[mask].sum()), union_ns=union_ns,
                                 share_of_busy=union_ns / busy_ns if busy_ns else 0.0))
    rows.sort(key=lambda r: -r.union_ns)
    return rows


def _fallbacks(dev: DeviceActivities, kmask: np.ndarray, s: np.ndarray, e: np.ndarray,
               names: NameTable, kernel_sum: int, busy_ns: int) -> list[FallbackKernels]:
    rules = load_taxonomy().fallbacks
    rule_of = names.fallback[dev.gpu.name]
    rows: list[FallbackKernels] = []
    for index, rule in enumerate(rules):
        mask = kmask & (rule_of == index)
        if not mask.any():
            continue
        dur = (e - s)[mask]
        ids, per_name = np.unique(dev.gpu.name[mask], return_inverse=True)
        name_time = np.bincount(per_name, weights=dur)
        examples = [names.display[ids[i]] for i in np.argsort(-name_time)[:3]]
        rows.append(FallbackKernels(
            rule=rule.id, why=rule.why, count=int(mask.sum()), sum_ns=int(dur.sum()),
            share_of_kernel_time=float(dur.sum() / kernel_sum) if kernel_sum else 0.0,
            share_of_busy=(iv.union_length(s[mask], e[mask]) / busy_ns if busy_ns else 0.0),
            examples=examples))
    rows.sort(key=lambda r: -r.sum_ns)
    return rows
