"""The bottom layer every package uses: Kafka's wire basics and the config vocabulary.

``errors`` (Kafka's error codes as exception classes), ``record/`` (RecordBatch v2, its
compression and control records), ``protocol/`` (request frames, bounded field readers,
response encoding), ``config/`` (every topic and broker config key with its default and
validation, in Kafka's names), ``latency`` (the latency histograms every layer fills).
Imports none of the project's other packages (Kafka's clients/common).
"""
