// Small pieces every daemon's main() shares.
#ifndef PARALLAX_CORE_BASE_DAEMON_H_
#define PARALLAX_CORE_BASE_DAEMON_H_

#include <signal.h>

#include <initializer_list>
#include <string>

#include "core/base/status.h"

namespace parallax {

// Blocks SIGINT, SIGTERM and `extra` in the calling thread (call it in main
// before any thread starts, so every thread inherits the mask) and ignores
// SIGPIPE. One thread then takes them with sigwait() on the returned set.
sigset_t BlockTerminationSignals(std::initializer_list<int> extra = {});

// Writes `text` to `path` through a temporary file and rename(), so a reader
// (a test, a script waiting for a --port-file) never sees half of it.
Status WriteFileAtomically(const std::string& path, const std::string& text);

}  // namespace parallax

#endif  // PARALLAX_CORE_BASE_DAEMON_H_
