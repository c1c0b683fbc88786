"""Every reader on the real fixtures; expected counts come from the raw files themselves (read
here with the standard library) or from the provenance notes in SOURCES.md."""

from __future__ import annotations

import csv
import gzip
import json
import shutil
from collections import Counter

import numpy as np
import pytest

from latscope.trace.model import CopyDir, GpuKind, HostMem
from latscope.trace.readers import detect_format, read_trace


def _raw_events(path):
    with gzip.open(path, "rt") as f:
        return json.load(f)["traceEvents"]


@pytest.mark.parametrize("key", ["b200", "fullgraph", "h100", "mi250", "mi300x_hf", "piecewise",
                                 "sglang"])
def test_kineto_reader_keeps_every_gpu_and_runtime_event(key, kineto_path, loaded):
    raw = _raw_events(kineto_path(key))
    cats = Counter(e.get("cat") for e in raw if e.get("ph") == "X")
    trace = loaded(key)
    assert detect_format(kineto_path(key)) == "kineto"
    assert len(trace.gpu) == cats["kernel"] + cats["gpu_memcpy"] + cats["gpu_memset"]
    assert len(trace.api) == cats["cuda_runtime"] + cats["cuda_driver"]
    assert np.all(trace.gpu.end >= trace.gpu.start)
    assert trace.meta.vendor == ("nvidia" if key in ("b200", "h100") else "amd")


def test_kineto_times_are_ns_of_the_raw_microseconds(kineto_path, loaded):
    raw = [e for e in _raw_events(kineto_path("b200")) if e.get("cat") == "kernel"]
    first = min(raw, key=lambda e: e["ts"])
    trace = loaded("b200")
    kernels = trace.gpu.kind == GpuKind.KERNEL
    assert trace.gpu.start[kernels].min() == round(first["ts"] * 1000)


def test_b200_copies_pinned_and_pageable_as_in_sources(loaded):
    # SOURCES.md #6: 13 HtoD (Pinned -> Device), 2 HtoD (Pageable -> Device), 146 DtoD.
    gpu = loaded("b200").gpu
    h2d = gpu.copy == CopyDir.H2D
    assert int((h2d & (gpu.hostmem == HostMem.PINNED)).sum()) == 13
    assert int((h2d & (gpu.hostmem == HostMem.PAGEABLE)).sum()) == 2
    assert int((gpu.copy == CopyDir.D2D).sum()) == 146


def test_rocm_memcpy_host_kind_is_unknown(loaded):
    gpu = loaded("mi250").gpu
    h2d = gpu.copy == CopyDir.H2D
    assert h2d.sum() == 2 and np.all(gpu.hostmem[h2d] == HostMem.UNKNOWN)
    assert np.all(gpu.bytes[h2d] == -1)  # ROCm 6.2 Kineto omits bytes (SOURCES.md #11)


def test_cpu_only_vllm_trace_has_ranges_but_no_gpu(fixtures_dir):
    path = fixtures_dir / "vllm" / "cpu-vllm0.32" / "profile_rank0.pt.trace.json.gz"
    trace = read_trace(path)
    assert len(trace.gpu) == 0 and len(trace.ranges) > 30000
    assert trace.meta.rank == 0


def test_rocprofv3_json(traces_dir):
    path = traces_dir / "amd_mi350x_rocprofv3_results.json.gz"
    assert detect_format(path) == "rocprofv3-json"
    trace = read_trace(path)
    assert len(trace.gpu) == 43915  # SOURCES.md #7
    assert set(trace.meta.devices.values()) == {"AMD Instinct MI350X"}
    names = {trace.names[i] for i in np.unique(trace.gpu.name)}
    assert any(n.startswith("ncclDevKernel_Generic_1") for n in names)
    assert not any(n.startswith("kernel_id ") for n in names)  # every dispatch got its symbol


