"""Diskless topics in the broker (ADR 0027): the sequencer of a partition."""
