#include "tests/testing/coordinator_process.h"

#include <signal.h>
#include <sys/wait.h>

#include <filesystem>

namespace parallax::testing {

CoordinatorProcess::CoordinatorProcess(std::string bin_dir, std::string dir,
                                       CoordinatorProcessOptions options)
    : bin_dir_(std::move(bin_dir)),
      dir_(std::move(dir)),
      options_(std::move(options)),
      db_(options_.db.empty() ? dir_ + "/state.db" : options_.db) {
  Start(options_.port);
}

CoordinatorProcess::~CoordinatorProcess() = default;

void CoordinatorProcess::Start(int port) {
  const std::string port_file = dir_ + "/" + options_.name + ".port";
  std::error_code ec;
  std::filesystem::remove(port_file, ec);
  std::vector<std::string> argv = {bin_dir_ + "/parallax-coordinator",
                                   "--listen",
                                   options_.listen_host + ":" + std::to_string(port),
                                   "--db",
                                   db_,
                                   "--port-file",
                                   port_file};
  argv.insert(argv.end(), options_.extra_args.begin(), options_.extra_args.end());
  if (options_.open_file_limit > 0) argv = WithOpenFileLimit(options_.open_file_limit, argv);
  child_.reset();  // a previous process, if any, is gone first
  child_ = std::make_unique<ChildProcess>(argv, log_path(), options_.env);
  const std::string got = WaitForFileWord(port_file, options_.start_timeout_ms, child_.get());
  if (got.empty()) {
    error_ = "parallax-coordinator did not start (--listen " + options_.listen_host + ":" +
             std::to_string(port) + "); its log:\n" + Log();
    return;
  }
  error_.clear();
  port_text_ = got;
  port_ = std::stoi(got);
}

bool CoordinatorProcess::Kill() {
  if (!child_) return false;
  child_->Signal(SIGKILL);
  const int status = child_->Wait(10'000);
  return status != -1 && WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL;
}

bool CoordinatorProcess::Restart() {
  Start(port_ != 0 ? port_ : options_.port);
  return ok();
}

}  // namespace parallax::testing
