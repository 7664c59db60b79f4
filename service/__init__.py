"""The Strata broker process: Kafka-protocol server, handlers, CLI (``strata``)."""
