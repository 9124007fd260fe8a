"""The chaos runner: the whole system under crashes, restarts and network faults (issue 6).

``python -m chaos --profile short|long --seed N`` — see ``chaos.runner``.
"""
