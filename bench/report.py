#!/usr/bin/env python3
"""Turn benchmark results (bench/results/*.json) into BENCHMARKS.md and PNG plots.

Every result file follows the schema "fardisk-bench/1" documented in
bench/README.md. For each scenario the report has one table (a row per setup,
newest run of each) and one bar chart per scenario with a panel per metric; each
named time series gets a line chart with one line per setup.

    report.py [--results DIR] [--out FILE] [--plots DIR] [--no-plots] [--notes DIR]

A scenario may have a hand-written note, NOTES_DIR/<scenario>.md (default bench/notes),
shown under its heading: how to read the table, what a ratio is relative to.

Exit status: 0 written, 1 a result file is invalid or plotting is impossible,
2 usage error. Plots need matplotlib (the venv from scripts/install-deps.sh; run
through `bench/run.sh report`), or pass --no-plots for tables only.
"""

import argparse
import datetime
import json
import os
import re
import sys

SCHEMA = "fardisk-bench/1"
SCENARIO_RE = re.compile(r"^[a-z0-9][a-z0-9-]{0,63}$")
SERIES_POINTS_MAX = 100_000  # bound memory and plotting time per series
RESULT_FILES_MAX = 10_000


class ResultError(Exception):
    """A result file that does not follow the schema."""


def _is_number(x):
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def _require(cond, path, msg):
    if not cond:
        raise ResultError(f"{path}: {msg}")


def _check_series(path, series):
    _require(isinstance(series, dict), path, "'series' must be an object")
    for name, s in series.items():
        where = f"series[{name!r}]"
        _require(isinstance(s, dict), path, f"{where} must be an object")
        xs, ys = s.get("x"), s.get("y")
        _require(isinstance(xs, list) and isinstance(ys, list), path, f"{where} needs lists x and y")
        _require(len(xs) == len(ys), path, f"{where}: x has {len(xs)} points, y has {len(ys)}")
        _require(len(xs) <= SERIES_POINTS_MAX, path, f"{where}: more than {SERIES_POINTS_MAX} points")
        _require(all(_is_number(v) for v in xs + ys), path, f"{where}: x and y must be numbers")


def validate(path, doc):
    """Check one parsed result against the schema; return it unchanged."""
    _require(isinstance(doc, dict), path, "top level must be an object")
    _require(doc.get("schema") == SCHEMA, path, f"'schema' must be {SCHEMA!r}, got {doc.get('schema')!r}")
    scenario = doc.get("scenario")
    _require(isinstance(scenario, str) and SCENARIO_RE.match(scenario), path,
             f"'scenario' must match {SCENARIO_RE.pattern}, got {scenario!r}")
    _require(isinstance(doc.get("setup"), str) and doc["setup"].strip(), path, "'setup' must be a non-empty string")
    try:
        datetime.datetime.fromisoformat(str(doc.get("started_at")).replace("Z", "+00:00"))
    except ValueError:
        raise ResultError(f"{path}: 'started_at' must be an ISO 8601 time, got {doc.get('started_at')!r}") from None
    metrics = doc.get("metrics")
    _require(isinstance(metrics, dict) and metrics, path, "'metrics' must be a non-empty object")
    for name, value in metrics.items():
        _require(_is_number(value), path, f"metric {name!r} must be a number, got {value!r}")
    if "durable_at_fsync" in doc:
        _require(isinstance(doc["durable_at_fsync"], bool), path, "'durable_at_fsync' must be true or false")
    if "order" in doc:
        _require(isinstance(doc["order"], int) and not isinstance(doc["order"], bool), path,
                 "'order' must be an integer")
    if "params" in doc:
        _require(isinstance(doc["params"], dict), path, "'params' must be an object")
    if "series" in doc:
        _check_series(path, doc["series"])
    return doc


