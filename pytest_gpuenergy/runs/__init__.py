"""Runs: the record of a case on a GPU, the run document, the store and its one baseline rule, provenance.

The names a user types for runs live here, where reading them (every pytest start, for the options'
help) loads nothing else of the package.
"""

from typing import Final, Literal

DEFAULT_STORAGE = ".energy"      # the storage folder, in the rootdir
LATEST = "latest"                # the baseline: per case, the latest saved run that has it
Outcome = Literal["passed", "failed", "error", "skipped", "xfailed", "xpassed"]   # how pytest reports a test
PASSED: Final = "passed"
OUTCOMES: Final[tuple[Outcome, ...]] = (PASSED, "failed", "error", "skipped", "xfailed", "xpassed")
