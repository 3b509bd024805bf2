# What `cmake --install` (and `make install PREFIX=...`, and the .deb of `make deb`) puts where
# (docs/operations.md "Installing"). The binaries go together into bin/: `llmbus serve` starts
# the actor binaries it finds beside itself, and the worker loads the CUDA module from there.
include(GNUInstallDirs)

install(TARGETS llmbus llmbus-input-processor llmbus-scheduler llmbus-kv-manager llmbus-gpu-worker
                llmbus-output-processor llmbus-api-server llmbus-encoder-cache llmbus-bench
                llmbus-kernel-bench llmbus-clip-bench
        RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT runtime)
if(TARGET llmbus_runner_cuda)
  install(TARGETS llmbus_runner_cuda LIBRARY DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT runtime)
endif()

# The wire contract, for clients in any language (flatc --python/--go/... over these).
file(GLOB llb_schema_files ${CMAKE_SOURCE_DIR}/schemas/*.fbs)
install(FILES ${llb_schema_files} DESTINATION ${CMAKE_INSTALL_DATADIR}/llmbus/schemas COMPONENT runtime)

# systemd units (their ExecStart names the binary alone: systemd finds it in /usr/local/bin or
# /usr/bin) and the environment file they read.
file(GLOB llb_units ${CMAKE_SOURCE_DIR}/ops/deploy/*.service ${CMAKE_SOURCE_DIR}/ops/deploy/*.target)
# lib/systemd/system, not the (multiarch) libdir: where systemd looks under /usr and /usr/local.
install(FILES ${llb_units} DESTINATION lib/systemd/system COMPONENT runtime)
# /etc for the /usr prefix (the package, where it is a conffile), <prefix>/etc otherwise.
if(CMAKE_INSTALL_PREFIX STREQUAL "/usr")
  set(llb_etc /etc/llmbus)
else()
  set(llb_etc ${CMAKE_INSTALL_SYSCONFDIR}/llmbus)
endif()
install(FILES ${CMAKE_SOURCE_DIR}/ops/deploy/llmbus.env DESTINATION ${llb_etc} COMPONENT runtime)

# Monitoring and NATS examples.
install(FILES ${CMAKE_SOURCE_DIR}/ops/prometheus/prometheus.yml DESTINATION ${CMAKE_INSTALL_DATADIR}/llmbus/prometheus
        COMPONENT runtime)
install(FILES ${CMAKE_SOURCE_DIR}/ops/grafana/llmbus.json DESTINATION ${CMAKE_INSTALL_DATADIR}/llmbus/grafana
        COMPONENT runtime)
install(FILES ${CMAKE_SOURCE_DIR}/ops/nats/llmbus-accounts.conf ${CMAKE_SOURCE_DIR}/ops/cluster/nats-node.conf
        DESTINATION ${CMAKE_INSTALL_DATADIR}/llmbus/nats COMPONENT runtime)
install(FILES ${CMAKE_SOURCE_DIR}/README.md DESTINATION ${CMAKE_INSTALL_DOCDIR} COMPONENT runtime)

# The Debian package (`make deb`): cpack's DEB generator, one package holding every component.
# cpack (and the `install` target) need only the installed targets built, not the tests.
set(CMAKE_SKIP_INSTALL_ALL_DEPENDENCY ON)
set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME llmbus)
set(CPACK_PACKAGE_VENDOR llmbus)
set(CPACK_PACKAGE_CONTACT "llmbus maintainers <llmbus@localhost>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "LLM serving engine: actors on NATS, OpenAI-compatible API")
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)     # dpkg-shlibdeps: libnats3.4, libevent, libjansson, ...
set(CPACK_DEBIAN_PACKAGE_DEPENDS "nats-server")  # `llmbus serve` runs the embedded nats-server
set(CPACK_DEBIAN_PACKAGE_SECTION net)
set(CPACK_DEB_COMPONENT_INSTALL OFF)
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_SET_DESTDIR ON)                  # /etc/llmbus is an absolute destination
file(WRITE ${CMAKE_BINARY_DIR}/deb/conffiles "/etc/llmbus/llmbus.env\n")  # an admin's edits survive upgrades
set(CPACK_DEBIAN_PACKAGE_CONTROL_EXTRA ${CMAKE_BINARY_DIR}/deb/conffiles)
include(CPack)
