"""The core: what any loader is made of, independent of how it runs. Nothing here starts a
thread or a process, and nothing here imports another slipstream folder.

``containers`` (the ``numobs``/``getobs`` protocol), ``views``, ``rng`` (``sample_rng``), ``draws``
(counter-based draws of the built-in augmentations), ``streams`` (the one table of random-stream
tags), ``nested`` (the one rule for nested samples), ``spec``, ``nodes`` and ``samplewriters`` (the
batch structure and how samples are written into it), ``collate`` (``default_collate``), ``slots``
(reusable batch buffers), ``workerinfo``, ``errors`` (every exception, one hierarchy),
``arguments`` (argument checks), ``closing`` (the closing-iterator base and the one exit registry),
``optional`` (optional dependencies), ``cpus`` (the cores this process may use: affinity and cgroup
quota), ``timings`` (where a worker's time goes), ``sizes``, ``redact``, ``processlock`` and
``forking`` (clean-up hooks run in forked workers).
"""
