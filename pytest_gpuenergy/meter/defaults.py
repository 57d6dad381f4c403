"""The meter's defaults, read at every pytest start (the options and their help), apart from the
meter itself, which a session that measures nothing never loads."""

DEFAULT_MIN_TIME_S = 0.5        # the shortest region measure() aims for
