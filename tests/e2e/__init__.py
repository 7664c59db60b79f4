"""End-to-end tests: the real broker as a subprocess, driven by real Kafka clients."""
