"""Diff two analysed traces (e.g. the same model on MI300X and H100): breakdown, time per kernel
category (union inside the window) and per kernel family (summed), side by side with deltas.

Kernel names differ across vendors, so rows are matched by category and by family (the C++
function without template arguments, or a taxonomy family such as "Cijk_* (Tensile GEMM)");
PyTorch's own kernels (``at::native::*``) match by name across vendors.
"""

from __future__ import annotations

from typing import Any

_PARTS = ("window_ns", "busy_ns", "compute_ns", "exposed_comm_ns", "exposed_copy_ns", "idle_ns")


def compare_results(a: dict[str, Any], b: dict[str, Any], device_a: int | None = None,
                    device_b: int | None = None, top_n: int = 20) -> dict[str, Any]:
    da, db = _pick(a, device_a), _pick(b, device_b)
    return {
        "a": {"path": a["source"]["path"], "device": da["device"], "name": da["device_name"]},
        "b": {"path": b["source"]["path"], "device": db["device"], "name": db["device_name"]},
        "breakdown": [_row(k[:-3], da["breakdown"][k], db["breakdown"][k]) for k in _PARTS],
        "categories": _match(da["kernels"]["categories"], db["kernels"]["categories"],
                             "category", "union_ns"),
        "families": _match(da["kernels"]["families"], db["kernels"]["families"], "family",
                           "sum_ns")[:top_n],
        "kernel_count": _row("kernels", da["kernels"]["kernel_count"],
                             db["kernels"]["kernel_count"], suffix=""),
    }


def _pick(result: dict[str, Any], device: int | None) -> dict[str, Any]:
    from latscope.errors import ConfigError

    devices = result["devices"]
    if not devices:
        raise ConfigError(f"{result['source']['path']}: no GPU activity to compare")
    if device is None:
        return max(devices, key=lambda d: d["breakdown"]["busy_ns"])
    for dev in devices:
        if dev["device"] == device:
            return dev
    raise ConfigError(f"{result['source']['path']}: no device {device} "
                      f"(have {[d['device'] for d in devices]})")


def _row(key: str, va: float, vb: float, suffix: str = "_ns") -> dict[str, Any]:
    return {"key": key, f"a{suffix}": va, f"b{suffix}": vb, f"delta{suffix}": vb - va,
            "ratio": (vb / va) if va else None}


def _match(rows_a: list[dict], rows_b: list[dict], key: str, value: str) -> list[dict[str, Any]]:
    index_a = {r[key]: r for r in rows_a}
    index_b = {r[key]: r for r in rows_b}
    keys = list(dict.fromkeys([*index_a, *index_b]))
    out = []
    for k in keys:
        ra, rb = index_a.get(k, {}), index_b.get(k, {})
        row = _row(k, ra.get(value, 0), rb.get(value, 0))
        row.update({"count_a": ra.get("count", 0), "count_b": rb.get("count", 0),
                    "category": ra.get("category") or rb.get("category") or k})
        out.append(row)
    out.sort(key=lambda r: -max(r["a_ns"], r["b_ns"]))
    return out
