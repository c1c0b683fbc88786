"""rocpd SQLite and rocprof v1/v2 (results.csv / results.json) readers, on small files built here
in the documented layouts (no real sample of either format is in the fixtures). Expected values are
the ones written into the files, and the breakdown figures are interval unions worked out by hand
from those timestamps."""

from __future__ import annotations

import json
import sqlite3

import numpy as np
import pytest

from latscope.errors import TraceFormatError
from latscope.trace.analyze import analyze_trace
from latscope.trace.model import CopyDir, GpuKind, HostMem, RangeKind
from latscope.trace.readers import detect_format, read_trace

UUID = "_0000c0ffee_1234"
GEMM = "Cijk_Alik_Bljk_HHS_BH_MT128x128x32_MI32x32x8x1_SN_1LDSB0"
ELEMENTWISE = "void at::native::elementwise_kernel<128, 4>(int, float)"

# Table columns from ROCm/rocm-systems projects/rocprofiler-sdk/source/share/
# rocprofiler-sdk-rocpd/rocpd_tables.sql (schema 3.0.1; FOREIGN KEYs and unused tables left out):
# every table is created as name{{uuid}}, with an un-suffixed view over it (rocpd_views.sql).
_ROCPD_TABLES = {
    "rocpd_metadata": '"id" INTEGER PRIMARY KEY, "tag" TEXT NOT NULL, "value" TEXT NOT NULL',
    "rocpd_string": '"id" INTEGER PRIMARY KEY, "guid" TEXT, "string" TEXT NOT NULL UNIQUE',
    "rocpd_info_process": '"id" INTEGER PRIMARY KEY, "guid" TEXT, "nid" INTEGER, "ppid" INTEGER,'
                          ' "pid" INTEGER NOT NULL, "command" TEXT',
    "rocpd_info_thread": '"id" INTEGER PRIMARY KEY, "guid" TEXT, "nid" INTEGER, "ppid" INTEGER,'
                         ' "pid" INTEGER NOT NULL, "tid" INTEGER NOT NULL, "name" TEXT',
    "rocpd_info_agent": '"id" INTEGER PRIMARY KEY, "guid" TEXT, "nid" INTEGER, "pid" INTEGER,'
                        ' "type" TEXT, "absolute_index" INTEGER, "logical_index" INTEGER,'
                        ' "type_index" INTEGER, "uuid" INTEGER, "name" TEXT, "model_name" TEXT,'
                        ' "vendor_name" TEXT, "product_name" TEXT, "user_name" TEXT',
    "rocpd_info_kernel_symbol": '"id" INTEGER PRIMARY KEY, "guid" TEXT, "nid" INTEGER,'
                                ' "pid" INTEGER, "code_object_id" INTEGER, "kernel_name" TEXT,'
                                ' "display_name" TEXT',
    "rocpd_event": '"id" INTEGER PRIMARY KEY, "guid" TEXT, "category_id" INTEGER,'
                   ' "stack_id" INTEGER, "parent_stack_id" INTEGER, "correlation_id" INTEGER',
    "rocpd_region": '"id" INTEGER PRIMARY KEY, "guid" TEXT, "nid" INTEGER, "pid" INTEGER NOT NULL,'
                    ' "tid" INTEGER NOT NULL, "start" BIGINT NOT NULL, "end" BIGINT NOT NULL,'
                    ' "name_id" INTEGER NOT NULL, "event_id" INTEGER',
    "rocpd_kernel_dispatch": '"id" INTEGER PRIMARY KEY, "guid" TEXT, "nid" INTEGER,'
                             ' "pid" INTEGER, "tid" INTEGER, "agent_id" INTEGER NOT NULL,'
                             ' "kernel_id" INTEGER NOT NULL, "dispatch_id" INTEGER,'
                             ' "queue_id" INTEGER NOT NULL, "stream_id" INTEGER NOT NULL,'
                             ' "start" BIGINT NOT NULL, "end" BIGINT NOT NULL,'
                             ' "workgroup_size_x" INTEGER, "grid_size_x" INTEGER,'
                             ' "region_name_id" INTEGER, "event_id" INTEGER',
    "rocpd_memory_copy": '"id" INTEGER PRIMARY KEY, "guid" TEXT, "nid" INTEGER, "pid" INTEGER,'
                         ' "tid" INTEGER, "start" BIGINT NOT NULL, "end" BIGINT NOT NULL,'
                         ' "name_id" INTEGER NOT NULL, "dst_agent_id" INTEGER,'
                         ' "dst_address" INTEGER, "src_agent_id" INTEGER, "src_address" INTEGER,'
                         ' "size" INTEGER NOT NULL, "queue_id" INTEGER, "stream_id" INTEGER,'
                         ' "region_name_id" INTEGER, "event_id" INTEGER',
}
# String names as rocprofv3 writes them (operation names of the buffer record kinds).
_STRINGS = ["MEMORY_COPY_HOST_TO_DEVICE", "MEMORY_COPY_DEVICE_TO_HOST",
            "MEMORY_COPY_HOST_TO_HOST", "hipLaunchKernel",
            "HIP_RUNTIME_API", "MARKER_CORE_API", "my_range", "KERNEL_DISPATCH", "MEMORY_COPY"]
