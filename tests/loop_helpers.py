"""Tiny models and tokenizers for the loop's tests: a character-level fast tokenizer with a Qwen-style chat
template and randomly initialised two-layer Qwen3 models, built locally in seconds (no network)."""

from __future__ import annotations

import string
from pathlib import Path

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast, Qwen3Config, Qwen3ForCausalLM

SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def make_tokenizer() -> PreTrainedTokenizerFast:
    """A character-level tokenizer: every printable ASCII character is one token."""
    chars = sorted(set(string.printable))
    vocab = {tok: i for i, tok in enumerate(SPECIAL + chars)}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token="<|endoftext|>"))
    tok.pre_tokenizer = pre_tokenizers.Split("", behavior="isolated")
    tok.decoder = decoders.Fuse()
    tok.add_special_tokens(SPECIAL)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>", unk_token="<|endoftext|>"
    )
    fast.chat_template = CHAT_TEMPLATE
    return fast


def make_model(tokenizer, seed: int = 0, hidden_size: int = 32) -> Qwen3ForCausalLM:
    torch.manual_seed(seed)
    cfg = Qwen3Config(
        vocab_size=len(tokenizer),
        hidden_size=hidden_size,
        intermediate_size=2 * hidden_size,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=hidden_size // 4,
        max_position_embeddings=512,
        tie_word_embeddings=True,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=None,
    )
    return Qwen3ForCausalLM(cfg)


def save_tiny(dirpath: Path, seed: int = 0) -> Path:
    """Save a tiny model + tokenizer in Hugging Face format; returns the folder."""
    tokenizer = make_tokenizer()
    model = make_model(tokenizer, seed=seed)
    dirpath.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(dirpath)
    tokenizer.save_pretrained(dirpath)
    return dirpath


class ScriptedEngine:
    """A rollout engine whose completion texts come from `script(prompt_text, sample_index)`; token ids are the
    text's ids plus EOS and log-probs are the live model's (so updates on these samples are real GRPO steps)."""

    copies_weights = False  # reads the live model, as the HF engine does

    def __init__(self, model, tokenizer, script):
        self.model, self.tokenizer, self.script = model, tokenizer, script
        self.calls = 0

    def update_weights(self, model) -> None:
        self.model = model

    def close(self) -> None:
        pass

    def generate(
        self, prompt_ids, sampling, on_batch=None, on_progress=None
    ):  # all at once; callbacks unused
        from pasodoble.rollout import Completion
        from pasodoble.update.logprobs import logprobs

        self.calls += 1
        out = []
        for ids in prompt_ids:
            prompt_text = self.tokenizer.decode(list(ids))
            texts = [self.script(prompt_text, j) for j in range(sampling.n)]
            comps = [
                self.tokenizer(t, add_special_tokens=False)["input_ids"] + [self.tokenizer.eos_token_id]
                for t in texts
            ]
            width = len(ids) + max(len(c) for c in comps)
            pad = self.tokenizer.pad_token_id
            seq = torch.tensor([list(ids) + c + [pad] * (width - len(ids) - len(c)) for c in comps])
            mask = torch.tensor(
                [[1] * (len(ids) + len(c)) + [0] * (width - len(ids) - len(c)) for c in comps]
            )
            with torch.no_grad():
                lps = logprobs(self.model, seq, mask, mask, temperature=sampling.temperature)
            out.append(
                [
                    Completion(t, c, lps[row, len(ids) : len(ids) + len(c)].tolist(), "stop")
                    for row, (t, c) in enumerate(zip(texts, comps))
                ]
            )
        return out


class ExactGrader:
    """Grader stand-in for pure-logic tests: the last \\boxed{} of a response equals the gold string."""

    def grade(self, golds, responses, *, extract: bool = True):
        from types import SimpleNamespace

        from pasodoble.core.prompts import last_boxed

        verdicts = []
        for gold, response in zip(golds, responses):
            got = last_boxed(response) if extract else response
            status = "ok" if got is not None else "no_answer"
            verdicts.append(
                SimpleNamespace(
                    correct=got is not None and got.strip() == gold.strip(), status=status, extracted=got
                )
            )
        return SimpleNamespace(verdicts=verdicts, counters={"checks": len(golds)})
