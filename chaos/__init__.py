"""The chaos runner: the whole system under crashes, restarts and network faults, then the
invariants of docs/invariants.md checked (``chaos.checks``).

``python -m chaos --profile short|long --seed N`` — see ``chaos.runner``.
"""
