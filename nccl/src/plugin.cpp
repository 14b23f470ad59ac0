// SPDX-License-Identifier: GPL-2.0
// libnccl-net-mercury.so: the entry points NCCL finds by dlsym
// (ncclNetPlugin_v11, ncclNetPlugin_v10), each a table of C functions over
// the transport in comm.hpp. NCCL_NET_PLUGIN=mercury selects it.
#include <climits>
#include <cstring>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "comm.hpp"
#include "devices.hpp"
#include "lanes.hpp"
#include "log.hpp"
#include "nccl_net.h"
#include "wire.hpp"

namespace mercury::nccl {
namespace {

// The most one message may carry: test() reports sizes as int.
constexpr size_t kMaxMessage = size_t{1} << 30;

struct Net {
    std::vector<Device> devices;
    std::vector<Settings> settings;   // per device
};

Net& net()
{
    static Net n;
    return n;
}

std::once_flag found_devices;

ncclResult_t init_once(ncclDebugLogger_t logger)
{
    if (logger)
        Log::set(logger);
    std::call_once(found_devices, [] {
        Net& n = net();
        n.devices = find_devices();
        std::string line;
        for (size_t i = 0; i < n.devices.size(); ++i) {
            std::string error;
            n.settings.push_back(read_settings(n.devices[i], &error));
            if (!error.empty())
                Log::warn(error);
            line += " [" + std::to_string(i) + "]" + n.devices[i].name;
        }
        if (!n.devices.empty())
            Log::info("using" + line + ", " + std::to_string(n.settings[0].data_sockets) +
                      " data sockets per connection (NCCL_SOCKET_NTHREADS x NCCL_NSOCKS_PERTHREAD)");
    });
    if (net().devices.empty()) {
        Log::warn("no network interface found (NCCL_SOCKET_IFNAME?)");
        return ncclInternalError;
    }
    return ncclSuccess;
}

// A v11 communicator's context: the lane its class maps to.
struct Context {
    uint8_t lane;
};

ncclResult_t report(const Failure& f)
{
    if (f && !f.reason.empty())
        Log::warn(f.reason);
    return f.code;
}

bool valid_dev(int dev)
{
    if (dev >= 0 && static_cast<size_t>(dev) < net().devices.size())
        return true;
    Log::warn("no device " + std::to_string(dev));
    return false;
}

template <typename Props>
ncclResult_t fill_properties(int dev, Props* props)
{
    if (!valid_dev(dev))
        return ncclInvalidArgument;
    const Device& d = net().devices[static_cast<size_t>(dev)];
    std::memset(props, 0, sizeof(*props));
    props->name = const_cast<char*>(d.name.c_str());
    props->pciPath = d.pci_path.empty() ? nullptr : const_cast<char*>(d.pci_path.c_str());
    props->guid = static_cast<uint64_t>(dev);
    props->ptrSupport = NCCL_PTR_HOST;
    props->regIsGlobal = 0;
    props->forceFlush = 0;
    props->speed = d.speed_mbit;
    props->port = 0;
    props->latency = 0;
    props->maxComms = 65536;
    // One receive per irecv, as NCCL's socket transport: a stream matched
    // in order could stall if NCCL grouped receives across shared comms.
    props->maxRecvs = 1;
    props->netDeviceType = NCCL_NET_DEVICE_HOST;
    props->netDeviceVersion = NCCL_NET_DEVICE_INVALID_VERSION;
    props->vProps.ndevs = 1;
    props->vProps.devs[0] = dev;
    props->maxP2pBytes = kMaxMessage;
    props->maxCollBytes = kMaxMessage;
    return ncclSuccess;
}

// connect()'s progress lives in the handle (NCCL calls it again with the
// same one until it returns a comm); only pointers this process made are
// followed: a handle from the wire carries whatever the peer put there.
std::mutex connectors_mu;
std::set<Connector*> connectors;

Connector* pending_connector(Handle* h)
{
    std::lock_guard lock(connectors_mu);
    auto* c = reinterpret_cast<Connector*>(h->pending);
    return connectors.count(c) ? c : nullptr;
}

void forget_connector(Handle* h, Connector* c)
{
    std::lock_guard lock(connectors_mu);
    connectors.erase(c);
    delete c;
    h->pending = 0;
}

ncclResult_t do_connect(int dev, int lane, void* opaque, void** send_comm)
{
    *send_comm = nullptr;
    if (!valid_dev(dev) || !opaque)
        return ncclInvalidArgument;
    auto* h = static_cast<Handle*>(opaque);
    Connector* c = pending_connector(h);
    Failure f;
    if (!c) {
        auto fresh = std::make_unique<Connector>(*h, net().settings[static_cast<size_t>(dev)],
                                                 static_cast<uint8_t>(lane), &f);
        if (f)
            return report(f);
        c = fresh.release();
        std::lock_guard lock(connectors_mu);
        connectors.insert(c);
        h->pending = reinterpret_cast<uint64_t>(c);
    }
    std::unique_ptr<SendComm> comm = c->step(&f);
    if (f || comm)
        forget_connector(h, c);
    if (f)
        return report(f);
    if (comm)
        Log::info("connected, lane " + std::to_string(lane));
    *send_comm = comm.release();
    return ncclSuccess;
}

// ---- the functions of both tables ----------------------------------------

ncclResult_t devices(int* ndev)
{
    *ndev = static_cast<int>(net().devices.size());
    return ncclSuccess;
}

ncclResult_t do_listen(int dev, void* opaque, void** listen_comm)
{
    *listen_comm = nullptr;
    if (!valid_dev(dev) || !opaque)
        return ncclInvalidArgument;
    Failure f;
    auto comm = std::make_unique<ListenComm>(net().devices[static_cast<size_t>(dev)],
                                             net().settings[static_cast<size_t>(dev)],
                                             static_cast<Handle*>(opaque), &f);
    if (f)
        return report(f);
    *listen_comm = comm.release();
    return ncclSuccess;
}

ncclResult_t do_accept(void* listen_comm, void** recv_comm, ncclNetDeviceHandle_v10_t** dev_comm)
{
    *recv_comm = nullptr;
    if (dev_comm)
        *dev_comm = nullptr;
    Failure f;
    std::unique_ptr<RecvComm> comm = static_cast<ListenComm*>(listen_comm)->accept(&f);
    if (f)
        return report(f);
    *recv_comm = comm.release();
    return ncclSuccess;
}

ncclResult_t reg_mr(void* comm, void* data, size_t size, int type, void** mhandle)
{
    (void)comm;
    (void)data;
    (void)size;
    if (type != NCCL_PTR_HOST) {
        Log::warn("a buffer in GPU memory: this plugin moves host memory only (it says so in getProperties)");
        return ncclInternalError;
    }
    static int token;
    *mhandle = &token;   // nothing to register for host memory
    return ncclSuccess;
}

ncclResult_t reg_mr_dmabuf(void* comm, void* data, size_t size, int type, uint64_t, int, void** mhandle)
{
    (void)comm;
    (void)data;
    (void)size;
    (void)type;
    *mhandle = nullptr;
    Log::warn("DMA-BUF registration: this plugin moves host memory only");
    return ncclInternalError;
}

ncclResult_t dereg_mr(void*, void*)
{
    return ncclSuccess;
}

ncclResult_t isend(void* send_comm, void* data, size_t size, int tag, void*, void*, void** request)
{
    *request = nullptr;
    if (size > kMaxMessage) {
        Log::warn("isend of " + std::to_string(size) + " bytes: more than the " + std::to_string(kMaxMessage) +
                  " getProperties allows");
        return ncclInvalidArgument;
    }
    Request* r = nullptr;
    Failure f = static_cast<SendComm*>(send_comm)->isend(data, size, tag, &r);
    if (f)
        return f.code;   // logged when the connection failed
    *request = r;
    return ncclSuccess;
}

ncclResult_t irecv(void* recv_comm, int n, void** data, size_t* sizes, int* tags, void**, void**, void** request)
{
    *request = nullptr;
    if (n < 1 || n > static_cast<int>(kMaxGroup)) {
        Log::warn("irecv of " + std::to_string(n) + " buffers (1.." + std::to_string(kMaxGroup) + ")");
        return ncclInvalidArgument;
    }
    for (int i = 0; i < n; ++i)
        if (sizes[i] > kMaxMessage) {
            Log::warn("irecv of " + std::to_string(sizes[i]) + " bytes: more than the " +
                      std::to_string(kMaxMessage) + " getProperties allows");
            return ncclInvalidArgument;
        }
    Request* r = nullptr;
    Failure f = static_cast<RecvComm*>(recv_comm)->irecv(n, data, sizes, tags, &r);
    if (f)
        return f.code;   // logged when the connection failed
    *request = r;
    return ncclSuccess;
}

// Host memory is visible once received: nothing to flush (NULL: done).
ncclResult_t iflush(void*, int, void**, int*, void**, void** request)
{
    *request = nullptr;
    return ncclSuccess;
}

ncclResult_t test(void* request, int* done, int* sizes)
{
    *done = 0;
    auto* r = static_cast<Request*>(request);
    if (!r || !r->used || !r->comm) {
        Log::warn("test() of a request that is not outstanding");
        return ncclInternalError;
    }
    Comm* comm = r->comm;
    if (const Failure& f = comm->progress(); f)
        return f.code;
    if (!comm->complete(*r))
        return ncclSuccess;
    *done = 1;
    if (sizes)
        for (int i = 0; i < r->n; ++i)
            sizes[i] = static_cast<int>(r->send ? r->capacity[i] : r->received[i]);
    comm->retire(r);
    return ncclSuccess;
}

ncclResult_t close_send(void* send_comm)
{
    delete static_cast<SendComm*>(send_comm);
    return ncclSuccess;
}

ncclResult_t close_recv(void* recv_comm)
{
    delete static_cast<RecvComm*>(recv_comm);
    return ncclSuccess;
}

ncclResult_t close_listen(void* listen_comm)
{
    delete static_cast<ListenComm*>(listen_comm);
    return ncclSuccess;
}

ncclResult_t get_device_mr(void*, void*, void** dptr)
{
    *dptr = nullptr;
    return ncclInternalError;   // no device offload (netDeviceType HOST)
}

ncclResult_t irecv_consumed(void*, int, void*)
{
    return ncclSuccess;   // only called with device offload, which this plugin has not
}

// ---- v10 ------------------------------------------------------------------

ncclResult_t init_v10(ncclDebugLogger_t logger, ncclProfilerCallback_t)
{
    return init_once(logger);
}

ncclResult_t properties_v10(int dev, ncclNetProperties_v10_t* props)
{
    return fill_properties(dev, props);
}

ncclResult_t listen_v10(int dev, void* handle, void** listen_comm)
{
    return do_listen(dev, handle, listen_comm);
}

ncclResult_t connect_v10(int dev, ncclNetCommConfig_v10_t* config, void* handle, void** send_comm,
                         ncclNetDeviceHandle_v10_t** dev_comm)
{
    if (dev_comm)
        *dev_comm = nullptr;
    std::string error;
    const int lane = lane_of_class(config ? config->trafficClass : NCCL_NET_TRAFFIC_CLASS_UNDEF, &error);
    if (lane < 0) {
        *send_comm = nullptr;
        Log::warn(error);
        return ncclInvalidArgument;
    }
    return do_connect(dev, lane, handle, send_comm);
}

// ---- v11 ------------------------------------------------------------------

ncclResult_t init_v11(void** ctx, uint64_t comm_id, ncclNetCommConfig_v11_t* config, ncclDebugLogger_t logger,
                      ncclProfilerCallback_t)
{
    *ctx = nullptr;
    if (const ncclResult_t r = init_once(logger); r != ncclSuccess)
        return r;
    std::string error;
    const int tc = config ? config->trafficClass : NCCL_NET_TRAFFIC_CLASS_UNDEF;
    const int lane = lane_of_class(tc, &error);
    if (lane < 0) {
        Log::warn(error);
        return ncclInvalidArgument;
    }
    Log::info("communicator " + std::to_string(comm_id) + ": traffic class " + std::to_string(tc) + ", lane " +
              std::to_string(lane));
    *ctx = new Context{static_cast<uint8_t>(lane)};
    return ncclSuccess;
}

ncclResult_t properties_v11(int dev, ncclNetProperties_v11_t* props)
{
    const ncclResult_t r = fill_properties(dev, props);
    if (r == ncclSuccess)
        props->maxMultiRequestSize = 1;
    return r;
}

ncclResult_t listen_v11(void*, int dev, void* handle, void** listen_comm)
{
    return do_listen(dev, handle, listen_comm);
}

ncclResult_t connect_v11(void* ctx, int dev, void* handle, void** send_comm, ncclNetDeviceHandle_v11_t** dev_comm)
{
    if (dev_comm)
        *dev_comm = nullptr;
    const int lane = ctx ? static_cast<Context*>(ctx)->lane : kDefaultLane;
    return do_connect(dev, lane, handle, send_comm);
}

ncclResult_t finalize_v11(void* ctx)
{
    delete static_cast<Context*>(ctx);
    return ncclSuccess;
}

}  // namespace
}  // namespace mercury::nccl

using namespace mercury::nccl;

extern "C" {

__attribute__((visibility("default"))) ncclNet_v11_t ncclNetPlugin_v11 = {
    "Mercury", init_v11, devices, properties_v11, listen_v11, connect_v11, do_accept, reg_mr, reg_mr_dmabuf,
    dereg_mr, isend, irecv, iflush, test, close_send, close_recv, close_listen, get_device_mr, irecv_consumed,
    nullptr /* makeVDevice */, finalize_v11, nullptr /* setNetAttr */,
};

__attribute__((visibility("default"))) ncclNet_v10_t ncclNetPlugin_v10 = {
    "Mercury", init_v10, devices, properties_v10, listen_v10, connect_v10, do_accept, reg_mr, reg_mr_dmabuf,
    dereg_mr, isend, irecv, iflush, test, close_send, close_recv, close_listen, get_device_mr, irecv_consumed,
    nullptr /* makeVDevice */,
};

}  // extern "C"
