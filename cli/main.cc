// parallax: the command line. See `parallax --help`.
#include <csignal>
#include <iostream>

#include "cli/cli.h"

int main(int argc, char** argv) {
  std::signal(SIGPIPE, SIG_IGN);
  std::vector<std::string> args(argv + 1, argv + argc);
  return parallax::cli::RunCli(args, parallax::cli::CliEnvironmentFromProcess(), std::cout,
                               std::cerr);
}