S = {s: i + 1 for i, s in enumerate(_STRINGS)}


def _insert(conn, table, rows):
    for row in rows:
        cols = ", ".join(f'"{c}"' for c in row)
        conn.execute(f"INSERT INTO {table}{UUID} ({cols}) VALUES ({', '.join('?' * len(row))})",
                     list(row.values()))


def _make_rocpd(path, *, views=True):
    conn = sqlite3.connect(path)
    for name, cols in _ROCPD_TABLES.items():
        conn.execute(f"CREATE TABLE {name}{UUID} ({cols})")
        if views:
            conn.execute(f"CREATE VIEW {name} AS SELECT * FROM {name}{UUID}")
    _insert(conn, "rocpd_metadata", [{"tag": "schema_version", "value": "3"}])
    _insert(conn, "rocpd_string", [{"id": i, "string": s} for s, i in S.items()])
    _insert(conn, "rocpd_info_process", [{"id": 1, "pid": 4242}])
    _insert(conn, "rocpd_info_thread", [{"id": 1, "pid": 1, "tid": 4243}])
    _insert(conn, "rocpd_info_agent", [
        {"id": 1, "type": "CPU", "type_index": 0, "name": "AMD EPYC", "product_name": "AMD EPYC"},
        {"id": 2, "type": "GPU", "type_index": 0, "name": "gfx942",
         "product_name": "AMD Instinct MI300X"},
        {"id": 3, "type": "GPU", "type_index": 1, "name": "gfx942",
         "product_name": "AMD Instinct MI300X"}])
    _insert(conn, "rocpd_info_kernel_symbol", [
        {"id": 1, "kernel_name": GEMM + ".kd", "display_name": GEMM},
        {"id": 2, "kernel_name": "_ZN2at6native18elementwise_kernel", "display_name": ELEMENTWISE}])
    # event id -> (category, stack_id = internal correlation id)
    events = {1: ("HIP_RUNTIME_API", 11), 2: ("KERNEL_DISPATCH", 11), 3: ("KERNEL_DISPATCH", 12),
              4: ("KERNEL_DISPATCH", 13), 5: ("MEMORY_COPY", 14), 6: ("MEMORY_COPY", 15),
              7: ("MARKER_CORE_API", 16)}
    _insert(conn, "rocpd_event", [{"id": i, "category_id": S[c], "stack_id": corr,
                                   "correlation_id": 0} for i, (c, corr) in events.items()])
    _insert(conn, "rocpd_region", [
        {"pid": 1, "tid": 1, "start": 900, "end": 950, "name_id": S["hipLaunchKernel"],
         "event_id": 1},
        {"pid": 1, "tid": 1, "start": 50, "end": 3900, "name_id": S["my_range"], "event_id": 7}])
    kd = {"pid": 1, "tid": 1, "stream_id": 0, "workgroup_size_x": 256, "grid_size_x": 1024}
    _insert(conn, "rocpd_kernel_dispatch", [
        {**kd, "agent_id": 2, "kernel_id": 1, "dispatch_id": 1, "queue_id": 1, "start": 1000,
         "end": 2000, "event_id": 2},
        {**kd, "agent_id": 2, "kernel_id": 2, "dispatch_id": 2, "queue_id": 2, "start": 1500,
         "end": 3000, "event_id": 3},
        {**kd, "agent_id": 3, "kernel_id": 1, "dispatch_id": 3, "queue_id": 3, "start": 5000,
         "end": 6000, "event_id": 4}])
    _insert(conn, "rocpd_memory_copy", [
        {"pid": 1, "start": 100, "end": 400, "name_id": S["MEMORY_COPY_HOST_TO_DEVICE"],
         "src_agent_id": 1, "dst_agent_id": 2, "size": 4096, "stream_id": 7, "event_id": 5},
        {"pid": 1, "start": 3500, "end": 3800, "name_id": S["MEMORY_COPY_DEVICE_TO_HOST"],
         "src_agent_id": 2, "dst_agent_id": 1, "size": 8192, "stream_id": 7, "event_id": 6},
        {"pid": 1, "start": 7000, "end": 7100, "name_id": S["MEMORY_COPY_HOST_TO_HOST"],
         "src_agent_id": 1, "dst_agent_id": 1, "size": 64, "stream_id": 7}])
    conn.commit()
    conn.close()
    return path


