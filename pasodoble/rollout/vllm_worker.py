"""Worker-side half of the vLLM weight sync: a vLLM worker extension (`worker_extension_cls`).

vLLM mixes this class into every worker, so its methods can be called by name through `collective_rpc` (in
process) or the server's `/collective_rpc` endpoint (server mode). Across processes only strings cross the boundary
(tensors do not pickle through the RPC), so the trainer writes the new weights as safetensors under /dev/shm and
passes the folder (`pasodoble_reload`). An engine core in the trainer's own process takes the tensors themselves
(`pasodoble_load`, the same layer-wise reload fed from an iterator of (name, tensor) pairs).

`pasodoble_reload(path)` uses the worker's own `reload_weights` (layer-wise reload, which re-runs the CPU build's
weight repacking; writing into `model.load_weights` directly loads into parameters the CPU kernels no longer read)
and then refreshes a tied output head: no checkpoint weight is named after it, so the layer-wise reload never
re-processes it, and the CPU build's packed copy of the head (`cpu_linear`) would keep the old embedding (measured:
log-probs off by 8-33 nats after an embedding change). The head is re-tied to the embedding and re-packed.

A server started with `--weight-transfer-config` receives weights over vLLM's weight-transfer engines instead
(`rollout.transfer`); importing this module registers the project's gloo backend there (`rollout.gloo_transfer`,
before the worker loads its model and builds its transfer engine), and `pasodoble_retie_head` re-ties the head after
such an update.

The reload loads only from the run's own weights folder (`PASODOBLE_WEIGHTS_ROOT`, set by whoever starts the
engine; `rollout.shm.weights_folder_refusal`): a caller cannot point the server at weights of its choosing.

This module must not import torch-heavy project code: vLLM imports it inside each worker process.
"""

from __future__ import annotations

import os

from pasodoble.rollout import gloo_transfer
from pasodoble.rollout.shm import WEIGHTS_ROOT_ENV, weights_folder_refusal

gloo_transfer.register()


class SyncExtension:
    """Methods added to each vLLM worker; `self` is the worker."""

    def pasodoble_reload(self, path: str) -> str:
        refusal = weights_folder_refusal(str(path), os.environ.get(WEIGHTS_ROOT_ENV))
        if refusal is not None:
            raise PermissionError(f"pasodoble_reload refused {path!r}: {refusal}")
        self.reload_weights(weights_path=path)
        self.pasodoble_retie_head()
        return "ok"

    def pasodoble_load(self, weights) -> str:
        """Load (name, tensor) pairs straight into the layer-wise reload. Only an engine core in the caller's own
        process gets here with the tensors themselves (`VLLMEngine` with `weight_sync: direct`); they are never
        serialised."""
        self.reload_weights(weights_iterator=iter(weights))
        self.pasodoble_retie_head()
        return "ok"

    def pasodoble_retie_head(self) -> str:
        """Re-tie (and re-pack) a tied output head to the embedding, after any load (see module docstring)."""
        model = self.model_runner.get_model()
        head = getattr(model, "lm_head", None)
        embed = getattr(getattr(model, "model", None), "embed_tokens", None)
        tied = getattr(getattr(model, "config", None), "tie_word_embeddings", False)
        if tied and head is not None and embed is not None:
            if head.weight is not embed.weight:
                head.weight = embed.weight
            method = getattr(head, "quant_method", None)
            if method is not None:  # the CPU build packs the head's weight for its GEMM: pack the new one
                method.process_weights_after_loading(head)
        return "ok"
