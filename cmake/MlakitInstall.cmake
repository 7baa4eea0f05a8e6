# Installs the headers and libraries and exports the CMake package, so a consumer can write
#   find_package(mlakit REQUIRED)  target_link_libraries(app PRIVATE mlakit::mlakit)
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(mlakit_targets mlakit mlakit_core)
if(MLAKIT_CUDA)
  list(APPEND mlakit_targets mlakit_cuda)
endif()

install(TARGETS ${mlakit_targets} EXPORT mlakitTargets
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
  INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/mlakit DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
if(MLAKIT_BUILD_TOOLS)
  install(TARGETS mlakit_cli RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
endif()

set(mlakit_cmake_dir ${CMAKE_INSTALL_LIBDIR}/cmake/mlakit)
install(EXPORT mlakitTargets NAMESPACE mlakit:: DESTINATION ${mlakit_cmake_dir})
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/mlakitConfig.cmake.in
  ${PROJECT_BINARY_DIR}/mlakitConfig.cmake INSTALL_DESTINATION ${mlakit_cmake_dir})
write_basic_package_version_file(${PROJECT_BINARY_DIR}/mlakitConfigVersion.cmake COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/mlakitConfig.cmake ${PROJECT_BINARY_DIR}/mlakitConfigVersion.cmake
  DESTINATION ${mlakit_cmake_dir})
