"""The dispatcher: relays the outbox to RabbitMQ with publisher confirms (docs/life-of-a-job.md)."""
