// NetHosts: "hosts" on one machine for multi-host tests and the emulated
// cluster benchmark. Each host is a network namespace with one veth link to
// a bridge in the root namespace; the bridge holds the address of the root
// namespace (where a coordinator can listen), each host one address on the
// same /24. A host's link can be shaped to a rate in both directions (tbf on
// both ends of its veth: what leaves the host waits in a queue it never
// overflows, as behind a NIC; what enters it queues 4 MiB at the "switch
// port", where several senders into one host can overflow it), set down and
// up, and its bytes are read from the kernel's counters of the veth.
//
// Names and the subnet are unique per process and per object: two NetHosts
// alive at once, in one process or in two, never collide, and addresses go
// only on the bridge this object made. Everything is removed in the
// destructor (also after a failed Create()). A process killed with SIGKILL
// leaves its namespaces behind; RemoveStale() deletes those of dead
// processes.
//
// Needs root and `ip` (iproute2) and `tc`; the kernel here has tbf but no
// netem, so a link gets a rate, never latency or loss. Not thread-safe,
// except EnterInThisThread(), Bytes() and the accessors (const after
// Create()).
#ifndef PARALLAX_TESTS_TESTING_NET_HOSTS_H_
#define PARALLAX_TESTS_TESTING_NET_HOSTS_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace parallax::testing {

// A shaped link's tbf bucket: after an idle spell this many bytes may go
// at once (more at rates above 2 Gbit/s: 2 ms at the rate), on average the
// rate. A second, peak bucket holds such a burst to the rate plus
// 1/kPeakRateExcess past its first kPeakBucketBytes, as on a real link,
// which is never faster than its rate. That bucket holds two
// segmentation-offload packets: tbf counts one 64 KiB packet with the headers
// of all its frames (68.5 KB), and a packet larger than the bucket is cut
// into frames, each sent, acknowledged and woken for on its own (25x the
// acknowledgement bytes and about twice the CPU with a 66 KiB bucket).
inline constexpr uint64_t kMinBurstBytes = 512 * 1024;
inline constexpr uint64_t kPeakRateExcess = 100;
inline constexpr uint64_t kPeakBucketBytes = 128 * 1024;

struct NetHostsOptions {
  // Number of hosts, 1 to 200.
  int hosts = 2;
  // Each host's link rate in bits/s, the same in both directions (what the
  // host sends and what it receives are shaped separately); 0 = unshaped.
  uint64_t rate_bits_per_s = 0;
};

// A host's link bytes since it was made, seen from the host: `sent` left the
// host, `received` entered it (Ethernet frames, headers included).
struct LinkBytes {
  uint64_t sent = 0;
  uint64_t received = 0;
};

class NetHosts {
 public:
  explicit NetHosts(NetHostsOptions options = {});
  ~NetHosts();
  NetHosts(const NetHosts&) = delete;
  NetHosts& operator=(const NetHosts&) = delete;

  // Makes the bridge, the namespaces and their links, and shapes them when
  // options.rate_bits_per_s > 0. Returns "" or the command that failed with
  // its error output. REQUIRES: called once.
  std::string Create();

  size_t size() const { return ns_.size(); }
  // The bridge's address in the root namespace.
  std::string CoordinatorHost() const { return subnet_ + "1"; }
  // Host i's address (inside its namespace).
  std::string Host(size_t i) const { return subnet_ + std::to_string(10 + i); }
  // Host i's namespace name (`ip netns exec <Ns(i)> ...`).
  const std::string& Ns(size_t i) const { return ns_[i]; }
  // Host i's link: the veth end in the root namespace (its counters).
  const std::string& Veth(size_t i) const { return veth_[i]; }
  // Host i's interface inside its namespace (what GLOO_SOCKET_IFNAME names).
  const std::string& Iface(size_t i) const { return peer_[i]; }
  const std::string& Bridge() const { return bridge_; }
  uint64_t rate_bits_per_s(size_t i) const { return rate_[i]; }

  // `argv` run inside host i: {"/usr/sbin/ip", "netns", "exec", Ns(i), argv...}.
  std::vector<std::string> InHost(size_t i, const std::vector<std::string>& argv) const;

  // Moves the calling thread into host i's namespace (setns): sockets it
  // opens from now on are the host's. Returns "" or the error. The thread
  // stays there; use a thread of its own.
  std::string EnterInThisThread(size_t i) const;

  // Sets host i's link down (nothing crosses; the host keeps its address)
  // or up again.
  bool SetLink(size_t i, bool up);

  // Reshapes host i's link to `rate_bits_per_s` in both directions (0 =
  // unshaped). Returns "" or the command that failed.
  std::string Shape(size_t i, uint64_t rate_bits_per_s);

  // Host i's kernel counters now; nullopt when the veth is gone.
  std::optional<LinkBytes> Bytes(size_t i) const;

  // Deletes namespaces and links that a NetHosts of a process no longer
  // alive left behind (its names carry its pid). Returns how many.
  static int RemoveStale();

 private:
  std::string AllocateSubnet();

  // Constant after construction.
  const NetHostsOptions options_;
  std::string tag_;  // pid and a per-process counter, base 36
  std::string bridge_;
  std::vector<std::string> ns_, veth_, peer_;

  std::string subnet_;  // "10.77.x."
  std::vector<uint64_t> rate_;
  bool bridge_made_ = false;
};

// Parses "1gbit", "10gbit", "100mbit", "250kbit" or a plain number of
// bits/s; nullopt when it is none of these.
std::optional<uint64_t> ParseRate(const std::string& text);

}  // namespace parallax::testing

#endif  // PARALLAX_TESTS_TESTING_NET_HOSTS_H_
