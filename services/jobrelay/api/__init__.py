"""The HTTP API (FastAPI): submission, job views, cancel, admin, health, metrics."""
