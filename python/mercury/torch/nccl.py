# SPDX-License-Identifier: GPL-2.0
"""NCCL lanes: the :class:`mercury.torch.reducer.Reducer` of
``backend="nccl"``, for models on GPUs.

Each lane is an NCCL process group whose communicators carry an NCCL
traffic class (``ncclConfig_t.trafficClass``, PyTorch's
``ProcessGroupNCCL.Options().config.traffic_class``): lane ``L`` of ``N``
gets class ``lane_rank(L, N)``, the datapath rank a Gloo lane of the same
index gets. NCCL hands the class to its network plugin; Mercury's
(``libnccl-net-mercury.so``, ``nccl/``) runs every socket of the
communicator on congestion control ``mercury`` and registers it with the
local mercuryd as that lane. NCCL's own sockets live in its proxy threads,
so unlike the Gloo lanes nothing here touches a socket: the class is the
whole contract.

What it takes: PyTorch 2.8 or later built with NCCL 2.26 or later (the
first with traffic classes), CUDA, and the plugin selected
(``NCCL_NET_PLUGIN=mercury``, set here when unset and the library loads).
Without the plugin the lanes still train, correctly, on NCCL's own transport
without priorities, with one warning.

Each process group has its own CUDA stream (ProcessGroupNCCL's), so each
lane's reductions run on a stream of their own; ``work.wait()`` makes the
stream that runs the forward pass wait for a bucket's reduction (an event,
not a host wait).
"""
from __future__ import annotations

import ctypes
import os
import re
import warnings
from typing import Any, Callable, List, Mapping, Optional, Sequence, Set, Tuple

import torch
import torch.distributed as dist

import mercury
from mercury.contract import lane_rank
from mercury.torch._job import default_job
from mercury.torch.lanes import check_lane_count

__all__ = ["NcclLanes", "check_nccl", "unsupported", "plugin_selection", "nccl_version", "has_traffic_class",
           "PLUGIN", "PLUGIN_LIBRARY"]

PLUGIN = "mercury"                           # NCCL_NET_PLUGIN's value for Mercury's plugin
PLUGIN_LIBRARY = "libnccl-net-mercury.so"    # what NCCL then dlopen()s
MIN_TORCH = (2, 8)
MIN_NCCL = (2, 26, 0)
# What NCCL sums (ProcessGroupNCCL views complex tensors as real pairs).
SUMMABLE = frozenset({torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.int8, torch.uint8,
                      torch.int32, torch.int64, torch.complex64, torch.complex128})


def _version(text: str) -> Tuple[int, ...]:
    """``"2.8.0+cu128"`` -> ``(2, 8, 0)``."""
    return tuple(int(x) for x in re.findall(r"\d+", text.split("+")[0])[:3])


def nccl_version() -> Optional[Tuple[int, int, int]]:
    """The NCCL this PyTorch runs (major, minor, patch), or None if it has none."""
    if not dist.is_nccl_available():
        return None
    v = torch.cuda.nccl.version()
    if isinstance(v, int):   # older PyTorch: NCCL_VERSION_CODE, major*10000 + minor*100 + patch
        return v // 10000, v // 100 % 100, v % 100
    return tuple(v)[:3]  # type: ignore[return-value]


def unsupported(torch_version: str, nccl: Optional[Tuple[int, int, int]], traffic_class: bool,
                cuda: bool) -> Optional[str]:
    """Why ``backend="nccl"`` cannot run here, or None: PyTorch
    ``torch_version`` with NCCL ``nccl`` (None: built without it), whose
    NCCL config has a ``traffic_class`` field or not, CUDA usable or not."""
    fix = "(use backend='allreduce', Gloo lanes, meanwhile)"
    if _version(torch_version) < MIN_TORCH:
        return (f"backend='nccl' needs PyTorch {'.'.join(map(str, MIN_TORCH))} or later (the first to pass an NCCL "
                f"traffic class per process group); this is PyTorch {torch_version}: upgrade PyTorch {fix}")
    if nccl is None:
        return f"backend='nccl' needs a PyTorch built with NCCL; PyTorch {torch_version} has none {fix}"
    if nccl < MIN_NCCL:
        return (f"backend='nccl' needs NCCL {'.'.join(map(str, MIN_NCCL[:2]))} or later (traffic classes); this "
                f"PyTorch runs NCCL {'.'.join(map(str, nccl))}: install a newer NCCL (the nvidia-nccl package) {fix}")
    if not traffic_class:
        return (f"backend='nccl': PyTorch {torch_version} was built against an NCCL without traffic classes "
                f"(ProcessGroupNCCL.NCCLConfig has no traffic_class) {fix}")
    if not cuda:
        return f"backend='nccl' sums CUDA tensors and no CUDA device is usable here {fix}"
    return None


def has_traffic_class() -> bool:
    """Whether this PyTorch's NCCL config carries a traffic class."""
    pg = getattr(dist, "ProcessGroupNCCL", None)
    config = getattr(pg, "NCCLConfig", None)
    return config is not None and hasattr(config(), "traffic_class")


def check_nccl(**_: Any) -> None:
    """Backend ``"nccl"``'s check, before anything collective: RuntimeError
    saying what is missing and what to do."""
    why = unsupported(torch.__version__, nccl_version(), has_traffic_class(), torch.cuda.is_available())
    if why:
        raise RuntimeError(f"mercury.torch: {why}")


def _plugin_loads() -> bool:
    try:
        ctypes.CDLL(PLUGIN_LIBRARY)
    except OSError:
        return False
    return True


