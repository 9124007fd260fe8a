"""jobrelay: durable background jobs on a transactional outbox, PostgreSQL and RabbitMQ."""
