#include "core/comm/host_topology.h"

#include <unistd.h>

#include <algorithm>
#include <climits>
#include <fstream>
#include <map>

namespace parallax::comm {
namespace {

std::string ReadLine(const char* path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

std::string Namespace(const char* path) {
  char buf[PATH_MAX];
  ssize_t n = readlink(path, buf, sizeof(buf) - 1);
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : std::string();
}

}  // namespace

std::string ThisHostKey() {
  std::string key = ReadLine("/proc/sys/kernel/random/boot_id");
  for (const char* ns :
       {"/proc/thread-self/ns/net", "/proc/thread-self/ns/pid", "/proc/thread-self/ns/mnt"}) {
    key.append(1, '/').append(Namespace(ns));
  }
  return key;
}

uint64_t HostKeyDigest(const std::string& key) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : key) h = (h ^ c) * 1099511628211ull;
  return h;
}

HostLayout LayoutHosts(const std::vector<uint64_t>& digests, int rank) {
  HostLayout layout;
  std::map<uint64_t, int> host_of;  // digest -> host number
  std::vector<std::vector<int>> members;
  for (int r = 0; r < static_cast<int>(digests.size()); ++r) {
    auto [it, inserted] = host_of.emplace(digests[r], static_cast<int>(members.size()));
    if (inserted) members.emplace_back();
    members[it->second].push_back(r);
  }
  layout.hosts = static_cast<int>(members.size());
  layout.host = host_of.at(digests[rank]);
  layout.local = members[layout.host];
  for (size_t i = 0; i < layout.local.size(); ++i) {
    if (layout.local[i] == rank) layout.local_rank = static_cast<int>(i);
  }
  layout.max_local = 0;
  for (const auto& m : members) {
    layout.leaders.push_back(m.front());
    layout.max_local = std::max(layout.max_local, static_cast<int>(m.size()));
  }
  return layout;
}

}  // namespace parallax::comm
