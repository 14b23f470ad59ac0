# SPDX-License-Identifier: GPL-2.0
"""Mercury's Python client: talks to mercuryd through libmercury (ctypes over
the C ABI in ``agent/include/mercury/client.h``).

Every call returns at once. Without mercuryd the library keeps what it was
told and sends it when the agent appears; without libmercury itself, importing
still works: it warns once and every call is a no-op, so training never
depends on Mercury being installed.

Example::

    import mercury
    with mercury.Client("resnet50", worker_rank=0) as client:
        client.declare_model([("conv1", 37632), ("fc", 2052000)])
        client.register_socket(layer=0, sock=conn)   # a socket.socket or an fd
        client.report_timings(1, forward_us=[300, 90], backward_us=[600, 180])

PyTorch users want :mod:`mercury.torch` instead.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import os
import socket
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Sequence, Tuple, Union

__all__ = ["Client", "MercuryError", "LayerRanks", "available", "strerror",
           "OK", "E_NOAGENT", "E_INVAL", "E_NOMEM", "E_NOMODEL", "NUM_RANKS", "MAX_LANES",
           "__version__"]

OK = 0
E_NOAGENT = -1
E_INVAL = -2
E_NOMEM = -3
E_NOMODEL = -4

from mercury.contract import MAX_LANES, NUM_RANKS  # noqa: E402  (one source, checked against C)
from mercury._version import __version__  # noqa: E402

SocketLike = Union[int, socket.socket]


class MercuryError(Exception):
    """A call libmercury refused; ``code`` is the MERCURY_E_* value."""

    def __init__(self, code: int, what: str) -> None:
        super().__init__(f"{what}: {strerror(code)} ({code})")
        self.code = code


def _candidates() -> list:
    env = os.environ.get("LIBMERCURY")
    if env:
        return [env]
    here = Path(__file__).resolve().parent
    # In the source tree: the CMake build next to it.
    tree = [str(here.parent.parent / "build" / "user" / "agent" / "libmercury.so")]
    found = ctypes.util.find_library("mercury")
    return tree + ([found] if found else []) + ["libmercury.so.0"]


def _load() -> Optional[ctypes.CDLL]:
    errors = []
    for path in _candidates():
        try:
            lib = ctypes.CDLL(path)
            break
        except OSError as e:
            errors.append(str(e))
    else:
        warnings.warn("mercury: libmercury not found (%s); Mercury calls are no-ops" % "; ".join(errors),
                      RuntimeWarning, stacklevel=3)
        return None
    c_void_p, c_uint32, c_uint64, c_int = ctypes.c_void_p, ctypes.c_uint32, ctypes.c_uint64, ctypes.c_int
    lib.mercury_open.restype = c_void_p
    lib.mercury_open.argtypes = [ctypes.c_char_p, ctypes.c_char_p, c_uint32]
    lib.mercury_close.argtypes = [c_void_p]
    lib.mercury_declare_model.argtypes = [c_void_p, c_uint32, ctypes.POINTER(ctypes.c_char_p),
                                          ctypes.POINTER(c_uint64)]
    lib.mercury_report_timings.argtypes = [c_void_p, c_uint64, c_uint32, ctypes.POINTER(c_uint32),
                                           ctypes.POINTER(c_uint32)]
    lib.mercury_register_socket.argtypes = [c_void_p, c_uint32, c_int]
    lib.mercury_register_lane.argtypes = [c_void_p, c_uint32, c_uint32, c_int]
    lib.mercury_release_socket.argtypes = [c_void_p, c_int]
    lib.mercury_release_lanes.argtypes = [c_void_p]
    lib.mercury_subscribe_ranks.argtypes = [c_void_p]
    lib.mercury_layer_ranks.argtypes = [c_void_p, ctypes.POINTER(ctypes.c_uint8), c_uint32,
                                        ctypes.POINTER(c_uint32), ctypes.POINTER(c_int)]
    lib.mercury_last_error.argtypes = [c_void_p, ctypes.c_char_p, ctypes.c_size_t]
    lib.mercury_begin_iteration.argtypes = [c_void_p, c_uint64]
    lib.mercury_connected.argtypes = [c_void_p]
    lib.mercury_strerror.restype = ctypes.c_char_p
    lib.mercury_strerror.argtypes = [c_int]
    return lib


_lib = _load()


def available() -> bool:
    """True if libmercury was loaded (the agent may still be absent)."""
    return _lib is not None


def strerror(code: int) -> str:
    if _lib is None:
        return "libmercury not loaded"
    return _lib.mercury_strerror(code).decode()


def _fd(sock: SocketLike) -> int:
    return sock if isinstance(sock, int) else sock.fileno()


@dataclass(frozen=True)
class LayerRanks:
    """The agent's ranks for the job's layers (0 = most urgent)."""
    generation: int
    datapath: bool   # a Mercury datapath enforces them right now
    ranks: Tuple[int, ...]


class Client:
    """One trainer process's connection to mercuryd. Use as a context manager.

    Methods return True when the agent took the message now and False when it
    is not connected (the library sends it when it connects); they raise
    :class:`MercuryError` for calls that can never succeed.
    """

    def __init__(self, job: str, worker_rank: int = 0, socket_path: Optional[str] = None) -> None:
        self._handle = None
        self._layers = 0
        if _lib is None:
            return
        self._handle = _lib.mercury_open(socket_path.encode() if socket_path else None, job.encode(),
                                         worker_rank)
        if not self._handle:
            raise MercuryError(E_INVAL, "job name %r (1 to 255 bytes)" % job)

    def close(self) -> None:
        if self._handle:
            _lib.mercury_close(self._handle)
            self._handle = None

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _check(self, rc: int, what: str) -> bool:
        if rc == OK:
            return True
        if rc == E_NOAGENT:
            return False
        raise MercuryError(rc, what)

    @property
    def connected(self) -> bool:
        return bool(self._handle and _lib.mercury_connected(self._handle))

    def wait_connected(self, timeout: float) -> bool:
        """Waits up to ``timeout`` seconds for the agent; True if connected."""
        deadline = time.monotonic() + timeout
        while not self.connected and time.monotonic() < deadline:
            time.sleep(0.02)
        return self.connected

    def declare_model(self, layers: Sequence[Tuple[str, int]]) -> bool:
        """layers: [(name, parameter_bytes), ...] in forward order."""
        if not self._handle:
            return False
        n = len(layers)
        names = (ctypes.c_char_p * n)(*[name.encode() for name, _ in layers])
        sizes = (ctypes.c_uint64 * n)(*[int(size) for _, size in layers])
        self._layers = n
        return self._check(_lib.mercury_declare_model(self._handle, n, names, sizes), "declare_model")

    def report_timings(self, iteration: int, forward_us: Sequence[float], backward_us: Sequence[float]) -> bool:
        """One iteration's measured compute per layer, in microseconds."""
        if not self._handle:
            return False
        if len(forward_us) != len(backward_us):
            raise MercuryError(E_INVAL, "report_timings: forward and backward differ in length")
        n = len(forward_us)
        fwd = (ctypes.c_uint32 * n)(*[min(int(v), 0xFFFFFFFF) for v in forward_us])
        bwd = (ctypes.c_uint32 * n)(*[min(int(v), 0xFFFFFFFF) for v in backward_us])
        return self._check(_lib.mercury_report_timings(self._handle, iteration, n, fwd, bwd), "report_timings")

    def register_socket(self, layer: int, sock: SocketLike) -> bool:
        """This TCP connection carries ``layer``'s tensor. The socket is passed
        (proving ownership); its number and cookie are kept (no descriptor
        more) to pass it again to a restarted agent until :meth:`release_socket`."""
        if not self._handle:
            return False
        return self._check(_lib.mercury_register_socket(self._handle, layer, _fd(sock)), "register_socket")

    def release_socket(self, sock: SocketLike) -> None:
        """Forgets a registered socket: call it before closing a socket you
        registered (one closed without it is forgotten when its number no
        longer names it)."""
        if self._handle:
            self._check(_lib.mercury_release_socket(self._handle, _fd(sock)), "release_socket")

    def register_lane(self, lane: int, lanes: int, sock: SocketLike) -> bool:
        """This TCP connection is one of priority lane ``lane`` of ``lanes``."""
        if not self._handle:
            return False
        return self._check(_lib.mercury_register_lane(self._handle, lane, lanes, _fd(sock)), "register_lane")

    def release_lanes(self) -> bool:
        """Forgets every lane connection; the agent withdraws their entries."""
        if not self._handle:
            return False
        return self._check(_lib.mercury_release_lanes(self._handle), "release_lanes")

    def subscribe_ranks(self) -> bool:
        """Asks the agent for the layers' ranks, now and whenever they change."""
        if not self._handle:
            return False
        return self._check(_lib.mercury_subscribe_ranks(self._handle), "subscribe_ranks")

    def layer_ranks(self) -> Optional[LayerRanks]:
        """The latest ranks the agent sent, or None if none arrived yet."""
        if not self._handle or not self._layers:
            return None
        buf = (ctypes.c_uint8 * self._layers)()
        gen, datapath = ctypes.c_uint32(0), ctypes.c_int(0)
        n = _lib.mercury_layer_ranks(self._handle, buf, self._layers, ctypes.byref(gen), ctypes.byref(datapath))
        if n < 0:
            raise MercuryError(n, "layer_ranks")
        if n != self._layers:
            return None  # for another model, or none yet
        return LayerRanks(gen.value, bool(datapath.value), tuple(buf[:n]))

    def last_error(self) -> Optional[Tuple[int, str]]:
        """(errno, reason) the agent gave when it last refused us, or None."""
        if not self._handle:
            return None
        msg = ctypes.create_string_buffer(256)
        code = _lib.mercury_last_error(self._handle, msg, len(msg))
        return (code, msg.value.decode(errors="replace")) if code else None

    def begin_iteration(self, iteration: int) -> bool:
        if not self._handle:
            return False
        return self._check(_lib.mercury_begin_iteration(self._handle, iteration), "begin_iteration")
