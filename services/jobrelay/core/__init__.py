"""The pure core: job states, retry policy, message format, errors, settings.

Nothing in this package imports an I/O library (no sqlalchemy, psycopg, aio_pika, fastapi);
``tests/unit/test_core_is_pure.py`` keeps it that way.
"""
