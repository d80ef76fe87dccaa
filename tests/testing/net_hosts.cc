#include "tests/testing/net_hosts.h"

#include <fcntl.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <sched.h>
#include <signal.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>

#include "tests/testing/subprocess.h"

namespace parallax::testing {
namespace {

const char kIp[] = "/usr/sbin/ip";
const char kTc[] = "/usr/sbin/tc";
// Every name starts with "pxh", then one letter for what it is, then the
// 7-character tag: RemoveStale() recognises them by that shape.
const char kPrefix[] = "pxh";
constexpr size_t kTagLength = 7;
constexpr int kMaxHosts = 200;

std::string Base36(uint64_t v, size_t width) {
  const char digits[] = "0123456789abcdefghijklmnopqrstuvwxyz";
  std::string out(width, '0');
  for (size_t i = width; i-- > 0; v /= 36) out[i] = digits[v % 36];
  return out;
}

std::optional<uint64_t> FromBase36(const std::string& s) {
  uint64_t v = 0;
  for (char c : s) {
    int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'z' ? c - 'a' + 10 : -1;
    if (d < 0) return std::nullopt;
    v = v * 36 + d;
  }
  return v;
}

// "pid (5 base-36 digits) + counter (2)": unique among live processes and
// among the NetHosts of one process.
std::string MakeTag() {
  static std::atomic<uint64_t> counter{0};
  return Base36(static_cast<uint64_t>(getpid()), 5) + Base36(counter++ % (36 * 36), 2);
}

std::string Join(const std::vector<std::string>& argv) {
  std::string out;
  for (const std::string& a : argv) out += (out.empty() ? "" : " ") + a;
  return out;
}

// "" or the command and its error output.
std::string RunOne(const std::vector<std::string>& argv) {
  RunResult r = RunProcess(argv, {}, 20'000);
  if (r.exit_code == 0) return "";
  std::string err = r.err;
  while (!err.empty() && (err.back() == '\n' || err.back() == ' ')) err.pop_back();
  return Join(argv) + (err.empty() ? "" : ": " + err);
}

// The tbf qdisc for `rate`: a queue of `limit` bytes and a burst of 2 ms at
// the rate, at least 512 KiB: several segmentation-offload packets (64 KiB
// each) pass whole. With a burst of one such packet, tbf cuts them up and
// PyTorch DDP ran 4x slower at 500 Mbit/s than with 512 KiB (Parallax and
// DDP at 1 Gbit/s, burst 125 KB: no difference). The peak rate (1% above
// the rate, a bucket of two such packets) keeps a burst to the rate: without
// it 512 KiB passed an idle 1 Gbit/s link in well under its 4.2 ms, so a
// step's short transfers went faster than the link (the planner's
// prediction of 2 hosts at 1 Gbit/s was 1.3x the measured wait).
std::vector<std::string> TbfArgs(uint64_t rate, uint64_t limit) {
  const uint64_t burst = std::max<uint64_t>(kMinBurstBytes, rate / 8 / 500);
  return {"tbf",
          "rate",
          std::to_string(rate) + "bit",
          "burst",
          std::to_string(burst),
          "limit",
          std::to_string(limit),
          "peakrate",
          std::to_string(rate + rate / kPeakRateExcess) + "bit",
          "mtu",
          std::to_string(kPeakBucketBytes)};
}

// What leaves a host waits in its own queue, as behind a real NIC, where
// TCP's small-queue limit and the qdisc hold a sender back instead of
// dropping its packets: a queue no sender fills (a tbf queue of 20 ms at
// 250 Mbit/s dropped 16% of a PS job's packets). What enters a host queues
// at the switch port in front of it: 4 MiB, or 20 ms at the rate when more;
// several senders at full rate into one host (incast) overflow it there,
// as they would.
constexpr uint64_t kHostQueueBytes = 64ull << 20;
uint64_t SwitchPortQueueBytes(uint64_t rate) {
  return std::max<uint64_t>(4ull << 20, rate / 8 / 50);
}

// Third octets of the 10.77.x.0/24 subnets that hold an address in this
// namespace.
std::set<int> UsedSubnets() {
  std::set<int> used;
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return used;
  for (ifaddrs* a = list; a != nullptr; a = a->ifa_next) {
    if (a->ifa_addr == nullptr || a->ifa_addr->sa_family != AF_INET) continue;
    const uint32_t ip = ntohl(reinterpret_cast<sockaddr_in*>(a->ifa_addr)->sin_addr.s_addr);
    if ((ip >> 16) == ((10u << 8) | 77u)) used.insert((ip >> 8) & 0xff);
  }
  freeifaddrs(list);
  return used;
}

// Held while a subnet is chosen and its address added, so two processes
// never pick the same one.
class SubnetLock {
 public:
  SubnetLock() {
    const char* dir = std::filesystem::is_directory("/run/lock") ? "/run/lock" : "/tmp";
    fd_ = open((std::string(dir) + "/parallax-net-hosts.lock").c_str(),
               O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd_ >= 0) flock(fd_, LOCK_EX);
  }
  ~SubnetLock() {
    if (fd_ >= 0) close(fd_);  // releases the lock
  }
  SubnetLock(const SubnetLock&) = delete;
  SubnetLock& operator=(const SubnetLock&) = delete;

 private:
  int fd_ = -1;
};

bool ProcessAlive(uint64_t pid) {
  return pid > 0 && (kill(static_cast<pid_t>(pid), 0) == 0 || errno != ESRCH);
}

// The pid in a name of ours ("pxh" + kind + tag + ...), or nullopt.
std::optional<uint64_t> PidOfName(const std::string& name) {
  if (name.size() < 4 + kTagLength || name.compare(0, 3, kPrefix) != 0 ||
      std::string("bvqn").find(name[3]) == std::string::npos) {
    return std::nullopt;
  }
  if (!FromBase36(name.substr(4 + 5, 2))) return std::nullopt;
  return FromBase36(name.substr(4, 5));
}

}  // namespace

std::optional<uint64_t> ParseRate(const std::string& text) {
  static const std::pair<const char*, uint64_t> kUnits[] = {
      {"gbit", 1'000'000'000}, {"mbit", 1'000'000}, {"kbit", 1'000}, {"bit", 1}, {"", 1}};
  for (const auto& [suffix, scale] : kUnits) {
    const size_t n = std::strlen(suffix);
    if (text.size() <= n || text.compare(text.size() - n, n, suffix) != 0) continue;
    const std::string number = text.substr(0, text.size() - n);
    if (number.find_first_not_of("0123456789.") != std::string::npos) return std::nullopt;
    try {
      size_t used = 0;
      const double v = std::stod(number, &used);
      if (used != number.size() || v < 0) return std::nullopt;
      return static_cast<uint64_t>(v * scale + 0.5);
    } catch (const std::exception&) {
      return std::nullopt;
    }
  }
  return std::nullopt;
}

NetHosts::NetHosts(NetHostsOptions options) : options_(options), tag_(MakeTag()) {
  bridge_ = std::string(kPrefix) + "b" + tag_;
  const int hosts = std::clamp(options_.hosts, 0, kMaxHosts);
  for (int i = 0; i < hosts; ++i) {
    ns_.push_back(std::string(kPrefix) + "n" + tag_ + "-" + std::to_string(i));
    veth_.push_back(std::string(kPrefix) + "v" + tag_ + std::to_string(i));
    peer_.push_back(std::string(kPrefix) + "q" + tag_ + std::to_string(i));
  }
  rate_.assign(ns_.size(), 0);
}

NetHosts::~NetHosts() {
  // Deleting one end of a veth deletes both; processes still inside a
  // namespace keep it alive, but no longer linked to anything.
  for (size_t i = 0; i < ns_.size(); ++i) {
    RunProcess({kIp, "netns", "del", ns_[i]}, {}, 20'000);
    RunProcess({kIp, "link", "del", veth_[i]}, {}, 20'000);
  }
  if (bridge_made_) RunProcess({kIp, "link", "del", bridge_}, {}, 20'000);
}

std::string NetHosts::AllocateSubnet() {
  const std::set<int> used = UsedSubnets();
  const int start = getpid() % 250;
  for (int k = 0; k < 250; ++k) {
    const int x = 1 + (start + k) % 250;
    if (used.count(x) == 0) {
      subnet_ = "10.77." + std::to_string(x) + ".";
      return "";
    }
  }
  return "no free 10.77.x.0/24 subnet: 250 are in use (leftovers? NetHosts::RemoveStale)";
}

std::string NetHosts::Create() {
  if (options_.hosts < 1 || options_.hosts > kMaxHosts) {
    return "NetHosts: hosts = " + std::to_string(options_.hosts) + ", expected 1 to " +
           std::to_string(kMaxHosts);
  }
  {
    SubnetLock lock;
    if (std::string e = AllocateSubnet(); !e.empty()) return e;
    if (std::string e = RunOne({kIp, "link", "add", bridge_, "type", "bridge"}); !e.empty()) {
      return e;
    }
    bridge_made_ = true;
    if (std::string e = RunOne({kIp, "addr", "add", CoordinatorHost() + "/24", "dev", bridge_});
        !e.empty()) {
      return e;
    }
  }
  if (std::string e = RunOne({kIp, "link", "set", bridge_, "up"}); !e.empty()) return e;
  for (size_t i = 0; i < ns_.size(); ++i) {
    const std::vector<std::vector<std::string>> commands = {
        {kIp, "netns", "add", ns_[i]},
        {kIp, "link", "add", veth_[i], "type", "veth", "peer", "name", peer_[i]},
        {kIp, "link", "set", peer_[i], "netns", ns_[i]},
        {kIp, "-n", ns_[i], "addr", "add", Host(i) + "/24", "dev", peer_[i]},
        {kIp, "-n", ns_[i], "link", "set", peer_[i], "up"},
        {kIp, "-n", ns_[i], "link", "set", "lo", "up"},
        {kIp, "link", "set", veth_[i], "master", bridge_},
        {kIp, "link", "set", veth_[i], "up"}};
    for (const auto& c : commands) {
      if (std::string e = RunOne(c); !e.empty()) return e;
    }
    if (options_.rate_bits_per_s > 0) {
      if (std::string e = Shape(i, options_.rate_bits_per_s); !e.empty()) return e;
    }
  }
  return "";
}

std::vector<std::string> NetHosts::InHost(size_t i, const std::vector<std::string>& argv) const {
  std::vector<std::string> out = {kIp, "netns", "exec", ns_[i]};
  out.insert(out.end(), argv.begin(), argv.end());
  return out;
}

std::string NetHosts::EnterInThisThread(size_t i) const {
  const std::string path = "/run/netns/" + ns_[i];
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return "open " + path + ": " + std::strerror(errno);
  const int rc = setns(fd, CLONE_NEWNET);
  const int err = errno;
  close(fd);
  return rc == 0 ? "" : "setns " + path + ": " + std::strerror(err);
}

bool NetHosts::SetLink(size_t i, bool up) {
  return RunOne({kIp, "link", "set", veth_[i], up ? "up" : "down"}).empty();
}

std::string NetHosts::Shape(size_t i, uint64_t rate_bits_per_s) {
  // The root end's egress is what enters the host; the namespace end's
  // egress is what leaves it.
  std::vector<std::vector<std::string>> commands;
  if (rate_bits_per_s == 0) {
    if (rate_[i] == 0) return "";
    commands = {{kTc, "qdisc", "del", "dev", veth_[i], "root"},
                {kTc, "-n", ns_[i], "qdisc", "del", "dev", peer_[i], "root"}};
  } else {
    const std::vector<std::string> in =
        TbfArgs(rate_bits_per_s, SwitchPortQueueBytes(rate_bits_per_s));
    const std::vector<std::string> out = TbfArgs(rate_bits_per_s, kHostQueueBytes);
    commands = {{kTc, "qdisc", "replace", "dev", veth_[i], "root"},
                {kTc, "-n", ns_[i], "qdisc", "replace", "dev", peer_[i], "root"}};
    commands[0].insert(commands[0].end(), in.begin(), in.end());
    commands[1].insert(commands[1].end(), out.begin(), out.end());
  }
  for (const auto& c : commands) {
    if (std::string e = RunOne(c); !e.empty()) return e;
  }
  rate_[i] = rate_bits_per_s;
  return "";
}

std::optional<LinkBytes> NetHosts::Bytes(size_t i) const {
  auto read = [&](const char* counter) -> std::optional<uint64_t> {
    std::ifstream f("/sys/class/net/" + veth_[i] + "/statistics/" + counter);
    uint64_t v = 0;
    if (!(f >> v)) return std::nullopt;
    return v;
  };
  // The root end receives what the host sends, and transmits what it gets.
  std::optional<uint64_t> rx = read("rx_bytes"), tx = read("tx_bytes");
  if (!rx || !tx) return std::nullopt;
  return LinkBytes{*rx, *tx};
}

int NetHosts::RemoveStale() {
  int removed = 0;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator("/run/netns", ec)) {
    const std::string name = e.path().filename();
    if (std::optional<uint64_t> pid = PidOfName(name); pid && !ProcessAlive(*pid)) {
      removed += RunProcess({kIp, "netns", "del", name}, {}, 20'000).exit_code == 0;
    }
  }
  for (const auto& e : std::filesystem::directory_iterator("/sys/class/net", ec)) {
    const std::string name = e.path().filename();
    if (std::optional<uint64_t> pid = PidOfName(name); pid && !ProcessAlive(*pid)) {
      removed += RunProcess({kIp, "link", "del", name}, {}, 20'000).exit_code == 0;
    }
  }
  return removed;
}

}  // namespace parallax::testing
