"""Whether a run may have died with a GPU changed: a look at the journals' folders, nothing opened.

Every pytest session of an environment where the plugin is installed asks this at its start, also
one that measures nothing (``plugin.hooks``), so that a GPU a killed run left capped is put back by
the next session whatever it runs. The journal itself (``journal.py``: its devices, locks and knobs,
and the simulator's state) costs a start about 20 ms to import, so the look lives here, on its own.
"""

from __future__ import annotations

from ..fileio import sim_state_dir, user_state_dir

# Where each knob keeps its journal's entries under ``<state>/journal/`` (earlier versions' places);
# another knob: its name.
JOURNAL_FOLDERS = {"power-limit": "", "sm-clock": "clocks"}


def may_need_repair(backend_kind: str) -> bool:
    """Whether a journal that ``backend_kind`` would open holds an entry: a run may have died with a
    GPU changed. Only looks (no backend is opened, nothing is written), so a session that uses none of
    the plugin can still repair a GPU the last run left capped, and pays one directory listing."""
    real = [user_state_dir()]
    folders = {"nvml": real, "amdsmi": real, "sim": [sim_state_dir()]}.get(backend_kind) or [*real, sim_state_dir()]
    for folder in folders:
        for journal in (folder / "journal", *(folder / "journal" / sub for sub in JOURNAL_FOLDERS.values() if sub)):
            try:
                if any(journal.glob("GPU-*.json")):
                    return True
            except OSError:
                continue      # an unreadable folder: the session that uses the GPUs will say so
    return False
