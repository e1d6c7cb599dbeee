"""Every public figure of the reference table next to the simulator's prediction.

    python benchmarks/simulator_reference.py          # the report; exit 1 if one is off > 20 %
    python benchmarks/simulator_reference.py --write  # and refresh tuner/sim/reference_errors.json
    python benchmarks/simulator_reference.py --fit    # refit the constants, print the new values

For each figure of ``benchmarks/reference_figures.yaml``: what its source measured, the shipped
simulator's prediction and error, and the error when the figure's own source is left out of the
fit (``reference_fit.held_out``). Then the errors per regime (GPU class x method family x
load), the sources whose parameters no other source pins, and the figures read but not used.
Last, the public power figures the power model is fitted to (:mod:`tuner.sim.power_fit`): each
GPU, setup, reading, source, the model's value, its error and its error held out (the
leave-one-out errors whose largest is the band ``spectune estimate`` prints beside J/token).
``--write`` stores the errors where ``spectune estimate`` and ``--plan`` read their error bands
(:mod:`tuner.sim.band`); ``tests/sim/test_reference_table.py`` checks the stored file
against a fresh run.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path

from reference_fit import fit, held_out, predictions
from reference_parameters import PARAMETERS
from reference_table import Figure, ReferenceTable, load_table

from tuner import serde
from tuner.sim import power_fit
from tuner.sim.band import FigureError
from tuner.sim.power import SHIPPED_POWER
from tuner.sim.virtual_time import SHIPPED, Calibrated

__all__ = ["BAR", "ERRORS_FILE", "Report", "main", "power_rows", "report"]

BAR = 0.20  # every figure within 20 % of its measurement
ERRORS_FILE = Path(__file__).parents[1] / "tuner" / "sim" / "reference_errors.json"


class Report:
    """The shipped simulator against the table: predictions, held-out predictions, errors."""

    def __init__(self, table: ReferenceTable, physics: Calibrated) -> None:
        self.table = table
        self.predicted = predictions(table.figures, physics)
        self.held_out, self.sole = held_out(table.figures, physics)

    def error(self, figure: Figure) -> float:
        return self.predicted[figure.id] / figure.measured - 1

    def held_out_error(self, figure: Figure) -> float:
        return self.held_out[figure.id] / figure.measured - 1

    @property
    def failures(self) -> list[Figure]:
        return [f for f in self.table.figures if abs(self.error(f)) > BAR]

    def errors(self) -> list[FigureError]:
        return [
            FigureError(
                f.id, f.source, str(f.kind), f.regime, self.error(f), self.held_out_error(f)
            )
            for f in self.table.figures
        ]


def report(table: ReferenceTable | None = None, physics: Calibrated | None = None) -> Report:
    """The shipped simulator (or ``physics``) against the reference table."""
    shipped = physics if physics is not None else SHIPPED
    if not isinstance(shipped, Calibrated):
        raise TypeError("the reference report needs the simulator's own models (Calibrated)")
    return Report(table or load_table(), shipped)


def _print_figures(result: Report) -> None:
    print("| figure | regime | measured | predicted | error | held out | source |")
    print("|---|---|---|---|---|---|---|")
    for f in result.table.figures:
        address = result.table.sources[f.source].address
        print(
            f"| {f.id}: {f.what} | {f.label} | {f.measured:.4g} | {result.predicted[f.id]:.4g} "
            f"| {result.error(f):+.1%} | {result.held_out_error(f):+.1%} | {address} |"
        )


def _print_regimes(result: Report) -> None:
    groups: dict[str, list[Figure]] = defaultdict(list)
    for f in result.table.figures:
        groups[f.label].append(f)
    header = "| regime (GPU class / method / load) | figures | sources | largest error |"
    print(header + " largest held-out error |")
    print("|---|---|---|---|---|")
    for label in sorted(groups):
        figures = groups[label]
        worst = max(abs(result.error(f)) for f in figures)
        worst_out = max(abs(result.held_out_error(f)) for f in figures)
        sources = len({f.source for f in figures})
        print(f"| {label} | {len(figures)} | {sources} | {worst:.1%} | {worst_out:.1%} |")


def _print_summary(result: Report) -> None:
    figures = result.table.figures
    errors = [abs(result.error(f)) for f in figures]
    outs = [abs(result.held_out_error(f)) for f in figures]
    print(
        f"{len(figures)} figures from {len(result.table.sources)} sources: largest error "
        f"{max(errors):.1%}, mean {sum(errors) / len(errors):.1%}; held out by source: largest "
        f"{max(outs):.1%}, mean {sum(outs) / len(outs):.1%}"
    )
    for source, names in sorted(result.sole.items()):
        if names:
            print(f"  only {source} pins {', '.join(names)}: held out, it is predicted from priors")


def _print_not_used(table: ReferenceTable) -> None:
    print("Read and not used:")
    for item in table.not_used:
        print(f"- {item['figures']} ({item['address']}): {item['why']}")


def power_rows() -> list[dict[str, object]]:
    """The power figures the power model was fitted to, each with the model's value and its
    errors (shipped fit, and held out): what the power table prints."""
    held = power_fit.held_out()
    rows: list[dict[str, object]] = []
    for f in power_fit.FIGURES:
        speculation = f"K={f.k} (a 0.5B draft for MTP)" if f.k else "no speculation"
        rows.append(
            {
                "figure": f.id,
                "gpu": f.hardware,
                "setup": f"{f.model}, one stream, {speculation}, {f.limit_w:.0f} W limit",
                "measured_w": f.measured_w,
                "at_limit": f.at_limit,
                "source": f.source,
                "model_w": power_fit.predicted_w(f, SHIPPED_POWER),
                "error": power_fit.error(f, SHIPPED_POWER),
                "held_out": held[f.id],
            }
        )
    return rows


def _print_power() -> None:
    print(
        f"Power figures (power model: memory {SHIPPED_POWER.memory}, compute "
        f"{SHIPPED_POWER.compute}; tuner/sim/power_fit.py):"
    )
    print("| GPU | setup | figure | source | model | error | held out |")
    print("|---|---|---|---|---|---|---|")
    for row in power_rows():
        limit = " (the limit)" if row["at_limit"] else ""
        print(
            f"| {row['gpu']} | {row['setup']} | {row['measured_w']:.0f} W{limit} "
            f"| {row['source']} | {row['model_w']:.0f} W | {row['error']:+.1%} "
            f"| {row['held_out']:+.1%} |"
        )
    print(f"J/token band: power {power_fit.power_band().describe()}")


def write_errors(result: Report, path: Path = ERRORS_FILE) -> None:
    """Stores the figures' errors where :mod:`tuner.sim.band` reads them."""
    data = {
        "generated_by": "benchmarks/simulator_reference.py --write",
        "bar": BAR,
        "figures": [serde.dump(e) for e in result.errors()],
    }
    path.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")


def _print_fit(table: ReferenceTable) -> None:
    start = SHIPPED if isinstance(SHIPPED, Calibrated) else Calibrated()
    fitted = fit(table.figures, start)
    where = "tuner/sim/calibration.py and tuner/sim/acceptance.py"
    print(f"fit cost {fitted.cost:.3f}; constants (paste into {where}):")
    for parameter in PARAMETERS:
        print(
            f"  {parameter.name}: {parameter.get(start):.4g} -> {parameter.get(fitted.physics):.4g}"
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help="refresh the shipped error bands")
    parser.add_argument("--fit", action="store_true", help="refit the constants and print them")
    args = parser.parse_args(argv)
    table = load_table()
    if args.fit:
        _print_fit(table)
        return 0
    result = report(table)
    _print_figures(result)
    print()
    _print_regimes(result)
    print()
    _print_summary(result)
    print()
    _print_not_used(table)
    print()
    _print_power()
    if args.write:
        write_errors(result)
        print(f"\nwrote {ERRORS_FILE}")
    failures = result.failures
    for f in failures:
        print(f"OFF BY MORE THAN {BAR:.0%}: {f.id} ({result.error(f):+.1%})", file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
