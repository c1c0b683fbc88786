"""run_doctor end to end on captured trees: a fake 8x MI300X host, the real H200 capture, and the
real vLLM logs in the shared fixtures; plus the CLI's JSON output and its error line."""

from __future__ import annotations

import orjson
import pytest
from fakehost import DATA, environ, pci_gpu, stat, status
from tooltexts import MI300X_BDFS, amd_smi_static, rocm_smi_showtopo, rocminfo

from latscope.cli.main import main
from latscope.campaign.doctor import run_doctor
from latscope.findings.rank import merge
from latscope.errors import ConfigError
from latscope.model import Evidence, Finding, Severity

PID = 5150


def mi300x_tree(make_tree, env: dict[str, str], argv: list[str], topo: str = "XGMI"):
    files = {
        "/proc/sys/kernel/numa_balancing": "1\n",
        "/proc/cmdline": "BOOT_IMAGE=/vmlinuz-6.8.0 root=UUID=x ro quiet\n",
        "/sys/devices/system/node/node0/cpulist": "0-95\n",
        "/sys/devices/system/node/node1/cpulist": "96-191\n",
        f"/proc/{PID}/environ": environ(env),
        f"/proc/{PID}/cmdline": b"".join(a.encode() + b"\0" for a in argv),
        f"/proc/{PID}/status": status(PID, "0-191"),
        f"/proc/{PID}/stat": stat(PID, 1),
        "/latscope/tools/amd-smi_static.txt": amd_smi_static(),
        "/latscope/tools/rocminfo.txt": rocminfo(),
        "/latscope/tools/rocm-smi_topo.txt": rocm_smi_showtopo(topo),
        "/latscope/python.json": orjson.dumps({"vllm": "0.13.0+rocm700", "torch": "2.9.0+rocm7.0"}),
        "/latscope/collect.json": orjson.dumps({"pid": PID}),
    }
    for i, bdf in enumerate(MI300X_BDFS):
        files |= pci_gpu(bdf, "0x1002", "0x120000", i // 4, "32.0 GT/s PCIe", "32.0 GT/s PCIe", 16, 16)
    return make_tree(files)


def by_id(report):
    return {f.id: f for f in report.findings}


def test_mi300x_tree_flags_every_planted_rocm_problem(make_tree):
    env = {"PYTORCH_ROCM_ARCH": "gfx90a", "HIP_FORCE_DEV_KERNARG": "0", "AMD_SERIALIZE_KERNEL": "3",
           "HIP_VISIBLE_DEVICES": "0,1,2,3", "AMD_LOG_LEVEL": "4", "PATH": "/usr/bin"}
    argv = ["python3", "-m", "vllm.entrypoints.openai.api_server", "--model", "/m",
            "--tensor-parallel-size", "8"]
    found = by_id(run_doctor(root=str(mi300x_tree(make_tree, env, argv))))
    expect = {"gpu.rocm_arch": Severity.CRITICAL, "gpu.serialize": Severity.CRITICAL,
              "gpu.hip_force_dev_kernarg": Severity.WARNING, "gpu.rocm_aiter": Severity.WARNING,
              "gpu.visible_devices": Severity.WARNING, "gpu.amd_log_level": Severity.WARNING,
              "gpu.nccl_min_nchannels": Severity.INFO, "host.numa_balancing": Severity.WARNING,
              "host.iommu": Severity.WARNING, "gpu.topology": Severity.OK,
              "host.gpu_numa_affinity": Severity.INFO, "gpu.launch_blocking": Severity.OK}
    assert {k: found[k].severity for k in expect} == expect
    arch = found["gpu.rocm_arch"]
    assert ("PYTORCH_ROCM_ARCH", "gfx90a") in [(e.name, e.value) for e in arch.evidence]
    assert ("detected gfx", "gfx942") in [(e.name, e.value) for e in arch.evidence]
    assert all(e.source.endswith(f"/proc/{PID}/environ") for e in found["gpu.serialize"].evidence)
    assert found["gpu.inventory"].title == "8 AMD GPU(s) found"


def test_mi300x_pcie_topology_with_tp_warns(make_tree):
    argv = ["vllm", "serve", "/m", "-tp", "4"]
    found = by_id(run_doctor(root=str(mi300x_tree(make_tree, {}, argv, topo="PCIE"))))
    topo = found["gpu.topology"]
    assert topo.severity == Severity.WARNING and topo.title.startswith("6 GPU pair(s)")  # 4 GPUs
    assert found["gpu.rocm_arch"].severity == Severity.OK  # unset: the build's own list applies


def test_real_h200_capture(h200_capture):
    report = run_doctor(root=str(h200_capture))
    found = by_id(report)
    assert found["gpu.launch_blocking"].severity == Severity.CRITICAL
    assert found["server.debug_logging"].severity == Severity.WARNING
    assert found["gpu.nccl_debug"].severity == Severity.WARNING
    tenants = found["gpu.tenants"]
    assert tenants.severity == Severity.WARNING
    assert [e.name for e in tenants.evidence] == ["pid 424"]  # 423 is the server itself
    assert found["host.numa_balancing"].severity == Severity.OK
    assert found["host.pcie_link.0000:00:06.0"].severity == Severity.OK
    assert found["gpu.rocm_arch"].severity == Severity.SKIPPED
    assert report.facts["env"].get("HF_TOKEN") is None  # only relevant variables kept
    assert report.facts["gpu"]["gpus"][0]["name"] == "NVIDIA H200"


def test_h200_log_settings(fixtures_dir, make_tree):
    tree = make_tree({"/proc/cmdline": "quiet\n"})
    found = by_id(run_doctor(root=str(tree), log=str(fixtures_dir / "vllm/h200-vllm0.26/server.log")))
    assert found["server.enforce_eager"].severity == Severity.OK
    assert found["server.cudagraph_mode"].evidence[0].value == "FULL_AND_PIECEWISE"
    assert found["server.cudagraph_mode"].severity == Severity.OK
    assert found["server.chunked_prefill"].severity == Severity.OK
    assert found["server.profiler"].severity == Severity.WARNING  # --profiler-config was given
    assert found["server.debug_logging"].severity == Severity.OK


def test_cpu_debug_log_flags_debug_level_and_stale_env(fixtures_dir, make_tree):
    tree = make_tree({"/proc/cmdline": "quiet\n"})
    log = fixtures_dir / "vllm/cpu-vllm0.32/server_debug.log"
    found = by_id(run_doctor(root=str(tree), log=str(log)))
    debug = found["server.debug_logging"]
    assert debug.severity == Severity.WARNING and debug.evidence[0].value == "DEBUG"
    stale = found["server.stale_env"]
    assert stale.severity == Severity.WARNING and "VLLM_TORCH_PROFILER_DIR" in stale.title
    assert found["server.enforce_eager"].severity == Severity.INFO  # CPU build: no graphs anyway


def test_merge_keeps_most_severe_and_joins_bad_evidence():
    a = Finding("x", Severity.WARNING, "a", [Evidence("env", "DEBUG", "environ")])
    b = Finding("x", Severity.WARNING, "b", [Evidence("log", "DEBUG", "log:3")])
    c = Finding("x", Severity.SKIPPED, "skipped: no log")
    passed = Finding("x", Severity.OK, "not in the command line", [Evidence("cmdline", "-", "")])
    merged = merge([c, a, passed, b])
    assert len(merged) == 1 and merged[0].title == "a"
    # a check that passed adds nothing to one that failed (doctor's and diagnose's one merge)
    assert [e.name for e in merged[0].evidence] == ["env", "log"]


def test_bad_root_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError):
        run_doctor(root=str(tmp_path / "missing"))
    junk = tmp_path / "junk.tar.gz"
    junk.write_bytes(b"not a tar")
    with pytest.raises(ConfigError, match="not a readable tar archive"):
        run_doctor(root=str(junk))


