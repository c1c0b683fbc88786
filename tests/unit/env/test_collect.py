"""doctor --collect on this host: the archive round-trips through --root and holds no secret."""

from __future__ import annotations

import io
import json
import os
import tarfile
from pathlib import Path

from latscope.campaign.doctor import run_doctor
from latscope.env.collect import collect
from latscope.redact import redact_argv, redact_env


def test_collect_round_trip_redacts_secrets(tmp_path, monkeypatch):
    secret = "sk-testsecretvalue12345"
    monkeypatch.setenv("OPENAI_API_KEY", secret)
    monkeypatch.setenv("MY_PASSWORD", "hunter2hunter2")
    log = tmp_path / "server.log"
    log.write_text("INFO 11-30 04:32:52 [api_utils.py:286] non-default args: {'api_key': "
                   f"'{secret}', 'enforce_eager': True}}\n")
    out = collect(tmp_path / "cap.tar.gz", pid=os.getpid(), log=str(log))
    assert out.pid == os.getpid() and out.files > 5
    with tarfile.open(out.path) as tar:
        blob = b"".join(tar.extractfile(m).read() for m in tar.getmembers() if m.isfile())
        names = tar.getnames()
        manifest = json.loads(tar.extractfile("latscope/collect.json").read())
    assert secret.encode() not in blob and b"hunter2hunter2" not in blob
    assert f"proc/{os.getpid()}/environ" in names and "latscope/server.log" in names
    # collect.json as bundles always had it (BundleManifest's fields, in this order)
    assert list(manifest) == ["pid", "url", "hostname", "time", "latscope", "tools"]
    assert manifest["pid"] == os.getpid() and manifest["tools"] == out.tools
    report = run_doctor(root=str(out.path))
    assert report.facts["pid"] == os.getpid()
    assert report.facts["server"]["settings"]["enforce_eager"]["value"] is True  # log travelled
    numa = {f.id: f for f in report.findings}["host.numa_balancing"]
    assert numa.evidence[0].source == f"{out.path}:/proc/sys/kernel/numa_balancing"


def test_redaction_rules():
    env = redact_env({"HF_TOKEN": "hf_x", "AWS_SECRET_ACCESS_KEY": "a", "VLLM_LOGGING_LEVEL": "DEBUG",
                      "CUSTOM": "Bearer abcdef", "HIP_FORCE_DEV_KERNARG": "1"})
    assert env == {"HF_TOKEN": "<redacted>", "AWS_SECRET_ACCESS_KEY": "<redacted>",
                   "VLLM_LOGGING_LEVEL": "DEBUG", "CUSTOM": "<redacted>", "HIP_FORCE_DEV_KERNARG": "1"}
    assert "s3cret" not in " ".join(redact_argv(["vllm", "serve", "--api-key", "s3cret"]))


def test_url_passwords_are_redacted_but_host_kept():
    env = redact_env({"HTTPS_PROXY": "http://bob:hunter2@proxy:3128", "NO_PROXY": "localhost"})
    assert env == {"HTTPS_PROXY": "http://bob:<redacted>@proxy:3128", "NO_PROXY": "localhost"}
    argv = redact_argv(["latscope", "net", "--url", "https://u:pw9x@example.test/v1"])
    assert "pw9x" not in " ".join(argv) and "example.test" in argv[-1]


def test_bad_root_archive_and_unwritable_outputs_are_one_line_errors(tmp_path, capsys):
    from latscope.cli.main import main

    junk = tmp_path / "junk.tar.gz"
    junk.write_text("not an archive")
    assert main(["doctor", "--root", str(junk)]) == 1
    assert main(["doctor", "--collect", str(tmp_path / "missing" / "x.tar.gz")]) == 1
    captured = Path(__file__).parent / "data" / "h200_collect.tar.gz"
    assert main(["doctor", "--root", str(captured), "-o", "/proc/latscope-run"]) == 1
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 3 and all(line.startswith("error: ") for line in err)
    assert "cannot create output dir" in err[2]


def test_a_bundle_whose_collect_json_does_not_fit_is_one_line_naming_the_key(tmp_path, capsys):
    from latscope.cli.main import main

    bundle = tmp_path / "odd.tar.gz"
    with tarfile.open(bundle, "w:gz") as tar:
        for name, data in (("latscope/collect.json", b'{"pid": "423", "hostname": "vm"}'),
                           ("proc/cmdline", b"ro quiet\n")):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    assert main(["doctor", "--root", str(bundle), "-o", str(tmp_path / "run")]) == 1
    err = capsys.readouterr().err.splitlines()
    assert err == [f"error: --root {bundle}: latscope/collect.json: Expected `int | null`, "
                   "got `str` - at `$.pid`"]
