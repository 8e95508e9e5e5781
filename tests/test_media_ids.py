"""Media spans in a prompt sequence (engine/inference/media.py): ids that compare whole images,
a common prefix that never splits one, and text-only prompts untouched."""

from engine.inference.generate import common_prefix
from engine.inference.media import MAX_SPAN, is_media, span_ids, span_index, spans, whole_spans

CAT, DOG = "a" * 64, "b" * 64


def test_a_span_is_negative_indexed_and_deterministic():
    ids = span_ids(CAT, 64)
    assert all(is_media(t) and -(2 ** 31) <= t < 0 for t in ids)
    assert [span_index(t) for t in ids] == list(range(64)) and ids == span_ids(CAT, 64)
    assert len(set(ids)) == 64 and not set(ids) & set(span_ids(DOG, 64))
    assert len(span_ids(CAT, MAX_SPAN)) == MAX_SPAN


def test_spans_are_found_even_side_by_side():
    seq = [1, 2] + span_ids(CAT, 3) + span_ids(CAT, 3) + [5] + span_ids(DOG, 2)
    assert spans(seq) == [(2, 5), (5, 8), (9, 11)] and spans([1, 2, 3]) == []


def test_the_common_prefix_never_ends_inside_an_image():
    head = [10, 11]
    a = head + span_ids(CAT, 8) + [7, 8]
    assert common_prefix(a, list(a)) == len(a)
    assert common_prefix(a, head + span_ids(DOG, 8) + [7, 8]) == 2  # another image: from its start
    assert common_prefix(a, a[:6]) == 2  # a sequence cut inside the image keeps none of it
    assert common_prefix(a, a[:10] + [9]) == 10  # the whole image, then the text differs
    # A colliding first position still cannot keep half an image.
    forged = head + a[2:5] + span_ids(DOG, 8)[3:] + [7, 8]
    assert common_prefix(a, forged) == 2
    assert whole_spans(4, a) == 2 and whole_spans(10, a) == 10


def test_text_only_prefixes_are_what_they_were():
    assert common_prefix([1, 2, 3, 4], [1, 2, 9]) == 2 and common_prefix([], [1]) == 0
    assert common_prefix([5, 6], [5, 6, 7]) == 2
