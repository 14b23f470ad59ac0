// SPDX-License-Identifier: GPL-2.0
#define CATCH_CONFIG_MAIN
#include <catch2/catch.hpp>
