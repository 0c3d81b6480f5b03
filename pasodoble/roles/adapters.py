"""LoRA roles and two adapters on one shared base: ways of building a `Role`, not a second Role class.

What:
- `LoraConfig` (`proposer.lora` / `solver.lora`: rank, alpha, dropout, target modules; None = full fine-tuning).
- `AdapterView`: the module a LoRA role trains. It wraps a peft model and exposes only ITS adapter: `parameters()`
  yields that adapter's weights (so the role's optimizer and gradient clipping never see the base or the other
  role's adapter), and every `forward` / `generate` first activates it. With `roles.shared_base: true` both roles
  hold a view of the same peft model (one frozen base in memory, adapters `proposer` and `solver`).
- `save_adapter` / `load_weights`: a LoRA role's checkpoint holds its adapter in peft format (adapter_config.json +
  adapter_model.safetensors), a full role's holds the Hugging Face model; `load_weights` restores either in place.
- `build_shared_roles` lives in `shared_base.py`; `pasodoble export` in `export.py`.

Why: a shared base halves the memory of dual play, and one vLLM engine can serve both adapters (`max_loras=2`).

How to run: `pasodoble train --config recipes/tiny-online.yaml roles.shared_base=true proposer.lora.rank=8
solver.lora.rank=8`; tests in `tests/roles/test_adapters.py`.

Departures: none from the method; the reference code trained full models only.
"""

from __future__ import annotations

from pathlib import Path

import torch

from pasodoble.errors import UserError
from pasodoble.roles.config import ADAPTER_FILE
from pasodoble.roles.config import LoraConfig as LoraConfig  # re-exported: defined beside RoleConfig
from pasodoble.roles.config import RolesConfig as RolesConfig


def peft_config(cfg: LoraConfig):
    from peft import LoraConfig as PeftLoraConfig

    return PeftLoraConfig(
        r=cfg.rank,
        lora_alpha=cfg.alpha,
        lora_dropout=cfg.dropout,
        target_modules=list(cfg.target_modules),
        task_type="CAUSAL_LM",
    )


class AdapterView(torch.nn.Module):
    """One adapter of a (possibly shared) peft model, seen as the role's model (see module docstring)."""

    def __init__(self, peft_model: torch.nn.Module, adapter: str):
        super().__init__()
        self.peft = peft_model
        self.adapter = adapter

    def activate(self) -> None:
        if self.peft.active_adapter != self.adapter:
            self.peft.set_adapter(self.adapter)  # also marks only this adapter trainable

    def forward(self, *args, **kwargs):
        self.activate()
        return self.peft(*args, **kwargs)

    def generate(self, *args, **kwargs):
        self.activate()
        return self.peft.generate(*args, **kwargs)

    def named_parameters(self, prefix: str = "", recurse: bool = True, remove_duplicate: bool = True):
        tag = f".{self.adapter}."
        for name, p in super().named_parameters(prefix, recurse, remove_duplicate):
            if tag in name:
                yield name, p

    def parameters(self, recurse: bool = True):
        for _, p in self.named_parameters(recurse=recurse):
            yield p

    def __getattr__(self, name: str):
        try:
            return super().__getattr__(name)
        except AttributeError:
            return getattr(self._modules["peft"], name)

    def adapter_state(self) -> dict[str, torch.Tensor]:
        from peft import get_peft_model_state_dict

        return get_peft_model_state_dict(self.peft, adapter_name=self.adapter)

    def save_adapter(self, folder: str | Path) -> None:
        """This adapter alone, in peft's format (what vLLM's LoRARequest and PeftModel.from_pretrained read)."""
        from safetensors.torch import save_file

        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        state = {k: v.detach().contiguous().cpu() for k, v in self.adapter_state().items()}
        save_file(state, str(folder / ADAPTER_FILE))
        self.peft.peft_config[self.adapter].save_pretrained(str(folder))

    def save_pretrained(self, folder: str | Path, **_) -> None:
        self.save_adapter(folder)

    def load_adapter_file(self, folder: str | Path) -> None:
        from peft import set_peft_model_state_dict
        from safetensors.torch import load_file

        device = next(self.parameters()).device
        state = load_file(str(Path(folder) / ADAPTER_FILE), device=str(device))
        result = set_peft_model_state_dict(self.peft, state, adapter_name=self.adapter)
        unexpected = getattr(result, "unexpected_keys", [])
        if unexpected:
            raise UserError(f"{folder}: adapter has weights this model lacks ({unexpected[0]}, ...)")


