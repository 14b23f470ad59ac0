# SPDX-License-Identifier: GPL-2.0
"""The package version: the one number, kept equal to CMakeLists.txt's
``project(mercury VERSION ...)`` by tests/python."""
__version__ = "0.1.0"
