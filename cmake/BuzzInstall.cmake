# Install rules and Debian packages (CPack DEB), one component per package:
#   daemon  buzz-backfilld   the service, its unit, tmpfiles entry, default configuration
#   ctl     buzzctl          the operator CLI and its bash completion
#   lib     libbuzz-backfill1     the engine's shared library
#   client  libbuzz-backfill-client1  the client library (what a relay links for readiness)
#   dev     libbuzz-backfill-dev  headers, pkg-config files, CMake package configuration
#   desktop buzz-backfill-desktop the GTK 4 client, its .desktop file and icon (when built)
# The version comes from project(VERSION) in the top-level CMakeLists.txt, and only from there.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(BUZZ_PKG_DIR ${PROJECT_SOURCE_DIR}/packaging)

# ---- the engine library -------------------------------------------------------------------
set_target_properties(buzz-backfill PROPERTIES VERSION ${PROJECT_VERSION} SOVERSION 1)
install(TARGETS buzz-backfill EXPORT BuzzBackfillTargets
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT lib NAMELINK_COMPONENT dev)
install(FILES ${PROJECT_SOURCE_DIR}/engine/include/buzz/definition.h
              ${PROJECT_SOURCE_DIR}/engine/include/buzz/engine.h
              ${PROJECT_SOURCE_DIR}/common/include/buzz/err.h
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/buzz COMPONENT dev)
configure_file(${BUZZ_PKG_DIR}/libbuzz-backfill.pc.in
               ${PROJECT_BINARY_DIR}/libbuzz-backfill.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/libbuzz-backfill.pc
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig COMPONENT dev)
target_include_directories(buzz-backfill INTERFACE
  $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>)
install(EXPORT BuzzBackfillTargets NAMESPACE BuzzBackfill::
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/BuzzBackfill COMPONENT dev)
configure_package_config_file(${BUZZ_PKG_DIR}/BuzzBackfillConfig.cmake.in
  ${PROJECT_BINARY_DIR}/BuzzBackfillConfig.cmake
  INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/BuzzBackfill)
write_basic_package_version_file(${PROJECT_BINARY_DIR}/BuzzBackfillConfigVersion.cmake
  COMPATIBILITY SameMajorVersion)
install(FILES ${PROJECT_BINARY_DIR}/BuzzBackfillConfig.cmake
              ${PROJECT_BINARY_DIR}/BuzzBackfillConfigVersion.cmake
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/BuzzBackfill COMPONENT dev)

# ---- the client library ------------------------------------------------------------------
# Headers: buzz/client.h and the generated contracts (buzz/backfill/v1/*.pb-c.h: the stubs are
# the client API); buzz/err.h comes with the engine's headers above.
if(TARGET buzz-backfill-client)
  set_target_properties(buzz-backfill-client PROPERTIES VERSION ${PROJECT_VERSION} SOVERSION 1)
  install(TARGETS buzz-backfill-client
          LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT client NAMELINK_COMPONENT dev)
  install(FILES ${PROJECT_SOURCE_DIR}/client/include/buzz/client.h
          DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/buzz COMPONENT dev)
  foreach(p rpc admin readiness token)
    install(FILES ${PROJECT_BINARY_DIR}/proto/gen/buzz/backfill/v1/${p}.pb-c.h
            DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/buzz/backfill/v1 COMPONENT dev)
  endforeach()
  configure_file(${BUZZ_PKG_DIR}/libbuzz-backfill-client.pc.in
                 ${PROJECT_BINARY_DIR}/libbuzz-backfill-client.pc @ONLY)
  install(FILES ${PROJECT_BINARY_DIR}/libbuzz-backfill-client.pc
          DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig COMPONENT dev)
endif()

# ---- the daemon and the CLI ---------------------------------------------------------------
if(TARGET buzz-backfilld)
  install(TARGETS buzz-backfilld RUNTIME DESTINATION ${CMAKE_INSTALL_SBINDIR} COMPONENT daemon)
  # /usr/lib/systemd/system for the packages (Debian 12 merges /lib into /usr/lib)
  install(FILES ${BUZZ_PKG_DIR}/systemd/buzz-backfilld.service
          DESTINATION ${CMAKE_INSTALL_PREFIX}/lib/systemd/system COMPONENT daemon)
  install(FILES ${BUZZ_PKG_DIR}/systemd/buzz-backfilld.tmpfiles
          DESTINATION ${CMAKE_INSTALL_PREFIX}/lib/tmpfiles.d RENAME buzz-backfilld.conf
          COMPONENT daemon)
  install(FILES ${BUZZ_PKG_DIR}/buzz-backfilld.conf
          DESTINATION ${CMAKE_INSTALL_FULL_SYSCONFDIR}/buzz-backfill
          PERMISSIONS OWNER_READ OWNER_WRITE GROUP_READ COMPONENT daemon)
  # definitions_dir: definition files hold SQL the daemon runs, so only root may write here
  install(DIRECTORY DESTINATION ${CMAKE_INSTALL_FULL_SYSCONFDIR}/buzz-backfill/definitions.d
          DIRECTORY_PERMISSIONS OWNER_READ OWNER_WRITE OWNER_EXECUTE GROUP_READ GROUP_EXECUTE
                                WORLD_READ WORLD_EXECUTE
          COMPONENT daemon)
  # modules: where the packaged configuration's example names the definitions module
  install(DIRECTORY DESTINATION ${CMAKE_INSTALL_PREFIX}/lib/buzz-backfill
          DIRECTORY_PERMISSIONS OWNER_READ OWNER_WRITE OWNER_EXECUTE GROUP_READ GROUP_EXECUTE
                                WORLD_READ WORLD_EXECUTE
          COMPONENT daemon)
