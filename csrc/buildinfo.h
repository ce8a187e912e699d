/* What this build of the C core was made for (csrc/buildinfo.c).
 *
 * Declared apart from simstore.h so that the build's own facts stay out of
 * the hot loops' header; build_native.py feeds the part between the CDEF
 * markers to cffi as it does simstore.h's.
 */
#ifndef SIMSTORE_BUILDINFO_H
#define SIMSTORE_BUILDINFO_H

/* CDEF-BEGIN */
/* Strings fixed at compile time: version, the simstore release whose
 * pyproject.toml the build read; python, the interpreter that ran the build
 * (implementation and version), whose unicodedata made unicode_tables.h;
 * compiler, the C compiler's own version string. A wheel installed on
 * another Python, or a core left over from an older build, shows here. */
typedef struct {
    const char *version;
    const char *python;
    const char *compiler;
} ss_build;
const ss_build *ss_build_info(void);
/* CDEF-END */

#endif
