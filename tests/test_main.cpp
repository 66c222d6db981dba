// The doctest entry point for the ringgrad test suite. Every tests/<layer>/test_*.cpp file is linked
// into the same executable; run it with --help for doctest's filters (-tc, -ts, -sf).
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>
