"""The tiny model: deterministic bytes, a lossless tokenizer, a valid chat template, and weights
laid out exactly as Hugging Face's own ``LlamaForCausalLM`` expects (checked against transformers,
not against our own table)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from latscope.server.tinymodel import (
    BOS, CHAT_TEMPLATE, EOT, SPECIAL_TOKENS, TinySpec, cache_root, ensure_tiny_model,
)


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return ensure_tiny_model(root=tmp_path_factory.mktemp("models"))


def _files(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir())}


@pytest.mark.slow
def test_two_builds_give_identical_bytes(built, tmp_path):
    # Built in another process: per-process hash seeds (Python's, Rust's HashMap) must not matter.
    code = ("import sys; from pathlib import Path; from latscope.server.tinymodel import "
            "ensure_tiny_model; print(ensure_tiny_model(root=Path(sys.argv[1])))")
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True,
                         text=True, check=True, timeout=300)
    again = Path(out.stdout.strip())
    assert again.name == built.name  # same inputs, same cache key
    assert _files(again) == _files(built)
    assert set(_files(built)) >= {"config.json", "tokenizer.json", "tokenizer_config.json",
                                  "generation_config.json", "model.safetensors"}


def test_cached_model_is_reused_not_rebuilt(built):
    before = {p.name: p.stat().st_mtime_ns for p in built.iterdir()}
    assert ensure_tiny_model(root=built.parent) == built
    assert {p.name: p.stat().st_mtime_ns for p in built.iterdir()} == before


def test_dummy_variant_has_no_weights_and_the_same_tokenizer(built, tmp_path):
    dummy = ensure_tiny_model(root=tmp_path, dummy=True)
    assert dummy.name.startswith("tiny-llama-dummy-")
    assert not (dummy / "model.safetensors").exists()
    assert (dummy / "tokenizer.json").read_bytes() == (built / "tokenizer.json").read_bytes()
    assert (dummy / "config.json").read_bytes() == (built / "config.json").read_bytes()


def test_tokenizer_is_lossless_and_has_the_special_tokens(built):
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(built / "tokenizer.json"))
    assert tok.get_vocab_size() == TinySpec().vocab_size
    assert [tok.token_to_id(t) for t in SPECIAL_TOKENS] == list(range(len(SPECIAL_TOKENS)))
    for text in ["def f(x):\n    return x * 2", "naïve café — 東京 🚀", " leading  spaces\t"]:
        ids = tok.encode(text).ids
        assert tok.decode(ids) == text  # byte-level BPE never loses a byte
    prose = "The return statement leaves the current function call."
    assert len(tok.encode(prose).ids) < len(prose) / 2  # it learned English from the corpus


def test_chat_template_renders_and_special_tokens_stay_whole(built):
    import jinja2
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(built / "tokenizer.json"))
    text = jinja2.Template(CHAT_TEMPLATE).render(
        messages=[{"role": "user", "content": "hi"}], add_generation_prompt=True, bos_token=BOS)
    assert text.startswith(BOS) and text.endswith("assistant<|end_header_id|>\n\n")
    ids = tok.encode(text).ids
    assert ids[0] == tok.token_to_id(BOS)
    assert tok.token_to_id(EOT) in ids


@pytest.mark.slow
def test_transformers_loads_tokenizer_and_chat_template(built):
    transformers = pytest.importorskip("transformers")
    tok = transformers.AutoTokenizer.from_pretrained(str(built))
    text = tok.apply_chat_template([{"role": "user", "content": "hello"}],
                                   add_generation_prompt=True, tokenize=False)
    assert text == f"{BOS}<|start_header_id|>user<|end_header_id|>\n\nhello{EOT}" \
                   "<|start_header_id|>assistant<|end_header_id|>\n\n"
    assert tok.eos_token == EOT


@pytest.mark.slow
def test_weights_match_huggingface_llama_layout(built):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from safetensors.torch import load_file

    weights = load_file(str(built / "model.safetensors"))
    config = transformers.AutoConfig.from_pretrained(str(built))
    with torch.device("meta"):
        reference = transformers.LlamaForCausalLM(config)
    expected = {k: tuple(v.shape) for k, v in reference.state_dict().items()}
    assert {k: tuple(v.shape) for k, v in weights.items()} == expected
    assert {v.dtype for v in weights.values()} == {torch.bfloat16}
    q = weights["model.layers.0.self_attn.q_proj.weight"].float()
    assert abs(q.std().item() - 0.02) < 0.001  # drawn from N(0, 0.02), 65536 samples
    assert abs(q.mean().item()) < 0.001
    assert torch.all(weights["model.norm.weight"] == 1)


def test_concurrent_builders_produce_one_valid_directory(tmp_path):
    code = textwrap.dedent(f"""
        from pathlib import Path
        from latscope.server.tinymodel import ensure_tiny_model
        print(ensure_tiny_model(root=Path({str(tmp_path)!r}), dummy=True))
    """)
    procs = [subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
             for _ in range(2)]
    outs = [p.communicate(timeout=120)[0].strip() for p in procs]
    assert all(p.returncode == 0 for p in procs)
    assert outs[0] == outs[1]
    built_dirs = [p.name for p in tmp_path.iterdir() if not p.name.endswith(".lock")]
    assert built_dirs == [Path(outs[0]).name]  # no half-built temporary directory left


def test_cache_root_follows_xdg(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert cache_root() == tmp_path / "latscope" / "models"
    monkeypatch.setenv("XDG_CACHE_HOME", "")
    assert cache_root() == Path.home() / ".cache" / "latscope" / "models"
