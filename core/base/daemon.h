// Small pieces every daemon's main() shares.
#ifndef PARALLAX_CORE_BASE_DAEMON_H_
#define PARALLAX_CORE_BASE_DAEMON_H_

#include <signal.h>

#include <cstdint>
#include <initializer_list>
#include <string>

#include "parallax/status.h"

namespace parallax {

// Blocks SIGINT, SIGTERM and `extra` in the calling thread (call it in main
// before any thread starts, so every thread inherits the mask) and ignores
// SIGPIPE. One thread then takes them with sigwait() on the returned set.
sigset_t BlockTerminationSignals(std::initializer_list<int> extra = {});

// Raises this process's soft limit on open files (RLIMIT_NOFILE) to its hard
// limit: a server holds one descriptor per connection. Returns the soft limit
// in force afterwards (unchanged when it cannot be raised).
int64_t RaiseOpenFileLimit();

// The soft limit on open files (RLIMIT_NOFILE) of this process.
int64_t OpenFileLimit();

// Writes `text` to `path` through a temporary file and rename(), so a reader
// (a test, a script waiting for a --port-file) never sees half of it.
Status WriteFileAtomically(const std::string& path, const std::string& text);

}  // namespace parallax

#endif  // PARALLAX_CORE_BASE_DAEMON_H_
