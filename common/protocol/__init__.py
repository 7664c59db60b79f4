"""Kafka's request and response framing: ``codec`` (frames in, typed requests out;
responses to bytes), ``reader`` (a bounds-checked request reader compiled from kio's
schemas) and ``fields`` (its bounded primitive readers)."""
