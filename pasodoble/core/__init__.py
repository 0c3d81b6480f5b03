"""The method of dual play (docs/METHOD.md) and nothing else: prompts and proposal parsing, rewards, diversity, GRPO
advantages and loss, the question buffer, knowledge passages, step metrics and learning-rate schedules. Plain values
and tensors in, plain values out; no engines, no processes, no files beyond reading a corpus. Imports only the
plumbing modules of `pasodoble` and `grader`; how the update batches its log-probs is `pasodoble.update`, the CPU
fast paths are `pasodoble.accel`."""
