/* The build's facts, given as macros by csrc/build_native.py. */
#include "buildinfo.h"

#ifndef SS_BUILD_VERSION
#error "SS_BUILD_VERSION is set by csrc/build_native.py"
#endif
#ifndef SS_BUILD_PYTHON
#error "SS_BUILD_PYTHON is set by csrc/build_native.py"
#endif

#if defined(__clang__)
#define SS_BUILD_COMPILER __VERSION__ /* names clang itself */
#elif defined(__GNUC__)
#define SS_BUILD_COMPILER "gcc " __VERSION__
#elif defined(_MSC_FULL_VER)
#define SS_STR2(x) #x
#define SS_STR(x) SS_STR2(x)
#define SS_BUILD_COMPILER "MSVC " SS_STR(_MSC_FULL_VER)
#else
#define SS_BUILD_COMPILER "unknown"
#endif

static const ss_build BUILD = {SS_BUILD_VERSION, SS_BUILD_PYTHON, SS_BUILD_COMPILER};

const ss_build *ss_build_info(void) { return &BUILD; }
