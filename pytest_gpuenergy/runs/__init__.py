"""Runs: the record of a case on a GPU, the run document, the store and its one baseline rule, provenance."""
