"""The Jepsen-style fault suite (issue 31): brokers on a network that can be cut, nemeses,
a workload that records its history, and a checker. ``bench/jepsen.py`` is its command;
``tests/e2e/test_jepsen_lean.py`` runs a short version in the test suite."""
