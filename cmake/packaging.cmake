# The Debian package: `cmake --build build --target package` writes
# build/dedloc_<version>_<arch>.deb with the binary, the man page and the bash
# completion (the "runtime" install component; the static library, headers and
# pkg-config file of `cmake --install` stay out of it). dpkg-shlibdeps (Debian
# dpkg-dev) declares the shared libraries the binary links; an OpenCL driver
# is declared by hand, since the loader alone finds no device.
# scripts/check_deb.sh installs the package into a fresh Debian 12 root.

find_program(DEDLOC_GZIP gzip)
if(DEDLOC_GZIP)
  # Debian keeps man pages compressed; -n leaves the timestamp out (reproducible).
  set(DEDLOC_MANPAGE ${CMAKE_BINARY_DIR}/dedloc.1.gz)
  add_custom_command(OUTPUT ${DEDLOC_MANPAGE}
    COMMAND ${DEDLOC_GZIP} -9n -c ${CMAKE_SOURCE_DIR}/docs/dedloc.1 > ${DEDLOC_MANPAGE}
    DEPENDS ${CMAKE_SOURCE_DIR}/docs/dedloc.1
    COMMENT "Compressing the man page")
else()
  set(DEDLOC_MANPAGE ${CMAKE_SOURCE_DIR}/docs/dedloc.1)
endif()
add_custom_target(dedloc_manpage ALL DEPENDS ${DEDLOC_MANPAGE})

install(FILES ${DEDLOC_MANPAGE} DESTINATION ${CMAKE_INSTALL_MANDIR}/man1 COMPONENT runtime)
# The bash completion is written by the binary from its option tables
# (`dedloc completion bash`), so it holds exactly what the parsers take.
set(DEDLOC_COMPLETION ${CMAKE_BINARY_DIR}/dedloc-completion.bash)
add_custom_command(OUTPUT ${DEDLOC_COMPLETION}
  COMMAND $<TARGET_FILE:dedloc> completion bash > ${DEDLOC_COMPLETION}
  DEPENDS dedloc
  COMMENT "Writing the bash completion")
add_custom_target(dedloc_completion ALL DEPENDS ${DEDLOC_COMPLETION})
install(FILES ${DEDLOC_COMPLETION}
  DESTINATION ${CMAKE_INSTALL_DATAROOTDIR}/bash-completion/completions
  RENAME dedloc COMPONENT runtime)

set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME dedloc)
set(CPACK_PACKAGE_VENDOR "dedloc")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY
  "train an ALBERT language model together with volunteers over the internet")
set(CPACK_PACKAGE_DESCRIPTION
  "dedloc pretrains one ALBERT model with peers that each bring a GPU (NVIDIA, AMD, Intel) or a CPU, in the manner of DeDLOC: one OpenCL code path, CLBlast for matrix products, training data streamed from files or http(s) servers.")
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_STRIP_FILES ON)
# One package holding only the runtime component.
set(CPACK_DEB_COMPONENT_INSTALL ON)
set(CPACK_COMPONENTS_ALL runtime)
set(CPACK_COMPONENTS_GROUPING ALL_COMPONENTS_IN_ONE)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_NAME dedloc)
set(CPACK_DEBIAN_PACKAGE_MAINTAINER "dedloc maintainers <maintainers@dedloc.invalid>")
set(CPACK_DEBIAN_PACKAGE_SECTION science)
set(CPACK_DEBIAN_PACKAGE_PRIORITY optional)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
# Added to what dpkg-shlibdeps finds: PoCL runs everything on the CPU where no
# other OpenCL driver (opencl-icd: NVIDIA's, Mesa's, Intel's...) is installed.
set(CPACK_DEBIAN_PACKAGE_DEPENDS "pocl-opencl-icd | opencl-icd")
# https data checks certificates against the system's CAs; `dedloc tune` runs
# CLBlast's kernel tuner.
set(CPACK_DEBIAN_PACKAGE_RECOMMENDS "ca-certificates")
set(CPACK_DEBIAN_PACKAGE_SUGGESTS "clblast-utils")
include(CPack)