def _device0_breakdown(trace):
    return next(d for d in analyze_trace(trace).devices if d.device == 0)


@pytest.mark.parametrize("views", [True, False])
def test_rocpd_kernels_copies_devices_and_queues(tmp_path, views):
    path = _make_rocpd(tmp_path / "1_results.db", views=views)
    assert detect_format(path) == "rocpd-sqlite"
    trace = read_trace(path)
    gpu, names = trace.gpu, np.asarray(trace.names, dtype=object)
    kernels = gpu.kind == GpuKind.KERNEL
    assert list(names[gpu.name[kernels]]) == [GEMM, ELEMENTWISE, GEMM]
    assert list(gpu.device[kernels]) == [0, 0, 1]  # GPU agents 2, 3 -> type_index 0, 1
    assert list(gpu.stream[kernels]) == [1, 2, 3]
    assert list(gpu.start[kernels]) == [1000, 1500, 5000]
    assert list(gpu.end[kernels]) == [2000, 3000, 6000]
    copies = gpu.kind == GpuKind.MEMCPY
    assert list(gpu.copy[copies]) == [CopyDir.H2D, CopyDir.D2H, CopyDir.H2H]
    assert list(gpu.bytes[copies]) == [4096, 8192, 64]
    assert list(gpu.device[copies]) == [0, 0, -1]  # H2H: CPU agent, not GPU 1 (agent id 1)
    assert list(gpu.hostmem[copies]) == [HostMem.UNKNOWN, HostMem.UNKNOWN, HostMem.NA]
    assert trace.meta.devices == {0: "AMD Instinct MI300X", 1: "AMD Instinct MI300X"}
    assert trace.meta.vendor == "amd" and trace.meta.format == "rocpd-sqlite"


def test_rocpd_api_joined_by_correlation_and_markers_are_ranges(tmp_path):
    trace = read_trace(_make_rocpd(tmp_path / "r.db"))
    assert len(trace.api) == 1
    assert trace.names[trace.api.name[0]] == "hipLaunchKernel"
    assert (trace.api.pid[0], trace.api.tid[0]) == (4242, 4243)  # real ids, not row ids
    first_kernel = int(np.flatnonzero(trace.gpu.kind == GpuKind.KERNEL)[0])
    assert trace.gpu.corr[first_kernel] == trace.api.corr[0] == 11
    assert len(trace.ranges) == 1 and trace.ranges.kind[0] == RangeKind.ANNOTATION
    assert trace.names[trace.ranges.name[0]] == "my_range"


def test_rocpd_breakdown_adds_up_and_is_a_union(tmp_path):
    dev = _device0_breakdown(read_trace(_make_rocpd(tmp_path / "r.db")))
    b = dev.breakdown
    # Device 0 activities: copy 100-400, kernels 1000-2000 and 1500-3000 (two queues), copy
    # 3500-3800. Window 100..3800 = 3700; kernel union 2000 (a sum would say 2500); copies 600.
    assert b.window_ns == 3700
    assert b.compute_ns == 2000 and b.exposed_copy_ns == 600 and b.idle_ns == 1100
    assert b.compute_ns + b.exposed_comm_ns + b.exposed_copy_ns + b.idle_ns == 3700


def test_rocpd_truncated_file_is_one_line_error(tmp_path):
    good = _make_rocpd(tmp_path / "r.db")
    cut = tmp_path / "cut.db"
    cut.write_bytes(good.read_bytes()[:3000])
    with pytest.raises(TraceFormatError) as err:
        read_trace(cut)
    assert "\n" not in str(err.value) and "SQLite" in str(err.value)


