"""A metric's trend as a picture: each kernel's runs as points, their spread as a bar, the median
joined along the kernels, the threshold's limit a dashed line (matplotlib, analysis/plots.py's)."""
import pathlib

from analysis.plots import pyplot
from .query import threshold_limit


def trend_png(points: list, metric: str, repro: str, out: pathlib.Path, title: str | None = None) -> pathlib.Path:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(8, 4), dpi=100)
    xs = list(range(len(points)))
    for x, p in zip(xs, points):
        ax.scatter([x] * len(p.values), p.values, s=14, color="tab:blue", alpha=0.6, zorder=3)
        ax.vlines(x, *p.spread, color="tab:blue", linewidth=3, alpha=0.35)
    ax.plot(xs, [p.median for p in points], color="tab:blue", marker="o", label="median of the runs")
    limit = threshold_limit(points[0].limit) if points else None
    if limit is not None:
        ax.axhline(limit, color="tab:red", linestyle="--", label=f"threshold {limit:g}")
    ax.set_xticks(xs)
    ax.set_xticklabels([p.kernel for p in points], rotation=20, ha="right", fontsize=8)
    ax.set_ylabel(f"{metric} ({points[0].unit})" if points and points[0].unit else metric)
    ax.set_title(title or f"{repro}: {metric} by kernel")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    out = pathlib.Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out)
    plt.close(fig)
    return out
