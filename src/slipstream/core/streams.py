"""The random streams: one table of the tags that keep slipstream's seeded streams apart.

Every seeded stream is ``SeedSequence(seed, spawn_key=(TAG, ...))`` (or, for the counter-based
draws, a SplitMix64 key mixed from ``TAG``), so two streams of one seed never coincide as long as
their tags differ. A tag is part of the bits a seed gives: changing one changes every batch, file or
plan drawn under it, so a tag is added here, never renumbered.

======================  =====  ==============================================================
name                    tag    the stream
======================  =====  ==============================================================
``ORDER``               1      an epoch's permutation of the samples (``order.orders``)
``SAMPLE``              2      ``sample_rng(seed, epoch, index)``: a sample's augmentation
``WORKER``              3      the global seeds a loader's worker sets (``core.workerinfo``)
``CODEC_CHOICE``        3      ``F.Image(policy="proportion")``: which rows are stored encoded,
                               under the field's own seed (a write-time stream; it has shared
                               tag 3 with ``WORKER`` since both existed, and files written with
                               it must read back the same)
``DRAWS``               4      the counter-based draws of the built-in image ops (``core.draws``)
``PACK``                23     ``ss.pack``'s shuffles and tie-breaks (``sequences.packplan``)
======================  =====  ==============================================================

The mixtures' permutations (``sequences.permute``) are keyed by SplitMix64 of (seed, source) and
(seed, pass) instead: a family of their own, not ``SeedSequence`` streams.
"""

from __future__ import annotations

__all__ = ["CODEC_CHOICE", "DRAWS", "ORDER", "PACK", "SAMPLE", "WORKER"]

ORDER = 1
SAMPLE = 2
WORKER = 3
CODEC_CHOICE = 3
DRAWS = 4
PACK = 23
