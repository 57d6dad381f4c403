"""Bridges: energy for what other tools already measure (pytest-benchmark's rounds), written where
their users look for it."""