def wrap_lora(model: torch.nn.Module, adapter: str, cfg: LoraConfig) -> AdapterView:
    """A fresh LoRA adapter named `adapter` on `model` (frozen); returns the role's view of it."""
    from peft import get_peft_model

    peft_model = get_peft_model(model, peft_config(cfg), adapter_name=adapter)
    return AdapterView(peft_model, adapter)


def add_adapter(view: AdapterView, adapter: str, cfg: LoraConfig) -> AdapterView:
    """A second adapter on the same frozen base as `view` (shared-base dual play)."""
    view.peft.add_adapter(adapter, peft_config(cfg))
    return AdapterView(view.peft, adapter)


def shape_problem(err: Exception) -> str:
    """The first line of a `load_state_dict` error that names a parameter (a size mismatch, a missing key)."""
    lines = [line.strip() for line in str(err).splitlines() if line.strip()]
    named = [line for line in lines if line.startswith(("size mismatch", "Missing key", "Unexpected key"))]
    return (named or lines or [type(err).__name__])[0].rstrip(".")


def _check_lora_rank(model: AdapterView, folder: Path) -> None:
    import json

    try:
        saved = json.loads((folder / "adapter_config.json").read_text(encoding="utf-8")).get("r")
    except (OSError, UnicodeDecodeError, ValueError, AttributeError):
        return  # the weights' own shapes are checked when they load
    rank = model.peft.peft_config[model.adapter].r
    if saved != rank:
        raise UserError(
            f"{folder}: the checkpoint's LoRA rank is {saved}, {model.adapter}.lora.rank is {rank}; "
            "resume with the run's rank"
        )


def load_weights(model: torch.nn.Module, folder: Path, dtype: torch.dtype, load=None) -> None:
    """Restore what `Role.save` wrote into `model`, in place: an adapter for a view, else the full weights
    (through `load(state_dict)` when given: a sharded model keeps its slice). Weights of another shape (LoRA
    rank, model size) are one `UserError` line naming the first parameter that differs."""
    if isinstance(model, AdapterView):
        if not (folder / ADAPTER_FILE).is_file():
            raise UserError(
                f"{folder}: no {ADAPTER_FILE}; this checkpoint holds a full model, not a LoRA adapter"
            )
        _check_lora_rank(model, folder)
        try:
            model.load_adapter_file(folder)
        except RuntimeError as err:
            raise UserError(f"{folder}: the adapter does not fit this model ({shape_problem(err)})") from None
        return
    from transformers import AutoModelForCausalLM

    if (folder / ADAPTER_FILE).is_file():
        raise UserError(f"{folder}: holds a LoRA adapter but this role is a full model; set the role's lora")
    try:  # safetensors only: a pickled weight file could run code
        saved = AutoModelForCausalLM.from_pretrained(str(folder), dtype=dtype, use_safetensors=True)
    except OSError as err:
        reason = str(err).splitlines()[0] if str(err) else type(err).__name__
        raise UserError(f"{folder}: cannot load the saved weights ({reason})") from err
    try:
        (load or model.load_state_dict)(saved.state_dict())
    except RuntimeError as err:
        raise UserError(
            f"{folder}: the saved model's shape differs from this role's model ({shape_problem(err)}); "
            "resume with the model the run was trained from"
        ) from None
