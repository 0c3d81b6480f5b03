"""Shared test fixtures: a tiny random Qwen3 and a character tokenizer with a chat template, and the tiny worlds.

Real Hugging Face classes (built locally, saved and reloaded with `from_pretrained`), only untrained: for tests of
shapes, log-probs and plumbing that do not need a trained model. The trained tiny world lives in `pasodoble.world`.

Every cached tiny world a test needs comes from one session-scoped fixture here (`tiny_world`,
`tiny_world_vllm`), built into the shared model cache on first use and found there afterwards. A test module that
launches subprocesses on `tiny:` models asks for the fixture (`pytest.mark.usefixtures`) so that no order of the
modules, and no state of the cache, makes a rank wait on a build. Modules that may build it take a time budget
covering a build (`tests.worlds.BUILD_BUDGET_S`; a build is about 5 minutes on a free core).
"""

from __future__ import annotations

import string
from pathlib import Path

import pytest
import torch

import pasodoble.accel  # noqa: F401  the fast paths plug into update batching and decoding on import, as in a run
from tests.worlds import VLLM_WORLD, recipe_world

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared"
FOLDER_MARKERS = {"accel": "accel", "bench": "bench"}  # tests/<folder>/ -> the marker its tests carry


def pytest_collection_modifyitems(config, items):
    """Marks each test of a folder in `FOLDER_MARKERS` with its marker (`-m accel`, `-m "not bench"`)."""
    for item in items:
        parts = Path(str(item.fspath)).resolve().relative_to(ROOT).parts
        if len(parts) > 2 and parts[0] == "tests" and parts[1] in FOLDER_MARKERS:
            item.add_marker(FOLDER_MARKERS[parts[1]])


CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def build_char_tokenizer():
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    chars = list(string.printable[:95]) + ["\n"]
    vocab = {tok: i for i, tok in enumerate(specials + sorted(set(chars)))}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<|endoftext|>"))
    tok.pre_tokenizer = pre_tokenizers.Split("", behavior="isolated")
    tok.decoder = decoders.Fuse()
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>", bos_token=None
    )
    fast.add_special_tokens({"additional_special_tokens": specials[1:]})
    fast.chat_template = CHAT_TEMPLATE
    return fast


@pytest.fixture(scope="session")
def tiny_lm(tmp_path_factory):
    """(model, tokenizer, path): a random 2-layer Qwen3, saved and reloaded through `from_pretrained`."""
    from transformers import AutoModelForCausalLM, AutoTokenizer, Qwen3Config, Qwen3ForCausalLM

    torch.manual_seed(0)
    tokenizer = build_char_tokenizer()
    config = Qwen3Config(
        vocab_size=len(tokenizer),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=8,
        max_position_embeddings=512,
        tie_word_embeddings=True,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    path = tmp_path_factory.mktemp("tiny_lm")
    Qwen3ForCausalLM(config).save_pretrained(path)
    tokenizer.save_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path)
    return model, AutoTokenizer.from_pretrained(path), path


@pytest.fixture(scope="session")
def tiny_world():
    """The default tiny world's SFT-warmed models (`tiny:proposer`, `tiny:solver` of recipes/tiny-online.yaml)."""
    return recipe_world([])


@pytest.fixture(scope="session")
def tiny_world_vllm():
    """The tiny world the vLLM tests use (`VLLM_WORLD` over recipes/tiny-online.yaml)."""
    return recipe_world(VLLM_WORLD)


@pytest.fixture
def one_thread():
    """One torch thread for the test (the compiled CPU kernels serve one-thread calls only)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture
def accel_switch(monkeypatch):
    """`accel_switch(**keys)` makes `AccelConfig(**keys)` the process's fast-path settings for the test."""
    from pasodoble.accel import settings

    def switch(**keys):
        monkeypatch.setitem(settings._current, "cfg", settings.AccelConfig(**keys))

    return switch


@pytest.fixture
def fresh_kernel(monkeypatch, tmp_path):
    """An empty kernel cache and no compiled kernel (`accel.decode_kernel`, `accel.train_attention`,
    `accel.fused_layers`) loaded yet in this process; the process's state is restored after."""
    from pasodoble.accel import decode_kernel, fused_layers, train_attention

    monkeypatch.setenv("PASODOBLE_CACHE", str(tmp_path))
    saved = [(module, dict(module._state)) for module in (decode_kernel, train_attention, fused_layers)]
    for module, _ in saved:
        module._state.clear()
    yield tmp_path
    for module, state in saved:
        module._state.clear()
        module._state.update(state)
