// Which ranks of a communicator share a host, for the shared-memory
// reduction and the hierarchical all-reduce (host_aware_communicator.cc).
//
// Two processes are "on one host" when they can share memory through a file
// in /dev/shm and see each other's process ids: same boot of the same
// machine (the kernel's boot_id) and the same mount, network and pid
// namespaces. Processes in different network namespaces count as different
// hosts on purpose: that is how containers with their own network, and the
// emulated hosts of the tests and bench/cluster, look to a job.
//
// Pure functions except ThisHostKey(); thread-safe.
#ifndef PARALLAX_CORE_COMM_HOST_TOPOLOGY_H_
#define PARALLAX_CORE_COMM_HOST_TOPOLOGY_H_

#include <cstdint>
#include <string>
#include <vector>

namespace parallax::comm {

// The calling thread's host identity ("<boot_id>/net:[...]/pid:[...]/
// mnt:[...]", the namespaces of the thread: a thread can have moved into
// another network namespace); the parts that cannot be read are empty.
std::string ThisHostKey();

// A 64-bit digest of a host key (FNV-1a), what ranks exchange.
uint64_t HostKeyDigest(const std::string& key);

// The ranks of a world grouped by host. Hosts are numbered in the order of
// their lowest rank; a host's leader is its lowest rank.
struct HostLayout {
  int host = 0;              // this rank's host
  int hosts = 1;             // number of hosts
  std::vector<int> local;    // the ranks on this rank's host, ascending
  int local_rank = 0;        // this rank's index in `local`
  std::vector<int> leaders;  // each host's lowest rank, by host number
  int max_local = 1;         // the most ranks any host has

  bool leader() const { return local_rank == 0; }
};

// REQUIRES: 0 <= rank < digests.size(); digests[r] is rank r's host.
HostLayout LayoutHosts(const std::vector<uint64_t>& digests, int rank);

}  // namespace parallax::comm

#endif  // PARALLAX_CORE_COMM_HOST_TOPOLOGY_H_
