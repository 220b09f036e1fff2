"""The router's line per request, written in batches (``_lines``)."""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio
import pytest

from lorafleet_serve._lines import Lines

from conftest import eventually

LOG = "lorafleet.serve.lines-test"


def said(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == LOG]


@asynccontextmanager
async def writing(caplog: pytest.LogCaptureFixture, every: float) -> AsyncIterator[Lines]:
    """Lines whose writer runs (and waits for a first line) inside the block, stopped after it."""
    caplog.set_level(logging.INFO, logger=LOG)
    lines = Lines(logging.getLogger(LOG), every=every)
    async with anyio.create_task_group() as tasks:
        tasks.start_soon(lines.write)
        await anyio.wait_all_tasks_blocked()
        yield lines
        tasks.cancel_scope.cancel()


@pytest.mark.anyio
async def test_lines_wait_for_their_batch_and_keep_the_time_their_request_ended(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async with writing(caplog, every=0.01) as lines:
        before = time.time()
        lines.add(lambda: "method=POST a")
        lines.add(lambda: "method=POST b%s")  # a line is not a format string
        after = time.time()
        assert said(caplog) == []  # in the batch, not yet written
        await eventually(lambda: len(said(caplog)) == 2)
        assert said(caplog) == ["method=POST a", "method=POST b%s"]
        assert all(before <= r.created <= after for r in caplog.records if r.name == LOG)


@pytest.mark.anyio
async def test_lines_left_when_the_writer_stops_are_written_and_later_ones_at_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async with writing(caplog, every=3600) as lines:
        lines.add(lambda: "first")
        await anyio.wait_all_tasks_blocked()  # the writer sleeps out its batch's hour
        assert said(caplog) == []
    assert said(caplog) == ["first"]  # written as the writer stopped
    lines.add(lambda: "second")  # no writer: at once
    assert said(caplog) == ["first", "second"]
