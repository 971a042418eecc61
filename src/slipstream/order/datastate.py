"""Stateful data: a container whose state is part of the loader's, and changes that settle at a position.

The protocol (torchdata's ``Stateful`` names). A container is *stateful* when it has callable
``state_dict()`` and ``load_state_dict(state)``; it may also have ``settle_changes(position) -> bool``.

* ``state_dict()`` returns a JSON-serializable value (a dict): ``loader.state_dict()`` holds it as
  ``"data"``. It should include changes made but not settled yet (they settle where they would have).
* ``load_state_dict(state)`` puts the container back in ``state``, or raises ``ValueError`` (a state
  of other data) and stays as it was. ``loader.load_state_dict(s)`` calls it first, before the loader
  changes anything; if the loader then refuses ``s`` itself, the container is put back in the state
  it had. A state without ``"data"`` leaves the container as it is; a state with ``"data"`` loaded
  into a loader over data that is not stateful is refused. Given the states of all ranks (a list,
  elastic resume), their ``"data"`` must be equal (the ranks' containers were changed alike, at the
  same steps): otherwise ``ValueError`` names the ranks that differ, and nothing changes.
* ``settle_changes(position)`` makes the changes recorded since its last call take effect from
  container position ``position`` on (earlier positions keep the items they had) and returns True
  when the state changed. The loader calls it in the consumer's thread: at the start of an epoch
  that starts fresh (nothing of it handed out), with ``position`` 0, before the epoch's length is
  read; and, for the ``"sequential"`` order only, at the entry of every ``next()`` of the epoch's
  iterator, with ``position`` P below. P grows along an epoch and starts again at the next (each
  epoch reads the positions again). It may run while the loader's worker threads read positions
  before P: it must replace what those reads use in one step (build the new state, then assign it);
  so must ``load_state_dict``, which a helper process runs beside its threads' earlier reads. With
  a container that settles, iterate one epoch at a time (two iterators' settles would interleave).

P, at a ``next()`` with ``h`` batches of the epoch handed out on this rank (``in_order=False``: the
number handed out, wherever they lie), is the first position, in the epoch's global order (every
rank's share), of the batches numbered ``h + ahead``, where ``ahead`` is the loader's ``prefetch``,
plus ``finish_ahead`` when the data has a batch finisher: for every backend and worker count the
same, so the batches do not depend on them; the same on every rank in lockstep, and after an
elastic resume the same on every new rank (it is computed from the epoch's deal: the positions a
resumed epoch had consumed, prefix and overtaking batches, are not in its order). When batch
``h + ahead`` lies beyond the epoch (its last batches) nothing is settled: changes made then wait
for the next epoch's start (position 0), where they would otherwise apply to no position at all.
Other orders (random, quasi_random, samplers, batch samplers, order objects) read positions in no
order a position could split, so their changes settle at the next fresh epoch's start only. An
epoch begun (its iterator made, its opening settle done) but with nothing handed out yet is saved
with ``"opened": True``, so its resumed iterator does not settle at its start again.

A state saved mid-epoch (sequential order) also holds ``"settle_at"``: the P of the saving run's
next ``next()`` (null: none, that batch lies beyond the epoch). A change pending in the data's state
settles there after a resume, whatever the resumed loader's world size, batch size or prefetch: its
``iter()`` calls ``settle_changes(settle_at)`` before any batch is read (P lies past every position
the saving run had read, and the resumed one has read nothing yet); with null, the rest of the epoch
settles nothing (as the saving run's would not), and changes wait for the next epoch's start.

Why no batch numbered ``h + ahead`` or later has begun reading at that ``next()``, on any backend:
each executor starts a job (the reads of one batch) only while fewer than ``prefetch`` jobs are
started and not handed out (``backends.threads``: a worker pulls the next job from the plans only
under that condition; ``backends.process_executor``: ``_start`` sends jobs up to it, before and
after each hand-out, in the consumer's thread; ``backends.inline``: a batch is read inside the
``next()`` that returns it). The jobs come in batch order, skipping those a resumed state handed
out, so after ``c`` hand-outs of this iterator the jobs started are its first ``c + prefetch`` at
most, whose batch numbers are below ``first + |done| + c + prefetch = h + prefetch`` (``first`` and
``done``: what the resumed state had handed out). A finisher (``loading.finishing``) takes at most
``finish_ahead`` batches more from the executor than it hands out. The position is the first of
that batch in the global order, and the sequential order's positions only grow along it (the
padding at an epoch's end repeats positions from its start: below P), so every read so far is of a
position below P.

Worker copies: thread workers read the loader's own container. Process and helper workers hold
copies: when the state changes (a settle returned True, or ``load_state_dict`` loaded one) the
loader hands ``state_dict()`` to its backend (``data_changed``), and every job dispatched after
that carries it to each worker once (``workers.protocol``'s ``Apply``, sent once per worker per
change): the worker's copy calls ``load_state_dict(state)`` before the job's message is read, so it
reads the new state (a refusal there makes every later read of that worker raise it). Workers that
start later get the container as it is then (pickled or forked). So ``load_state_dict`` of a state
the copy already has must leave it as it is, and a direct ``data.load_state_dict`` (not through
the loader) is not seen by running worker processes (``loader.restart_workers()`` starts fresh ones).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from ..core.errors import add_note
from .deals import Deal, batches_per_rank
from .progress import UNSAVED, Position, Progress

__all__ = [
    "DataState", "Settler", "is_stateful", "load_in_worker", "opened_in", "refusal_of", "sequential_first", "settle_at_in",
]  # fmt: skip

REFUSED = "slipstream.datastate.refused"  # a worker's cache key: why its copy refused a state


def is_stateful(data: Any) -> bool:
    """Whether ``data`` has callable ``state_dict`` and ``load_state_dict``."""
    return callable(getattr(data, "state_dict", None)) and callable(getattr(data, "load_state_dict", None))


def sequential_first(order: Any, n: int, deal: Deal) -> Callable[[int], int | None] | None:
    """``first(m)``: the first position, in the global order, of the batches numbered ``m`` of an
    epoch of ``order`` over ``n`` observations dealt as ``deal``; None beyond the epoch. None (no
    such function) unless ``order`` is the built-in "sequential" one."""
    if getattr(order, "kind", None) != "sequential" or not hasattr(order, "world_size"):
        return None
    world_size, batch_size, drop_last = order.world_size, order.batch_size, order.drop_last
    count = batches_per_rank(n, deal, world_size, batch_size, drop_last)
    consumed, extra = deal.consumed, deal.extra
    # free positions (not consumed) before each extra one: the i-th free position is consumed + i
    # + the number of extra positions with at most i free ones before them
    before = extra - np.arange(len(extra)) - consumed

    def first(m: int) -> int | None:
        if m >= count:
            return None
        i = m * world_size * batch_size  # the global batch m is entries [i, i + world_size * batch_size) of the deal
        return consumed + i + (int(np.searchsorted(before, i, side="right")) if len(extra) else 0)

    return first


class Settler:
    """One epoch's settle calls at ``next()`` (see the module doc): ``first`` gives P from a batch
    number, ``changed`` is called when the container's state changed."""

    __slots__ = ("data", "first", "ahead", "changed")

    def __init__(self, data: Any, first: Callable[[int], int | None], ahead: int, changed: Callable[[], None]):
        self.data, self.first, self.ahead, self.changed = data, first, ahead, changed

    def position(self, progress: Progress) -> int | None:
        """P at a ``next()`` with ``progress`` as it is now (None: nothing settles there)."""
        return self.first(progress.batch + len(progress.done) + self.ahead)

    def __call__(self, progress: Progress) -> None:
        position = self.position(progress)
        if position is not None and self.data.settle_changes(position):
            self.changed()