def load_results(results_dir):
    """Parse and validate every *.json in results_dir; raise on the first bad file."""
    names = sorted(n for n in os.listdir(results_dir) if n.endswith(".json"))
    if len(names) > RESULT_FILES_MAX:
        raise ResultError(f"{results_dir}: more than {RESULT_FILES_MAX} result files")
    docs = []
    for name in names:
        path = os.path.join(results_dir, name)
        try:
            with open(path, encoding="utf-8") as f:
                doc = json.load(f)
        except json.JSONDecodeError as err:
            raise ResultError(f"{path}: not JSON: {err}") from None
        docs.append(validate(path, doc))
    return docs


def latest_by_setup(docs):
    """Group by scenario; keep the newest run of each setup and count the runs."""
    groups = {}
    for doc in docs:
        runs = groups.setdefault(doc["scenario"], {}).setdefault(doc["setup"], [])
        runs.append(doc)
    out = {}
    for scenario, setups in sorted(groups.items()):
        rows = []
        for setup, runs in setups.items():
            runs.sort(key=lambda d: d["started_at"])
            rows.append((runs[-1], len(runs)))
        # Optional "order" puts reference rows (the local-disk limit) first; then by name.
        rows.sort(key=lambda r: (r[0].get("order", 1_000_000), r[0]["setup"]))
        out[scenario] = rows
    return out


def metric_names(rows):
    names = []
    for doc, _ in rows:
        for name in doc["metrics"]:
            if name not in names:
                names.append(name)
    return names


def fmt_number(x):
    if isinstance(x, int):
        return f"{x:,}"
    if abs(x) >= 1000:
        return f"{x:,.0f}"
    if abs(x) >= 10:
        return f"{x:.1f}"
    return f"{x:.3g}"


def fmt_durable(doc):
    value = doc.get("durable_at_fsync")
    return "—" if value is None else ("yes" if value else "no")


