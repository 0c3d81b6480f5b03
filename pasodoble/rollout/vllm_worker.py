"""Worker-side half of the vLLM weight sync: a vLLM worker extension (`worker_extension_cls`).

vLLM mixes this class into every worker, so its methods can be called by name through `collective_rpc` (in
process) or the server's `/collective_rpc` endpoint (server mode). Only strings cross the boundary: tensors do not
pickle through the RPC, so the trainer writes the new weights as safetensors under /dev/shm and passes the folder.

`pasodoble_reload(path)` uses the worker's own `reload_weights` (layer-wise reload, which re-runs the CPU build's
weight repacking; writing into `model.load_weights` directly loads into parameters the CPU kernels no longer read)
and then ties the output head to the embedding again: the layer-wise reload replaces the embedding parameter, and
a model with `tie_word_embeddings` would otherwise keep sampling from the stale head (measured: log-probs off by
33 nats after an embedding change).

This module must not import torch-heavy project code: vLLM imports it inside each worker process.
"""

from __future__ import annotations


class SyncExtension:
    """Methods added to each vLLM worker; `self` is the worker."""

    def pasodoble_reload(self, path: str) -> str:
        self.reload_weights(weights_path=path)
        model = self.model_runner.get_model()
        head = getattr(model, "lm_head", None)
        embed = getattr(getattr(model, "model", None), "embed_tokens", None)
        tied = getattr(getattr(model, "config", None), "tie_word_embeddings", False)
        if tied and head is not None and embed is not None and head.weight is not embed.weight:
            head.weight = embed.weight
            method = getattr(head, "quant_method", None)
            if method is not None:  # the CPU build packs the head's weight for its GEMM: redo it
                method.process_weights_after_loading(head)
        return "ok"
