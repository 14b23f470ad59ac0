# SPDX-License-Identifier: GPL-2.0
#
# Mercury: top-level build. `make` builds the module and user space;
# `make test` installs what it needs and runs every test; `make demo` runs the
# main job. See README.md.

BUILD   ?= build
USER    := $(BUILD)/user
KO      := kmod/tcp_mercury.ko
INITRD  := $(BUILD)/initramfs.cpio.gz
JOBS    ?= $(shell nproc)

.PHONY: all deps kmod kmod-guest user deb test unit bpftest torchtest pstest nccltest vmtest systemdtest fuzz bench bench-jobs bench-gap bench-nccl bench-torch bench-ps bench-ps-cost bench-cc bench-agent demo install clean guest

all: kmod user

deps:
	scripts/install-deps.sh

guest: deps
	scripts/fetch-guest-kernel.sh >/dev/null

# The module for the running kernel (a real worker)...
kmod:
	$(MAKE) -C kmod

# ...and for the tests' guest kernel, Debian's 6.1 cloud kernel under qemu
# (the build machines' own kernel has no module support).
GUEST_KREL = $(shell scripts/guest-kernel.sh)
kmod-guest: deps
	$(MAKE) -C kmod KREL=$(GUEST_KREL)

user:
	cmake -S . -B $(USER) -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
	cmake --build $(USER) -j$(JOBS)

$(INITRD): kmod-guest user guest
	scripts/vm/build-initramfs.sh $@ $(KO) $(USER)/bin $(USER)/tests/bin $(USER)/lib

# Debian packages: mercury, python3-mercury, mercury-dkms (build/deb/*.deb).
deb: deps
	scripts/make-deb.sh $(BUILD)/deb

# Unit tests only (no VM): C/C++ (ctest) and the Python package (pytest).
unit: user
	cd $(USER) && ctest --output-on-failure
	/usr/bin/python3 -m pytest -q -p no:cacheprovider tests/python

# The BPF datapath on this host's kernel, in network namespaces (root).
bpftest: user
	tests/native/bpf_tests.sh $(USER)

# mercury.torch on real PyTorch (Gloo), natively with the BPF datapath (root):
# Debian 12's PyTorch 1.13, then Debian 13's 2.6 in a debootstrap root
# (scripts/torch-root.sh, made once under build/roots).
torchtest: deps user
	tests/torch/run.sh $(USER)
	root=$$(scripts/torch-root.sh) && tests/torch/run.sh $(USER) "$$root"

# mercury-ps against hostile peers and impostor servers, on a sanitizer build (root).
pstest: user
	tests/integration/run-ps.sh $(BUILD) $(USER)

# The NCCL plugin's harness on a sanitizer build, a sender killed 100 times (root).
nccltest:
	tests/integration/run-nccl-asan.sh $(BUILD)

# The module on a real kernel under qemu.
vmtest: $(INITRD)
	scripts/vm/run.sh tests $(INITRD)

# The .debs in a Debian 12 guest that boots systemd: apt install, the units
# under systemctl (socket activation, reload, restart, watchdog, the BPF
# datapath's pins), purge. The base image is cached under $(BUILD)/rootfs.
systemdtest: deb guest
	scripts/vm/systemd-guest.sh $(BUILD)/deb

# The agent protocol decoder under libFuzzer for a bounded time.
fuzz:
	scripts/fuzz.sh $(or $(FUZZ_SECONDS),60)

# Everything, from a fresh machine: install, build, unit + VM tests.
test: deps
	scripts/run-tests.sh

# The paper's experiment natively with the BPF datapath: models x bandwidths,
# ByteScheduler tuned per point, repeats with CIs, every baseline's CC pinned,
# checked against a lower bound; build/bench.{log,md,json,png}. Then the
# paper's scale, 8 workers + 8 servers, at 25 Mbit/s per link (at 50, two
# cores cannot keep all 32 links loaded: the link check fails), bytes scaled
# to match; build/bench-8x8.*. Last, two jobs at once (bench-jobs).
SCALE_POINTS ?= vgg16:2.5 resnet50:2.5
bench: deps user
	experiment/bench/bench.sh $(BUILD)/bench
	W=8 S=8 RATE=25 POINTS="$(SCALE_POINTS)" ABLATION_POINTS="" BALANCED_POINTS="" \
		experiment/bench/bench.sh $(BUILD)/bench-8x8
	experiment/bench/bench-jobs.sh $(BUILD)/bench-jobs