def _never(m: int) -> int | None:
    """``first`` for the rest of an epoch whose saving run would settle nothing more in it."""
    return None


def _text(value: Any) -> Any:
    try:
        return json.dumps(value, sort_keys=True)
    except (TypeError, ValueError):
        return value


class DataState:
    """A loader's side of the protocol for its ``data``; ``backend`` hears of each change."""

    def __init__(self, data: Any, backend: Any):
        self.data, self.backend = data, backend
        self.stateful = is_stateful(data)
        self.settles = self.stateful and callable(getattr(data, "settle_changes", None))

    def changed(self) -> None:
        """The container's state changed: the backend's worker copies load it before their next jobs."""
        self.backend.data_changed(self.data.state_dict())

    def opening(self, start: Position) -> None:
        """Settle before the epoch starting at ``start`` reads anything: at position 0 when it starts
        fresh, at its state's ``settle_at`` when it is the rest of a saved epoch that names one."""
        if not self.settles:
            return
        if not start.opened and start.deal.fresh and not start.batch and not start.done:
            position = 0
        elif isinstance(start.settle_at, int):
            position = start.settle_at
        else:
            return
        if self.data.settle_changes(position):
            self.changed()

    def settler(self, order: Any, n: int, start: Position, ahead: int) -> Settler | None:
        """The epoch's settle calls at ``next()``, or None (no settling container, or not sequential).
        The rest of a saved epoch whose state says it settles nothing more (``settle_at`` None) settles
        nothing more here either."""
        first = sequential_first(order, n, start.deal) if self.settles else None
        if first is None:
            return None
        return Settler(self.data, _never if start.settle_at is None else first, ahead, self.changed)

    def entries(self, position: Position) -> dict[str, Any]:
        """What ``loader.state_dict()`` adds: ``data`` and, for an epoch begun with nothing handed
        out yet, ``opened`` (its opening settle happened: a resumed loader does not settle again)."""
        if not self.stateful:
            return {}
        extra: dict[str, Any] = {"data": self.data.state_dict()}
        if self.settles and position.opened and not position.batch and not position.done and position.deal.fresh:
            extra["opened"] = True
        if self.settles and position.settle_at is not UNSAVED:
            extra["settle_at"] = position.settle_at
        return extra

    def wanted(self, state: Any) -> tuple[bool, Any]:
        """Whether ``state`` (one state, or all ranks' as a list) sets the data, and to what;
        ``ValueError`` when the ranks' data states differ or the data is not stateful. Not a
        state at all: nothing here (``order.resume`` says what it lacks)."""
        if isinstance(state, Mapping):
            states = [state]
        elif isinstance(state, Sequence) and not isinstance(state, (str, bytes)) and all(isinstance(s, Mapping) for s in state):
            states = list(state)
        else:
            return False, None
        having = [s for s in states if "data" in s]
        if not having:
            return False, None
        texts = [_text(s["data"]) for s in states if "data" in s]
        if len(having) < len(states) or any(t != texts[0] for t in texts):
            ranks = [s.get("rank", k) for k, s in enumerate(states) if "data" not in s or _text(s["data"]) != texts[0]]
            raise ValueError(
                f"the states disagree on 'data' (ranks {ranks} differ from rank {states[0].get('rank', 0)}'s): the data "
                "state of every rank must be the same, as when each rank's container is changed alike at the same step"
            )
        if not self.stateful:
            raise ValueError(
                f"state holds 'data' (the state of a stateful container), but this loader's data "
                f"({type(self.data).__name__}) has no state_dict/load_state_dict: resume over the data it was saved with"
            )
        return True, having[0]["data"]

    def load(self, value: Any) -> Callable[[], None]:
        """``data.load_state_dict(value)`` (its error propagates); returns the undo."""
        before = self.data.state_dict()
        self.data.load_state_dict(value)
        return lambda: self.data.load_state_dict(before)


