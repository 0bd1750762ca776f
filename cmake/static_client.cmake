# `cq` is started for every command, and on a slow machine each shared library
# it loads costs 0.3 to 1 ms (docs/adr/0032). Where the static archives are
# installed (Debian's libzmq3-dev, libsodium-dev, libpgm-dev, libbsd-dev),
# `cq` links libzmq and its dependencies statically, without Kerberos
# (cli/static/no_gssapi.cpp), OpenPGM's start-up lookup
# (cli/static/no_pgm.cpp) or NORM and Protolib and their static
# constructors (cli/static/no_norm.cpp), plus the C++ runtime and fmt's compiled
# part (cli/static/fmt_compiled.cpp), as a non-PIE executable (no relocations
# of its own to apply at start). It links the C library statically too
# (docs/adr/0052): no dynamic loader runs at all. The daemons, tests and
# benchmarks link everything shared, as before.
#
# The switch is the CQ_STATIC_CLIENT property of the program being linked:
# cq_bus links `cq_zmq`, which resolves to the archives for a program that
# sets it and to the shared libzmq for every other. `cq_fmt` and
# `cq_spdlog` do the same for fmt and spdlog, which Debian ships as shared
# libraries only: for `cq` they resolve to no library (fmt's compiled part is
# in cq, and cq calls no spdlog function), for every other program to the
# shared ones. Compiling a library sees fmt's and spdlog's headers either way.
option(CQ_STATIC_CLIENT "Link cq's ZeroMQ, libsodium and C++ runtime statically where the archives are installed" ON)

set(CQ_STATIC_CLIENT_OK OFF)
if(CQ_STATIC_CLIENT AND NOT CQ_SANITIZE AND CMAKE_SYSTEM_NAME STREQUAL "Linux"
   AND CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
  include(CheckIncludeFileCXX)
  check_include_file_cxx(gssapi/gssapi.h CQ_HAVE_GSSAPI_H)
  check_include_file_cxx(normApi.h CQ_HAVE_NORMAPI_H)
  set(_missing "")
  set(CQ_ZMQ_ARCHIVES "")
  # libzmq.a's own dependencies, in link order (`pkg-config --static --libs libzmq`
  # without Kerberos, NORM and Protolib, which no_norm.cpp stands in for).
  foreach(_lib zmq sodium pgm bsd md)
    find_library(CQ_STATIC_${_lib} NAMES lib${_lib}.a)
    if(CQ_STATIC_${_lib})
      list(APPEND CQ_ZMQ_ARCHIVES ${CQ_STATIC_${_lib}})
    else()
      list(APPEND _missing lib${_lib}.a)
    endif()
  endforeach()
  if(NOT CQ_HAVE_GSSAPI_H)
    list(APPEND _missing gssapi/gssapi.h)
  endif()
  if(NOT CQ_HAVE_NORMAPI_H)
    list(APPEND _missing normApi.h)
  endif()
  if(_missing)
    message(STATUS "cq links ZeroMQ shared (not installed: ${_missing})")
  else()
    set(CQ_STATIC_CLIENT_OK ON)
    message(STATUS "cq links ZeroMQ, libsodium and the C++ runtime statically")
  endif()
endif()

add_library(cq_zmq INTERFACE)
if(CQ_STATIC_CLIENT_OK)
  # Right after libzmq.a on the link line: libzmq.a names the gss_*, pgm_init
  # and Norm* symbols, and these must resolve them before libpgm.a's engine
  # object would (and so that no NORM archive is needed at all).
  add_library(cq_zmq_trims STATIC ${PROJECT_SOURCE_DIR}/cli/static/no_gssapi.cpp
                                  ${PROJECT_SOURCE_DIR}/cli/static/no_pgm.cpp
                                  ${PROJECT_SOURCE_DIR}/cli/static/no_norm.cpp)
  list(POP_FRONT CQ_ZMQ_ARCHIVES _zmq_a)
  add_library(cq_zmq_static INTERFACE)
  target_link_libraries(cq_zmq_static INTERFACE ${_zmq_a} cq_zmq_trims ${CQ_ZMQ_ARCHIVES}
                        Threads::Threads rt m)
  target_link_libraries(cq_zmq INTERFACE
                        $<IF:$<BOOL:$<TARGET_PROPERTY:CQ_STATIC_CLIENT>>,cq_zmq_static,cppzmq>)
  # cppzmq is header-only; its include directory is the system's either way.
  target_include_directories(cq_zmq INTERFACE $<TARGET_PROPERTY:cppzmq,INTERFACE_INCLUDE_DIRECTORIES>)
else()
  target_link_libraries(cq_zmq INTERFACE cppzmq)
endif()

add_library(cq_fmt INTERFACE)
add_library(cq_spdlog INTERFACE)
if(CQ_STATIC_CLIENT_OK)
  foreach(_dep fmt spdlog)
    target_link_libraries(cq_${_dep} INTERFACE
                          $<$<NOT:$<BOOL:$<TARGET_PROPERTY:CQ_STATIC_CLIENT>>>:${_dep}::${_dep}>)
    target_include_directories(cq_${_dep} INTERFACE
                               $<TARGET_PROPERTY:${_dep}::${_dep},INTERFACE_INCLUDE_DIRECTORIES>)
    target_compile_definitions(cq_${_dep} INTERFACE
                               $<TARGET_PROPERTY:${_dep}::${_dep},INTERFACE_COMPILE_DEFINITIONS>)
  endforeach()
else()
  target_link_libraries(cq_fmt INTERFACE fmt::fmt)
  target_link_libraries(cq_spdlog INTERFACE spdlog::spdlog)
endif()

# Marks `target` (the `cq` program) as linked statically where that is possible.
function(cq_static_client target)
  if(CQ_STATIC_CLIENT_OK)
    set_target_properties(${target} PROPERTIES CQ_STATIC_CLIENT ON)
    target_sources(${target} PRIVATE ${PROJECT_SOURCE_DIR}/cli/static/fmt_compiled.cpp)
    target_link_options(${target} PRIVATE -static -static-libstdc++ -static-libgcc -no-pie)
  endif()
endfunction()
