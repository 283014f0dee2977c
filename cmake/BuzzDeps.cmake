# Locate the system libraries (Debian packages; see scripts/deps.sh).
find_package(PkgConfig REQUIRED)
find_package(Threads REQUIRED)
pkg_check_modules(PQ REQUIRED IMPORTED_TARGET libpq)
pkg_check_modules(SODIUM REQUIRED IMPORTED_TARGET libsodium)
pkg_check_modules(PROTOBUFC IMPORTED_TARGET libprotobuf-c)
pkg_check_modules(CMOCKA IMPORTED_TARGET cmocka)
# json-c: the tests parse the daemon's JSON log lines with it
pkg_check_modules(JSONC IMPORTED_TARGET json-c)
pkg_check_modules(NCURSES IMPORTED_TARGET ncursesw)
find_library(NNG_LIBRARY nng)
find_path(NNG_INCLUDE_DIR nng/nng.h)
find_program(PROTOC_C protoc-c)
