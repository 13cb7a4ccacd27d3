"""The commands that replay or make events: ``reconstruct``, ``generate`` and ``demo``
(the two in one session, then a summary)."""

from __future__ import annotations

import argparse
import json
import os
from typing import TYPE_CHECKING

from pelengine.commands.args import EXIT_OK, generate_sizes, reconstruct_output, run_settings
from pelengine.progress import Progress
from pelengine.settings import Config

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def cmd_reconstruct(
    spark: SparkSession | None, args: argparse.Namespace, conf: Config, progress: Progress
) -> int:
    """Run the reconstruction and print its report."""
    from pelengine.runs.full import run_reconstruct
    from pelengine.runs.output import format_report

    settings = run_settings(args, conf)
    output = reconstruct_output(args, conf)
    report = run_reconstruct(spark, args.events, output, settings, progress)
    if args.json:
        print(json.dumps(report, indent=2, sort_keys=True, default=str))
    else:
        print(format_report(report))
        where = os.path.join(output.root, "_run_report.json") if output.root else None
        print(
            f"tables {'written as' if output.by_name else 'under'} {output}; "
            + (f"this report as JSON: {where}" if where else "this report is not saved")
        )
    return EXIT_OK


def cmd_generate(
    spark: SparkSession, args: argparse.Namespace, conf: Config, progress: Progress
) -> int:
    """Write a synthetic events table."""
    from pelengine.runs.generate import write_generated_events

    sizes = generate_sizes(args, conf)
    n = write_generated_events(
        spark, args.out, sizes.events, sizes.keys, sizes.seed, progress, faults=not args.no_faults
    )
    print(f"wrote {n} events ({sizes.keys} keys, seed {sizes.seed}) to {args.out}")
    return EXIT_OK


def cmd_demo(
    spark: SparkSession, args: argparse.Namespace, conf: Config, progress: Progress
) -> int:
    """Generate, reconstruct and summarize under one directory, in one session."""
    from pelengine.read.summary import summarize
    from pelengine.runs.full import run_reconstruct
    from pelengine.runs.generate import write_generated_events
    from pelengine.runs.output import format_report

    root = args.dir or conf.demo.dir
    events_path = os.path.join(root, "events")
    out_path = os.path.join(root, "out")
    sizes = generate_sizes(args, conf)
    write_generated_events(
        spark,
        events_path,
        sizes.events,
        sizes.keys,
        sizes.seed,
        progress,
        faults=not args.no_faults,
    )
    what = f"{sizes.events} events ({sizes.keys} keys, seed {sizes.seed})"
    print(f"== generated {what} into {events_path}")
    report = run_reconstruct(spark, events_path, out_path, run_settings(args, conf), progress)
    print(f"== reconstructed into {out_path}")
    print(format_report(report))
    print("== summary")
    print(summarize(spark, out_path))
    return EXIT_OK