def test_non_rocpd_sqlite_is_refused(tmp_path):
    path = tmp_path / "other.db"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE measurements (t INTEGER, v REAL)")
    conn.commit()
    conn.close()
    with pytest.raises(TraceFormatError, match="rocpd") as err:
        read_trace(path)
    assert "\n" not in str(err.value)


def test_rocpd_schema_without_inline_timestamps_names_the_way_out(tmp_path):
    # Schema 4 (rocpd_timestamp spine) keeps start_id/end_id instead of start/end.
    path = tmp_path / "v4.db"
    conn = sqlite3.connect(path)
    conn.execute(f"CREATE TABLE rocpd_kernel_dispatch{UUID} (id INTEGER, agent_id INTEGER, "
                 "queue_id INTEGER, kernel_id INTEGER, start_id INTEGER, end_id INTEGER)")
    conn.execute(f"CREATE VIEW rocpd_kernel_dispatch AS SELECT * FROM rocpd_kernel_dispatch{UUID}")
    conn.commit()
    conn.close()
    with pytest.raises(TraceFormatError, match="lacks start, end.*rocpd convert") as err:
        read_trace(path)
    assert "\n" not in str(err.value)


# results.csv header from ROCm/rocprofiler bin/tblextr.py as listed in
# shared/docs/trace-formats.md section 2 ("rocprof v1/v2"); tblextr ends every line with a comma.
V1_HEADER = ("Index,KernelName,gpu-id,queue-id,queue-index,pid,tid,grd,wgr,lds,scr,arch_vgpr,"
             "accum_vgpr,sgpr,wave_size,sig,obj,DispatchNs,BeginNs,EndNs,CompleteNs,DurationNs")


def _v1_row(index, name, gpu, queue, begin, end):
    return (f'{index},"{name}",{gpu},{queue},{index},77,78,1024,256,0,0,32,0,16,64,0x0,0x0,'
            f"{begin - 50},{begin},{end},{end + 10},{end - begin}")


def _write_v1_csv(path, rows, header=V1_HEADER):
    path.write_text("\n".join([header + ","] + [r + "," for r in rows]) + "\n")
    return path


def test_rocprof_v1_csv_kernels(tmp_path):
    templated = "void foo<int, float>(int*, float) [clone .kd]"  # a comma inside quotes
    path = _write_v1_csv(tmp_path / "results.csv", [
        _v1_row(0, GEMM + " [clone .kd]", 0, 0, 1000, 2000),
        _v1_row(1, templated, 0, 1, 1500, 3000),
        _v1_row(2, GEMM + " [clone .kd]", 1, 0, 5000, 6000)])
    assert detect_format(path) == "rocprof-v1-csv"
    trace = read_trace(path)
    gpu = trace.gpu
    assert len(gpu) == 3 and np.all(gpu.kind == GpuKind.KERNEL)
    assert [trace.names[i] for i in gpu.name] == [GEMM + " [clone .kd]", templated,
                                                  GEMM + " [clone .kd]"]
    assert list(gpu.device) == [0, 0, 1] and list(gpu.stream) == [0, 1, 0]
    assert list(gpu.start) == [1000, 1500, 5000] and list(gpu.end) == [2000, 3000, 6000]
    dev = _device0_breakdown(trace)
    b = dev.breakdown
    assert b.window_ns == 2000 and b.busy_ns == 2000  # union 1000..3000, not 2500
    assert b.compute_ns + b.exposed_comm_ns + b.exposed_copy_ns + b.idle_ns == 2000


def test_rocprof_v1_csv_missing_column_and_truncated_row(tmp_path):
    no_end = _write_v1_csv(tmp_path / "a.csv", [_v1_row(0, "k", 0, 0, 1, 2)],
                           header=V1_HEADER.replace(",EndNs", ""))
    with pytest.raises(TraceFormatError, match="lacks EndNs") as err:
        read_trace(no_end)
    assert "\n" not in str(err.value)
    full = _write_v1_csv(tmp_path / "b.csv", [_v1_row(0, "k", 0, 0, 1000, 2000)] * 2)
    cut = tmp_path / "c.csv"
    cut.write_text(full.read_text()[:-40])
    with pytest.raises(TraceFormatError, match="row 3") as err:
        read_trace(cut)
    assert "\n" not in str(err.value)


