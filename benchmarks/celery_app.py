"""The Celery side of ``benchmarks/e2e.py``: one no-op task, acks_late, no result backend; and of
``benchmarks/peers.py``: the same with Celery's PostgreSQL result backend.

The worker runs as ``celery -A benchmarks.celery_app worker``; the broker URL and the completion
log come from the environment that ``e2e.py`` sets:

- ``BENCH_CELERY_BROKER_URL``: the scratch vhost of the benchmark's RabbitMQ;
- ``BENCH_CELERY_COMPLETIONS``: a file the task appends one fixed-width line to per run
  (``<sent at> <done at>``, epoch seconds). ``O_APPEND`` writes of one short line are atomic
  across the pool's processes and threads, so its size counts completions and its lines give the
  first and last completion and the latency. That is the whole "work" of the task: a
  ``time.time()`` and one ``write(2)``.
- ``BENCH_CELERY_RESULT_BACKEND`` (``benchmarks/peers.py``): a ``db+postgresql+psycopg://`` URL
  (SQLAlchemy on psycopg 3, both in the main lock): each task's result and state stored in its
  ``celery_taskmeta`` table before the ack (acks_late), which ``peers.py`` counts.
"""

from __future__ import annotations

import os
import time

from celery import Celery

QUEUE = "bench.celery"
LINE_BYTES = 36  # b"%17.6f %17.6f\n"

RESULT_BACKEND = os.environ.get("BENCH_CELERY_RESULT_BACKEND") or None

app = Celery("jobrelay_bench", broker=os.environ.get("BENCH_CELERY_BROKER_URL", "amqp://"))
app.conf.update(
    task_acks_late=True,  # ack after the task ran, as jobrelay acks after the result is stored
    # e2e: no result backend at all, Celery does less durable work; peers: results stored.
    task_ignore_result=RESULT_BACKEND is None,
    result_backend=RESULT_BACKEND,
    task_default_queue=QUEUE,  # durable classic queue, persistent messages (Celery defaults)
    task_serializer="json",
    accept_content=["json"],
    broker_connection_retry_on_startup=True,
    worker_hijack_root_logger=False,
)

_path = os.environ.get("BENCH_CELERY_COMPLETIONS")
# Opened before the prefork pool forks: every child inherits the O_APPEND descriptor.
_fd = os.open(_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600) if _path else None


@app.task(name="bench.noop")
def noop(sent_at: float = 0.0) -> None:
    if _fd is not None:
        os.write(_fd, b"%17.6f %17.6f\n" % (sent_at, time.time()))
