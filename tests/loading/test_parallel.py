"""``ss.loadparallel``: ``fn`` mapped over an iterable in worker threads, in input order, reading at most
``prefetch`` items ahead; an error reaches the consumer at its item; ``workers=0`` maps lazily in the
caller's thread and ``workers="auto"`` uses the usable cores."""

import threading

import pytest

import slipstream as ss


def test_results_keep_the_input_order():
    assert list(ss.loadparallel(range(50), lambda x: x * x, workers=4)) == [x * x for x in range(50)]


def test_any_iterable_works_and_each_iter_is_a_fresh_pass():
    mapped = ss.loadparallel([3, 1, 2], str, workers=2)
    assert list(mapped) == ["3", "1", "2"] and list(mapped) == ["3", "1", "2"]
    assert len(mapped) == 3
    generator = (x for x in range(4))
    once = ss.loadparallel(generator, workers=2)
    assert list(once) == [0, 1, 2, 3] and list(once) == []
    with pytest.raises(TypeError):
        len(ss.loadparallel(x for x in range(3)))


def test_workers_zero_maps_lazily_in_the_callers_thread():
    threads = []
    assert list(ss.loadparallel(range(3), lambda x: threads.append(threading.current_thread()) or x, workers=0)) == [0, 1, 2]
    assert set(threads) == {threading.current_thread()}


def test_work_runs_in_parallel():
    barrier = threading.Barrier(3, timeout=10)

    def meet(x):
        barrier.wait()  # only passes if three items are being mapped at once
        return x

    assert list(ss.loadparallel(range(6), meet, workers=3)) == list(range(6))


def test_the_source_is_read_at_most_prefetch_items_ahead():
    consumed = [0]
    lead = []

    def source():
        for k in range(40):
            lead.append(k - consumed[0])
            yield k

    for _ in ss.loadparallel(source(), workers=3, prefetch=5):
        consumed[0] += 1
    assert max(lead) <= 5


def test_an_error_in_fn_reaches_the_consumer_at_its_item_with_a_note():
    def fn(x):
        if x == 3:
            raise ZeroDivisionError("item three")
        return x

    got = []
    with pytest.raises(ZeroDivisionError, match="item three") as info:
        for value in ss.loadparallel(range(10), fn, workers=2):
            got.append(value)
    assert got == [0, 1, 2]
    assert any("item 3" in note for note in info.value.__notes__)


@pytest.mark.parametrize(
    "kwargs, error",
    [({"workers": -1}, ValueError), ({"prefetch": 0}, ValueError), ({"fn": 5}, TypeError)],
)
def test_bad_arguments_are_refused(kwargs, error):
    with pytest.raises(error):
        ss.loadparallel(range(3), **kwargs)
    with pytest.raises(TypeError, match="needs an iterable"):
        ss.loadparallel(5)


def test_workers_auto_uses_the_cores_this_process_may_use(monkeypatch):
    from slipstream.core.cpus import usable_cores

    mapped = ss.loadparallel(range(20), lambda x: x * x, workers="auto")
    assert mapped.workers == usable_cores()
    assert list(mapped) == [x * x for x in range(20)]
    monkeypatch.setattr("slipstream.core.arguments.usable_cores", lambda: 5)
    assert ss.loadparallel(range(3), workers="auto").workers == 5
    with pytest.raises(ValueError, match="workers must be an integer >= 0 or 'auto', got 'many'"):
        ss.loadparallel(range(3), workers="many")
