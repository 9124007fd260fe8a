"""The pure core: job states, retry policy, message format, errors, settings.

Nothing in this package imports an I/O library (no sqlalchemy, psycopg, aio_pika, fastapi);
``tests/unit/test_core.py::test_the_core_imports_no_io_library`` keeps it that way
(docs/architecture.md).
"""
