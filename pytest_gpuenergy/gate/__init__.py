"""The gate: budgets, statistics, comparison of runs, and the gate shared by pytest and `gpuenergy compare`."""