def test_rocprofv3_csv_folder_counts_rows(traces_dir):
    folder = traces_dir / "rocprofv3_csv_docs"
    assert detect_format(folder) == "rocprofv3-csv"
    trace = read_trace(folder)
    with open(folder / "kernel_trace.csv", newline="") as f:
        kernels = list(csv.DictReader(f))
    with open(folder / "memory_copy_trace.csv", newline="") as f:
        copies = list(csv.DictReader(f))
    assert int((trace.gpu.kind == GpuKind.KERNEL).sum()) == len(kernels)
    assert int((trace.gpu.kind == GpuKind.MEMCPY).sum()) == len(copies)
    assert set(trace.gpu.device.tolist()) == {4}  # "Agent 4"
    assert np.all(trace.gpu.bytes == -1)  # the CSV has no bytes column


def test_nsys_sqlite(traces_dir):
    path = traces_dir / "nvidia_a100_nsys2022.2_saxpy.sqlite.gz"
    assert detect_format(path) == "nsys-sqlite"
    trace = read_trace(path)
    gpu = trace.gpu
    assert int((gpu.kind == GpuKind.KERNEL).sum()) == 5  # SOURCES.md #10
    assert int((gpu.kind == GpuKind.MEMCPY).sum()) == 15
    # srcKind/dstKind 0 = pageable in nsys numbering; every host side here is pageable
    copies = gpu.kind == GpuKind.MEMCPY
    assert np.all(gpu.hostmem[copies] == HostMem.PAGEABLE)
    assert len(np.unique(trace.api.corr)) == len(trace.api)  # de-duplicated by correlation id
    assert all(not trace.names[i].endswith("_v3020") for i in trace.api.name)
    assert trace.meta.devices == {0: "NVIDIA A100-SXM4-40GB"}


def test_format_detected_from_content_not_name(kineto_path, tmp_path):
    renamed = tmp_path / "profile.bin"
    shutil.copy(kineto_path("mi250"), renamed)
    assert detect_format(renamed) == "kineto"
    plain = tmp_path / "trace.txt"
    with gzip.open(kineto_path("mi250"), "rb") as src:
        plain.write_bytes(src.read())
    assert detect_format(plain) == "kineto"
    assert len(read_trace(plain).gpu) == 16


def test_wide_integers_are_read(tmp_path):
    # ijson's C backend rejects integers wider than 64 bits; rocprofv3 writes such ids.
    path = tmp_path / "t.json"
    path.write_text('{"traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", "ts": 1.0, '
                    '"dur": 2.0, "args": {"device": 0, "stream": 7, "correlation": 1, '
                    '"id": 17332996360099338395}}]}')
    trace = read_trace(path)
    assert len(trace.gpu) == 1 and trace.gpu.end[0] - trace.gpu.start[0] == 2000


def test_block_cut_inside_a_string_is_recovered(tmp_path, monkeypatch):
    # Names may contain the "}, {" sequence the reader cuts at; a cut inside a string must be
    # detected (the block does not decode) and merged with the next block.
    from latscope.trace.readers import chunked

    monkeypatch.setattr(chunked, "BLOCK", 64)
    events = [{"ph": "X", "cat": "kernel", "name": f"k{{lambda}}, {{x}} {i}", "ts": float(i),
               "dur": 0.5, "args": {"device": 0, "stream": 7, "correlation": i}}
              for i in range(50)]
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"schemaVersion": 1, "traceEvents": events, "traceName": "x"}))
    trace = read_trace(path)
    assert len(trace.gpu) == 50
    assert sorted(trace.names[i] for i in trace.gpu.name) == sorted(e["name"] for e in events)
    assert trace.gpu.corr.tolist() == list(range(50))


def test_vendor_from_api_names_when_metadata_is_silent(tmp_path):
    events = [{"ph": "X", "cat": "cuda_runtime", "name": "hipLaunchKernel", "ts": 1.0, "dur": 1.0,
               "pid": 1, "tid": 1, "args": {"correlation": 5}},
              {"ph": "X", "cat": "kernel", "name": "k", "ts": 3.0, "dur": 1.0,
               "args": {"device": 0, "stream": 0, "correlation": 5}}]
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"traceEvents": events}))
    assert read_trace(path).meta.vendor == "amd"
