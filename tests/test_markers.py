"""The suite's rule for the ``spark`` marker (tests/conftest.py): a test that uses the Spark
session fixture without the marker fails before any session starts, so ``-m "not spark"``
cannot pick up a slow test unnoticed. Checked on a small suite run with the real conftest
and a stand-in ``spark`` fixture (no JVM)."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest_plugins = ["pytester"]

CONFTEST = Path(__file__).with_name("conftest.py")


def test_a_test_using_spark_without_the_marker_fails(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(CONFTEST.read_text())
    pytester.makepyfile(
        test_suite="""
        import pytest

        @pytest.fixture
        def spark(request):
            if request.node.get_closest_marker("spark") is None:
                raise RuntimeError("SESSION STARTED FOR AN UNMARKED TEST")
            return "a stand-in session"

        @pytest.fixture
        def rows(spark):
            return [spark]

        def test_unmarked(spark):
            pass

        def test_unmarked_through_another_fixture(rows):
            pass

        @pytest.mark.spark
        def test_marked(rows):
            assert rows == ["a stand-in session"]

        def test_without_spark():
            pass
        """
    )
    ini = "[pytest]\nmarkers =\n    spark: needs a Spark session\n"
    pytester.makefile(".ini", pytest=ini)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=2, errors=2)
    result.stdout.fnmatch_lines(
        [
            "test_suite.py::test_unmarked uses the Spark session (fixture spark) but is not "
            "marked spark: add @pytest.mark.spark*",
            "test_suite.py::test_unmarked_through_another_fixture uses the Spark session "
            "(fixture spark) but is not marked spark*",
        ]
    )
    assert "SESSION STARTED" not in result.stdout.str()  # stopped before the fixture ran
    # -m "not spark" selects the unmarked ones, and they fail there too
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-m", "not spark")
    result.assert_outcomes(passed=1, errors=2, deselected=1)


def test_the_slowest_files_named_first_exist() -> None:
    """conftest's SLOWEST_FILES orders the suite's files for its workers: a file renamed or
    gone would fall silently to the end of the order."""
    from tests.conftest import SLOWEST_FILES

    root = CONFTEST.parent.parent
    assert len(set(SLOWEST_FILES)) == len(SLOWEST_FILES)
    assert [p for p in SLOWEST_FILES if not (root / p).is_file()] == []