def scenario_table(rows):
    """Markdown table: one row per setup, one column per metric."""
    names = metric_names(rows)
    head = ["setup", "durable at fsync"] + names + ["runs", "date"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for doc, runs in rows:
        cells = [doc["setup"], fmt_durable(doc)]
        cells += [fmt_number(doc["metrics"][n]) if n in doc["metrics"] else "—" for n in names]
        cells += [str(runs), doc["started_at"][:10]]
        lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    return "\n".join(lines)


def params_line(rows):
    params = {}
    for doc, _ in rows:
        for k, v in doc.get("params", {}).items():
            params.setdefault(k, set()).add(json.dumps(v))
    if not params:
        return ""
    parts = [f"`{k}`={', '.join(sorted(v))}" for k, v in sorted(params.items())]
    return "Parameters: " + "; ".join(parts) + "\n\n"


def import_pyplot():
    try:
        import matplotlib
    except ImportError:
        raise ResultError("matplotlib is not importable: run `bench/run.sh report` "
                          "(uses the venv from scripts/install-deps.sh) or pass --no-plots") from None
    matplotlib.use("Agg")  # files only, no display
    import matplotlib.pyplot as plt
    return plt


def plot_bars(plt, scenario, rows, path):
    names = metric_names(rows)
    fig, axes = plt.subplots(len(names), 1, figsize=(8, 1.2 + 0.5 * len(rows) * len(names)), squeeze=False)
    for ax, name in zip(axes[:, 0], names):
        have = [(doc["setup"], doc["metrics"][name]) for doc, _ in rows if name in doc["metrics"]]
        labels = [s for s, _ in have]
        values = [v for _, v in have]
        ax.barh(range(len(values)), values, color="#4878a8")
        ax.set_yticks(range(len(values)), labels=labels, fontsize=8)
        ax.invert_yaxis()
        ax.set_title(name, fontsize=9, loc="left")
        for i, v in enumerate(values):
            ax.text(v, i, " " + fmt_number(v), va="center", fontsize=7)
    fig.suptitle(scenario, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def series_names(rows):
    names = []
    for doc, _ in rows:
        for name in doc.get("series", {}):
            if name not in names:
                names.append(name)
    return names


def plot_series(plt, scenario, name, rows, path):
    fig, ax = plt.subplots(figsize=(8, 4))
    labels = {}
    for doc, _ in rows:
        s = doc.get("series", {}).get(name)
        if s is None:
            continue
        ax.plot(s["x"], s["y"], label=doc["setup"], linewidth=1)
        labels = s
    ax.set_xlabel(labels.get("x_label", "x"))
    ax.set_ylabel(labels.get("y_label", name))
    ax.set_title(f"{scenario}: {name}", fontsize=10)
    ax.legend(fontsize=8)
    ax.grid(True, alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def write_plots(plt, scenario, rows, plots_dir):
    """Draw the scenario's charts; return their paths."""
    paths = [os.path.join(plots_dir, f"{scenario}.png")]
    plot_bars(plt, scenario, rows, paths[0])
    for name in series_names(rows):
        safe = re.sub(r"[^a-z0-9_-]+", "-", name.lower())
        path = os.path.join(plots_dir, f"{scenario}-{safe}.png")
        plot_series(plt, scenario, name, rows, path)
        paths.append(path)
    return paths


def scenario_note(notes_dir, scenario):
    """The hand-written note for a scenario, or "" when there is none."""
    path = os.path.join(notes_dir, f"{scenario}.md") if notes_dir else ""
    if not path or not os.path.isfile(path):
        return ""
    with open(path, encoding="utf-8") as f:
        return f.read().strip() + "\n"


def render(grouped, plots, out_path, notes_dir=None):
    out_dir = os.path.dirname(os.path.abspath(out_path))
    parts = [
        "# fardisk benchmarks\n",
        "Generated by `bench/report.py` from `bench/results/*.json`; do not edit by hand.",
        "Each table shows the newest run of each setup; `runs` counts all runs kept.\n",
    ]
    # bench/notes/_goals.md: where fardisk stands against each goal, with the rows behind it.
    goals = scenario_note(notes_dir, "_goals")
    if goals:
        parts.append(goals)
    for scenario, rows in grouped.items():
        parts.append(f"## {scenario}\n")
        note = scenario_note(notes_dir, scenario)
        if note:
            parts.append(note)
        parts.append(params_line(rows) + scenario_table(rows) + "\n")
        for path in plots.get(scenario, []):
            rel = os.path.relpath(os.path.abspath(path), out_dir)
            parts.append(f"![{os.path.basename(path)}]({rel})\n")
    return "\n".join(parts)


def parse_args(argv):
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--results", default=os.path.join(root, "bench", "results"))
    p.add_argument("--out", default=os.path.join(root, "BENCHMARKS.md"))
    p.add_argument("--plots", default=os.path.join(root, "bench", "plots"))
    p.add_argument("--no-plots", action="store_true", help="tables only")
    p.add_argument("--notes", default=os.path.join(root, "bench", "notes"), help="per-scenario notes (<scenario>.md)")
    return p.parse_args(argv)


def main(argv):
    args = parse_args(argv)
    try:
        grouped = latest_by_setup(load_results(args.results))
        if not grouped:
            raise ResultError(f"{args.results}: no *.json result files")
        plots = {}
        if not args.no_plots:
            plt = import_pyplot()
            os.makedirs(args.plots, exist_ok=True)
            plots = {s: write_plots(plt, s, rows, args.plots) for s, rows in grouped.items()}
        text = render(grouped, plots, args.out, args.notes)
    except (ResultError, OSError) as err:
        print(f"report.py: {err}", file=sys.stderr)
        return 1
    with open(args.out, "w", encoding="utf-8") as f:
        f.write(text)
    n_plots = sum(len(v) for v in plots.values())
    print(f"report.py: {len(grouped)} scenarios, {n_plots} plots -> {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
