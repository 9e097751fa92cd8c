"""The figures' shared frame: panels on matplotlib's Agg canvas (no display needed), log2 axes, saving."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path


def panels(count: int = 2, size: tuple[float, float] = (10, 4.2), **subplots) -> tuple:
    """A figure on an Agg canvas and its `count` axes side by side: ``(fig, ax_1, ..., ax_count)``."""
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ModuleNotFoundError as err:
        raise ModuleNotFoundError("ladref's figures need matplotlib: pip install matplotlib") from err
    fig = Figure(figsize=size)
    FigureCanvasAgg(fig)
    axes = fig.subplots(1, count, **subplots)
    return (fig, *(axes if count > 1 else [axes]))


def log2_axis(ax, xlabel: str, ylabel: str, ticks: Sequence[int] | None = None, legend_size: float | None = 8) -> None:
    """A log2 x axis (with `ticks` labelled as plain numbers), labels, a light grid and the legend."""
    ax.set_xscale("log", base=2)
    if ticks is not None:
        ax.set_xticks(list(ticks), [str(t) for t in ticks], fontsize=8)
    ax.yaxis.set_major_formatter("{x:g}")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.grid(True, alpha=0.3)
    if legend_size is not None:
        ax.legend(fontsize=legend_size)


def save(fig, path: str | Path, title: str) -> Path:
    """Title the figure, lay it out and write it to `path` (folders created); the path."""
    fig.suptitle(title)
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    return path
