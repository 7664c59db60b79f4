"""``strata perf produce|consume``: Kafka's kafka-producer-perf-test and kafka-consumer-perf-test."""
