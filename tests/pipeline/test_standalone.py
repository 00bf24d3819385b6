"""The archive job on a real Spark standalone master and worker (started from PySpark)."""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator

import pytest

from pipeline import jobs
from pipeline.session import spark_session
from pipeline.standalone import StandaloneCluster
from tests.pipeline.conftest import archived_rows

pytestmark = pytest.mark.django_db


@pytest.fixture(scope="module")
def cluster(tmp_path_factory) -> Iterator[StandaloneCluster]:
    with StandaloneCluster(tmp_path_factory.mktemp("spark"), cores=2, memory="512m") as c:
        yield c
    for proc in c.procs:
        assert proc.poll() is not None


@pytest.fixture(scope="module")
def spark(cluster) -> Iterator[object]:
    """A session whose executors run on the standalone worker (overrides local[2])."""
    logging.getLogger("py4j").setLevel(logging.WARNING)
    conf = {
        "spark.driver.host": "127.0.0.1",
        "spark.driver.bindAddress": "127.0.0.1",
        "spark.executor.memory": "512m",
        "spark.cores.max": "2",
        "spark.ui.showConsoleProgress": "false",
    }
    session = spark_session(cluster.url, "mqcloud-standalone-test", conf=conf)
    try:
        yield session
    finally:
        session.stop()


def test_archive_on_standalone_cluster(spark, cluster, store, archive_dir):
    assert spark.sparkContext.master == cluster.url
    expected = store.produce("orders", "shop", 3, 6) | store.produce("audit", "shop", 2, 3)
    result = jobs.archive(once=True, spark=spark)
    assert result.rows == len(expected)
    executors = spark.sparkContext._jsc.sc().getExecutorMemoryStatus().size()
    assert executors >= 2  # the driver and at least one executor on the worker
    rows = archived_rows(spark, archive_dir)
    assert sorted((r["topic"], r["partition"], r["index"]) for r in rows) == sorted(expected)
    assert os.path.isdir(os.path.join(archive_dir, "topic=audit"))
