"""The report's plots as one PNG for a chat message, drawn by matplotlib (Agg, no display).

matplotlib is the optional extra `report` (pip install 'wattprobe[report]'): the agent image does
not carry it, so it is imported here only, and its absence is one clear line."""

from __future__ import annotations

from pathlib import Path

from exporter.app.report import ReportError
from exporter.app.report.compute import Report
from exporter.app.report.figures import plot_data
from exporter.app.report.period import Period


def write_png(report: Report, period: Period, path: Path) -> None:
    try:
        import matplotlib  # noqa: PLC0415 (optional: only --format png needs it)

        matplotlib.use("Agg")
        from matplotlib import pyplot as plt  # noqa: PLC0415
    except ImportError:
        raise ReportError(
            "--format png needs matplotlib: pip install 'wattprobe[report]' (csv and html do not)"
        ) from None
    plots = plot_data(report)
    fig, (ax_ns, ax_day, ax_idle) = plt.subplots(3, 1, figsize=(9, 12), layout="constrained")
    try:
        fig.suptitle(f"wattprobe report {period.label}")
        labels = [n for n, _ in plots.energy]
        # facility first, IT over it: the lighter part of each bar is the overhead
        ax_ns.barh(
            labels, [v for _, v in plots.facility], color="#E69F00", label="facility (x PUE)"
        )
        ax_ns.barh(labels, [v for _, v in plots.energy], color="#0072B2", label="IT")
        ax_ns.invert_yaxis()
        ax_ns.set_xlabel("kWh")
        ax_ns.set_title("Energy per namespace")
        ax_ns.legend()
        bottom = [0.0] * len(plots.days)
        for name, values in plots.trend:
            ax_day.bar(plots.days, values, bottom=bottom, label=name)
            bottom = [b + max(v, 0.0) for b, v in zip(bottom, values, strict=True)]
        ax_day.set_ylabel("kWh")
        ax_day.set_title("Daily energy")
        ax_day.tick_params(axis="x", labelrotation=90)
        if plots.trend:
            ax_day.legend(fontsize="small")
        ax_idle.barh([n for n, _ in plots.idle_hours], [v for _, v in plots.idle_hours])
        ax_idle.invert_yaxis()
        ax_idle.set_xlabel("hours")
        ax_idle.set_title("Idle GPU hours (allocated, idle)")
        fig.savefig(path, format="png", dpi=100)
    finally:
        plt.close(fig)