def _v1_json_events(start_ns=1_000_000):
    # Layout of ROCm/rocprofiler bin/sqlitedb.py (open_json, label_json, dump_json) and
    # bin/dform.py (gen_*_json_trace): a leading {}, process_name labels "GPU0"/"GPU Barriers0",
    # ts/dur strings in us rebased to the run start, the table's columns (absolute BeginNs/EndNs,
    # gpu-id/queue-id, dev-id/stream-id) as string args.
    def x(name, pid, tid, begin, end, **args):
        return {"ph": "X", "name": name, "pid": pid, "tid": tid,
                "ts": str((begin - start_ns) // 1000), "dur": str((end - begin) // 1000),
                "args": {"BeginNs": str(begin), "EndNs": str(end),
                         **{k.replace("_", "-"): str(v) for k, v in args.items()}}}
    labels = [{"args": {"name": n}, "ph": "M", "pid": p, "name": "process_name", "sort_index": i}
              for i, (p, n) in enumerate([(0, "Markers and Ranges"), (2, "CPU HIP API"),
                                          (1, "COPY"), (6, "GPU0"), (518, "GPU Barriers0")])]
    t = start_ns
    return [{}] + labels + [
        x("CopyHostToDevice", 1, 0, t + 100_000, t + 400_000, dev_id=0, stream_id=3),
        x("hipLaunchKernel", 2, 4243, t + 900_000, t + 950_000),
        x(GEMM + " [clone .kd]", 6, 0, t + 1_000_000, t + 2_000_000, gpu_id=0, queue_id=1),
        x(ELEMENTWISE, 6, 0, t + 1_500_000, t + 3_000_000, gpu_id=0, queue_id=2),
        x("<barrier packet>", 518, 0, t + 1_200_000, t + 1_300_000),
        x("CopyDeviceToHost", 1, 0, t + 3_500_000, t + 3_800_000, dev_id=0, stream_id=3),
        x("step", 0, 4243, t + 50_000, t + 3_900_000),
        {"ts": 950, "ph": "s", "cat": "DataFlow", "id": 0, "pid": 2, "tid": 4243, "name": "dep"}]


def test_rocprof_v1_json_kernels_copies_api(tmp_path):
    path = tmp_path / "results.json"
    path.write_text(json.dumps({"traceEvents": _v1_json_events(), "otherData": {"rocminfo": ""}}))
    assert detect_format(path) == "rocprof-v1-json"
    trace = read_trace(path)
    gpu, t = trace.gpu, 1_000_000
    assert list(gpu.kind) == [GpuKind.MEMCPY, GpuKind.KERNEL, GpuKind.KERNEL, GpuKind.MEMCPY]
    assert list(gpu.start - t) == [100_000, 1_000_000, 1_500_000, 3_500_000]  # BeginNs, not ts
    assert list(gpu.end - t) == [400_000, 2_000_000, 3_000_000, 3_800_000]
    assert list(gpu.copy[gpu.kind == GpuKind.MEMCPY]) == [CopyDir.H2D, CopyDir.D2H]
    assert np.all(gpu.device == 0)
    assert list(gpu.stream[gpu.kind == GpuKind.KERNEL]) == [1, 2]
    assert trace.names[trace.api.name[0]] == "hipLaunchKernel" and len(trace.ranges) == 1
    b = _device0_breakdown(trace).breakdown
    # same shape as the rocpd case, in us: window 3.7 ms, kernel union 2 ms, copies 0.6 ms
    assert b.window_ns == 3_700_000 and b.compute_ns == 2_000_000
    assert b.exposed_copy_ns == 600_000
    parts = b.compute_ns + b.exposed_comm_ns + b.exposed_copy_ns + b.idle_ns
    assert parts == b.window_ns


def test_rocprof_v1_json_without_args_uses_string_microseconds(tmp_path):
    events = _v1_json_events(start_ns=0)
    for ev in events:
        if ev.get("ph") == "X":
            del ev["args"]
    path = tmp_path / "results.json"
    path.write_text(json.dumps({"traceEvents": events}))
    trace = read_trace(path)
    kernels = trace.gpu.kind == GpuKind.KERNEL
    assert list(trace.gpu.start[kernels]) == [1_000_000, 1_500_000]  # "1000" us -> ns
    assert list(trace.gpu.end[kernels]) == [2_000_000, 3_000_000]


def test_rocprof_v1_json_truncated_is_one_line_error(tmp_path):
    path = tmp_path / "results.json"
    text = json.dumps({"traceEvents": _v1_json_events()})
    path.write_text(text[: len(text) // 2])
    with pytest.raises(TraceFormatError) as err:
        read_trace(path)
    assert "\n" not in str(err.value) and "rocprof v1" in str(err.value)
