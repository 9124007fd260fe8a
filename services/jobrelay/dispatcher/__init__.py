"""The dispatcher: relays the outbox to RabbitMQ with publisher confirms (SPEC §5)."""
