"""The ``slipstream`` command line and its demo (the main job on an embedded default).
"""
