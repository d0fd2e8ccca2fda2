# `cmake --install`: the tools (ortc, ortc-opt, ortc-run) into bin/, the runtime's static
# library and C API headers into lib/ and include/ortc/, the MPI communicator plugin into
# lib/ortc/, and a CMake package (ortcConfig)
# so that an application can `find_package(ortc)` and link `ortc::ortc_runtime` to load
# and train artifacts. The compiler's own libraries are not installed: nothing links them.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

install(TARGETS ortc ortc-opt ortc-run RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(TARGETS ortc_runtime ortc_digest ortc_cpu_features
  EXPORT ortcTargets
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(DIRECTORY ${CMAKE_SOURCE_DIR}/runtime/include/ortc
  DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
# The communicators of data-parallel runs (MPI, NCCL, RCCL), where the runtime looks for them
# (runtime/src/Communicator.cpp: <bin>/../${ORTC_COMM_INSTALL_DIR}).
install(TARGETS ortc_comm_nccl ortc_comm_rccl LIBRARY DESTINATION ${ORTC_COMM_INSTALL_DIR})
if(TARGET ortc_comm_mpi)
  install(TARGETS ortc_comm_mpi LIBRARY DESTINATION ${ORTC_COMM_INSTALL_DIR})
endif()

set(ORTC_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/ortc)
install(EXPORT ortcTargets NAMESPACE ortc:: DESTINATION ${ORTC_CMAKE_DIR})
configure_package_config_file(${CMAKE_SOURCE_DIR}/cmake/ortcConfig.cmake.in
  ${CMAKE_BINARY_DIR}/ortcConfig.cmake INSTALL_DESTINATION ${ORTC_CMAKE_DIR})
write_basic_package_version_file(${CMAKE_BINARY_DIR}/ortcConfigVersion.cmake
  VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_BINARY_DIR}/ortcConfig.cmake ${CMAKE_BINARY_DIR}/ortcConfigVersion.cmake
  DESTINATION ${ORTC_CMAKE_DIR})

# libMLIR/libLLVM live in /usr/lib/llvm-22/lib, outside the loader's default path: the
# installed tools keep the link directories they were built with as their RUNPATH.
set_target_properties(ortc ortc-opt ortc-run PROPERTIES INSTALL_RPATH_USE_LINK_PATH ON)
