"""pyspark's FutureWarning about pandas >= 3 is silenced where simstore starts Spark, and
nothing else is (issue #48). No JVM: pyspark's own pandas check is called directly."""

from __future__ import annotations

import warnings

import pytest

pytest.importorskip("pyspark", reason="simstore.spark needs pyspark: pip install '.[spark]'")
pd = pytest.importorskip("pandas")

from pyspark.sql.pandas.utils import require_minimum_pandas_version  # noqa: E402

from simstore.spark.environment import PANDAS3_WARNING, quiet_pandas3_warning  # noqa: E402


def test_the_pandas3_warning_only_is_silenced() -> None:
    """After quiet_pandas3_warning, pyspark's pandas check warns nothing; other
    FutureWarnings still show."""
    with warnings.catch_warnings(record=True) as got:
        warnings.simplefilter("default")
        quiet_pandas3_warning()
        require_minimum_pandas_version()
        warnings.warn(PANDAS3_WARNING.replace("PySpark", "Other"), FutureWarning, stacklevel=1)
        warnings.warn("another future change", FutureWarning, stacklevel=1)
    assert [str(w.message) for w in got] == [
        PANDAS3_WARNING.replace("PySpark", "Other"),
        "another future change",
    ]


@pytest.mark.skipif(int(pd.__version__.split(".")[0]) < 3, reason="pyspark warns of pandas 3")
def test_pyspark_still_warns_without_it() -> None:
    """The warning being silenced is real: pyspark's check gives it under pandas 3."""
    with warnings.catch_warnings(record=True) as got:
        warnings.simplefilter("default")
        require_minimum_pandas_version()
    assert any(PANDAS3_WARNING in str(w.message) for w in got)
