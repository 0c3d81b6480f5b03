"""The pure pieces of dual play: GRPO losses, rewards, prompts and proposal parsing, diversity, the question buffer,
step metrics, knowledge passages and mixed precision. Plain values and tensors in, plain values out; no engines,
no processes, no files beyond reading a corpus. Imports only the plumbing modules of `pasodoble` and `grader`."""
