"""The independent checker of a chaos run: it reads the run's history (docs/history.md, format
1) and nothing else, and counts what the history shows went wrong.

It shares no code with ``chaos/`` (whose own checker reads the servers) nor with jobrelay, and
imports only the standard library (``tests/unit/test_history_checker.py`` holds it to that), so
that a mistake in the runner or in the system cannot hide itself in the checker too.
``python -m checker HISTORY.jsonl`` runs it (``__main__.py``).
"""
