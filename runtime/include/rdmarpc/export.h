// rdmarpc/export.h: the symbol-visibility macro for the public API.
//
// The library is built with -fvisibility=hidden; only classes and functions
// marked RDMARPC_EXPORT are visible to users of the shared library.
#ifndef RDMARPC_EXPORT_H_
#define RDMARPC_EXPORT_H_

#define RDMARPC_EXPORT __attribute__((visibility("default")))

#endif  // RDMARPC_EXPORT_H_