def opened_in(state: Any, position: Position) -> bool:
    """Whether a loaded ``state`` says the epoch ``position`` starts had begun (its opening settle done)."""
    states = [state] if isinstance(state, Mapping) else list(state)
    return any(s.get("opened") is True and s.get("epoch") == position.epoch for s in states)


def settle_at_in(state: Any, position: Position) -> Any:
    """The ``settle_at`` that a loaded ``state`` (or the ranks' states) gives the epoch ``position``
    starts: the latest of its states' (None, past the epoch, beyond any), ``UNSAVED`` when none has
    one; ``ValueError`` for a value that is neither an integer >= 0 nor None."""
    states = [state] if isinstance(state, Mapping) else list(state)
    values = []
    for s in states:
        if s.get("epoch") != position.epoch or "settle_at" not in s:
            continue
        value = s["settle_at"]
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
            raise ValueError(f"state['settle_at'] must be an integer >= 0 or None, as state_dict() writes it, got {value!r}")
        values.append(value)
    if not values:
        return UNSAVED
    return None if any(v is None for v in values) else max(values)


# -- in a worker process (``state``: the worker's ``WorkerState``, its payload the loader's) ----------


def load_in_worker(state: Any, data_state: Any) -> None:
    """The worker's copy of the data loads ``data_state`` (sent by ``workers.protocol.Apply``); a
    refusal is kept and raised by the worker's later reads (``refusal_of``)."""
    try:
        state.payload.data.load_state_dict(data_state)
    except Exception as exc:  # noqa: BLE001 - raised by the reads that would have used it
        add_note(exc, f"slipstream: raised by load_state_dict of worker {state.id}'s copy of the data")
        state.cache[REFUSED] = exc
    else:
        state.cache.pop(REFUSED, None)


def refusal_of(state: Any) -> BaseException | None:
    """Why the worker's copy refused the latest state (None: it did not)."""
    return state.cache.get(REFUSED)
