"""The ``strata`` command line: ``strata up`` and the commands that talk to a broker as a client.

:mod:`service.cli.main` parses the arguments and runs ``strata up`` (the broker,
through :mod:`service.app`); the other commands (``topics``, ``produce``,
``consume``, ``groups``, ``perf``) use confluent-kafka like any Kafka client and
import nothing of the broker.
"""
