"""The RabbitMQ adapter: topology, publishing, consuming."""
