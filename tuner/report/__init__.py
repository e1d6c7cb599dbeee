"""Reading a finished study: picks, speculation per load level, deployments, charts, report.

- :mod:`~tuner.analysis.trials`: the study's trials as flat points (outcome, settings, numbers).
- :mod:`~tuner.analysis.picks`: max-throughput, min-ttft and balanced, on confirmed numbers.
- :mod:`~tuner.analysis.recommendation`: the answer every page prints (numbers from
  :mod:`~tuner.analysis.estimates`, rivals, the serve command).
- :mod:`~tuner.analysis.levels`: the best K per concurrency level, vLLM's batch-size K table.
- :mod:`~tuner.analysis.provenance`: what an export says about where it came from.
- :mod:`~tuner.export.deploy`: docker-compose.yml and ``docker run`` renderings.
- :mod:`~tuner.report.headline` (the answer, first), :mod:`~tuner.report.importance`,
  :mod:`~tuner.report.charts`, :mod:`~tuner.report.page`: the HTML report and its PNG charts
  (matplotlib, imported only to write a report); :mod:`~tuner.report.dashboard_note`: the
  answer as optuna-dashboard's study note.

Export (:mod:`tuner.export.vllm`) and confirmation (:mod:`tuner.study.confirm`) use the light
modules.
"""
