// px-net-hosts: the network-namespace hosts of tests/testing/net_hosts.h for
// scripts (bench/cluster/cluster.py). It makes the hosts, prints them as one
// JSON line, answers commands on stdin with one JSON line each, and removes
// everything when stdin closes, on "quit", on SIGTERM/SIGINT/SIGHUP, and
// when its parent dies.
//
//   px-net-hosts --hosts N [--rate 1gbit] [--sweep]
//
//   first line:  {"bridge":..,"coordinator_host":..,"rate_bits_per_s":..,
//                 "hosts":[{"ns":..,"address":..,"veth":..,"ifname":..},..]}
//   bytes        {"bytes":[{"sent":..,"received":..},..]}   (each host's link, from the host)
//   link I up|down, shape I RATE       {"ok":true} or {"error":".."}
//   quit         removes everything and exits 0
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "tests/testing/net_hosts.h"

namespace {

using nlohmann::json;
using parallax::testing::NetHosts;

json Describe(const NetHosts& net) {
  json hosts = json::array();
  for (size_t i = 0; i < net.size(); ++i) {
    hosts.push_back({{"ns", net.Ns(i)},
                     {"address", net.Host(i)},
                     {"veth", net.Veth(i)},
                     {"ifname", net.Iface(i)}});
  }
  return {{"bridge", net.Bridge()},
          {"coordinator_host", net.CoordinatorHost()},
          {"rate_bits_per_s", net.size() > 0 ? net.rate_bits_per_s(0) : 0},
          {"hosts", hosts}};
}

json Error(const std::string& what) { return {{"error", what}}; }

json Answer(NetHosts& net, const std::string& line) {
  std::istringstream in(line);
  std::string command, arg;
  size_t host = 0;
  in >> command;
  if (command == "bytes") {
    json bytes = json::array();
    for (size_t i = 0; i < net.size(); ++i) {
      auto b = net.Bytes(i);
      if (!b) return Error("host " + std::to_string(i) + ": veth " + net.Veth(i) + " is gone");
      bytes.push_back({{"sent", b->sent}, {"received", b->received}});
    }
    return {{"bytes", bytes}};
  }
  if (command != "link" && command != "shape") {
    return Error("unknown command '" + command + "'; expected bytes, link, shape or quit");
  }
  if (!(in >> host >> arg) || host >= net.size()) {
    return Error("usage: " + command + " HOST(0.." + std::to_string(net.size() - 1) + ") " +
                 (command == "link" ? "up|down" : "RATE"));
  }
  if (command == "link") {
    if (arg != "up" && arg != "down") return Error("link: expected up or down, got '" + arg + "'");
    return net.SetLink(host, arg == "up") ? json{{"ok", true}} : Error("ip link set failed");
  }
  std::optional<uint64_t> rate = parallax::testing::ParseRate(arg);
  if (!rate) return Error("shape: '" + arg + "' is no rate (1gbit, 100mbit, bits/s)");
  std::string e = net.Shape(host, *rate);
  return e.empty() ? json{{"ok", true}} : Error(e);
}

// Answers stdin until it closes, "quit" or a signal on `sigfd`.
void Serve(NetHosts& net, int sigfd) {
  std::string pending;
  char buf[4096];
  for (;;) {
    pollfd fds[2] = {{0, POLLIN, 0}, {sigfd, POLLIN, 0}};
    if (poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      return;
    }
    if (fds[1].revents != 0) return;
    const ssize_t n = read(0, buf, sizeof buf);
    if (n <= 0) return;
    pending.append(buf, n);
    for (size_t eol; (eol = pending.find('\n')) != std::string::npos;) {
      const std::string line = pending.substr(0, eol);
      pending.erase(0, eol + 1);
      if (line == "quit") return;
      if (line.empty()) continue;
      std::cout << Answer(net, line).dump() << std::endl;
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  parallax::testing::NetHostsOptions options;
  std::string rate = "0";
  bool sweep = false;
  CLI::App app{"Hosts in network namespaces on a bridge, with shaped links, for bench/cluster"};
  app.add_option("--hosts", options.hosts, "number of hosts")
      ->required()
      ->check(CLI::Range(1, 200));
  app.add_option("--rate", rate, "each host's link rate per direction (1gbit, 100mbit; 0: none)")
      ->capture_default_str();
  app.add_flag("--sweep", sweep, "first remove what killed runs left behind");
  CLI11_PARSE(app, argc, argv);
  std::optional<uint64_t> bits = parallax::testing::ParseRate(rate);
  if (!bits) {
    std::cerr << "px-net-hosts: --rate '" << rate << "' is no rate (1gbit, 100mbit, bits/s)\n";
    return 2;
  }
  options.rate_bits_per_s = *bits;

  // Signals arrive through a descriptor, so teardown runs on this thread.
  sigset_t mask;
  sigemptyset(&mask);
  for (int s : {SIGTERM, SIGINT, SIGHUP}) sigaddset(&mask, s);
  sigprocmask(SIG_BLOCK, &mask, nullptr);
  const int sigfd = signalfd(-1, &mask, SFD_CLOEXEC);
  prctl(PR_SET_PDEATHSIG, SIGTERM);
  if (getppid() == 1) return 1;  // the parent is already gone

  if (sweep) {
    const int removed = NetHosts::RemoveStale();
    if (removed > 0) std::cerr << "px-net-hosts: removed " << removed << " leftovers\n";
  }
  NetHosts net(options);
  if (std::string e = net.Create(); !e.empty()) {
    std::cout << Error(e).dump() << std::endl;
    return 1;
  }
  std::cout << Describe(net).dump() << std::endl;
  Serve(net, sigfd);
  return 0;
}
