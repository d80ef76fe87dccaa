// Attacks for the security tier: floods of TCP connections that hold a
// server's descriptors without ever authenticating, and the probes that time
// an honest client meanwhile.
#ifndef PARALLAX_TESTS_SECURITY_FLOOD_H_
#define PARALLAX_TESTS_SECURITY_FLOOD_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace parallax::testing {

// Raises this process's soft open-file limit to its hard limit (an attacker
// holds thousands of sockets); returns the limit now in force.
int64_t RaiseOwnFileLimit();

// Opens `count` connections to 127.0.0.1:`port` in a background thread, at
// most `per_second` of them a second, and holds them until Close().
//   kIdle: connect and send nothing.
//   kSlow: send a Thrift frame header announcing `announced_bytes`, then one
//          byte every 100 ms on each connection (a request that never ends).
//   kUnauthenticatedBody: announce `announced_bytes` and send `body_bytes`
//          of a body without the secret (all but the last byte: what makes a
//          server that allocates before it authenticates fill that much
//          memory).
//   kTrickle: send `trickle.prefix` (half an HTTP request, the start of a TLS
//          ClientHello), then one byte of `trickle.byte` every
//          `trickle.period_ms` on each connection; a connection the server
//          closes is opened again (when `trickle.reopen`), so that `count`
//          stay open as long as the server lets them.
class ConnectionFlood {
 public:
  enum class Kind { kIdle, kSlow, kUnauthenticatedBody, kTrickle };
  struct Trickle {
    std::string prefix;
    char byte = 'a';
    int period_ms = 2'000;
    bool reopen = true;
    bool idle = false;  // send nothing after the prefix (only watch and reopen)
  };
  ConnectionFlood(int port, Kind kind, int count, int per_second, uint32_t announced_bytes = 1000,
                  uint32_t body_bytes = 0);
  // A kTrickle flood.
  ConnectionFlood(int port, int count, int per_second, Trickle trickle);
  ~ConnectionFlood();

  // Whether every connection has been attempted.
  bool done() const { return done_.load(); }
  // Connections the kernel completed (the server may have closed them since).
  int opened() const { return opened_.load(); }
  // kTrickle: connections the server closed (each was then opened again).
  int closed_by_server() const { return closed_by_server_.load(); }
  // Closes every connection and stops the threads.
  void Close();

 private:
  void Open();
  void Dribble();
  // kTrickle: one round of bytes; closes and reopens what the server closed.
  void TrickleRound();
  int Connect();
  // A new connection with what its kind sends first; -1 when it failed.
  int OpenOne(const std::string& body);

  const int port_;
  const Kind kind_;
  const int count_;
  const int per_second_;
  const uint32_t announced_bytes_;
  const uint32_t body_bytes_;
  const Trickle trickle_;
  std::atomic<bool> stop_{false};
  std::atomic<int> closed_by_server_{0};
  std::atomic<bool> done_{false};
  std::atomic<int> opened_{0};
  std::mutex mu_;
  std::vector<int> fds_;  // GUARDED_BY(mu_)
  std::thread opener_;
  std::thread dribbler_;
};

// Calls `probe` (an honest client's whole exchange, returning "" on success
// or what went wrong) every `period_ms` while `running()` holds, and at least
// `min_probes` times; records each duration.
struct ProbeLog {
  int probes = 0;
  double max_ms = 0;
  std::vector<std::string> failures;
};
ProbeLog ProbeWhile(const std::function<bool()>& running, const std::function<std::string()>& probe,
                    int period_ms, int min_probes);

// VmRSS of `pid` in bytes (0 when it cannot be read).
int64_t ResidentBytes(int pid);

}  // namespace parallax::testing

#endif  // PARALLAX_TESTS_SECURITY_FLOOD_H_
