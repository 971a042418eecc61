"""Token sequences: token documents as containers, packing them into fixed-length rows
(``ss.pack``), weighted mixtures of sources (``ss.mix``) and the inputs attention kernels take
for packed batches. Every one is a container whose item is a pure function of its position and
seed, so the loader's orders, ranks, workers, backends and resume apply unchanged.
"""
