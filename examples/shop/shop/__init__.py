"""A small shop whose background work runs on jobrelay (see ../README.md)."""
