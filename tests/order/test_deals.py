"""Deals: an epoch's global order (or what is left of it) dealt to ranks, and what was consumed."""

import math
from collections import Counter

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from slipstream.order.deals import FRESH, Deal, consumed_after, deal_positions


def reference(n: int, rank: int, world: int, per_batch: int, drop_last: bool) -> list[list[int]]:
    """The plain deal of a whole epoch, written as directly as possible (the oracle)."""
    total = (n // world) * world if drop_last else math.ceil(n / world) * world
    padded = [k % n for k in range(total)]
    share = padded[rank::world]
    count = len(share) // per_batch if drop_last else math.ceil(len(share) / per_batch)
    return [share[k * per_batch : (k + 1) * per_batch] for k in range(count)]


def all_ranks(n, deal, world, per_batch, drop_last):
    return [deal_positions(n, deal, r, world, per_batch, drop_last) for r in range(world)]


@given(st.integers(0, 200), st.integers(1, 9), st.integers(1, 7), st.booleans())
def test_the_fresh_deal_is_the_plain_one(n, world, per_batch, drop_last):
    for rank in range(world):
        got = [p.tolist() for p in deal_positions(n, FRESH, rank, world, per_batch, drop_last)]
        assert got == reference(n, rank, world, per_batch, drop_last)


@given(st.integers(0, 200), st.integers(1, 9), st.booleans())
def test_ranks_get_equal_shares_whose_union_is_the_data(n, world, drop_last):
    shares = [np.concatenate(b) if b else np.zeros(0, int) for b in all_ranks(n, FRESH, world, 1, drop_last)]
    assert len({len(s) for s in shares}) == 1
    counts = Counter(i for s in shares for i in s.tolist())
    if drop_last:
        assert len(shares[0]) == n // world and all(c == 1 for c in counts.values())
    else:
        assert set(counts) == set(range(n))
        assert sum(c - 1 for c in counts.values()) == world * math.ceil(n / world) - n  # only the padding


@st.composite
def dealt_and_stopped(draw):
    """An epoch of n units dealt (fresh, or the rest after an earlier stop) and stopped again."""
    n = draw(st.integers(0, 120))
    world, per_batch, drop_last = draw(st.integers(1, 6)), draw(st.integers(1, 6)), draw(st.booleans())
    deal = FRESH
    if draw(st.booleans()):  # a deal that is itself the rest of an earlier one, on other ranks
        w0, b0, d0 = draw(st.integers(1, 6)), draw(st.integers(1, 6)), draw(st.booleans())
        count = len(deal_positions(n, FRESH, 0, w0, b0, d0))
        deal = consumed_after(n, FRESH, w0, b0, d0, draw(st.integers(0, max(count - 1, 0))))
    count = len(deal_positions(n, deal, 0, world, per_batch, drop_last))
    stop = draw(st.integers(0, count))
    return n, deal, world, per_batch, drop_last, stop


@given(dealt_and_stopped(), st.integers(1, 7), st.integers(1, 7), st.booleans())
def test_the_rest_dealt_to_other_ranks_loses_and_repeats_nothing_beyond_padding(case, world2, per_batch2, drop2):
    n, deal, world, per_batch, drop_last, stop = case
    before = [p for batches in all_ranks(n, deal, world, per_batch, drop_last) for b in batches[:stop] for p in b.tolist()]
    rest = consumed_after(n, deal, world, per_batch, drop_last, stop)
    after_batches = all_ranks(n, rest, world2, per_batch2, drop2)
    assert len({len(b) for b in after_batches}) == 1  # equal batch counts per rank
    after = [p for batches in after_batches for b in batches for p in b.tolist()]
    earlier = set(range(deal.consumed)) | set(deal.extra.tolist())
    seen = Counter(before + after)
    unconsumed = set(range(n)) - earlier - set(before)
    assert set(rest.rest(n).tolist()) == unconsumed  # what is left is exactly what nobody saw
    left = len(unconsumed)
    if drop2:  # a fresh deal of what is left: whole batches only, none twice
        assert set(after) <= unconsumed and all(seen[p] == 1 for p in after)
        assert len(after) == left - left % (world2 * per_batch2)
    else:  # nothing lost; loaded again: only the new deal's padding
        assert unconsumed <= set(after)
        assert len(after) - left == math.ceil(left / world2) * world2 - left < world2


@given(dealt_and_stopped())
def test_the_rest_dealt_to_the_same_ranks_is_exactly_what_they_had_left(case):
    n, deal, world, per_batch, drop_last, stop = case
    rest = consumed_after(n, deal, world, per_batch, drop_last, stop)
    if stop == len(deal_positions(n, deal, 0, world, per_batch, drop_last)):
        return  # a finished epoch: the loader moves on to the next one
    for rank in range(world):
        had = [b.tolist() for b in deal_positions(n, deal, rank, world, per_batch, drop_last)[stop:]]
        assert [b.tolist() for b in deal_positions(n, rest, rank, world, per_batch, drop_last)] == had


@given(st.integers(1, 80), st.integers(1, 5), st.integers(1, 5), st.data())
def test_ranks_out_of_step_count_each_their_own(n, world, per_batch, data):
    counts = {r: (data.draw(st.integers(0, 30)), frozenset(data.draw(st.sets(st.integers(0, 30), max_size=3)))) for r in range(world)}
    rest = consumed_after(n, FRESH, world, per_batch, False, counts)
    seen = set()
    for r, (count, done) in counts.items():
        batches = deal_positions(n, FRESH, r, world, per_batch, False)
        for k in [*range(min(count, len(batches))), *(k for k in done if k < len(batches))]:
            seen |= set(batches[k].tolist())
    assert set(rest.rest(n).tolist()) == set(range(n)) - seen
    assert rest.consumed == next((p for p in range(n) if p not in seen), n)
    assert all(p in seen for p in rest.extra.tolist())


def test_a_deal_goes_through_its_state_as_runs_and_refuses_bad_ones():
    deal = Deal(5, [9, 7, 8, 12])
    assert Deal.from_state(deal.to_state()) == deal and Deal(3).to_state() == {"consumed": 3, "extra": ""}
    many = Deal(10, np.arange(10, 600_000, 2))  # every other position of a long window
    assert Deal.from_state(many.to_state()) == many and len(many.to_state()["extra"]) < 600_000 / 8 * 4 / 3 + 4
    with pytest.raises(ValueError, match="beyond the consumed prefix"):
        Deal(5, [3])
    with pytest.raises(ValueError, match="integer 'consumed'"):
        Deal.from_state({"consumed": "5"})
    for bad in ([7], "not base64!", 3):
        with pytest.raises(ValueError, match="base64 text of a bitmap"):
            Deal.from_state({"consumed": 1, "extra": bad})
    with pytest.raises(ValueError, match="the data changed"):
        Deal(20).rest(10)
