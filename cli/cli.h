// The `parallax` command line: submit, status, cancel, agents, events.
//
// Exit codes: 0 ok; 1 the job or request failed (unknown job id included);
// 2 usage error or invalid input (a bad job file); 3 the coordinator could
// not be reached (the message says where it looked).
#ifndef PARALLAX_CLI_CLI_H_
#define PARALLAX_CLI_CLI_H_

#include <ostream>
#include <string>
#include <vector>

namespace parallax::cli {

enum ExitCode { kExitOk = 0, kExitFailed = 1, kExitUsage = 2, kExitUnreachable = 3 };

// What the process environment says, read once in main.
struct CliEnvironment {
  std::string coordinator;  // $PARALLAX_COORDINATOR, or empty
  std::string token;        // $PARALLAX_TOKEN, or empty
  std::string secret_file;  // $PARALLAX_SECRET_FILE, or empty
  std::string tls_ca;       // $PARALLAX_TLS_CA, or empty
};

CliEnvironment CliEnvironmentFromProcess();

// Runs one command. `args` excludes the program name. Writes results to
// `out` and messages to `err`; returns the exit code.
int RunCli(const std::vector<std::string>& args, const CliEnvironment& env, std::ostream& out,
           std::ostream& err);

}  // namespace parallax::cli

#endif  // PARALLAX_CLI_CLI_H_