endif()
if(TARGET buzzctl)
  install(TARGETS buzzctl RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT ctl)
  install(FILES ${BUZZ_PKG_DIR}/completion/buzzctl
          DESTINATION ${CMAKE_INSTALL_DATADIR}/bash-completion/completions COMPONENT ctl)
endif()

if(TARGET buzz-backfill-desktop)
  install(TARGETS buzz-backfill-desktop RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR}
          COMPONENT desktop)
  install(FILES ${PROJECT_SOURCE_DIR}/client/desktop/buzz-backfill-desktop.desktop
          DESTINATION ${CMAKE_INSTALL_DATADIR}/applications COMPONENT desktop)
  install(FILES ${PROJECT_SOURCE_DIR}/client/desktop/buzz-backfill-desktop.svg
          DESTINATION ${CMAKE_INSTALL_DATADIR}/icons/hicolor/scalable/apps COMPONENT desktop)
endif()

# ---- man pages (scdoc), when scdoc is there ------------------------------------------------
find_program(SCDOC scdoc)
if(SCDOC)
  set(BUZZ_MAN_PAGES "buzz-backfilld.8:daemon" "buzz-backfilld.conf.5:daemon" "buzzctl.1:ctl")
  if(TARGET buzz-backfill-desktop)
    list(APPEND BUZZ_MAN_PAGES "buzz-backfill-desktop.1:desktop")
  endif()
  set(BUZZ_MAN_OUT)
  foreach(entry ${BUZZ_MAN_PAGES})
    string(REPLACE ":" ";" parts ${entry})
    list(GET parts 0 page)
    list(GET parts 1 component)
    string(REGEX REPLACE ".*\\.([0-9])$" "\\1" section ${page})
    set(src ${PROJECT_SOURCE_DIR}/docs/man/${page}.scd)
    set(out ${PROJECT_BINARY_DIR}/man/${page})
    add_custom_command(OUTPUT ${out}.gz
      COMMAND ${CMAKE_COMMAND} -E make_directory ${PROJECT_BINARY_DIR}/man
      COMMAND sh -c "${SCDOC} < '${src}' > '${out}' && gzip -9n -f '${out}'"
      DEPENDS ${src} COMMENT "scdoc ${page}" VERBATIM)
    list(APPEND BUZZ_MAN_OUT ${out}.gz)
    install(FILES ${out}.gz DESTINATION ${CMAKE_INSTALL_MANDIR}/man${section}
            COMPONENT ${component})
  endforeach()
  add_custom_target(buzz-man ALL DEPENDS ${BUZZ_MAN_OUT})
endif()

# ---- Debian packages ----------------------------------------------------------------------
set(BUZZ_COMPONENTS daemon ctl lib client dev)
if(TARGET buzz-backfill-desktop)
  list(APPEND BUZZ_COMPONENTS desktop)
endif()
foreach(component ${BUZZ_COMPONENTS})
  set(name_desktop buzz-backfill-desktop)
  set(name_daemon buzz-backfilld)
  set(name_ctl buzzctl)
  set(name_lib libbuzz-backfill1)
  set(name_client libbuzz-backfill-client1)
  set(name_dev libbuzz-backfill-dev)
  install(FILES ${BUZZ_PKG_DIR}/deb/copyright
          DESTINATION ${CMAKE_INSTALL_DATADIR}/doc/${name_${component}} COMPONENT ${component})
  set(changelog ${PROJECT_BINARY_DIR}/deb/${name_${component}}/changelog.Debian.gz)
  configure_file(${BUZZ_PKG_DIR}/deb/changelog.in
                 ${PROJECT_BINARY_DIR}/deb/${name_${component}}/changelog.Debian @ONLY)
  execute_process(COMMAND gzip -9n -f -k ${PROJECT_BINARY_DIR}/deb/${name_${component}}/changelog.Debian)
  install(FILES ${changelog}
          DESTINATION ${CMAKE_INSTALL_DATADIR}/doc/${name_${component}} COMPONENT ${component})
endforeach()

