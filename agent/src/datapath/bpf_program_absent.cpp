// SPDX-License-Identifier: GPL-2.0
// mercuryd built with -DMERCURY_BPF=OFF: there is no BPF program to load.
#include <cerrno>

#include "datapath/bpf_program.hpp"

namespace mercury {

Status BpfProgram::load(std::unique_ptr<BpfProgram>&)
{
    return Status{-EOPNOTSUPP, "this mercuryd was built without the BPF datapath (-DMERCURY_BPF=OFF): "
                               "use tcp_mercury.ko (--datapath=kmod)"};
}

void BpfProgram::SkeletonDeleter::operator()(tcp_mercury*) const {}
void BpfProgram::LinkDeleter::operator()(bpf_link*) const {}
BpfProgram::~BpfProgram() = default;

}  // namespace mercury
