"""pasodoble: dual-play RL for LLM reasoning.

A Proposer model writes hard questions with its own answers, grounded in passages of a knowledge corpus; a Solver
model answers them; both are trained against each other with GRPO-style RL and no human label. The method is the
PasoDoble paper's ("Better LLM Reasoning via Dual-Play"); see the README for the tour and the module map.
"""

__version__ = "0.1.0"
