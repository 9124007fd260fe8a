"""An order handled by one durable job (see ../README.md)."""
