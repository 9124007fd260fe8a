"""The consumer service: leased, fenced execution of jobs (docs/life-of-a-job.md)."""
