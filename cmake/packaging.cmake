# Debian packages (deploy/package.sh; docs/adr/0025 says why one package).
#   cq        the programs (cq, cq-coordinator, cq-node, cq-shim) and the
#             coordinator's web module (lib/cq/cq-coordinator-web.so), stripped,
#             the systemd units (not enabled: `cq-coordinator install` and
#             `cq-node install` enable theirs), the launchd plist and the docs
#   cq-dbgsym their debug symbols (a .ddeb beside it)
# Runtime dependencies come from dpkg-shlibdeps.
install(TARGETS cq-coordinator cq-node cq-shim RUNTIME DESTINATION bin)
install(TARGETS cq-coordinator-web LIBRARY DESTINATION lib/cq) # loaded by cq-coordinator
install(FILES deploy/systemd/cq-coordinator.service deploy/systemd/cq-node.service
        DESTINATION lib/systemd/system)
install(FILES README.md docs/install.md docs/operations.md docs/job-authors.md docs/protocol.md
        DESTINATION share/doc/cq)
install(FILES deploy/launchd/org.cq.node.plist DESTINATION share/cq/launchd)
install(PROGRAMS deploy/install-node.sh DESTINATION share/cq)

# cpack installs what the build made and builds nothing: deploy/package.sh
# builds first, and the package test runs beside other tests that use the
# same binaries (a relink under them would pull them away).
set(CMAKE_SKIP_INSTALL_ALL_DEPENDENCY ON)

set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME cq)
set(CPACK_PACKAGE_VENDOR "cq")
set(CPACK_PACKAGE_CONTACT "cq maintainers <cq@localhost>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "job queue for a team's shared GPU machines")
set(CPACK_PACKAGE_DESCRIPTION
    "cq places training runs, evaluations and scripts on a handful of shared machines so that RAM, VRAM and GPUs stay busy without overloading one. The package holds the client (cq), the coordinator and the node daemon with their systemd units; neither service is enabled until `cq-coordinator install` or `cq-node install` runs.")
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
# No CPACK_STRIP_FILES: the DEB generator strips the programs itself when it
# makes the dbgsym package (CPACK_DEBIAN_DEBUGINFO_PACKAGE); stripping first
# would leave it nothing to extract.
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION admin)
set(CPACK_DEBIAN_PACKAGE_PRIORITY optional)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_PACKAGE_DEPENDS "adduser")
set(CPACK_DEBIAN_PACKAGE_RELEASE 1)
set(CPACK_DEBIAN_DEBUGINFO_PACKAGE ON)
set(CPACK_DEBIAN_PACKAGE_CONTROL_EXTRA
    ${PROJECT_SOURCE_DIR}/deploy/debian/postinst ${PROJECT_SOURCE_DIR}/deploy/debian/prerm
    ${PROJECT_SOURCE_DIR}/deploy/debian/postrm)
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION ON)
include(CPack)
