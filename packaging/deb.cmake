# SPDX-License-Identifier: GPL-2.0
# make deb: three Debian packages from one build (CPack), configured with
# -DCMAKE_INSTALL_PREFIX=/usr by scripts/make-deb.sh:
#   mercury         mercuryd, mercuryctl, mercury-ps, libmercury (headers, pkg-config),
#                   systemd units, /etc/mercury/mercuryd.conf (a conffile)
#   python3-mercury the Python package (mercury, mercury.torch)
#   mercury-dkms    the module's source for DKMS, built on install and on
#                   every kernel upgrade

# The module's source as DKMS wants it: kmod/ and the headers it includes.
configure_file(${CMAKE_CURRENT_LIST_DIR}/dkms/dkms.conf.in ${CMAKE_BINARY_DIR}/dkms/dkms.conf @ONLY)
install(FILES ${CMAKE_BINARY_DIR}/dkms/dkms.conf DESTINATION src/mercury-${PROJECT_VERSION}
        COMPONENT dkms EXCLUDE_FROM_ALL)
install(FILES kmod/Kbuild kmod/tcp_mercury.h kmod/mercury_cc.c kmod/mercury_table.c kmod/mercury_netlink.c
        DESTINATION src/mercury-${PROJECT_VERSION}/kmod COMPONENT dkms EXCLUDE_FROM_ALL)
install(FILES include/mercury/uapi.h include/mercury/cc_core.h include/mercury/cc_hooks.h
        DESTINATION src/mercury-${PROJECT_VERSION}/include/mercury COMPONENT dkms EXCLUDE_FROM_ALL)
configure_file(${CMAKE_CURRENT_LIST_DIR}/deb/dkms.postinst.in ${CMAKE_BINARY_DIR}/deb/dkms/postinst @ONLY)
configure_file(${CMAKE_CURRENT_LIST_DIR}/deb/dkms.prerm.in ${CMAKE_BINARY_DIR}/deb/dkms/prerm @ONLY)
configure_file(${CMAKE_CURRENT_LIST_DIR}/deb/mercury.postinst ${CMAKE_BINARY_DIR}/deb/mercury/postinst COPYONLY)
configure_file(${CMAKE_CURRENT_LIST_DIR}/deb/mercury.postrm ${CMAKE_BINARY_DIR}/deb/mercury/postrm COPYONLY)
configure_file(${CMAKE_CURRENT_LIST_DIR}/deb/mercury.conffiles ${CMAKE_BINARY_DIR}/deb/mercury/conffiles COPYONLY)

set(CPACK_GENERATOR DEB)
set(CPACK_DEB_COMPONENT_INSTALL ON)
set(CPACK_STRIP_FILES ON)
set(CPACK_COMPONENTS_ALL mercury python dkms)
set(CPACK_PACKAGE_NAME mercury)
set(CPACK_PACKAGE_VENDOR "Mercury")
set(CPACK_PACKAGE_CONTACT "Mercury maintainers <maintainers@mercury.invalid>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "transport-layer scheduling for data-parallel DNN training")
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION net)

set(CPACK_DEBIAN_MERCURY_PACKAGE_NAME mercury)
set(CPACK_DEBIAN_MERCURY_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_MERCURY_DESCRIPTION
    "Mercury agent, control tool and trainer library\n mercuryd learns per-layer compute timings from trainers and pushes\n per-connection priorities to the mercury congestion control (the\n module from mercury-dkms, or the eBPF one it loads itself).")
set(CPACK_DEBIAN_MERCURY_PACKAGE_CONTROL_EXTRA
    ${CMAKE_BINARY_DIR}/deb/mercury/postinst;${CMAKE_BINARY_DIR}/deb/mercury/postrm;${CMAKE_BINARY_DIR}/deb/mercury/conffiles)
set(CPACK_DEBIAN_MERCURY_PACKAGE_CONTROL_STRICT_PERMISSION ON)

set(CPACK_DEBIAN_PYTHON_PACKAGE_NAME python3-mercury)
set(CPACK_DEBIAN_PYTHON_PACKAGE_ARCHITECTURE all)
set(CPACK_DEBIAN_PYTHON_PACKAGE_DEPENDS "python3, mercury (= ${PROJECT_VERSION})")
set(CPACK_DEBIAN_PYTHON_DESCRIPTION
    "Python client of the Mercury agent, and mercury.torch\n python3 -m mercury status; mercury.torch.DistributedOptimizer for PyTorch.")

set(CPACK_DEBIAN_DKMS_PACKAGE_NAME mercury-dkms)
set(CPACK_DEBIAN_DKMS_PACKAGE_ARCHITECTURE all)
set(CPACK_DEBIAN_DKMS_PACKAGE_DEPENDS "dkms, make")
set(CPACK_DEBIAN_DKMS_DESCRIPTION
    "tcp_mercury congestion control, as DKMS source\n Built by DKMS for every installed kernel with headers, and again on\n kernel upgrades.")
set(CPACK_DEBIAN_DKMS_PACKAGE_CONTROL_EXTRA ${CMAKE_BINARY_DIR}/deb/dkms/postinst;${CMAKE_BINARY_DIR}/deb/dkms/prerm)
set(CPACK_DEBIAN_DKMS_PACKAGE_CONTROL_STRICT_PERMISSION ON)
include(CPack)
