"""What the batch log says when the query fails: the reason, not Spark's wrapper."""

from __future__ import annotations

from streaming.listener import failure_reason

WRAPPED = """[PYTHON_STREAMING_DATA_SOURCE_RUNTIME_ERROR] Failed when Python streaming data \
source perform latestOffset: Traceback (most recent call last):
  File "/x/connectors/kafka_source.py", line 178, in latestOffset
    return off.next_end(start, marks, max_rows)
           ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^
ValueError: t-0: latest offset 0 is below the offset already read 2000; was the topic \
deleted and re-created?
 SQLSTATE: 38000
=== Streaming Query ===
Identifier: tsm"""


def test_the_python_error_inside_spark_s_wrapper() -> None:
    assert failure_reason(WRAPPED) == (
        "ValueError: t-0: latest offset 0 is below the offset already read 2000; "
        "was the topic deleted and re-created?"
    )


def test_a_jvm_error_is_its_first_line() -> None:
    text = "org.x.JsonEOFException: Unexpected end-of-input\n at [Source: line 1]\n\tat a.b(C)"
    assert failure_reason(text) == "org.x.JsonEOFException: Unexpected end-of-input"
    assert failure_reason("") == ""


def test_each_batch_line_counts_its_own_late_records(caplog) -> None:
    """The accumulator holds totals since the start: each line says its batch's."""
    import json
    from types import SimpleNamespace

    from streaming.listener import ProgressLogger

    caplog.set_level("INFO", logger="streaming.listener.batches")
    metrics = SimpleNamespace(value={})
    logger = ProgressLogger("tsm", metrics)
    mark = "2023-11-14T22:13:25.000Z"
    for batch, totals in enumerate(({"late": 2, "dead_letters": 3}, {"late": 2}, {"late": 7})):
        metrics.value = totals
        progress = {"name": "tsm", "batchId": batch, "eventTime": {"watermark": mark}}
        logger.onQueryProgress(SimpleNamespace(progress=SimpleNamespace(json=json.dumps(progress))))
    lines = [json.loads(r.getMessage()) for r in caplog.records]
    assert [line["late"] for line in lines] == [2, 0, 5]
    assert len({line["watermark"] for line in lines}) == 1
