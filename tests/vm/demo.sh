#!/bin/sh
# SPDX-License-Identifier: GPL-2.0
# The demo until the emulated training cluster lands: the handover benchmark.
exec sh ./bench-cc.sh
