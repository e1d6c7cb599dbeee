"""Reading a finished study: picks, speculation per load level, charts and the HTML report.

The light modules (:mod:`~tuner.report.picks`, :mod:`~tuner.report.levels`,
:mod:`~tuner.report.trials`) serve export and confirmation too; :mod:`~tuner.report.charts`
and :mod:`~tuner.report.page` draw with matplotlib and are imported only to write a report.
"""
