"""Diff two analysed traces (e.g. the same model on MI300X and H100): breakdown, time per kernel
category (union inside the window) and per kernel family (summed), side by side with deltas.

Kernel names differ across vendors, so rows are matched by category and by family (the C++
function without template arguments, or a taxonomy family such as "Cijk_* (Tensile GEMM)");
PyTorch's own kernels (``at::native::*``) match by name across vendors.
"""

from __future__ import annotations

from latscope.trace.results import (
    CategoryTime,
    Comparison,
    CountDiff,
    DeviceAnalysis,
    DiffRow,
    FamilyTime,
    MatchRow,
    Side,
    TraceAnalysis,
)

_PARTS = ("window", "busy", "compute", "exposed_comm", "exposed_copy", "idle")


def compare_results(a: TraceAnalysis, b: TraceAnalysis, device_a: int | None = None,
                    device_b: int | None = None, top_n: int = 20) -> Comparison:
    da, db = _pick(a, device_a), _pick(b, device_b)
    ca, cb = da.kernels, db.kernels
    return Comparison(
        a=Side(path=a.source.path, device=da.device, name=da.device_name),
        b=Side(path=b.source.path, device=db.device, name=db.device_name),
        breakdown=[_row(part, getattr(da.breakdown, f"{part}_ns"),
                        getattr(db.breakdown, f"{part}_ns")) for part in _PARTS],
        categories=_match({r.category: r for r in ca.categories},
                          {r.category: r for r in cb.categories}, "union_ns"),
        families=_match({r.family: r for r in ca.families},
                        {r.family: r for r in cb.families}, "sum_ns")[:top_n],
        kernel_count=CountDiff(key="kernels", a=ca.kernel_count, b=cb.kernel_count,
                               delta=cb.kernel_count - ca.kernel_count,
                               ratio=cb.kernel_count / ca.kernel_count
                               if ca.kernel_count else None),
    )


def _pick(result: TraceAnalysis, device: int | None) -> DeviceAnalysis:
    from latscope.errors import ConfigError

    devices = result.devices
    if not devices:
        raise ConfigError(f"{result.source.path}: no GPU activity to compare")
    if device is None:
        return max(devices, key=lambda d: d.breakdown.busy_ns)
    for dev in devices:
        if dev.device == device:
            return dev
    raise ConfigError(f"{result.source.path}: no device {device} "
                      f"(have {[d.device for d in devices]})")


def _row(key: str, va: float, vb: float) -> DiffRow:
    return DiffRow(key=key, a_ns=va, b_ns=vb, delta_ns=vb - va, ratio=(vb / va) if va else None)


Rows = dict[str, CategoryTime] | dict[str, FamilyTime]


def _match(index_a: Rows, index_b: Rows, value: str) -> list[MatchRow]:
    """Rows of A and B under one key (a category, a family), ``value`` their time side by
    side; a key only one side has reads 0 on the other."""
    out = []
    for k in dict.fromkeys([*index_a, *index_b]):
        ra, rb = index_a.get(k), index_b.get(k)
        va = getattr(ra, value) if ra is not None else 0
        vb = getattr(rb, value) if rb is not None else 0
        out.append(MatchRow(key=k, a_ns=va, b_ns=vb, delta_ns=vb - va,
                            ratio=(vb / va) if va else None,
                            count_a=ra.count if ra is not None else 0,
                            count_b=rb.count if rb is not None else 0,
                            category=(ra.category if ra is not None else None)
                            or (rb.category if rb is not None else None) or k))
    out.sort(key=lambda r: -max(r.a_ns, r.b_ns))
    return out
