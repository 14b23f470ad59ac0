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
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>

#include "tcp_mercury.skel.h"

namespace mercury {

namespace {

// The struct_ops link attach type and map flag of kernel 6.4; Debian 12's
// uapi headers (6.1) predate them.
constexpr int kAttachStructOps = 44;   // BPF_STRUCT_OPS
constexpr unsigned kMapFlagLink = 1U << 13;   // BPF_F_LINK

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

    std::unique_ptr<BpfProgram> prog(new BpfProgram());
    // Link mode first (the kernel unregisters even if we crash); kernels
    // before 6.4 refuse the flag, and then only our destructor unregisters.
    for (const bool link : {true, false}) {
        prog->skel_.reset(tcp_mercury::open());
        if (!prog->skel_)
            return Status{-errno, std::string("cannot open the BPF object: ") + std::strerror(errno)};
        if (link)
            bpf_map__set_map_flags(prog->skel_->maps.mercury, kMapFlagLink);
        const int err = tcp_mercury::load(prog->skel_.get());
        if (!err)
            break;
        if (!link)
            return Status{err, std::string("the kernel refused the BPF congestion control (needs struct_ops, "
                                           "kernel >= 5.6 with BTF): ") + std::strerror(-err)};
    }
    if (Status s = prog->attach(); !s)
        return s;
    if (Status s = prog->pin(); !s)
        return s;
    out = std::move(prog);
    return {};
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

Status BpfProgram::pin()
{
    unpin();   // pins a crashed owner left behind
    pinned_ = true;
    bpf_map* const maps[] = {skel_->maps.mercury_tags, skel_->maps.mercury_flows, skel_->maps.mercury_config,
                             skel_->maps.mercury_state, skel_->maps.mercury_socks};
    for (bpf_map* map : maps) {
        const std::string path = std::string(MERCURY_BPF_PIN_DIR "/") + bpf_map__name(map);
        if (int err = bpf_map__pin(map, path.c_str()))
            return Status{err, "cannot pin " + path + ": " + std::strerror(-err)};
    }
    std::ofstream(MERCURY_BPF_OWNER_FILE) << getpid() << "\n";
    return {};
}

void BpfProgram::unpin() const
{
    for (const char* name : {MERCURY_BPF_MAP_TAGS, MERCURY_BPF_MAP_FLOWS, MERCURY_BPF_MAP_CONFIG,
                             MERCURY_BPF_MAP_STATE, MERCURY_BPF_MAP_SOCKS})
        unlink((std::string(MERCURY_BPF_PIN_DIR "/") + name).c_str());
    unlink(MERCURY_BPF_OWNER_FILE);
}

BpfProgram::~BpfProgram()
{
    // Unregister first, so nobody finds maps without a CC behind them.
    link_fd_ = UniqueFd();
    map_link_.reset();
    if (pinned_)
        unpin();
    skel_.reset();
}

}  // namespace mercury
