// px_test_task: a stand-in task for agent and integration tests.
//
// Prints its environment's PARALLAX_* lines (sorted, "NAME=value"; the
// secret PARALLAX_TOKEN only as "(set)") and CUDA_VISIBLE_DEVICES when set, then does what PX_TEST_BEHAVIOR says: steps
// separated by ',', run in order (unset or empty: exit 0):
//   exit:N                    exit with code N
//   sleep:MS                  sleep MS milliseconds, then go on
//   hang                      sleep until killed
//   ignore_term               ignore SIGTERM from now on (for SIGKILL-after-grace tests)
//   lines:N                   print N numbered lines ("line 1" …)
//   leak_token                print PARALLAX_TOKEN (a misbehaving task, for redaction tests)
//   fail_on_attempt:A:CODE    exit CODE when PARALLAX_ATTEMPT == A, else go on
//   hang_rank_on_attempt:R:A  hang when PARALLAX_RANK == R and PARALLAX_ATTEMPT == A, else go on
// After the last step: exit 0. An unknown step: a message on stderr, exit 2.
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

extern char** environ;

namespace {

std::vector<std::string> Split(const std::string& text, char sep) {
  std::vector<std::string> parts;
  std::stringstream in(text);
  std::string part;
  while (std::getline(in, part, sep)) parts.push_back(part);
  return parts;
}

std::string Env(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

[[noreturn]] void Hang() {
  std::fflush(nullptr);
  while (true) pause();
}

}  // namespace

int main() {
  std::vector<std::string> lines;
  for (char** e = environ; *e; ++e) {
    if (std::strncmp(*e, "PARALLAX_TOKEN=", 15) == 0) {
      // A well-behaved task never prints the secret ("leak_token" does).
      lines.emplace_back((*e)[15] ? "PARALLAX_TOKEN=(set)" : "PARALLAX_TOKEN=");
    } else if (std::strncmp(*e, "PARALLAX_", 9) == 0 ||
               std::strncmp(*e, "CUDA_VISIBLE_DEVICES=", 21) == 0) {
      lines.emplace_back(*e);
    }
  }
  std::sort(lines.begin(), lines.end());
  for (const std::string& line : lines) std::printf("%s\n", line.c_str());
  std::fflush(stdout);

  for (const std::string& step : Split(Env("PX_TEST_BEHAVIOR"), ',')) {
    if (step.empty()) continue;
    std::vector<std::string> f = Split(step, ':');
    auto arg = [&](size_t i) { return i < f.size() ? std::atoi(f[i].c_str()) : 0; };
    if (f[0] == "exit" && f.size() == 2) {
      std::fflush(nullptr);
      return arg(1);
    } else if (f[0] == "sleep" && f.size() == 2) {
      std::this_thread::sleep_for(std::chrono::milliseconds(arg(1)));
    } else if (f[0] == "leak_token" && f.size() == 1) {
      std::printf("my secret is %s\n", Env("PARALLAX_TOKEN").c_str());
      std::fflush(stdout);
    } else if (f[0] == "hang" && f.size() == 1) {
      Hang();
    } else if (f[0] == "ignore_term" && f.size() == 1) {
      signal(SIGTERM, SIG_IGN);
    } else if (f[0] == "lines" && f.size() == 2) {
      for (int i = 1; i <= arg(1); ++i) std::printf("line %d\n", i);
      std::fflush(stdout);
    } else if (f[0] == "fail_on_attempt" && f.size() == 3) {
      if (Env("PARALLAX_ATTEMPT") == f[1]) {
        std::printf("failing on attempt %s with exit code %s\n", f[1].c_str(), f[2].c_str());
        std::fflush(nullptr);
        return arg(2);
      }
    } else if (f[0] == "hang_rank_on_attempt" && f.size() == 3) {
      if (Env("PARALLAX_RANK") == f[1] && Env("PARALLAX_ATTEMPT") == f[2]) {
        std::printf("rank %s hanging on attempt %s\n", f[1].c_str(), f[2].c_str());
        Hang();
      }
    } else {
      std::fprintf(stderr, "px_test_task: unknown PX_TEST_BEHAVIOR step '%s'\n", step.c_str());
      return 2;
    }
  }
  return 0;
}
