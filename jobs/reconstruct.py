"""spark-submit entry point: the CLI's `reconstruct` with the same arguments.

spark-submit jobs/reconstruct.py --events PATH --out PATH [--redis-version 7.0] ...
"""

from __future__ import annotations

import sys

from pelengine.cli import console_main

if __name__ == "__main__":
    console_main(["reconstruct", *sys.argv[1:]])
