#!/usr/bin/env python3
"""Print the suite's line and branch coverage of reach/, and fail below the branch floor.

    python tools/covgate.py [--branches 95]

Run after ``coverage combine`` (``make test`` does): reads the combined data through
coverage's JSON report, prints the modules under the floor, then one summary line. Branch
coverage is the number that matters here: a line can run without its ``else`` ever being
taken, and the failure paths are the ``else``s.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--branches", type=float, default=95.0,
                        help="the floor for branch coverage of reach/, in percent (default 95)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "coverage.json"
        subprocess.run([sys.executable, "-m", "coverage", "json", "-q", "-o", str(out)],
                       check=True)
        data = json.loads(out.read_text())
    under = []
    for name, info in sorted(data["files"].items()):
        s = info["summary"]
        if s["num_branches"] and 100 * s["covered_branches"] / s["num_branches"] < args.branches:
            under.append(f"  {name}: {s['covered_branches']}/{s['num_branches']} branches "
                         f"({100 * s['covered_branches'] / s['num_branches']:.1f} %)")
    t = data["totals"]
    lines = 100 * t["covered_lines"] / t["num_statements"]
    branches = 100 * t["covered_branches"] / t["num_branches"]
    if under:
        print(f"modules under {args.branches:g} % of branches:")
        print("\n".join(under))
    print(f"coverage of reach/: {lines:.1f} % of lines ({t['covered_lines']}/"
          f"{t['num_statements']}), {branches:.1f} % of branches ({t['covered_branches']}/"
          f"{t['num_branches']}); floor {args.branches:g} % of branches")
    if branches < args.branches:
        print(f"FAIL: branch coverage {branches:.1f} % is under {args.branches:g} %",
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
