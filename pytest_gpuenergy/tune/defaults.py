"""``gpuenergy tune``'s choices and defaults, read by its parser (every ``gpuenergy --help``) apart
from the search and its pytest sessions, which only the command itself loads."""

KNOBS = ("power", "clock")
OBJECTIVES = ("ets", "edp")
DEFAULT_STEP_W = 25.0
DEFAULT_MAX_SETTINGS = 5
DEFAULT_TUNE_STORAGE = ".energy-tune"
