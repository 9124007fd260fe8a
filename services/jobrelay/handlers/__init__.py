"""Job handlers. ``builtin.registry`` is the default registry of job types."""
