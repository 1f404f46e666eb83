# Sides of pkg/: every library lives in pkg/<side>/<module>, and a side may link only the
# sides listed here (itself included). The build stops at configure time when a target
# breaks the rule. Targets outside pkg/ and cmd/ (generated protobuf code, system
# packages) have no side and may be used by anyone.
#
#   format     segment format and libmicroview: libc (+libm) only
#   common     log, util, rpc, config, httpd, kubeclient, rdma basics: used by every side
#   analytics  sketch, detect, fd: libc + libm only
#   node       the agent: segment store, agent service, kubelet device plugin, RDMA target
#   collector  transports, collect, pipeline, exposition, agent client
#   tools      microviewctl's modules
#   webhook    the admission webhook
#   scaler     the KEDA external scaler (microview-scaler)
#
# Self-test: cmake -DMV_SIDES_SELFTEST=ON -P cmake/sides.cmake
cmake_policy(VERSION 3.22)
set(MV_SIDE_ALLOWS_format format)
set(MV_SIDE_ALLOWS_common common)
set(MV_SIDE_ALLOWS_analytics analytics)
set(MV_SIDE_ALLOWS_node node common format)
set(MV_SIDE_ALLOWS_collector collector common format analytics)
set(MV_SIDE_ALLOWS_tools tools common format collector)
set(MV_SIDE_ALLOWS_webhook webhook common)
set(MV_SIDE_ALLOWS_scaler scaler common)

# mv_side_allowed(<from> <to> <outvar>): TRUE if side <from> may link side <to>.
function(mv_side_allowed from to out)
  if(NOT DEFINED MV_SIDE_ALLOWS_${from})
    message(FATAL_ERROR "unknown side '${from}' (known: see cmake/sides.cmake)")
  endif()
  if(to IN_LIST MV_SIDE_ALLOWS_${from})
    set(${out} TRUE PARENT_SCOPE)
  else()
    set(${out} FALSE PARENT_SCOPE)
  endif()
endfunction()

if(CMAKE_SCRIPT_MODE_FILE)
  if(MV_SIDES_SELFTEST)
    set(fails 0)
    foreach(case "node;collector;FALSE" "collector;node;FALSE" "node;common;TRUE"
                 "collector;analytics;TRUE" "node;analytics;FALSE" "format;common;FALSE"
                 "common;node;FALSE" "common;collector;FALSE" "webhook;common;TRUE"
                 "webhook;node;FALSE" "webhook;collector;FALSE" "analytics;format;FALSE"
                 "tools;collector;TRUE" "tools;node;FALSE" "collector;format;TRUE")
      list(GET case 0 from)
      list(GET case 1 to)
      list(GET case 2 want)
      mv_side_allowed(${from} ${to} got)
      if(NOT got STREQUAL want)
        message(SEND_ERROR "${from} -> ${to}: expected ${want}, got ${got}")
        math(EXPR fails "${fails} + 1")
      endif()
    endforeach()
    if(fails)
      message(FATAL_ERROR "${fails} side rule(s) wrong")
    endif()
    message(STATUS "side rules: all cases hold")
  endif()
  return()
endif()

# mv_side(<target> [<side>]): records the side of a target; without <side> it is taken from
# the directory (pkg/<side>/<module>).
function(mv_side target)
  if(ARGC GREATER 1)
    set(side ${ARGV1})
  else()
    # pkg/<side>/<module>, or pkg/<side> for a side that is one module (webhook).
    file(RELATIVE_PATH rel ${PROJECT_SOURCE_DIR}/pkg ${CMAKE_CURRENT_SOURCE_DIR})
    string(REGEX MATCH "^[a-z]+" side "${rel}")
    if(rel MATCHES "^\\.\\." OR NOT side OR NOT DEFINED MV_SIDE_ALLOWS_${side})
      message(FATAL_ERROR "${target}: libraries live in pkg/<side>/<module> with a side named "
                          "in cmake/sides.cmake, not pkg/${rel}")
    endif()
  endif()
  mv_side_allowed(${side} ${side} ok) # fails on an unknown side
  set_target_properties(${target} PROPERTIES MV_SIDE ${side})
  set_property(GLOBAL APPEND PROPERTY MV_SIDE_TARGETS ${target})
endfunction()

# mv_check_sides(): call once at the end of the top-level CMakeLists.txt.
function(mv_check_sides)
  get_property(targets GLOBAL PROPERTY MV_SIDE_TARGETS)
  set(bad "")
  foreach(t IN LISTS targets)
    get_target_property(side ${t} MV_SIDE)
    get_target_property(type ${t} TYPE)
    set(deps "")
    if(NOT type STREQUAL "INTERFACE_LIBRARY")
      get_target_property(d ${t} LINK_LIBRARIES)
      if(d)
        list(APPEND deps ${d})
      endif()
    endif()
    get_target_property(d ${t} INTERFACE_LINK_LIBRARIES)
    if(d)
      list(APPEND deps ${d})
    endif()
    foreach(dep IN LISTS deps)
      string(REGEX REPLACE "^\\$<LINK_ONLY:(.*)>$" "\\1" dep "${dep}")
      if(NOT TARGET ${dep})
        continue()
      endif()
      get_target_property(dside ${dep} MV_SIDE)
      if(NOT dside)
        continue()
      endif()
      mv_side_allowed(${side} ${dside} ok)
      if(NOT ok)
        list(APPEND bad "${t} (${side}) links ${dep} (${dside})")
      endif()
    endforeach()
  endforeach()
  if(bad)
    list(REMOVE_DUPLICATES bad)
    list(JOIN bad "\n  " msg)
    message(FATAL_ERROR "side rule broken (see cmake/sides.cmake and docs/architecture.md):\n  ${msg}")
  endif()
endfunction()
