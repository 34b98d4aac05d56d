"""The pure-Python Ed25519 verifier of the ``discord`` connector, against the RFC 8032 test
vectors and against real signatures made by the ``cryptography`` package (OpenSSL)."""

from __future__ import annotations

import hashlib

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from hypothesis import given, settings
from hypothesis import strategies as st

from goondan.tools import load_entry_module
from tests.support.connector_harness import CONNECTORS

verify = load_entry_module(CONNECTORS / "_ed25519.py", kind="connector").verify

# RFC 8032 §7.1, TEST 1, 2, 3 and SHA(abc): (public key, message, signature).
RFC_8032 = [
    ("d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a", "",
     "e5564300c360ac729086e2cc806e828a84877f1eb8e5d974d873e065224901555fb8821590a33bacc61e39701cf9b46bd25bf5f0595bbe24655141438e7a100b"),
    ("3d4017c3e843895a92b70aa74d1b7ebc9c982ccf2ec4968cc0cd55f12af4660c", "72",
     "92a009a9f0d4cab8720e820b5f642540a2b27b5416503f8fb3762223ebdb69da085ac1e43e15996e458f3613d0f11d8c387b2eaeb4302aeeb00d291612bb0c00"),
    ("fc51cd8e6218a1a38da47ed00230f0580816ed13ba3303ac5deb911548908025", "af82",
     "6291d657deec24024827e69c3abe01a30ce548a284743a445e3680d7db5ac3ac18ff9b538d16f290ae67f760984dc6594a7c15e9716ed28dc027beceea1ec40a"),
    ("ec172b93ad5e563bf4932c70e1245034c35467ef2efd4d64ebf819683467e2bf",
     hashlib.sha512(b"abc").hexdigest(),
     "dc2a4459e7369633a52b1bf277839a00201009a3efbf3ecb69bea2186c26b58909351fc9ac90b3ecfdfbc7c66431e0303dca179c138ac17ad9bef1177331a704"),
]


@pytest.mark.parametrize(("key", "message", "signature"), RFC_8032)
def test_the_rfc_8032_vectors_verify_and_any_change_breaks_them(
    key: str, message: str, signature: str
) -> None:
    public, data, sig = bytes.fromhex(key), bytes.fromhex(message), bytes.fromhex(signature)
    assert verify(public, data, sig)
    assert not verify(public, data + b"\0", sig)
    for i in (0, 31, 32, 63):  # a flipped bit in R, in S
        broken = bytearray(sig)
        broken[i] ^= 0x01
        assert not verify(public, data, bytes(broken))
    other = bytes.fromhex(RFC_8032[(RFC_8032.index((key, message, signature)) + 1) % 4][0])
    assert not verify(other, data, sig)


def test_malformed_keys_and_signatures_are_not_valid() -> None:
    key, message, signature = (bytes.fromhex(x) for x in RFC_8032[1])
    assert not verify(key[:31], message, signature)
    assert not verify(key, message, signature[:63])
    assert not verify(key, message, b"")
    # S >= L (the group order) is refused even though S - L would verify (malleability).
    order = 2**252 + 27742317777372353535851937790883648493
    s = int.from_bytes(signature[32:], "little")
    assert not verify(key, message, signature[:32] + (s + order).to_bytes(32, "little"))
    # A y coordinate >= p, and one with no x on the curve, decode to no point.
    assert not verify(b"\xff" * 31 + b"\x7f", message, signature)
    assert not verify((2).to_bytes(32, "little"), message, signature)


def _raw_public(key: Ed25519PrivateKey) -> bytes:
    return key.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)


@settings(max_examples=40, deadline=None)
@given(seed=st.binary(min_size=32, max_size=32), message=st.binary(max_size=300))
def test_real_signatures_made_by_openssl_verify(seed: bytes, message: bytes) -> None:
    key = Ed25519PrivateKey.from_private_bytes(seed)
    signature = key.sign(message)
    assert verify(_raw_public(key), message, signature)
    assert not verify(_raw_public(key), message + b"x", signature)
