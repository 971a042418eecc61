"""core.carried: an exception reaches another process as itself when it survives the trip, else as a
faithful RuntimeError stand-in; the same rule over a worker pipe and for a trip that pickles it."""

from __future__ import annotations

import pickle
import threading

import pytest

from slipstream.core.carried import portable, raise_portable, rebuild_error, type_name, wrap_error


class TwoArgs(Exception):
    def __init__(self, a, b):  # pickles as TwoArgs(message), which cannot be rebuilt
        super().__init__(f"{a}-{b}")


class Locked(Exception):
    def __init__(self, message):
        super().__init__(message)
        self.lock = threading.Lock()  # cannot be pickled


class Exits(Exception):
    def __reduce__(self):
        raise SystemExit("no")


def raised(exc: BaseException) -> BaseException:
    try:
        raise exc
    except BaseException as caught:  # noqa: BLE001
        return caught


def test_type_names_drop_builtins_only():
    assert type_name(ValueError("x")) == "ValueError"
    assert type_name(TwoArgs(1, 2)) == f"{__name__}.TwoArgs"


def test_an_exception_that_survives_the_trip_crosses_as_itself():
    exc = raised(ValueError("fine"))
    assert portable(exc) is exc
    with pytest.raises(ValueError) as info:
        try:
            raise exc
        except ValueError as caught:
            raise_portable(caught)
    assert info.value is exc


@pytest.mark.parametrize("exc", [TwoArgs(1, 2), Locked("locked"), Exits("exits")], ids=["init", "lock", "reduce"])
def test_one_that_does_not_is_a_stand_in_with_its_type_message_notes_where_and_traceback(exc):
    exc = raised(exc)
    exc.add_note("while reading sample 7")
    stand_in = portable(exc, where="raised in task 3")
    assert type(stand_in) is RuntimeError
    assert str(stand_in) == f"{type_name(exc)}: {exc}"
    assert stand_in.__notes__[0] == "while reading sample 7"
    last = stand_in.__notes__[-1]
    assert last.startswith("raised in task 3: a stand-in for the ") and "could not be sent back as itself" in last
    assert "Traceback" in last and "raised" in last
    again = pickle.loads(pickle.dumps(stand_in))
    assert str(again) == str(stand_in) and again.__notes__ == stand_in.__notes__
    with pytest.raises(RuntimeError) as info:
        try:
            raise exc
        except Exception as caught:
            raise_portable(caught)
    assert info.value.__cause__ is None and info.value.__suppress_context__


def test_the_trip_given_decides():
    exc = raised(ValueError("x"))

    def refuse(obj):
        raise TypeError("this trip carries nothing")

    stand_in = portable(exc, refuse, pickle.loads)
    assert isinstance(stand_in, RuntimeError) and "this trip carries nothing" in stand_in.__notes__[-1]


def test_over_a_pipe_an_exception_comes_back_as_itself_with_where_and_its_traceback():
    exc = raised(KeyError("k"))
    error = rebuild_error(pickle.loads(pickle.dumps(wrap_error(exc, "raised in worker 1 (pid 9)"))))
    assert type(error) is KeyError and error.args == ("k",)
    assert error.__notes__[-1].startswith("raised in worker 1 (pid 9)\nTraceback")


def test_over_a_pipe_one_that_does_not_survive_is_the_same_stand_in():
    exc = raised(TwoArgs(1, 2))
    exc.add_note("while writing shard 2")
    error = rebuild_error(wrap_error(exc, "raised in worker 0 (pid 1)"))
    assert type(error) is RuntimeError and str(error) == f"{type_name(exc)}: 1-2"
    assert error.__notes__[0] == "while writing shard 2"
    assert error.__notes__[-1].startswith("raised in worker 0 (pid 1): a stand-in for the ")
    assert str(error) == str(portable(exc)) and error.__notes__[0] == portable(exc).__notes__[0]


def test_one_that_survived_in_the_worker_but_does_not_unpickle_here_is_the_stand_in():
    data, *rest = wrap_error(raised(ValueError("v")), "raised in worker 2 (pid 5)")
    error = rebuild_error((b"not a pickle", *rest))  # as for a class this side cannot import
    assert type(error) is RuntimeError and str(error) == "ValueError: v"
    assert error.__notes__[-1].startswith("raised in worker 2 (pid 5): a stand-in for the ValueError")
