// The one translation unit that holds doctest's main(); every test file links against it.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>
