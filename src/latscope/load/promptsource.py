"""A run's prompts, built as they are sent: the synthetic ones from (seed, index) alone.

Synthetic prompt k is a function of the workload, the seed and k, never of the prompts before it,
so any process can build any prompt (a worker builds only its own share) and a run of any length
holds only the prompts it is about to send, not ~6 B per prompt token of every prompt it will
ever send. Before the run as many are built as the run will send, up to ``_AHEAD_PROMPTS`` and
``_AHEAD_TOKENS`` (an ordinary run: all of them, so its sends build nothing, as before); past
that the rest are built on the event loop as the run goes, in slices of at most
``_REFILL_SLICE_NS`` a loop turn, kept ahead of the sends. A send whose prompt is not ready
builds it itself and is counted (``built_in_send``): the client was the bottleneck.

Every index has its own prompt, so a ``--duration`` closed loop no longer resends a pool of
prompts a second time (which a server's prefix cache answers in a fraction of the prefill).

Only local tokenizers build during a run. Prompts measured with the server's ``/tokenize`` (no
local tokenizer) and dataset prompts are a fixed list built before the run
(``FixedPrompts``): the server is never asked to tokenize while it is measured; a run past the
list resends its prompts, and counts them (``resent``).
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from dataclasses import dataclass
from typing import Any, Iterable, Iterator, Protocol

import numpy as np

from latscope.load.config import LengthDist, MixEntry, WorkloadSpec

_AHEAD_PROMPTS = 65_536  # prompts built ahead of the sends, at most
_AHEAD_TOKENS = 8 << 20  # prompt tokens built ahead, at most (~6 B of text each: ~50 MB)
_REFILL_SLICE_NS = 500_000  # building during a run: at most this much of one loop turn
_PREFIX_STREAM = 2**62  # the shared prefix's random stream (indices stay below it)
_SIZE_STREAM = 2**62 + 1  # the sizes' stream where they have a seed of their own


@dataclass(slots=True)
class Prompt:
    text: str
    prompt_tokens: int | None  # as counted by the tokenizer (None: unknown)
    output_tokens: int  # max_tokens to ask for
    group: str = ""  # mix entry name, "shared_prefix" or "dataset"


# Ordinary words: their token ids form the pool synthetic prompts are drawn from.
_WORDS = (
    "the of and to in is that it was for on are as with his they at be this from have or by "
    "one had not but what all were when we there can an your which their said if do will each "
    "about how up out them then she many some so these would other into has more her two like "
    "him see time could no make than first been its who now people my made over did down only "
    "way find use may water long little very after words called just where most know get through "
    "back much before go good new write our used me man too any day same right look think also "
    "around another came come work three word must because does part even place well such here "
    "take why things help put years different away again off went old number great tell men say "
    "small every found still between name should home big give air line set own under read last "
    "never us left end along while might next sound below saw something thought both few those "
    "always looked show large often together asked house world going want school important until "
    "form food keep children feet land side without boy once animals life enough took sometimes "
    "four head above kind began almost live page got earth need far hand high year mother light "
    "parts country father let night following picture being study second eyes soon times story "
    "boys since white days ever paper hard near sentence better best across during today others "
    "sure means knew try told young miles sun ways thing whole hear example heard several change "
    "answer room sea against top turned learn point city play toward five using himself usually"
).split()


class Tokenizer(Protocol):
    exact: bool
    source: str

    def encode(self, text: str) -> list[int]: ...

    def decode(self, ids: list[int]) -> str: ...


class PromptMaker:
    """Builds prompts of an exact token count for one tokenizer, from a random stream it is
    given (each prompt its own: ``latscope.load.promptsource``)."""

    def __init__(self, tokenizer: Tokenizer) -> None:
        self.tok = tokenizer
        pool = sorted(set(tokenizer.encode(" ".join(_WORDS))))
        self.pool = np.asarray(pool or [0], dtype=np.int64)
        self.inexact = 0

    def ids(self, rng: np.random.Generator, n: int) -> list[int]:
        return self.pool[rng.integers(0, len(self.pool), size=max(n, 0))].tolist()

    def make(self, rng: np.random.Generator, n: int,
             prefix_ids: list[int] | None = None) -> tuple[str, int]:
        prefix_ids = prefix_ids or []
        tail = self.ids(rng, n - len(prefix_ids))
        text, actual = "", 0
        for _ in range(10):
            text = self.tok.decode(prefix_ids + tail)
            actual = len(self.tok.encode(text))
            if actual == n:
                return text, actual
            if actual > n:
                tail = tail[: max(len(tail) - (actual - n), 0)]
            else:
                tail = tail + self.ids(rng, n - actual)
        self.inexact += 1
        return text, actual


def _length(dist: LengthDist, rng: np.random.Generator) -> int:
    """One draw of ``dist`` (a fixed length draws nothing: a third of a short prompt's cost)."""
    return max(int(dist.a), 1) if dist.kind == "fixed" else int(dist.sample(rng, 1)[0])


def planned_sizes(spec: WorkloadSpec, n: int = 4096, seed: int = 0) -> list[int]:
    """``n`` request sizes (prompt + output tokens) drawn from a synthetic workload's own
    definition, its mix weights included (a dataset's: [], its sizes are what it holds)."""
    if spec.dataset:
        return []
    mix = spec.mix or [MixEntry("default", 1.0, LengthDist.parse(spec.input_len),
                                LengthDist.parse(spec.output_len))]
    rng = np.random.default_rng(seed)
    weights = np.asarray([m.weight for m in mix], dtype=np.float64)
    picks = rng.choice(len(mix), size=n, p=weights / weights.sum())
    sizes: list[int] = []
    for i, entry in enumerate(mix):
        k = int((picks == i).sum())
        if k:
            total = entry.input_len.sample(rng, k) + entry.output_len.sample(rng, k)
            sizes += total.tolist()
    return sizes


class FixedPrompts(list[Prompt]):
    """Prompts built before the run (dataset prompts; prompts measured with the server's own
    tokenizer); index k sends prompt k modulo their number."""

    resent = 0

    def take(self, index: int) -> Prompt:
        if index >= len(self):
            self.resent += 1
        prompt: Prompt = self[index % len(self)]
        return prompt

    def prebuild(self, order: Iterable[int], count: int | None = None) -> None:
        """Nothing to do: they were built before the run."""

    def group_names(self) -> set[str]:
        return {p.group for p in self}

    def groups_built(self) -> dict[str, int]:
        return dict(Counter(p.group for p in self))

    def notes(self) -> list[str]:
        if not self.resent:  # (build_workload noted what building them found)
            return []
        return [f"{self.resent} request(s) resent a prompt already sent (the {len(self)} "
                "prompts were built before the run, with the server's /tokenize or from the "
                "dataset): a server's prefix cache answers a resent prompt faster; "
                "--tokenizer builds a new prompt for every request"]

    def figures(self) -> dict[str, Any]:
        return {"built_as_sent": False, "built_before_run": len(self), "resent": self.resent}


class SyntheticPrompts:
    """Prompt k of a synthetic workload, built from (seed, k) when the run needs it; its size
    (mix entry, lengths, shared prefix or not) from (size_seed, k) where that is given, so that
    two runs send requests of the same sizes in the same order with texts of their own."""

    def __init__(self, spec: WorkloadSpec, maker: PromptMaker, seed: int, count: int,
                 size_seed: int | None = None) -> None:
        self.spec, self.maker, self.seed, self.count = spec, maker, seed, count
        self.size_seed = size_seed
        self.mix = spec.mix or [MixEntry("default", 1.0, LengthDist.parse(spec.input_len),
                                         LengthDist.parse(spec.output_len))]
        weights = np.asarray([m.weight for m in self.mix], dtype=np.float64)
        self._cumulative = np.cumsum(weights / weights.sum())
        self.prefix_ids = (maker.ids(np.random.default_rng([seed, _PREFIX_STREAM]),
                                     spec.prefix_len) if spec.prefix_len else [])
        self._reset()

    def _reset(self) -> None:
        self._ahead: dict[int, Prompt] = {}
        self._ahead_tokens = 0
        self._target = 0  # how many to keep built ahead of the sends
        self._order: Iterator[int] | None = None  # the indices still to build, in send order
        self._taken_max = -1  # the highest index a send has taken (the order skips up to it)
        self._refilling = False
        self.built_before_run = self.built_during_run = self.built_in_send = 0
        self.build_during_run_s = 0.0  # the loop's time spent building (client CPU, in the run)

    def __getstate__(self) -> dict[str, Any]:
        """A worker gets the recipe, not the driver's built prompts (it builds its own share)."""
        state = self.__dict__.copy()
        for key in ("_ahead", "_order"):
            state.pop(key)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._reset()

    def __len__(self) -> int:
        return self.count

    def __getitem__(self, index: int) -> Prompt:
        return self._ahead.get(index) or self.build(index)

    def __iter__(self) -> Iterator[Prompt]:
        return (self[k] for k in range(self.count))

    def build(self, index: int) -> Prompt:
        """Prompt ``index``: its mix entry, lengths, shared prefix and text, from its own
        random stream (the first three from the size seed's, where there is one)."""
        rng = np.random.default_rng([self.seed, index])
        sizes = rng if self.size_seed is None else np.random.default_rng(
            [self.size_seed, index, _SIZE_STREAM])
        entry = self.mix[0] if len(self.mix) == 1 else self.mix[min(
            int(np.searchsorted(self._cumulative, sizes.random(), side="right")),
            len(self.mix) - 1)]
        n_in, n_out = _length(entry.input_len, sizes), _length(entry.output_len, sizes)
        if self.spec.prefix_len and sizes.random() < self.spec.prefix_fraction:
            n_in = max(n_in, self.spec.prefix_len + 1)
            text, actual = self.maker.make(rng, n_in, self.prefix_ids)
            group = "shared_prefix" if len(self.mix) == 1 else f"{entry.name}+shared_prefix"
        else:
            text, actual = self.maker.make(rng, n_in)
            group = entry.name
        return Prompt(text, actual, n_out, group)

    def group_names(self) -> set[str]:
        """The groups this workload's prompts can fall in."""
        names = {m.name for m in self.mix}
        if not self.spec.prefix_len or self.spec.prefix_fraction <= 0:
            return names
        shared = {"shared_prefix"} if len(self.mix) == 1 else {f"{n}+shared_prefix"
                                                                for n in names}
        return shared if self.spec.prefix_fraction >= 1 else names | shared

    def groups_built(self) -> dict[str, int] | None:
        """The run's prompts by group, where this process built them all before the run (None
        otherwise: the summary's ``by_group`` counts what was sent)."""
        if self.built_before_run < self.count:
            return None
        return dict(Counter(p.group for p in self._ahead.values()))

    def prebuild(self, order: Iterable[int], count: int | None = None) -> None:
        """Build the first prompts of ``order`` (the indices in the order they will be sent):
        ``count`` of them (the run's size, default this workload's) within the bounds ahead;
        the rest are built during the run, as it takes them."""
        self._order = iter(order)
        self._target = max(1, min(count or self.count, _AHEAD_PROMPTS))
        self._fill(None)
        self.built_before_run = len(self._ahead)

    def take(self, index: int) -> Prompt:
        """Prompt ``index`` for its send, forgotten here; building more is scheduled on the
        running loop when the prompts ahead fell to half of what is kept."""
        self._taken_max = max(self._taken_max, index)
        prompt = self._ahead.pop(index, None)
        if prompt is None:
            began = time.perf_counter()
            prompt = self.build(index)
            self.build_during_run_s += time.perf_counter() - began
            self.built_in_send += 1
        else:
            self._ahead_tokens -= prompt.prompt_tokens or 0
        if (self._order is not None and not self._refilling
                and len(self._ahead) * 2 < self._target):
            try:
                asyncio.get_running_loop().call_soon(self._refill)
                self._refilling = True
            except RuntimeError:  # taken outside a run's loop: nothing to keep quiet for
                self.built_during_run += self._fill(None)
        return prompt

    def _refill(self) -> None:
        began = time.perf_counter_ns()
        built = self._fill(began + _REFILL_SLICE_NS)
        self.build_during_run_s += (time.perf_counter_ns() - began) / 1e9
        self.built_during_run += built
        if self._order is not None and len(self._ahead) < self._target and built:
            asyncio.get_running_loop().call_soon(self._refill)
        else:
            self._refilling = False

    def _fill(self, stop_ns: int | None) -> int:
        """Build the next indices of the order until the bounds ahead are reached, the order
        ends or (``stop_ns``) this slice of the loop's turn is spent; the number built."""
        built = 0
        while self._order is not None and len(self._ahead) < self._target and (
                not self._ahead or self._ahead_tokens < _AHEAD_TOKENS):
            index = next(self._order, None)
            if index is None:
                self._order = None
                break
            if index <= self._taken_max or index in self._ahead:  # sent already
                continue
            prompt = self._ahead[index] = self.build(index)
            self._ahead_tokens += prompt.prompt_tokens or 0
            built += 1
            if stop_ns is not None and time.perf_counter_ns() >= stop_ns:
                break
        return built

    def notes(self) -> list[str]:
        inexact = self.maker.inexact
        return [f"{inexact} prompt(s) could not be made exactly the target length"] if inexact \
            else []

    def figures(self) -> dict[str, Any]:
        return {"built_as_sent": True, "built_before_run": self.built_before_run,
                "built_during_run": self.built_during_run, "built_in_send": self.built_in_send,
                "build_during_run_s": self.build_during_run_s, "resent": 0}
