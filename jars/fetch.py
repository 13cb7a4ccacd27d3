"""Fetch delta-spark's jars into jars/lib, once (run by `make install`).

delta-spark is Delta Lake's JVM library: its jars on Spark's classpath before the
JVM starts, plus the Delta SQL extension and catalog. This resolves the one coordinate
`io.delta:delta-spark_<spark line>_2.13:<version>` with the ordinary Maven client
(jars/pom.xml), taking the Spark line from the installed pyspark and the version from
the installed delta-spark pip package (the two sides must match: the Python package calls
the jars), and copies into jars/lib the jars Spark does not already ship (pyspark's
own jars/ folder). Sessions the project builds find them there
(pelengine/storage/jars.py); spark-submit takes them with `--jars $(cat jars/lib/classpath)`.

    python jars/fetch.py            # fetch unless jars/lib already holds this coordinate
    python jars/fetch.py --check    # exit 0 when they are there, 1 otherwise

Nothing is downloaded when a Spark session starts (Spark never resolves Maven coordinates
itself): parallel JVMs race on Ivy's cache, and a job should not need the network to start.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
LIB = HERE / "lib"
#: the file naming what jars/lib holds: the coordinate, then one jar per line
MANIFEST = "MANIFEST"
#: comma-separated absolute paths of the jars, for spark-submit --jars / spark.jars
CLASSPATH = "classpath"
#: artifacts Spark provides under another name: jcl-over-slf4j is commons-logging's API,
#: RoaringBitmap 1.x (shipped) has its shims inside
PROVIDED_AS = {"commons-logging": "jcl-over-slf4j", "shims": "RoaringBitmap"}
_ARTIFACT = re.compile(r"^(?P<name>.+?)-\d[^/]*\.jar$")


def coordinate() -> str:
    """delta-spark's Maven coordinate for the installed pyspark and delta-spark."""
    spark = importlib.metadata.version("pyspark")
    delta = importlib.metadata.version("delta-spark")
    line = ".".join(spark.split(".")[:2])
    return f"io.delta:delta-spark_{line}_2.13:{delta}"


def shipped() -> set[str]:
    """The artifact names of the jars pyspark ships (its jars/ folder)."""
    import pyspark

    jars = Path(pyspark.__file__).parent / "jars"
    names = set()
    for jar in jars.glob("*.jar"):
        match = _ARTIFACT.match(jar.name)
        names.add(match.group("name") if match else jar.stem)
    return names


def fetched() -> str | None:
    """The coordinate jars/lib holds (None: nothing fetched, or an unreadable manifest)."""
    try:
        first = (LIB / MANIFEST).read_text("utf-8").splitlines()[0]
    except (OSError, IndexError):
        return None
    return first.strip() or None


def resolve(coord: str, work: Path) -> list[tuple[str, Path]]:
    """(artifactId, jar) of ``coord`` and its runtime dependencies, via Maven."""
    _, artifact, version = coord.split(":")
    line = artifact.removeprefix("delta-spark_").removesuffix("_2.13")
    listing = work / "deps.txt"
    command = [
        "mvn",
        "-B",
        "-q",
        "-f",
        str(HERE / "pom.xml"),
        f"-Dspark.line={line}",
        f"-Ddelta.version={version}",
        "-DincludeScope=runtime",
        "-DoutputAbsoluteArtifactFilename=true",
        f"-DoutputFile={listing}",
        "dependency:resolve",
    ]
    print("jars: " + " ".join(command), flush=True)
    done = subprocess.run(command, check=False)
    if done.returncode != 0:
        raise SystemExit(
            f"jars: Maven could not resolve {coord} (exit {done.returncode}, above); "
            "pelengine runs on the embedded delta-rs store until it can"
        )
    found = []
    for text in listing.read_text("utf-8").splitlines():
        parts = text.strip().split(":")
        # group:artifact:type[:classifier]:version:scope:/absolute/path
        if len(parts) >= 6 and parts[-1].endswith(".jar"):
            found.append((parts[1], Path(parts[-1])))
    if not any(name.startswith("delta-spark_") for name, _ in found):
        raise SystemExit(f"jars: Maven's listing has no delta-spark jar ({listing})")
    return found


def fetch(coord: str) -> list[Path]:
    """Resolve ``coord`` and copy the jars Spark lacks into jars/lib (replaced whole)."""
    have = shipped()
    with tempfile.TemporaryDirectory() as tmp:
        jars = resolve(coord, Path(tmp))
        keep = [jar for name, jar in jars if name not in have and PROVIDED_AS.get(name) not in have]
        left = sorted(name for name, _ in jars if name in have or PROVIDED_AS.get(name) in have)
        staging = HERE / f".lib.{os.getpid()}"
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir()
        for jar in keep:
            shutil.copy2(jar, staging / jar.name)
        copied = sorted(staging / jar.name for jar in keep)
        final = [LIB / p.name for p in copied]
        (staging / MANIFEST).write_text(
            "\n".join([coord, *(p.name for p in copied)]) + "\n", "utf-8"
        )
        (staging / CLASSPATH).write_text(",".join(str(p) for p in final) + "\n", "utf-8")
        shutil.rmtree(LIB, ignore_errors=True)
        staging.rename(LIB)
    print(
        f"jars: {coord}: {len(final)} jar(s) in {LIB} "
        f"({len(left)} left out, Spark ships them: {', '.join(left)})"
    )
    return final


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="only say whether they are there")
    parser.add_argument("--force", action="store_true", help="fetch even when they are there")
    args = parser.parse_args(argv)
    coord = coordinate()
    if args.check:
        ok = fetched() == coord
        print(f"jars: {coord} {'in ' + str(LIB) if ok else 'not fetched'}")
        return 0 if ok else 1
    if fetched() == coord and not args.force:
        print(f"jars: {coord} already in {LIB}")
        return 0
    if shutil.which("mvn") is None:
        print(
            f"jars: WARNING: mvn not found, so delta-spark ({coord}) is not installed and "
            "pelengine runs on its embedded delta-rs store; install Maven and re-run "
            "`make install`, or put delta-spark's jars in a folder named by "
            "PELENGINE_DELTA_JARS",
            file=sys.stderr,
        )
        return 3
    fetch(coord)
    return 0


if __name__ == "__main__":
    sys.exit(main())
