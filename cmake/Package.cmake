# What `cmake --install` and the Debian package (scripts/package, CPack)
# install besides libparallax and its headers (trainer/CMakeLists.txt) and
# the Python package (python/CMakeLists.txt):
#
#   lib/parallax/bin/   parallax, parallax-coordinator, parallax-agent,
#                       parallax-ps, parallax-trainer: one directory, so the
#                       agent's own bin dir (always executable for tasks)
#                       holds only Parallax's programs, never all of bin/
#   bin/                links to the three commands people run
#   share/doc/parallax/ README.md and docs/
# and, in the Debian package only (its paths are the system's):
#   /lib/systemd/system/parallax-{coordinator,agent}.service
#   /etc/default/parallax-{coordinator,agent}  (commented defaults; conffiles)
#   a python3 .pth file, so `import parallax` finds the Python package
#   postinst: the `parallax` system user, /var/lib/parallax, /etc/parallax
include(GNUInstallDirs)

set(PARALLAX_PROGRAMS parallax parallax-coordinator parallax-agent parallax-ps)
if(TARGET parallax-trainer)
  list(APPEND PARALLAX_PROGRAMS parallax-trainer)
endif()
install(TARGETS ${PARALLAX_PROGRAMS} RUNTIME DESTINATION lib/parallax/bin)
foreach(program parallax parallax-coordinator parallax-agent)
  install(CODE "
    set(bin \"\$ENV{DESTDIR}\${CMAKE_INSTALL_PREFIX}/${CMAKE_INSTALL_BINDIR}\")
    file(MAKE_DIRECTORY \"\${bin}\")
    file(CREATE_LINK ../lib/parallax/bin/${program} \"\${bin}/${program}\" SYMBOLIC)")
endforeach()
install(FILES README.md DESTINATION ${CMAKE_INSTALL_DATAROOTDIR}/doc/parallax)
install(DIRECTORY docs/ DESTINATION ${CMAKE_INSTALL_DATAROOTDIR}/doc/parallax)

# ---- The Debian package: cpack -G DEB (scripts/package) ----
# Files at the system's own paths form the `system` component, which only
# the package installs (a `cmake --install` never writes to /etc).
set(px_staging ${PROJECT_BINARY_DIR}/packaging)
install(FILES packaging/systemd/parallax-coordinator.service packaging/systemd/parallax-agent.service
  DESTINATION /lib/systemd/system COMPONENT system EXCLUDE_FROM_ALL)
install(FILES packaging/default/parallax-coordinator packaging/default/parallax-agent
  DESTINATION /etc/default COMPONENT system EXCLUDE_FROM_ALL)
if(PARALLAX_HAVE_PYTHON)
  # Debian's python3 reads .pth files in /usr/lib/python3/dist-packages only.
  file(WRITE ${px_staging}/parallax.pth "/usr/${PARALLAX_PYTHON_INSTALL_DIR}\n")
  install(FILES ${px_staging}/parallax.pth DESTINATION /usr/lib/python3/dist-packages
    COMPONENT system EXCLUDE_FROM_ALL)
endif()

set(CPACK_INSTALL_CMAKE_PROJECTS
  "${PROJECT_BINARY_DIR};Parallax;ALL;/" "${PROJECT_BINARY_DIR};Parallax;system;/")
set(CPACK_PACKAGE_NAME parallax)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_VENDOR "Parallax")
set(CPACK_PACKAGE_CONTACT "Parallax operators <parallax@localhost>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY
  "Sparsity-aware distributed training: coordinator, agent, CLI, trainer and PS shards")
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_GENERATOR DEB)
set(CPACK_STRIP_FILES TRUE)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION science)
set(CPACK_DEBIAN_COMPRESSION_TYPE gzip)
# The shared libraries the programs link, as Debian names them (dpkg-shlibdeps).
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_PACKAGE_DEPENDS "adduser")
if(PARALLAX_HAVE_PYTHON)
  set(CPACK_DEBIAN_PACKAGE_RECOMMENDS
    "python${Python_VERSION_MAJOR}.${Python_VERSION_MINOR}, python3-numpy, python3-torch")
endif()
# conffiles: the /etc/default files, kept as edited across upgrades.
set(CPACK_DEBIAN_PACKAGE_CONTROL_EXTRA
  ${PROJECT_SOURCE_DIR}/packaging/debian/postinst
  ${PROJECT_SOURCE_DIR}/packaging/debian/postrm
  ${PROJECT_SOURCE_DIR}/packaging/debian/conffiles)
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION TRUE)
include(CPack)
