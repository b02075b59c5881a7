# Install test, run by ctest as `cmake -P`: installs minidl's build tree into a fresh prefix,
# configures tests/install/consumer against that prefix only, builds it and runs it.
# Inputs (-D): MINIDL_BUILD_DIR, CONSUMER_SOURCE_DIR, WORK_DIR, CXX_COMPILER, BUILD_TYPE, SANITIZE.
cmake_minimum_required(VERSION 3.25)

foreach(var MINIDL_BUILD_DIR CONSUMER_SOURCE_DIR WORK_DIR CXX_COMPILER)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "run_consumer.cmake: -D${var}=... is required")
  endif()
endforeach()

function(run_step name)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  string(JOIN " " command_line ${ARGN})
  message("---- ${name}: ${command_line}\n${out}${err}")
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "install test: step '${name}' failed (exit ${rc})")
  endif()
endfunction()

set(prefix ${WORK_DIR}/prefix)
set(consumer_build ${WORK_DIR}/consumer-build)
file(REMOVE_RECURSE ${WORK_DIR})

# A sanitized libminidl.a needs the sanitizer runtimes at the consumer's link too; the exported
# target keeps -fsanitize out of its install interface on purpose (users choose their flags).
set(flags "")
if(SANITIZE)
  set(flags "-DCMAKE_CXX_FLAGS=-fsanitize=address,undefined" "-DCMAKE_EXE_LINKER_FLAGS=-fsanitize=address,undefined")
endif()

run_step(install ${CMAKE_COMMAND} --install ${MINIDL_BUILD_DIR} --prefix ${prefix})
# The CPU kernels run on their own thread pool, so the package must put no OpenMP runtime on
# its users' link lines (the consumer's link below also fails if libminidl needs one).
file(GLOB_RECURSE exported ${prefix}/*/minidlTargets*.cmake ${prefix}/*/minidlConfig.cmake)
if(NOT exported)
  message(FATAL_ERROR "install test: no minidlTargets*.cmake under ${prefix}")
endif()
foreach(file ${exported})
  file(READ ${file} text)
  if(text MATCHES "OpenMP|gomp")
    message(FATAL_ERROR "install test: ${file} names OpenMP; minidl::minidl must not need it")
  endif()
endforeach()
run_step(configure ${CMAKE_COMMAND} -S ${CONSUMER_SOURCE_DIR} -B ${consumer_build}
         -DCMAKE_PREFIX_PATH=${prefix} -DCMAKE_CXX_COMPILER=${CXX_COMPILER}
         -DCMAKE_BUILD_TYPE=${BUILD_TYPE} ${flags})
# The package must come from the fresh prefix, not from an older minidl installed elsewhere.
file(STRINGS ${consumer_build}/CMakeCache.txt found_dir REGEX "^minidl_DIR:")
string(FIND "${found_dir}" "=${prefix}/" at)
if(at EQUAL -1)
  message(FATAL_ERROR "install test: find_package(minidl) found '${found_dir}', not the package under ${prefix}")
endif()
run_step(build ${CMAKE_COMMAND} --build ${consumer_build})
run_step(run ${consumer_build}/consumer)