def plugin_selection(env: Mapping[str, str], loads: Callable[[], bool]) -> Tuple[dict, Optional[str]]:
    """What to add to the environment before NCCL loads its network plugin,
    and the one warning to give (None: Mercury's plugin will carry the
    lanes). ``env``: the environment now; ``loads()``: whether
    ``libnccl-net-mercury.so`` can be loaded from the library path."""
    chosen = env.get("NCCL_NET_PLUGIN", "")
    ours = chosen in ("", PLUGIN) or os.path.basename(chosen) == PLUGIN_LIBRARY
    if not ours:
        return {}, (f"NCCL_NET_PLUGIN={chosen} is not Mercury's plugin: the lanes' traffic classes go to that "
                    f"plugin, and no Mercury priorities reach their sockets (NCCL_NET_PLUGIN={PLUGIN} selects "
                    "Mercury's)")
    if env.get("NCCL_NET", "") not in ("", "Mercury"):
        return {}, (f"NCCL_NET={env['NCCL_NET']} makes NCCL use its {env['NCCL_NET']} transport, not Mercury's "
                    "plugin: no priorities (unset NCCL_NET)")
    if not chosen.startswith("/") and not loads():
        return {}, (f"{PLUGIN_LIBRARY} not found on the library path (install Mercury's package, or add the build's "
                    "lib/ directory to LD_LIBRARY_PATH): NCCL's own transport carries the lanes, without priorities")
    return ({} if chosen else {"NCCL_NET_PLUGIN": PLUGIN}), None


class NcclLanes:
    """``n`` NCCL process groups over all ranks, lane ``L`` with traffic
    class ``lane_rank(L, n)``; collective, as :class:`~mercury.torch.lanes.Lanes`.

    Each group's communicator is created and connected here (a one-element
    all-reduce on the current CUDA device), so the plugin registers every
    lane's sockets before the first backward pass. The plugin's sessions
    with mercuryd use this job's name and this worker's index
    (``$MERCURY_JOB``, ``$MERCURY_WORKER``, set here when unset).
    """

    warned_plugin = False   # the plugin warning, once per process

    def __init__(self, n: int) -> None:
        check_lane_count(n)
        check_nccl()
        add, warning = plugin_selection(os.environ, _plugin_loads)
        os.environ.update(add)
        os.environ.setdefault("MERCURY_JOB", default_job())
        os.environ.setdefault("MERCURY_WORKER", str(dist.get_rank()))
        self.reason_no_plugin = warning
        if warning and not NcclLanes.warned_plugin:
            NcclLanes.warned_plugin = True
            warnings.warn(f"mercury.torch: {warning}", RuntimeWarning, stacklevel=3)
        self.previous_cc: Set[str] = set()   # the plugin sets the CC as it opens each socket
        self.groups: List[dist.ProcessGroup] = []
        device = torch.device("cuda", torch.cuda.current_device())
        for lane in range(n):
            options = dist.ProcessGroupNCCL.Options()
            options.config.traffic_class = lane_rank(lane, n)
            # No resources shared with another communicator: a split sharing
            # them would carry its parent's connections, and so its class.
            options.config.split_share = 0
            group = dist.new_group(backend="nccl", pg_options=options)
            dist.all_reduce(torch.zeros(1, device=device), group=group)   # connect now
            self.groups.append(group)
        torch.cuda.synchronize(device)

    def __len__(self) -> int:
        return len(self.groups)

    def pin(self, cc: str) -> Optional[str]:
        """The plugin runs every lane socket on ``mercury`` (the host's
        default where it cannot, with a warning in NCCL's log); another CC
        is not the plugin's to set."""
        if cc != "mercury":
            return (f"backend='nccl' runs its lanes on congestion control mercury (Mercury's NCCL plugin sets it); "
                    f"congestion_control={cc!r} needs backend='allreduce'")
        return None

    def keep(self, n: int) -> None:
        """Uses only the first ``n`` lanes from now on."""
        for group in self.groups[n:]:
            dist.destroy_process_group(group)
        del self.groups[n:]

    def close(self) -> None:
        """Destroys the lanes' process groups (collective)."""
        self.keep(0)

    def register(self, client: mercury.Client) -> bool:
        """Nothing to do: the plugin registers each socket as its
        communicator's lane as it opens it."""
        return True

    def prepare(self, buckets: Sequence[Tuple[int, torch.dtype, torch.device]]) -> None:
        """TypeError for a bucket NCCL cannot sum: not on a CUDA device, or
        of a dtype NCCL has no sum for."""
        for _, dtype, device in buckets:
            if device.type != "cuda":
                raise TypeError(f"mercury.torch: backend='nccl' sums CUDA tensors; a bucket's parameters are on "
                                f"{device} (move the model to its GPU first, or use backend='allreduce')")
            if dtype not in SUMMABLE:
                raise TypeError(f"mercury.torch: backend='nccl' cannot sum {dtype} gradients")

    def reduce(self, bucket: int, flat: torch.Tensor, lane: int) -> Any:
        """Starts the sum of ``flat`` over the workers, in place, on lane
        ``lane``'s stream."""
        return dist.all_reduce(flat, group=self.groups[lane], async_op=True)

    @staticmethod
    def when_done(work: Any, callback: Callable[[], None]) -> None:
        """``callback`` once ``work`` is done as far as the host can tell:
        for NCCL, once the reduction is queued behind the streams' events
        (the trace's "done" is its launch, not its end)."""
        work.get_future().then(lambda _f: callback())
