"""The consumer service: leased, fenced execution of jobs (SPEC §6)."""
