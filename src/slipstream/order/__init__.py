"""The order and the checkpoint: which samples each rank loads, in which batches, and how far it got.

``orders`` (permutations and quasi-random page orders, pure functions of seed and epoch), ``deals``
(the rest of an epoch's global order dealt to ranks, and what a deal consumed), ``epochs`` (the
batches of indices one rank loads in an epoch, built-in or a user's order object), ``progress``
(how far an epoch got, as the few integers a checkpoint holds), ``resume`` (where a loader starts
from a saved state, on the same ranks or on others) and ``datastate`` (containers whose own state
is part of the loader's, and changes that settle at a position). Nothing here starts a thread.
"""