set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME buzz-backfill)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_CONTACT "buzz-backfill developers <maintainers@buzz-backfill.example.com>")
# No CPACK_PACKAGE_DESCRIPTION_SUMMARY: CPackDeb would put it above every component's own
# summary line (one summary for five packages, theirs shown as a verbatim paragraph). Each
# component's description is its summary line, then plain lines that CPackDeb indents by one
# space (lines that already start with a space would be shown verbatim by apt).
set(CPACK_DEB_COMPONENT_INSTALL ON)
set(CPACK_STRIP_FILES ON)
set(CPACK_COMPONENTS_ALL ${BUZZ_COMPONENTS})
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_PACKAGE_GENERATE_SHLIBS ON)
set(CPACK_DEBIAN_PACKAGE_SECTION database)
set(CPACK_DEBIAN_PACKAGE_PRIORITY optional)
set(CPACK_DEBIAN_PACKAGE_RELEASE 1)
set(CPACK_DEBIAN_PACKAGE_HOMEPAGE "https://example.invalid/buzz-backfill")
# shlibdeps must find the libraries of this build
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS_PRIVATE_DIRS ${PROJECT_BINARY_DIR}/engine
    ${PROJECT_BINARY_DIR}/client)

set(CPACK_DEBIAN_DAEMON_PACKAGE_NAME buzz-backfilld)
set(CPACK_DEBIAN_DAEMON_PACKAGE_SECTION admin)
set(CPACK_DEBIAN_DAEMON_PACKAGE_DEPENDS "adduser, libbuzz-backfill1 (= ${PROJECT_VERSION}-1)")
set(CPACK_DEBIAN_DAEMON_PACKAGE_RECOMMENDS "buzzctl")
set(CPACK_DEBIAN_DAEMON_PACKAGE_CONTROL_EXTRA
    ${BUZZ_PKG_DIR}/deb/daemon/conffiles ${BUZZ_PKG_DIR}/deb/daemon/postinst
    ${BUZZ_PKG_DIR}/deb/daemon/prerm ${BUZZ_PKG_DIR}/deb/daemon/postrm)
set(CPACK_DEBIAN_DAEMON_PACKAGE_CONTROL_STRICT_PERMISSION ON)
set(CPACK_COMPONENT_DAEMON_DESCRIPTION
    "buzz-backfill engine service\nRuns durable, resumable, validated PostgreSQL backfills after a schema change\nand serves the Admin and Readiness APIs over nng (ipc, tcp, tls+tcp).")

set(CPACK_DEBIAN_CTL_PACKAGE_NAME buzzctl)
set(CPACK_DEBIAN_CTL_PACKAGE_SECTION admin)
set(CPACK_COMPONENT_CTL_DESCRIPTION
    "operator client of buzz-backfilld\nLists, starts, pauses, resumes, retries and validates backfills, checks\nreadiness and mints capability tokens.")

set(CPACK_DEBIAN_DESKTOP_PACKAGE_NAME buzz-backfill-desktop)
set(CPACK_DEBIAN_DESKTOP_PACKAGE_SECTION admin)
set(CPACK_COMPONENT_DESKTOP_DESCRIPTION
    "desktop client of buzz-backfilld (GTK 4)\nBackfills with progress, rate and ETA, their detail and audit, readiness as\nthe relay sees it, and the supported controls, each confirmed before it is\nsent; unknown and stale data are shown as such.")

set(CPACK_DEBIAN_LIB_PACKAGE_NAME libbuzz-backfill1)
set(CPACK_DEBIAN_LIB_PACKAGE_SECTION libs)
set(CPACK_DEBIAN_LIB_PACKAGE_CONTROL_EXTRA ${BUZZ_PKG_DIR}/deb/lib/triggers)
set(CPACK_COMPONENT_LIB_DESCRIPTION
    "durable PostgreSQL backfill engine (shared library)\nThe engine behind buzz-backfilld: lifecycle, fenced claims, bounded batches\nand validation, with PostgreSQL as the only authority.")

set(CPACK_DEBIAN_CLIENT_PACKAGE_NAME libbuzz-backfill-client1)
set(CPACK_DEBIAN_CLIENT_PACKAGE_SECTION libs)
set(CPACK_DEBIAN_CLIENT_PACKAGE_CONTROL_EXTRA ${BUZZ_PKG_DIR}/deb/lib/triggers)
set(CPACK_COMPONENT_CLIENT_DESCRIPTION
    "client library of buzz-backfilld (shared library)\nAdmin and Readiness calls over nng with the generated protobuf-c stubs: what\na relay links to ask whether it may serve.")

set(CPACK_DEBIAN_DEV_PACKAGE_NAME libbuzz-backfill-dev)
set(CPACK_DEBIAN_DEV_PACKAGE_SECTION libdevel)
set(CPACK_DEBIAN_DEV_PACKAGE_DEPENDS
    "libbuzz-backfill1 (= ${PROJECT_VERSION}-1), libbuzz-backfill-client1 (= ${PROJECT_VERSION}-1), libpq-dev, libprotobuf-c-dev, libsodium-dev")
set(CPACK_COMPONENT_DEV_DESCRIPTION
    "durable PostgreSQL backfill engine (development files)\nHeaders, pkg-config files and CMake package configuration for writing\nbackfill definitions, embedding the engine and calling the service.")

include(CPack)
