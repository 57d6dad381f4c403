"""Repository-level pytest configuration.

``pytester`` drives the plugin end to end in the project's own tests; it has to be
enabled here, in the root conftest, because pytest only honours ``pytest_plugins``
at the root.
"""

pytest_plugins = ["pytester"]