# Two jobs on the same 4 + 4 hosts (VGG-16 with ResNet-50, VGG-16 with
# VGG-16): each job's time against running alone, under fifo, mercury
# without and with job isolation; Jain's index; build/bench-jobs.{md,json}.
bench-jobs: deps user
	experiment/bench/bench-jobs.sh $(BUILD)/bench-jobs

# Where mercury and fifo lose time against the bound: links sampled during
# one run per point, forward-pass waits by layer, against the simulated
# schedule; build/bench-gap.{md,json,png}.
bench-gap: deps user
	experiment/bench/bench-gap.sh $(BUILD)/bench-gap

# One connection of the NCCL plugin against iperf3 with as many streams, on
# an unshaped link between two namespaces; build/bench-nccl.txt.
bench-nccl: deps user
	command -v iperf3 >/dev/null || apt-get install -y iperf3
	experiment/bench/bench-nccl.sh $(USER) | tee $(BUILD)/bench-nccl.txt

# Real PyTorch on the emulated cluster: DDP vs mercury.torch (one lane,
# lanes on cubic, lanes with priorities); build/bench-torch.{md,json,png}.
bench-torch: deps user
	experiment/bench/bench-torch.sh $(BUILD)

# The same through mercury-ps (backend="ps"): servers on hosts of their own,
# then colocated with the workers; beside tuned DDP and the best all-reduce
# mode; then real compute (ResNet-18), 2 workers and 2 server hosts, with CPU
# utilisation (the servers' CPU seconds in bench-torch-stats.txt).
# build/bench-ps-{separate,colocated,real}/bench-torch.{md,json,png}.
PS_MODES_RUN ?= ddp@5,ddp@25,ddp@100,full,ps-vanilla,ps-cubic,ps-full
bench-ps: deps user
	PS_TOPOLOGY=separate MODES=$(PS_MODES_RUN) MODELS="$${MODELS:-vgg16}" RATES="$${RATES:-25 35 50}" \
		SKIP_REAL=1 experiment/bench/bench-torch.sh $(BUILD)/bench-ps-separate
	PS_TOPOLOGY=colocated MODES=$(PS_MODES_RUN) MODELS="$${MODELS:-vgg16}" RATES="$${RATES:-25 50}" \
		SKIP_REAL=1 experiment/bench/bench-torch.sh $(BUILD)/bench-ps-colocated
	PS_TOPOLOGY=separate MODES=ddp@25,full,ps-vanilla,ps-cubic,ps-full MODELS=" " \
		experiment/bench/bench-torch.sh $(BUILD)/bench-ps-real

# What a mercury-ps server costs: memory per declared gradient byte, CPU per
# byte summed (4 workers, a 256 MB model, loopback); one JSON line.
bench-ps-cost: deps user
	/usr/bin/python3 experiment/bench/ps-cost.py $(BUILD)/user/bin/mercury-ps | tee $(BUILD)/bench-ps-cost.json

# The CC's behaviour with the module in the VM, then the BPF datapath's
# per-ACK CPU cost against cubic natively, with 1 and 1,000 active flows.
bench-cc: $(INITRD)
	scripts/vm/run.sh bench-cc $(INITRD)
	BIN=$(USER)/bin:$(USER)/tests/bin experiment/bench/bench-ack-cost.sh | tee $(BUILD)/bench-ack-cost.txt

bench-agent: $(INITRD)
	scripts/vm/run.sh bench-agent $(INITRD)

# The main job: the emulated training cluster, vanilla vs Mercury; first
# natively with the BPF datapath (the replayer, then real PyTorch training
# for a minute), then in the VM with tcp_mercury.ko.
demo: deps
	$(MAKE) user
	@echo "=== natively, BPF datapath"
	experiment/demo-native.sh $(BUILD)/native-demo.log
	experiment/report/report.sh $(BUILD)/native-demo.log $(BUILD)/demo
	@echo "=== real PyTorch: DDP vs mercury.torch, natively (short; make bench-torch for the sweep)"
	MODELS=resnet18 RATES=50 REPEATS=2 WARMUP=2 ITERATIONS=3 MODES=ddp,one-lane,full SKIP_REAL=1 \
		experiment/bench/bench-torch.sh $(BUILD)/demo-torch
	$(MAKE) $(INITRD)
	@echo "=== in the VM, tcp_mercury.ko"
	scripts/vm/run.sh demo $(INITRD)
	experiment/report/report.sh $(BUILD)/vm-demo.log $(BUILD)/demo-vm

install: all
	$(MAKE) -C kmod install
	cmake --install $(USER)

clean:
	$(MAKE) -C kmod clean
	rm -rf $(BUILD)
