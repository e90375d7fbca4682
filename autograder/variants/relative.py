r"""The varied items of chapter 4 (relative encodings): 4.3, the T5 buckets a short training run reaches, 4.7,
which keys share a decoder's bucket, and 4.8, when ALiBi hides the better token.

Buckets come from ``posenc_ref.relative.relative_position_bucket`` (the rule of T5 and of Hugging Face's
``T5Attention``). With :math:`n` buckets for one direction (``num_buckets // 2`` bidirectional, ``num_buckets``
causal) and :math:`e = n / 2` exact ones, a distance :math:`a \ge e` is in bucket
:math:`e + \lfloor (n - e) \ln(a / e) / \ln(\text{max\_distance} / e) \rfloor` (at most :math:`n - 1`).

4.3: in sequences of at most :math:`L` tokens the offsets run from :math:`-(L - 1)` to :math:`L - 1`; the buckets
that learn are those of these offsets, both directions for the encoder, the past only (keys after the query are
masked) for a causal decoder. Counted by scanning the offsets; for the allowed values no bucket is skipped, so the
counts are :math:`2 b(L - 1) + 1` and :math:`b(L - 1) + 1` in the two layouts.

4.7: the distances that share the bucket of a key :math:`a` tokens before the query, in a decoder
(``bidirectional=False``), found by scanning; bucket :math:`e + k` holds
:math:`e\,(\text{max\_distance}/e)^{k/(n - e)} \le a < e\,(\text{max\_distance}/e)^{(k + 1)/(n - e)}`, and for the
allowed values no edge is within 1e-4 of a whole number.

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


def _buckets(offsets: list[int], num_buckets: int, max_distance: int, *, bidirectional: bool) -> list[int]:
    import torch

    from posenc_ref.relative import relative_position_bucket

    return relative_position_bucket(torch.tensor(offsets), bidirectional=bidirectional, num_buckets=num_buckets,
                                    max_distance=max_distance).tolist()


def trained_buckets(num_buckets: int, max_distance: int, length: int) -> list[int]:
    """[encoder, decoder]: how many buckets the offsets of sequences of at most ``length`` tokens reach."""
    encoder = _buckets(list(range(-(length - 1), length)), num_buckets, max_distance, bidirectional=True)
    decoder = _buckets(list(range(-(length - 1), 1)), num_buckets, max_distance, bidirectional=False)
    return [len(set(encoder)), len(set(decoder))]


def _trained(parameters: Mapping[str, Any]) -> dict[str, Any]:
    buckets, distance, length = parameters["num_buckets"], parameters["max_distance"], parameters["length"]
    right = trained_buckets(buckets, distance, length)
    encoder, decoder = right
    past = (encoder - 1) // 2  # the encoder's bucket of distance L - 1, as buckets 0 .. past are all reached
    mistakes = [
        ("off by one: a sequence of L tokens has distances 0 to L - 1, not L",
         trained_buckets(buckets, distance, length + 1)),
        (("the encoder's offset 0 is counted twice: it is one bucket (0); the keys after the query start at "
          "bucket num_buckets // 2 + 1"), [encoder + 1, decoder]),
        ("the encoder has both directions: the keys after the query reach buckets of their own",
         [past + 1, decoder]),
        ("the decoder spends all num_buckets buckets on the past (n = num_buckets), not half of them",
         [encoder, past + 1]),
        ("the counts are the wrong way round: [encoder, decoder]", [decoder, encoder]),
        ("sequences shorter than max_distance do not reach every bucket: count the buckets of their offsets",
         [buckets, buckets]),
        ((f"these are the counts for T5's defaults ({DEFAULT_BUCKETS} buckets, max_distance "
         f"{DEFAULT_MAX_DISTANCE}); the model here has {buckets} buckets and max_distance {distance}"),
         trained_buckets(DEFAULT_BUCKETS, DEFAULT_MAX_DISTANCE, length)),
    ]
    return {"EXPECTED": right, "MISTAKES": distinct_mistakes(right, mistakes)}


def shared_distances(num_buckets: int, max_distance: int, distance: int, *, bidirectional: bool = False) -> list[int]:
    """[first, last]: the distances whose keys before the query share the bucket of the key ``distance`` back."""
    distances = list(range(1, 4 * max_distance + 1))
    buckets = _buckets([-a for a in distances], num_buckets, max_distance, bidirectional=bidirectional)
    mine = buckets[distance - 1]
    shared = [a for a, bucket in zip(distances, buckets, strict=True) if bucket == mine]
    return [shared[0], shared[-1]]


def _shared(parameters: Mapping[str, Any]) -> dict[str, Any]:
    buckets, distance, a = parameters["num_buckets"], parameters["max_distance"], parameters["distance"]
    first, last = right = shared_distances(buckets, distance, a)
    mistakes = [
        (("this is the bucket of an encoder (bidirectional=True, num_buckets // 2 buckets a direction); a decoder "
          "spends all num_buckets buckets on the keys before the query"),
         shared_distances(buckets, distance, a, bidirectional=True)),
        (("the last distance is one too far: it is the first distance of the next bucket (round the upper edge "
         "up, then step back one)"), [first, last + 1]),
        (("the first distance is one too near: it is the last distance of the bucket below (round the lower edge "
         "up)"), [first - 1, last]),
        ("both ends are one too far out: they belong to the neighbouring buckets", [first - 1, last + 1]),
    ]
    return {"EXPECTED": right, "MISTAKES": distinct_mistakes(right, mistakes)}


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
    Variant.of(ASSIGNMENT, "4.3", "bucket_reach_test", _trained),
    Variant.of(ASSIGNMENT, "4.7", "t5_shared_test", _shared),
    Variant.of(ASSIGNMENT, "4.8", "alibi_hiding_test", _alibi_hiding),
)
