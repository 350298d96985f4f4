#!/usr/bin/env python3
"""Turn the rows a `fardisk-bench` subcommand wrote into result files, one per row.

    rows_to_results.py ROWS_JSON SERIES_DIR RESULTS_DIR SCENARIO EXTRA_NOTE

ROWS_JSON is {"rows": [{setup, order, duration_s, notes, params, metrics: [[name, value], ...],
series: {name: {x, y, x_label, y_label}}, durable?}]}; metrics keep their order (the table's
column order). Each row becomes one file through result.py (so the schema is checked once, there).
started_at comes from FARDISK_BENCH_STARTED_AT, as result.py reads it.
"""
import json
import os
import subprocess
import sys

sys.dont_write_bytecode = True


def main(argv):
    rows_path, series_dir, results, scenario, extra = argv[1:6]
    result_py = os.path.join(os.path.dirname(os.path.abspath(__file__)), "result.py")
    os.makedirs(series_dir, exist_ok=True)
    for n, row in enumerate(json.load(open(rows_path))["rows"]):
        args = [sys.executable, result_py, "--out-dir", results, "--scenario", scenario,
                "--setup", row["setup"], "--order", str(row["order"]), "--duration-s", str(row["duration_s"]),
                "--notes", f'{row["notes"]}; {extra}']
        if "durable" in row:
            args += ["--durable", "yes" if row["durable"] else "no"]
        args += [f"--param={k}={v}" for k, v in row["params"].items()]
        args += [f"--metric={k}={v}" for k, v in row["metrics"]]
        for name, s in row["series"].items():
            path = os.path.join(series_dir, f"{n}-{name}.txt")
            with open(path, "w") as f:
                f.write(f'# {s["x_label"]}, {s["y_label"]}\n')
                f.writelines(f"{x} {y}\n" for x, y in zip(s["x"], s["y"]))
            args.append(f"--series={name}={path}")
        subprocess.run(args, check=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
