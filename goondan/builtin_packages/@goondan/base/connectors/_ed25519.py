"""Ed25519 signature verification (RFC 8032 §5.1.7) in pure Python, for the ``discord``
connector: Discord signs each Interactions request with the application's Ed25519 key.

Only verification, only of public data: no secret key is handled here, so the big-integer
arithmetic need not run in constant time. Points are kept in extended homogeneous coordinates
``(X, Y, Z, T)`` with ``x = X/Z``, ``y = Y/Z``, ``x·y = T/Z`` (RFC 8032 §5.1.4). A verification
costs two scalar multiplications, a few milliseconds.

The check is the RFC's cofactorless equation ``[S]B = R + [k]A``, as libsodium and
``cryptography`` apply it to the signatures Discord sends; a non-canonical ``S`` (``S >= L``)
or an encoding that does not decode to a point is refused.
"""

from __future__ import annotations

import hashlib

__all__ = ["verify"]

_P = 2**255 - 19
_L = 2**252 + 27742317777372353535851937790883648493  # the order of the base point
_D = -121665 * pow(121666, _P - 2, _P) % _P
_SQRT_M1 = pow(2, (_P - 1) // 4, _P)

_Point = tuple[int, int, int, int]
_IDENTITY: _Point = (0, 1, 1, 0)


def _add(a: _Point, b: _Point) -> _Point:
    """Point addition (RFC 8032 §5.1.4; also correct for doubling)."""
    x1, y1, z1, t1 = a
    x2, y2, z2, t2 = b
    pa = (y1 - x1) * (y2 - x2) % _P
    pb = (y1 + x1) * (y2 + x2) % _P
    pc = 2 * t1 * t2 * _D % _P
    pd = 2 * z1 * z2 % _P
    e, f, g, h = pb - pa, pd - pc, pd + pc, pb + pa
    return (e * f % _P, g * h % _P, f * g % _P, e * h % _P)


def _multiply(scalar: int, point: _Point) -> _Point:
    """``[scalar]point`` by double-and-add."""
    result = _IDENTITY
    while scalar > 0:
        if scalar & 1:
            result = _add(result, point)
        point = _add(point, point)
        scalar >>= 1
    return result


def _same(a: _Point, b: _Point) -> bool:
    """Do two points in projective coordinates name the same affine point?"""
    return (a[0] * b[2] - b[0] * a[2]) % _P == 0 and (a[1] * b[2] - b[1] * a[2]) % _P == 0


def _x_of(y: int, sign: int) -> int | None:
    """The x coordinate of the point with this ``y`` and low bit ``sign`` (§5.1.3), or None."""
    if y >= _P:
        return None
    x2 = (y * y - 1) * pow(_D * y * y + 1, _P - 2, _P) % _P
    if x2 == 0:
        return None if sign else 0
    x = pow(x2, (_P + 3) // 8, _P)
    if (x * x - x2) % _P:
        x = x * _SQRT_M1 % _P
    if (x * x - x2) % _P:
        return None
    return _P - x if (x & 1) != sign else x


def _decode(data: bytes) -> _Point | None:
    """The point a 32-byte encoding names, or None when it names none (§5.1.3)."""
    if len(data) != 32:
        return None
    y = int.from_bytes(data, "little")
    sign, y = y >> 255, y & ((1 << 255) - 1)
    x = _x_of(y, sign)
    if x is None:
        return None
    return (x, y, 1, x * y % _P)


_BASE_Y = 4 * pow(5, _P - 2, _P) % _P
_BASE_X = _x_of(_BASE_Y, 0)
assert _BASE_X is not None
_BASE: _Point = (_BASE_X, _BASE_Y, 1, _BASE_X * _BASE_Y % _P)


def verify(public_key: bytes, message: bytes, signature: bytes) -> bool:
    """Is ``signature`` (64 bytes) a valid Ed25519 signature of ``message`` by
    ``public_key`` (32 bytes)? Malformed keys and signatures are simply not valid."""
    if len(public_key) != 32 or len(signature) != 64:
        return False
    a = _decode(public_key)
    r = _decode(signature[:32])
    if a is None or r is None:
        return False
    s = int.from_bytes(signature[32:], "little")
    if s >= _L:
        return False
    digest = hashlib.sha512(signature[:32] + public_key + message).digest()
    k = int.from_bytes(digest, "little") % _L
    return _same(_multiply(s, _BASE), _add(r, _multiply(k, a)))
