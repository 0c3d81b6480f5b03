"""pasodoble: dual-play RL for LLM reasoning.

A Proposer model writes hard questions with its own answers, grounded in passages of a knowledge corpus; a Solver
model answers them; both are trained against each other with GRPO-style RL and no human label. The method is the
PasoDoble paper's ("Better LLM Reasoning via Dual-Play"); see the README for the tour and the module map.
"""

import os

# oneDNN (torch's bfloat16 matrix products on a CPU) keeps up to 1,024 compiled kernels, one per operand shape, each
# with its scratch memory. A decode loop whose batch shrinks as rows end, and packed update rows of many lengths,
# reach hundreds of shapes, most used once: on SmolLM2-135M in bfloat16 the cache added about 200 MB to a GRPO
# step's peak at no gain in speed (docs/PERFORMANCE.md). oneDNN reads the capacity when it first builds a kernel, so
# it is set here, before torch runs one; a value set by the user wins.
os.environ.setdefault("ONEDNN_PRIMITIVE_CACHE_CAPACITY", "64")

__version__ = "0.1.0"
