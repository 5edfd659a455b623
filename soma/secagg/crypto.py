"""The cryptographic primitives secure aggregation uses, all from `cryptography` (OpenSSL).

Nothing here is written by hand; this module only fixes which primitive, which parameters,
and what is bound into each derivation:

- key pairs: X25519 (`new_private_key`, raw 32-byte public and private keys);
- a pairwise secret: X25519 agreement, then HKDF-SHA256 to 32 bytes, with `info` naming the
  purpose, the session and the two clients (`agree`), so one agreement never gives the same
  key for two purposes or two sessions;
- encryption of shares: AES-256-GCM, a fresh 96-bit random nonce per message, prepended to
  the ciphertext, and associated data naming session, sender and recipient (`seal`, `open_`):
  a ciphertext moved to another slot, or changed, does not decrypt;
- the mask generator: AES-256-CTR keyed by the 32-byte seed, counter from zero (see
  soma.secagg.masks); each seed is used for exactly one stream.

`cryptography` is imported on first use, so `import soma` (and `import soma.secagg`) work
without it; using secure aggregation without it raises MissingCryptography, saying what to
install.
"""

from __future__ import annotations

import os
from types import SimpleNamespace
from typing import Any

from soma.secagg.errors import MissingCryptography, SecAggError

KEY_BYTES = 32
NONCE_BYTES = 12
_LABEL = b"soma-secagg/1"

_LIB: SimpleNamespace | None = None


def lib() -> SimpleNamespace:
    """The `cryptography` primitives, imported once, or MissingCryptography."""
    global _LIB
    if _LIB is None:
        try:
            from cryptography.exceptions import InvalidTag
            from cryptography.hazmat.primitives import hashes
            from cryptography.hazmat.primitives.asymmetric.x25519 import (
                X25519PrivateKey,
                X25519PublicKey,
            )
            from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes
            from cryptography.hazmat.primitives.ciphers.aead import AESGCM
            from cryptography.hazmat.primitives.kdf.hkdf import HKDF
        except ImportError as error:
            raise MissingCryptography(
                "secure aggregation needs the 'cryptography' package (>= 41): "
                f"pip install 'soma[privacy]' ({error})"
            ) from None
        _LIB = SimpleNamespace(
            InvalidTag=InvalidTag,
            hashes=hashes,
            X25519PrivateKey=X25519PrivateKey,
            X25519PublicKey=X25519PublicKey,
            Cipher=Cipher,
            algorithms=algorithms,
            modes=modes,
            AESGCM=AESGCM,
            HKDF=HKDF,
        )
    return _LIB


def new_private_key() -> Any:
    """A fresh X25519 private key (from the OS's CSPRNG)."""
    return lib().X25519PrivateKey.generate()


def public_bytes(private: Any) -> bytes:
    return private.public_key().public_bytes_raw()


def private_bytes(private: Any) -> bytes:
    return private.private_bytes_raw()


def private_from_bytes(raw: bytes) -> Any:
    return lib().X25519PrivateKey.from_private_bytes(raw)


def label(*parts: object) -> bytes:
    """An unambiguous byte string naming what a key or message is for."""
    return b"|".join([_LABEL, *(str(p).encode("utf-8") for p in parts)])


def agree(private: Any, peer: bytes, info: bytes, *, whose: str = "the peer") -> bytes:
    """32 bytes both ends derive alike: X25519(private, peer), then HKDF-SHA256 with `info`."""
    c = lib()
    try:
        shared = private.exchange(c.X25519PublicKey.from_public_bytes(peer))
    except ValueError as error:  # not 32 bytes, or a low-order point (an all-zero secret)
        raise SecAggError(
            f"the public key of {whose} is not a usable X25519 key ({error})"
        ) from None
    return c.HKDF(algorithm=c.hashes.SHA256(), length=KEY_BYTES, salt=None, info=info).derive(
        shared
    )


def seal(key: bytes, plaintext: bytes, associated: bytes) -> bytes:
    """AES-256-GCM of `plaintext` under `key`, bound to `associated`: nonce || ciphertext."""
    nonce = os.urandom(NONCE_BYTES)
    return nonce + lib().AESGCM(key).encrypt(nonce, plaintext, associated)


def open_(key: bytes, sealed: bytes, associated: bytes) -> bytes | None:
    """The plaintext `seal` sealed, or None when it does not decrypt (changed, or not ours)."""
    c = lib()
    if len(sealed) < NONCE_BYTES + 16:
        return None
    try:
        return c.AESGCM(key).decrypt(sealed[:NONCE_BYTES], sealed[NONCE_BYTES:], associated)
    except c.InvalidTag:
        return None


def keystream(seed: bytes) -> Any:
    """An AES-256-CTR encryptor keyed by `seed` from counter 0: `.update(zeros)` is the
    pseudorandom stream."""
    if len(seed) != KEY_BYTES:
        raise SecAggError(f"a mask seed is {KEY_BYTES} bytes, not {len(seed)}")
    c = lib()
    return c.Cipher(c.algorithms.AES(seed), c.modes.CTR(bytes(16))).encryptor()
