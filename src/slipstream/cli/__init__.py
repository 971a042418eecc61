"""The ``slipstream`` command line (``main``), its demo (the main job on an embedded default) and
``info`` (versions, usable cores, the active fast paths).
"""
