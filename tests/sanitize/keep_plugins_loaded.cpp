// Linked into every executable of a sanitizer build (RINGGRAD_SANITIZE): a dlclose that unloads
// nothing. Open MPI dlopens its plugins and dlcloses them in MPI_Finalize, before LeakSanitizer
// scans the heap at exit; the stacks of what those plugins allocated would then read
// "<unknown module>", and tests/sanitize/lsan.supp could not name them. With the plugins still
// mapped, their allocations are reported under their own names and suppressed as Open MPI's.
// (Open MPI 4.1 has no setting that skips the dlclose.) Never part of a normal build.
extern "C" int dlclose(void*) { return 0; }
