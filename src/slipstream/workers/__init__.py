"""Worker processes: a persistent pool that runs small tasks against a payload sent once,
the message protocol between parent and workers, shared-memory segments passed by file
descriptor, and the fork clean-up registry.
"""
