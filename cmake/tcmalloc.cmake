# tcmalloc (docs/adr/0029) for the programs that run the coordinator's actors:
# every actor thread allocates and frees a job's records, and glibc's malloc
# spends their time on arena locks and on growing its heaps. Nothing calls it
# by name, so it is linked whether or not the linker drops unused libraries.
# Not with sanitizers, which bring their own allocator.
option(CQ_TCMALLOC "Link cq-coordinator and cq-sim with tcmalloc_minimal where it is installed" ON)
if(CQ_TCMALLOC AND NOT CQ_SANITIZE)
  pkg_check_modules(TCMALLOC IMPORTED_TARGET libtcmalloc_minimal)
  if(NOT TCMALLOC_FOUND)
    message(STATUS "tcmalloc_minimal not found: the coordinator uses the C library's malloc")
  endif()
endif()

function(cq_link_tcmalloc target)
  if(TCMALLOC_FOUND AND CQ_TCMALLOC AND NOT CQ_SANITIZE)
    target_link_libraries(${target} PRIVATE -Wl,--push-state,--no-as-needed PkgConfig::TCMALLOC
                          -Wl,--pop-state)
    # Sources of the target may use tcmalloc's extension API by name.
    target_compile_definitions(${target} PRIVATE CQ_TCMALLOC)
  endif()
endfunction()
