"""Building the SparkSession the jobs run on, with the ``mqcloud`` source registered.

Spark's Python workers import :mod:`pipeline` and :mod:`brokers.engine`, so the
session puts the project root on their ``PYTHONPATH`` and runs them with this
interpreter; a standalone cluster on other hosts needs the same checkout and venv there.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from pyspark.sql import SparkSession

from pipeline.source import MqcloudDataSource

PROJECT_ROOT = str(Path(__file__).resolve().parent.parent)


def spark_session(
    master: str, app_name: str = "mqcloud-pipeline", *, conf: dict[str, str] | None = None
) -> SparkSession:
    """A SparkSession on ``master`` (``local[*]``, ``spark://host:port`` …) in UTC."""
    path = os.pathsep.join(p for p in (PROJECT_ROOT, os.environ.get("PYTHONPATH", "")) if p)
    os.environ["PYTHONPATH"] = path  # local mode: workers inherit the driver's environment
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    builder = (
        SparkSession.builder.master(master)
        .appName(app_name)
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.ui.enabled", "false")
        # archive partitions (topic, date, hour) read back as strings: a topic code such
        # as "42" must not turn the column into an integer
        .config("spark.sql.sources.partitionColumnTypeInference.enabled", "false")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.executorEnv.PYTHONPATH", path)
        .config("spark.pyspark.python", sys.executable)
        .config("spark.pyspark.driver.python", sys.executable)
        .config("spark.driver.extraJavaOptions", "-Duser.timezone=UTC")
        .config("spark.executor.extraJavaOptions", "-Duser.timezone=UTC")
    )
    for key, value in (conf or {}).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    spark.dataSource.register(MqcloudDataSource)
    return spark
