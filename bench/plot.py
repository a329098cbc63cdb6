"""Charts for docs/benchmarks.md from session-bench --json phases (see bench/plot)."""

import argparse
import json
import statistics
from collections import defaultdict
from pathlib import Path

import matplotlib

matplotlib.use("svg")
import matplotlib.pyplot as plt  # noqa: E402

# Stable SVG element ids and no timestamp, so a chart only changes when its numbers do.
matplotlib.rcParams["svg.hashsalt"] = "moonbridge"
matplotlib.rcParams["font.size"] = 9


def cell_of(r):
    return f"{r['transport']} w{r['window']} c{r['client_coalesce']}"


def load(paths):
    """Phases grouped as cells[cell][variant] = [phase, ...], cells and variants in first-seen order."""
    cells = {}
    for path in paths:
        for line in Path(path).read_text().splitlines():
            line = line.strip()
            if not line.startswith("{"):
                continue
            r = json.loads(line)
            cell = cells.setdefault(cell_of(r), {})
            cell.setdefault(r["variant"], []).append(r)
    return cells


def chart(cells, metric, label, out, skip_missing):
    variants = []
    for c in cells.values():
        for v, rs in c.items():
            if v not in variants and not (skip_missing and all(r.get(metric) is None for r in rs)):
                variants.append(v)
    names = list(cells)
    width = 0.8 / max(len(variants), 1)
    fig, ax = plt.subplots(figsize=(max(6.0, 0.9 * len(names) + 2), 3.6))
    for i, v in enumerate(variants):
        xs, meds, lo, hi = [], [], [], []
        for j, name in enumerate(names):
            vals = [r[metric] for r in cells[name].get(v, []) if r.get(metric) is not None]
            if not vals:
                continue
            m = statistics.median(vals)
            xs.append(j - 0.4 + width * (i + 0.5))
            meds.append(m)
            lo.append(m - min(vals))
            hi.append(max(vals) - m)
        ax.bar(xs, meds, width, label=v, yerr=[lo, hi], capsize=2)
    ax.set_xticks(range(len(names)), names, rotation=30, ha="right")
    ax.set_ylabel(label)
    ax.grid(axis="y", linewidth=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out, format="svg", metadata={"Date": None})
    plt.close(fig)
    print(f"plot: wrote {out}")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--out-dir", required=True)
    p.add_argument("name")
    p.add_argument("files", nargs="+")
    a = p.parse_args()
    cells = load(a.files)
    if not cells:
        raise SystemExit("plot: no session-bench JSON phases in the input")
    out = Path(a.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    chart(cells, "proxy_cpu_ns_per_frame", "proxy CPU ns per frame (median, range)", out / f"{a.name}-cpu.svg", True)
    chart(cells, "frames_per_s", "frames per second (median, range)", out / f"{a.name}-fps.svg", False)


if __name__ == "__main__":
    main()
