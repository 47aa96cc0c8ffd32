"""The distributed deployment on Apache Kafka: the publisher, the faust worker (processor,
sinks, tables), the feeds it reads with, topics and groups, and the worker's service."""
