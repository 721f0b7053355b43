#!/usr/bin/env python3
"""Adapter agents: what going through Reach costs against calling the same agent directly.

    python bench/adapters.py            # both sections
    python bench/adapters.py --quick    # smoke sizes

Two sections, each measured against its own baseline in the same run (bench/adapters_http.py:
an aiohttp.web echo called through Reach's HttpAgent vs called directly with the best HTTP
client; bench/adapters_stdio.py: a JSON-lines echo process through Reach's ProcessAgent in
stdio mode vs driven directly over its pipe). Targets: through Reach ≥ 60 % of the direct
calls/s at 32 in flight, p50 ≤ 2× the direct p50 at 1 in flight.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import adapters_http  # noqa: E402
import adapters_stdio  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="smoke sizes; numbers mean little")
    args = parser.parse_args(argv)
    status = 0
    for title, section in (("HTTP agent", adapters_http), ("stdio process agent",
                                                           adapters_stdio)):
        print(f"\n### {title}\n", flush=True)
        status |= section.main(args.quick)
    return status


if __name__ == "__main__":
    sys.exit(main())
