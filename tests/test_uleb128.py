"""Unsigned LEB128 (harness.formats.uleb128)."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from harness.formats import uleb128

BOUNDARIES = [
    (0, b"\x00"),
    (1, b"\x01"),
    (127, b"\x7f"),
    (128, b"\x80\x01"),
    (129, b"\x81\x01"),
    (16383, b"\xff\x7f"),
    (16384, b"\x80\x80\x01"),
    (2**21 - 1, b"\xff\xff\x7f"),
    (2**21, b"\x80\x80\x80\x01"),
    (624485, b"\xe5\x8e\x26"),
    (2**32 - 1, b"\xff\xff\xff\xff\x0f"),
    (2**64, b"\x80" * 9 + b"\x02"),
]


@pytest.mark.parametrize("value, encoded", BOUNDARIES)
def test_encode_exact_bytes(value, encoded):
    assert uleb128.encode(value) == encoded


@pytest.mark.parametrize("value, encoded", [(v, e) for v, e in BOUNDARIES if len(e) <= uleb128.MAX_BYTES])
def test_decode_exact_bytes(value, encoded):
    assert uleb128.decode(encoded, 0) == (value, len(encoded))


@pytest.mark.parametrize("data", [b"\x80" * 9 + b"\x02", b"\x80" * 10_000 + b"\x01", b"\x80\x80\x80\x80\x80\x00"])
def test_decode_refuses_values_longer_than_the_formats_use(data):
    """A 10,000-byte ULEB128 is refused after MAX_BYTES, not read into a
    number of 10,000 digits."""
    with pytest.raises(ValueError, match="longer than 5 bytes"):
        uleb128.decode(data, 0)


@pytest.mark.parametrize("value, encoded", BOUNDARIES)
def test_size_matches_encoding_length(value, encoded):
    assert uleb128.size(value) == len(encoded)


def test_encode_negative_rejected():
    with pytest.raises(ValueError):
        uleb128.encode(-1)


def test_decode_returns_position_after_value_from_offset():
    data = b"\xaa\xbb" + b"\x80\x01" + b"\x05"
    assert uleb128.decode(data, 2) == (128, 4)
    assert uleb128.decode(data, 4) == (5, 5)


def test_decode_accepts_memoryview():
    assert uleb128.decode(memoryview(b"\x00\xe5\x8e\x26"), 1) == (624485, 4)


def test_decode_accepts_redundant_continuation_bytes():
    # Non-minimal encodings are still valid ULEB128.
    assert uleb128.decode(b"\x80\x80\x00", 0) == (0, 3)


@pytest.mark.parametrize("data", [b"", b"\x80", b"\xff\xff", b"\x80\x80\x80"])
def test_decode_unterminated_raises_index_error(data):
    with pytest.raises(IndexError):
        uleb128.decode(data, 0)


def test_decode_stops_at_end_argument():
    # The terminating byte lies beyond `end`, so the run is unterminated.
    with pytest.raises(IndexError):
        uleb128.decode(b"\x80\x01", 0, end=1)


def test_decode_at_end_of_data_raises_index_error():
    with pytest.raises(IndexError):
        uleb128.decode(b"\x05", 1)


@given(st.integers(min_value=0, max_value=2**35 - 1))
def test_round_trip(value):
    encoded = uleb128.encode(value)
    assert uleb128.decode(encoded + b"\x99", 0) == (value, len(encoded))
    assert uleb128.size(value) == len(encoded)
    # Minimal: only the last byte lacks the continuation bit, and it is
    # non-zero unless the value itself is 0.
    assert all(b & 0x80 for b in encoded[:-1])
    assert encoded[-1] < 0x80
    assert encoded[-1] != 0 or value == 0
