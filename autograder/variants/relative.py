r"""The varied items of chapter 4 (relative encodings): 4.7, where the last T5 bucket begins, and 4.8, when
ALiBi hides the better token.

4.7: the smallest distance :math:`a` at which a key :math:`a` tokens before the query lands in the last bucket
of its direction, found by scanning ``posenc_ref.relative.relative_position_bucket`` (the rule of T5 and of
Hugging Face's ``T5Attention``), bidirectional, for the student's ``num_buckets`` and ``max_distance``. With
:math:`n = \text{num\_buckets} / 2` buckets per direction and :math:`e = n / 2` exact ones, the bucket of
:math:`a \ge e` is :math:`e + \lfloor (n - e) \ln(a / e) / \ln(\text{max\_distance} / e) \rfloor` (at most
:math:`n - 1`), so the last bucket begins at
:math:`\lceil e\,(\text{max\_distance} / e)^{(n - 1 - e) / (n - e)} \rceil`; for the allowed values that bound
is never a whole number.

4.8: with ALiBi's slope :math:`m_h` the far key (a lead of :math:`\delta` in content score, :math:`D` positions
back) gets the smaller weight than the key 1 position back once :math:`\delta - m_h D < -m_h`, i.e. the smallest
whole :math:`D > 1 + \delta / m_h`, which is :math:`\lfloor 1 + \delta / m_h \rfloor + 1`; slopes from
``posenc_ref.relative.alibi_slopes`` (:math:`m_h = 2^{-8h/n}` for :math:`n` heads, a power of two), for head 1 and
head :math:`n`. :math:`\delta / m_h` is never a whole number for the allowed values, so there is no tie.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from autograder.variants import Variant, distinct_mistakes

ASSIGNMENT = "04_relative"
DEFAULT_BUCKETS, DEFAULT_MAX_DISTANCE = 32, 128  # T5's defaults, a mistake students make
DEFAULT_HEADS = 8  # the heads of 4.4's example, a mistake students make
FAR = 10**6  # a distance beyond every max_distance here: it lies in the last bucket


def last_bucket_start(num_buckets: int, max_distance: int, *, bidirectional: bool = True) -> int:
    """The first distance a >= 1 at which the key a tokens before the query is in the last bucket."""
    import torch

    from posenc_ref.relative import relative_position_bucket

    distances = torch.arange(1, 4 * max_distance + 1)  # (4 max_distance,): far enough to reach the last bucket
    buckets = relative_position_bucket(-distances, bidirectional=bidirectional, num_buckets=num_buckets,
                                       max_distance=max_distance)
    last = relative_position_bucket(torch.tensor([-FAR]), bidirectional=bidirectional, num_buckets=num_buckets,
                                    max_distance=max_distance)
    return int(distances[buckets == last][0])


def _last_bucket(parameters: Mapping[str, Any]) -> dict[str, Any]:
    buckets, distance = parameters["num_buckets"], parameters["max_distance"]
    start = last_bucket_start(buckets, distance)
    mistakes = [
        (("off by one: the answer is the first distance that lands in the last bucket (the bound where the "
         "logarithmic bucket reaches the last one is not a whole number: round it up)"), start - 1),
        (("this is where the last bucket begins with bidirectional=False; an encoder is bidirectional, so each "
         "direction has num_buckets // 2 buckets"), last_bucket_start(buckets, distance, bidirectional=False)),
        (("max_distance is not where the last bucket begins: the logarithmic buckets are cut with floor, so the "
         "last one starts well before it"), distance),
        (f"this is the answer for {DEFAULT_BUCKETS} buckets, T5's default; the model here has {buckets}",
         last_bucket_start(DEFAULT_BUCKETS, distance)),
        (f"this is the answer for max_distance {DEFAULT_MAX_DISTANCE}, T5's default; the model here uses {distance}",
         last_bucket_start(buckets, DEFAULT_MAX_DISTANCE)),
        ("this is the number of the last bucket, not the distance at which it begins", buckets // 2 - 1),
        ("this is the number of the last bucket of the keys after the query, not a distance", buckets - 1),
    ]
    return {"EXPECTED": [start], "MISTAKES": distinct_mistakes([start], [(why, [wrong]) for why, wrong in mistakes])}


def hiding_distance(lead: float, slope: float) -> int:
    """The smallest whole D >= 2 with lead - slope * D < -slope."""
    return math.floor(1 + lead / slope) + 1


def _alibi_hiding(parameters: Mapping[str, Any]) -> dict[str, Any]:
    from posenc_ref.relative import alibi_slopes

    lead, heads = parameters["lead"], parameters["heads"]
    slopes = alibi_slopes(heads).double().tolist()
    first, last = hiding_distance(lead, slopes[0]), hiding_distance(lead, slopes[-1])
    eight = alibi_slopes(DEFAULT_HEADS).double().tolist()
    mistakes = [
        ((f"the key just before the query pays a penalty too (it is 1 position away): compare the far key's "
         f"extra penalty, for D - 1 positions, with its lead of {lead}"), [first - 1, last - 1]),
        ("the heads are the wrong way round: head 1 has the steepest slope, the last head the gentlest",
         [last, first]),
        (("the heads are the wrong way round, and the key just before the query pays a penalty too (it is 1 "
         "position away)"), [last - 1, first - 1]),
        ((f"these are the slopes of {DEFAULT_HEADS} heads (head 1: 1/2); with {heads} heads head h has the slope "
          f"2**(-8h/{heads})"), [hiding_distance(lead, eight[0]), hiding_distance(lead, eight[-1])]),
    ]
    return {"EXPECTED": [first, last], "MISTAKES": distinct_mistakes([first, last], mistakes)}


VARIANTS = (
    Variant.of(ASSIGNMENT, "4.7", "t5_last_bucket_test", _last_bucket),
    Variant.of(ASSIGNMENT, "4.8", "alibi_hiding_test", _alibi_hiding),
)
