# ruff: noqa: E501  (REAL below is verbatim)
"""``lorafleet.vllm.running_adapters``: the engine's ``vllm:lora_requests_info``, as REAL.md shows it."""

from __future__ import annotations

from lorafleet import ReadEngine, ReadingReceived, vllm

# Verbatim from a real vLLM 0.32 (shared/vllm/REAL.md, "Races and loads during generation"), with the
# gauge's comments as prometheus_client writes them and another metric around it.
REAL = b"""\
# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="tiny"} 0.0
# HELP vllm:lora_requests_info Running stats on lora requests.
# TYPE vllm:lora_requests_info gauge
vllm:lora_requests_info{max_lora="2",running_lora_adapters="",waiting_lora_adapters=""} 1.7962223312258186e+09
vllm:lora_requests_info{max_lora="2",running_lora_adapters="a0",waiting_lora_adapters="a0"} 1.7962223312159688e+09
vllm:lora_requests_info{max_lora="2",running_lora_adapters="a1",waiting_lora_adapters="a1"} 1.7962223286733248e+09
vllm:lora_requests_info{max_lora="2",running_lora_adapters="a2",waiting_lora_adapters="a2"} 1.7962223155039358e+09
vllm:lora_requests_info{max_lora="2",running_lora_adapters="a3",waiting_lora_adapters="a3"} 1.796222317443089e+09
vllm:lora_requests_info{max_lora="2",running_lora_adapters="a4",waiting_lora_adapters="a4"} 1.7962223126247878e+09
vllm:lora_requests_info{max_lora="2",running_lora_adapters="a5",waiting_lora_adapters="a5"} 1.7962223129845355e+09
vllm:lora_requests_info{max_lora="2",running_lora_adapters="a1,a2",waiting_lora_adapters="a1,a2"} 1.7962223154950624e+09
# HELP vllm:num_requests_waiting Number of requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="tiny"} 0.0
"""


def newest_is(text: bytes, stamp: bytes) -> bytes:
    """REAL with the series whose value is ``stamp`` made the newest of all."""
    return text.replace(stamp, b"1.8e+09")


def test_the_newest_series_of_the_real_answer_is_empty() -> None:
    assert vllm.running_adapters(REAL) == frozenset()


def test_the_newest_series_wherever_it_is_written() -> None:
    assert vllm.running_adapters(newest_is(REAL, b"1.7962223154950624e+09")) == frozenset({"a1", "a2"})
    assert vllm.running_adapters(newest_is(REAL, b"1.796222317443089e+09")) == frozenset({"a3"})


def test_running_and_waiting_are_read_together() -> None:
    line = b'vllm:lora_requests_info{max_lora="1",running_lora_adapters="x",waiting_lora_adapters="y,z"} 9\n'
    assert vllm.running_adapters(line) == frozenset({"x", "y", "z"})


def test_series_tied_for_newest_count_together() -> None:
    text = (
        b'vllm:lora_requests_info{running_lora_adapters="a",waiting_lora_adapters="a"} 5.0\n'
        b'vllm:lora_requests_info{running_lora_adapters="b",waiting_lora_adapters="b"} 5.0 1700000000000\n'
        b'vllm:lora_requests_info{running_lora_adapters="c",waiting_lora_adapters="c"} 4.0\n'
    )
    assert vllm.running_adapters(text) == frozenset({"a", "b"})


def test_escaped_label_values() -> None:
    text = b'vllm:lora_requests_info{running_lora_adapters="q\\"x,b\\\\s,}{",max_lora="1"} 3\n'
    assert vllm.running_adapters(text) == frozenset({'q"x', "b\\s", "}{"})


def test_the_gauge_with_no_series_yet_says_nothing_runs() -> None:
    text = (
        b"# HELP vllm:lora_requests_info Running stats on lora requests.\n"
        b"# TYPE vllm:lora_requests_info gauge\n"
    )
    assert vllm.running_adapters(text) == frozenset()


def test_without_the_gauge_the_engine_says_nothing() -> None:
    without = b"\n".join(line for line in REAL.split(b"\n") if b"lora" not in line)
    assert vllm.running_adapters(without) is None
    assert vllm.running_adapters(b"") is None
    assert vllm.running_adapters(b"<html>not found</html>") is None


def test_a_series_it_cannot_read_makes_the_whole_answer_unread() -> None:
    for bad in (
        b'vllm:lora_requests_info{running_lora_adapters="a"} many\n',
        b'vllm:lora_requests_info{running_lora_adapters="a\n',
        b"vllm:lora_requests_info{running_lora_adapters=a} 1\n",
        b'vllm:lora_requests_info{running_lora_adapters="a"}\n',
        b'vllm:lora_requests_info{running_lora_adapters="a"} NaN\n',
        b"vllm:lora_requests_info 1\n",
    ):
        assert vllm.running_adapters(REAL + bad) is None, bad


def test_a_longer_name_is_another_metric() -> None:
    text = REAL + b'vllm:lora_requests_info_total{running_lora_adapters="zz"} 2e+09\n'
    assert vllm.running_adapters(text) == frozenset()


def test_an_answer_over_the_cap_is_not_read() -> None:
    padding = b"# " + b"x" * vllm.MAX_METRICS_BYTES + b"\n"
    assert vllm.running_adapters(REAL + padding) is None
    assert vllm.running_adapters(REAL[: vllm.MAX_METRICS_BYTES]) == frozenset()


def test_the_stand_in_is_read_alike() -> None:
    from lorafleet_standin._engine import Engine
    from lorafleet_standin._family import Family
    from lorafleet_standin._metrics import exposition

    engine = Engine(
        model="tiny", model_root="/m", family=Family.of("0.32"), enable_lora=True, max_lora_rank=8
    )
    assert vllm.running_adapters(exposition(engine)) == frozenset()
    engine.started("a1")
    engine.started("a2")
    assert vllm.running_adapters(exposition(engine)) == frozenset({"a1", "a2"})
    engine.ended("a1")
    assert vllm.running_adapters(exposition(engine)) == frozenset({"a2"})
    engine.ended("a2")
    assert vllm.running_adapters(exposition(engine)) == frozenset()


def test_max_loras_is_the_gauges_label() -> None:
    """[cap]: the ``max_lora`` label is vLLM's ``--max-loras``, the adapters one batch may use."""
    assert vllm.lora_gauge(REAL) == (frozenset(), 2)
    event = vllm.answer_event(ReadEngine(read=7, replica="r"), 200, REAL, truncated=False)
    assert event == ReadingReceived(read=7, adapters=(), running=0, waiting=0, max_loras=2)


def test_max_loras_unknown_when_no_series_says_it() -> None:
    without = b'vllm:lora_requests_info{running_lora_adapters="a",waiting_lora_adapters="a"} 5.0\n'
    assert vllm.lora_gauge(without) == (frozenset({"a"}), None)
    for label in (b'""', b'"0"', b'"two"', b'"-1"'):
        line = b"vllm:lora_requests_info{max_lora=" + label + b',running_lora_adapters="a"} 5.0\n'
        assert vllm.lora_gauge(line) == (frozenset({"a"}), None)
    assert vllm.lora_gauge(b"vllm:num_requests_running 3\n") == (None, None)
