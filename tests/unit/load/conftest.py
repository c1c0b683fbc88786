"""Fixtures for the load tests: a tiny real BPE tokenizer (trained on the spot with the
``tokenizers`` package, so exact-length tests use a real HF tokenizer.json) and fake servers."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def tokenizer_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from tokenizers import Tokenizer, models, pre_tokenizers, decoders, trainers

    from latscope.load.workload import _WORDS

    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=400, special_tokens=["<unk>", "<s>", "</s>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    corpus = [" ".join(_WORDS[i:i + 12]) for i in range(0, len(_WORDS), 3)]
    tok.train_from_iterator(corpus, trainer)
    out = tmp_path_factory.mktemp("tok")
    tok.save(str(out / "tokenizer.json"))
    return out
