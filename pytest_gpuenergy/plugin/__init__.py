"""The pytest glue: options resolved once into settings, fixtures, markers and hooks."""
