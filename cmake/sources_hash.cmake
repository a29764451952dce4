# cmake -DSRC=<source dir> -DOUT=<header> -P sources_hash.cmake: writes OUT, defining
# DPY_SOURCES_HASH, the SHA-256 of the C host's sources and CMakeLists.txt (each file's path and
# hash), the half of `dpy-lua --version`'s build that the binary carries. OUT is rewritten only
# when the hash changes, so that an unchanged tree recompiles nothing.
file(GLOB_RECURSE files RELATIVE "${SRC}" "${SRC}/host/*.c" "${SRC}/host/*.h" "${SRC}/host/*.cpp"
     "${SRC}/host/*.hpp")
list(APPEND files CMakeLists.txt)
list(SORT files)
set(all "")
foreach(f IN LISTS files)
  file(SHA256 "${SRC}/${f}" h)
  string(APPEND all "${f} ${h}\n")
endforeach()
string(SHA256 hash "${all}")
set(text "#define DPY_SOURCES_HASH \"${hash}\"\n")
set(old "")
if(EXISTS "${OUT}")
  file(READ "${OUT}" old)
endif()
if(NOT old STREQUAL text)
  file(WRITE "${OUT}" "${text}")
endif()
