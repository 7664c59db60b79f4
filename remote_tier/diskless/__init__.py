"""The bucket's side of diskless topics (ADR 0027): write-ahead objects and commit chains."""
