"""Update batching: how a role's update turns samples into log-probs within a memory budget.

Micro-batch planning (`micro_batches`) and token budgets (`token_budget`); the layouts a micro-batch runs in, all
computing the same log-probs to float rounding: the whole logits, the LM head in chunks (`chunked_logprobs`, through
the fused head `fused_head`), each distinct prompt once through the KV cache (`shared_prefix`, with its decode-time
attention `prefix_attention`), or packed rows of prompt groups without padding (`packed`, attended by
`segment_attention`); the input embedding's gradient in place (`embedding_grad`) and mixed precision (`precision`).
One entry point, `logprobs.logprobs(...)`, picks a layout by name; `logprobs.scored_temperature` is the rule for the
temperature log-probs are scored at. The CPU kernels plug in through `fast_paths` (filled by `pasodoble.accel`).
"""
