# SPDX-License-Identifier: GPL-2.0
"""Python bindings for libmercury (ctypes over the C ABI in agent/include/mercury.h).

Usable from PyTorch or any framework; every call returns at once, even when
mercuryd is missing (MERCURY_E_NOAGENT: kept and sent when it connects).

    client = mercury.Client("resnet50", worker_rank=0)
    client.declare_model([(name, p.numel() * 4) for name, p in model.named_parameters()])
    client.register_socket(layer=0, sock=conn)          # a socket.socket or an fd
    client.report_timings(iteration, forward_us, backward_us)
"""
import ctypes
import ctypes.util
import os

OK = 0
E_NOAGENT = -1
E_INVAL = -2
E_NOMEM = -3
E_NOMODEL = -4


def _load():
    path = os.environ.get("LIBMERCURY") or ctypes.util.find_library("mercury") or "libmercury.so.0"
    lib = ctypes.CDLL(path)
    lib.mercury_open.restype = ctypes.c_void_p
    lib.mercury_open.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_uint32]
    lib.mercury_close.argtypes = [ctypes.c_void_p]
    lib.mercury_declare_model.argtypes = [ctypes.c_void_p, ctypes.c_uint32,
                                          ctypes.POINTER(ctypes.c_char_p), ctypes.POINTER(ctypes.c_uint64)]
    lib.mercury_report_timings.argtypes = [ctypes.c_void_p, ctypes.c_uint64, ctypes.c_uint32,
                                           ctypes.POINTER(ctypes.c_uint32), ctypes.POINTER(ctypes.c_uint32)]
    lib.mercury_register_socket.argtypes = [ctypes.c_void_p, ctypes.c_uint32, ctypes.c_int]
    lib.mercury_begin_iteration.argtypes = [ctypes.c_void_p, ctypes.c_uint64]
    lib.mercury_connected.argtypes = [ctypes.c_void_p]
    lib.mercury_strerror.restype = ctypes.c_char_p
    lib.mercury_strerror.argtypes = [ctypes.c_int]
    return lib


_lib = _load()


def strerror(code):
    return _lib.mercury_strerror(code).decode()


class Client:
    """One trainer process's connection to mercuryd. Use as a context manager."""

    def __init__(self, job, worker_rank=0, socket_path=None):
        self._handle = _lib.mercury_open(socket_path.encode() if socket_path else None,
                                         job.encode(), worker_rank)
        if not self._handle:
            raise ValueError("mercury_open refused job name %r" % job)
        self._layers = 0

    def close(self):
        if self._handle:
            _lib.mercury_close(self._handle)
            self._handle = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    @property
    def connected(self):
        return bool(_lib.mercury_connected(self._handle))

    def declare_model(self, layers):
        """layers: [(name, parameter_bytes), ...] in forward order."""
        n = len(layers)
        names = (ctypes.c_char_p * n)(*[name.encode() for name, _ in layers])
        sizes = (ctypes.c_uint64 * n)(*[size for _, size in layers])
        self._layers = n
        return _lib.mercury_declare_model(self._handle, n, names, sizes)

    def report_timings(self, iteration, forward_us, backward_us):
        if len(forward_us) != len(backward_us):
            return E_INVAL
        n = len(forward_us)
        fwd = (ctypes.c_uint32 * n)(*[int(v) for v in forward_us])
        bwd = (ctypes.c_uint32 * n)(*[int(v) for v in backward_us])
        return _lib.mercury_report_timings(self._handle, iteration, n, fwd, bwd)

    def register_socket(self, layer, sock):
        fd = sock if isinstance(sock, int) else sock.fileno()
        return _lib.mercury_register_socket(self._handle, layer, fd)

    def begin_iteration(self, iteration):
        return _lib.mercury_begin_iteration(self._handle, iteration)
