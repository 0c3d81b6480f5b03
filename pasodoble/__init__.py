"""pasodoble: dual-play RL for LLM reasoning.

A Proposer model writes hard questions with its own answers, grounded in passages of a knowledge corpus; a Solver
model answers them; both are trained against each other with GRPO-style RL and no human label. The method is the
PasoDoble paper's ("Better LLM Reasoning via Dual-Play"); see the README for the tour and the module map.
"""

import os

# oneDNN runs torch's bfloat16 matrix products on a CPU, and the float32 linear layers of `accel.cpu_matmul`. It keeps
# up to 1,024 compiled kernels, one per operand shape, each with its scratch memory, and torch's oneDNN bridge
# (ideep, which `cpu_matmul` goes through) keeps its own cache of 1,024 more. A decode loop whose batch shrinks as rows
# end, and packed update rows of many lengths, reach hundreds of shapes, most used once: on SmolLM2-135M in bfloat16
# the kernel cache added about 200 MB to a GRPO step's peak at no gain in speed, and in float32 through `cpu_matmul`
# the bridge's cache grew by about 1 MB a shape (docs/PERFORMANCE.md). Both read their capacity when they first build
# a kernel, so it is set here, before torch runs one; a value set by the user wins.
os.environ.setdefault("ONEDNN_PRIMITIVE_CACHE_CAPACITY", "32")
os.environ.setdefault("LRU_CACHE_CAPACITY", "16")

__version__ = "0.1.0"
