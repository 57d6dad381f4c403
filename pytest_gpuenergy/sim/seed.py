"""The simulator's seed: what makes a session's simulated figures repeat.

Read at every pytest start (the plugin hands one seed to all of a session's processes), so it
lives apart from the simulator itself, which a session that uses none of the plugin never loads.
"""

from __future__ import annotations

import os
import secrets

SEED_ENV = "GPUENERGY_SIM_SEED"


def session_seed() -> int:
    """``GPUENERGY_SIM_SEED``, or a new random seed (noise differs from session to session, as on
    real GPUs; the plugin records the seed so a session can be repeated exactly)."""
    text = os.environ.get(SEED_ENV, "").strip()
    if not text:
        return secrets.randbits(31)
    try:
        return int(text)
    except ValueError:
        raise ValueError(f"{SEED_ENV}={text!r} is not a whole number") from None