def test_cli_writes_json_and_prints_error_line(h200_capture, tmp_path, capsys):
    out = tmp_path / "doctor.json"
    assert main(["doctor", "--root", str(h200_capture), "-o", str(out)]) == 0
    data = orjson.loads((out / "doctor.json").read_bytes())
    assert data["findings"][0]["severity"] == "critical"  # sorted most severe first
    assert data["facts"]["pid"] == 423
    # planted: CUDA_LAUNCH_BLOCKING (critical); DEBUG level, NCCL_DEBUG, a second GPU tenant
    assert "1 critical, 3 warning" in capsys.readouterr().out
    assert main(["doctor", "--root", str(tmp_path / "nope")]) == 1
    assert capsys.readouterr().err.startswith("error: --root")


def test_real_two_gpu_capture_nvlink_with_tp2(tmp_path):
    found = by_id(run_doctor(root=str(DATA / "h200x2_collect.tar.gz")))
    topo = found["gpu.topology"]
    assert topo.severity == Severity.OK
    values = {e.name: e.value for e in topo.evidence}
    assert values["link types"] == "NV18" and values["tensor_parallel_size"] == 2
    assert found["gpu.inventory"].title == "2 NVIDIA GPU(s) found"
    assert found["gpu.tenants"].severity == Severity.OK  # the only GPU process is the server
    assert found["gpu.launch_blocking"].severity == Severity.OK
    assert {f.severity for f in found.values()} <= {Severity.OK, Severity.INFO, Severity.SKIPPED}
