"""Worker processes: a persistent pool that runs small tasks against a payload sent once.

``pool`` (the parent side: tickets, results, liveness), ``link`` (the parent's end of each worker:
start, flow-controlled writes, stop), ``worker`` (the worker process's loop), ``crew`` (its
threads, when it runs several: the helper backend), ``protocol`` (the message kinds and the
cancellation flags both ends use), ``payload`` (what the messages carry), ``shm``/``rawmap``
(shared-memory segments passed by file descriptor) and ``sharedlist``. Fork clean-up goes through
``core.forking``; the exceptions live in ``core.errors`` and cross the pipe as ``core.carried``
makes them.
"""
