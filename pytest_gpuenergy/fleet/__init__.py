"""The suite across a GPU fleet on Ray: ``gpuenergy fleet -- PYTEST_ARGS``.

One Ray task per GPU model (or per node's GPUs with pytest-xdist) runs the user's pytest
arguments on GPUs of that model; every task's run documents come back to the driver, which
applies the gate and writes the reports once over all of them, grouped by GPU model.

* ``plan.py``: which GPU models a cluster offers, which tasks run, which arguments the driver keeps
* ``task.py``: what runs on a node (pytest in a subprocess that dies with its Ray worker)
* ``driver.py``: connecting to Ray, submitting, following the tasks' events
* ``report.py``: checking the documents that came back, the gate, the reports, the exit code
* ``cli.py``: the ``gpuenergy fleet`` command

Ray is an optional dependency (``pip install 'pytest-gpuenergy[fleet]'``): nothing here imports
it except when the command runs.
"""
