// The Catch2 main of the test suite (tests/<layer>/ mirror the source tree).
#define CATCH_CONFIG_MAIN
#include <catch2/catch.hpp>
