"""Building the SparkSession the jobs run on, with the ``mqcloud`` source registered.

Spark's Python workers import :mod:`pipeline` and :mod:`brokers.engine`, so the
session puts the project root on their ``PYTHONPATH`` and runs them with this
interpreter; a standalone cluster on other hosts needs the same checkout and venv there.

Network: with a ``local`` master the driver and its block manager bind and advertise
127.0.0.1 (``spark.driver.bindAddress`` / ``spark.driver.host``, and ``SPARK_LOCAL_IP`` for
the JVM), as every other process of the platform listens on loopback only. On a real
cluster the executors must reach the driver: ``SPARK_DRIVER_HOST`` names the address to
bind and advertise (unset: Spark's own choice, the machine's address).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from pyspark.sql import SparkSession

from pipeline.source import MqcloudDataSource

PROJECT_ROOT = str(Path(__file__).resolve().parent.parent)
LOOPBACK = "127.0.0.1"


def driver_address(master: str, configured: str | None = None) -> str | None:
    """The address the driver binds and advertises: ``configured``, else loopback for a
    local master, else None (Spark picks the machine's address)."""
    if configured:
        return configured
    return LOOPBACK if master.startswith("local") else None


def spark_session(
    master: str,
    app_name: str = "mqcloud-pipeline",
    *,
    conf: dict[str, str] | None = None,
    driver_host: str | None = None,
) -> SparkSession:
    """A SparkSession on ``master`` (``local[*]``, ``spark://host:port`` …) in UTC, its
    driver on :func:`driver_address` (``driver_host`` overrides the default)."""
    path = os.pathsep.join(p for p in (PROJECT_ROOT, os.environ.get("PYTHONPATH", "")) if p)
    host = driver_address(master, driver_host)
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
    if host is not None:
        os.environ["SPARK_LOCAL_IP"] = host  # read by the JVM that getOrCreate launches
        builder = builder.config("spark.driver.bindAddress", host).config("spark.driver.host", host)
    for key, value in (conf or {}).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    spark.dataSource.register(MqcloudDataSource)
    return spark
