// SPDX-License-Identifier: GPL-2.0
#include "datapath/bpf_program.hpp"

#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <linux/magic.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <utility>

#include "tcp_mercury.skel.h"

namespace mercury {

namespace {

// The struct_ops link attach type and map flag of kernel 6.4; Debian 12's
// uapi headers (6.1) predate them.
constexpr int kAttachStructOps = 44;   // BPF_STRUCT_OPS
constexpr unsigned kMapFlagLink = 1U << 13;   // BPF_F_LINK

constexpr const char* kMapNames[] = {MERCURY_BPF_MAP_TAGS, MERCURY_BPF_MAP_FLOWS, MERCURY_BPF_MAP_CONFIG,
                                     MERCURY_BPF_MAP_STATE, MERCURY_BPF_MAP_SOCKS};

// libbpf's messages (a refused program's verifier log runs to hundreds of
// lines) reach stderr for the first failed load only: mercuryd retries
// every check_ms, and must not write that log again each time.
bool g_load_failed_before = false;

int libbpf_print(enum libbpf_print_level level, const char* format, va_list args)
{
    if (level == LIBBPF_DEBUG || g_load_failed_before)
        return 0;
    return std::vfprintf(stderr, format, args);
}

// A bpffs of our own at the pin directory.
Status mount_pin_dir()
{
    std::error_code ec;
    std::filesystem::create_directories(MERCURY_BPF_PIN_DIR, ec);
    if (ec)
        return Status{-ec.value(), "cannot create " MERCURY_BPF_PIN_DIR ": " + ec.message()};
    struct statfs fs {};
    if (statfs(MERCURY_BPF_PIN_DIR, &fs) == 0 && fs.f_type == BPF_FS_MAGIC)
        return {};
    if (mount("bpf", MERCURY_BPF_PIN_DIR, "bpf", 0, "mode=0700") != 0)
        return Status{-errno, std::string("cannot mount a bpffs on " MERCURY_BPF_PIN_DIR ": ") + std::strerror(errno)};
    return {};
}

}  // namespace

void BpfProgram::SkeletonDeleter::operator()(tcp_mercury* skel) const
{
    tcp_mercury::destroy(skel);
}

void BpfProgram::LinkDeleter::operator()(bpf_link* link) const
{
    bpf_link__destroy(link);
}

Status BpfProgram::load(std::unique_ptr<BpfProgram>& out)
{
    if (access("/sys/kernel/btf/vmlinux", R_OK) != 0)
        return Status{-EOPNOTSUPP, "this kernel has no BTF (/sys/kernel/btf/vmlinux; CONFIG_DEBUG_INFO_BTF), which "
                                   "BPF congestion controls need: use tcp_mercury.ko (--datapath=kmod)"};
    if (congestion_control_registered(MERCURY_CA_NAME))
        return Status{-EEXIST, "a congestion control named '" MERCURY_CA_NAME "' is already registered "
                               "(tcp_mercury.ko, or a BPF one another mercuryd owns): use --datapath=kmod, "
                               "or stop the other one"};
    if (Status s = mount_pin_dir(); !s)
        return s;

    libbpf_set_print(libbpf_print);
    std::unique_ptr<BpfProgram> prog(new BpfProgram());
    // Maps pinned by an earlier loader are taken over: their entries, and
    // the sockets still running that loader's program (which read the same
    // maps), stay under control. Pins of another layout are replaced.
    prog->reused_ = pins_present();
    Status s = prog->open_and_load(prog->reused_);
    if (!s && prog->reused_ && s.error == -EINVAL) {
        prog->discarded_ = true;
        prog->reused_ = false;
        unpin();
        s = prog->open_and_load(false);
    }
    if (!s) {
        if (!g_load_failed_before)
            s.message += " (libbpf's log above; retries stay quiet until a load succeeds)";
        g_load_failed_before = true;
        return s;
    }
    g_load_failed_before = false;
    if (Status a = prog->attach(); !a)
        return a;
    // The host-wide counters' entry (mercury_bpf_state, MERCURY_BPF_GLOBAL_STATE).
    const uint64_t global_key = MERCURY_BPF_GLOBAL_STATE;
    const mercury_bpf_state zero{};
    if (bpf_map_update_elem(bpf_map__fd(prog->skel_->maps.mercury_state), &global_key, &zero, BPF_NOEXIST) != 0 &&
        errno != EEXIST)
        return Status{-errno, std::string("cannot create the host-wide counters: ") + std::strerror(errno)};
    std::ofstream(MERCURY_BPF_OWNER_FILE) << getpid() << "\n";
    out = std::move(prog);
    return {};
}

Status BpfProgram::open_and_load(bool reuse_pins)
{
    // Link mode first (the kernel unregisters even if we crash); kernels
    // before 6.4 refuse the flag, and then only our destructor unregisters.
    // Kernels before 6.0 refuse a BPF CC's write of sk_pacing_status: there
    // sockets switched from bbr keep its pacing (doc/datapaths.md).
    Status result;
    // {write sk_pacing_status, link mode}: the most capable first.
    const std::pair<bool, bool> attempts[] = {{true, true}, {true, false}, {false, true}, {false, false}};
    for (const auto& [pacing, link] : attempts) {
        skel_.reset(tcp_mercury::open());
        if (!skel_)
            return Status{-errno, std::string("cannot open the BPF object: ") + std::strerror(errno)};
        if (link)
            bpf_map__set_map_flags(skel_->maps.mercury, kMapFlagLink);
        skel_->rodata->mercury_may_write_pacing = pacing;
        // libbpf reuses a compatible pinned map, and pins the ones it creates.
        for (bpf_map* map : data_maps()) {
            const std::string path = std::string(MERCURY_BPF_PIN_DIR "/") + bpf_map__name(map);
            if (!reuse_pins)
                unlink(path.c_str());
            if (int err = bpf_map__set_pin_path(map, path.c_str()))
                return Status{err, "cannot pin " + path + ": " + std::strerror(-err)};
        }
        const int err = tcp_mercury::load(skel_.get());
        if (!err)
            return {};
        result = Status{err, std::string("the kernel refused the BPF congestion control (needs struct_ops, "
                                         "kernel >= 5.6 with BTF") +
                                 (reuse_pins ? ", and maps like the ones pinned under " MERCURY_BPF_PIN_DIR : "") +
                                 "): " + std::strerror(-err)};
    }
    return result;
}

std::vector<bpf_map*> BpfProgram::data_maps() const
{
    return {skel_->maps.mercury_tags, skel_->maps.mercury_flows, skel_->maps.mercury_config,
            skel_->maps.mercury_state, skel_->maps.mercury_socks};
}

Status BpfProgram::attach()
{
    bpf_map* ops = skel_->maps.mercury;
    // libbpf 1.1 fills the struct_ops value by a map update: on a link-mode
    // map that only prepares it, otherwise it registers the CC.
    map_link_.reset(bpf_map__attach_struct_ops(ops));
    if (!map_link_)
        return Status{-errno, std::string("cannot register the BPF congestion control: ") + std::strerror(errno)};
    if (bpf_map__map_flags(ops) & kMapFlagLink) {
        link_fd_ = UniqueFd(bpf_link_create(bpf_map__fd(ops), 0, static_cast<bpf_attach_type>(kAttachStructOps),
                                            nullptr));
        if (!link_fd_)
            return Status{-errno, std::string("cannot register the BPF congestion control: ") + std::strerror(errno)};
    }
    return {};
}

bool BpfProgram::pins_present()
{
    for (const char* name : kMapNames)
        if (access((std::string(MERCURY_BPF_PIN_DIR "/") + name).c_str(), F_OK) != 0)
            return false;
    return true;
}

void BpfProgram::unpin()
{
    for (const char* name : kMapNames)
        unlink((std::string(MERCURY_BPF_PIN_DIR "/") + name).c_str());
    unlink(MERCURY_BPF_OWNER_FILE);
}

BpfProgram::~BpfProgram()
{
    // Unregister; the pins stay, so that the next loader takes over the
    // entries and the sockets that keep running this program.
    link_fd_ = UniqueFd();
    map_link_.reset();
    skel_.reset();
}

}  // namespace mercury
