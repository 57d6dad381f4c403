"""Energy over the history of commits: every saved run read into one series per test, cap and GPU model,
the change points and trends in each (``changes``), what the energy cost (``cost``), and the reports
(``report`` for the terminal, Markdown and JSON; ``plots`` for the HTML page).

``gpuenergy history STORAGE`` (``cli/history.py``) is the command; ``docs/how-to/history.md`` says what
its output means.
"""
