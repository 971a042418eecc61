"""Clean-up that slipstream's own forked worker processes run first: a small registry.

A worker started with the "fork" method inherits a copy of everything the parent holds: the
parent ends of every pool's pipes, the file descriptors of shared batch slots, the mappings of
slots no batch uses. Each module that owns such a resource registers, at import time, a function
that lets go of it in the child::

    @at_worker_fork
    def _close_inherited_fds() -> None: ...

and a forked worker calls ``run_worker_fork_hooks()`` once, before it does anything else. Modules
never imported in the parent have nothing to clean up, so the worker imports nothing to run them.

These hooks run only in slipstream's own workers, never in a fork the user makes
(``os.register_at_fork`` would run them in every fork). They run in registration order, in a
child that has a single thread: they must take no lock a parent thread could have held when it
forked. An exception from a hook is the worker's start-up error (the parent reports it).

This module depends on no other slipstream module, so any layer may register with it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

__all__ = ["at_worker_fork", "run_worker_fork_hooks"]

_Hook = TypeVar("_Hook", bound=Callable[[], object])

_hooks: list[Callable[[], object]] = []


def at_worker_fork(hook: _Hook) -> _Hook:
    """Run ``hook()`` (no arguments) at the start of every forked slipstream worker; returns
    ``hook``, so it serves as a decorator. Registering the same function twice runs it once."""
    if hook not in _hooks:
        _hooks.append(hook)
    return hook


def run_worker_fork_hooks() -> None:
    """In a freshly forked slipstream worker: run every registered clean-up, in registration order."""
    for hook in _hooks:
        hook()
