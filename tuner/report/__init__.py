"""Reading a finished study: picks, speculation per load level, deployments, charts, report.

- :mod:`~tuner.report.trials`: the study's trials as flat points (outcome, settings, numbers).
- :mod:`~tuner.report.picks`: max-throughput, min-ttft and balanced, on confirmed numbers.
- :mod:`~tuner.report.levels`: the best K per concurrency level, vLLM's batch-size K table.
- :mod:`~tuner.report.provenance`: what an export says about where it came from.
- :mod:`~tuner.report.deploy`: docker-compose.yml and ``docker run`` renderings.
- :mod:`~tuner.report.importance`, :mod:`~tuner.report.charts`, :mod:`~tuner.report.page`:
  the HTML report and its PNG charts (matplotlib, imported only to write a report).

Export (:mod:`tuner.export`) and confirmation (:mod:`tuner.confirm`) use the light modules.
"""
