// `parallax run JOB.toml`: a whole job on this machine. Starts
// parallax-coordinator (SQLite under ./.parallax/ unless --db) and one
// parallax-agent with as many slots as the job needs (and, for a job with
// [ps] hosts = "ps", a second one with --role ps for its PS shards: the PS
// "hosts" are then a second agent process on this machine), submits the job,
// shows progress until it ends and exits 0 only if it SUCCEEDED. Ctrl-C
// cancels the job, waits for its tasks to stop and exits 130. The daemons die
// with this process (PR_SET_PDEATHSIG), and the agents then stop the job's
// tasks.
// The agent may execute programs under its own directory and under the job
// file's directory (--allow-exec), nothing else.
#ifndef PARALLAX_CLI_RUN_H_
#define PARALLAX_CLI_RUN_H_

#include <ostream>
#include <string>

#include "cli/job_watch.h"  // RunSummary

namespace parallax::cli {

struct RunOptions {
  std::string job_file;
  std::string state_dir = ".parallax";  // database, daemon logs, agent workdir
  std::string db;                       // default: <state_dir>/state.db
  std::string bin_dir;                  // where parallax-coordinator/-agent are
  std::string token;
  std::string secret_file;              // --secret-file, given to both daemons too
  // TLS (core/rpc/tls.h): both daemons serve with cert and key; the agent and
  // this command trust the CA. All empty: plaintext.
  std::string tls_cert_file;
  std::string tls_key_file;
  std::string tls_ca_file;
  std::string timeline_dir;             // --timeline: sets [trainer] timeline for the job
  // --http and --http-token-file of the embedded coordinator (its web pages
  // and /metrics); "": none. The address is printed once it listens.
  std::string http;
  std::string http_token_file;
  bool progress_bar = false;            // a terminal: redraw one line
};

int RunJob(const RunOptions& options, std::ostream& out, std::ostream& err);

}  // namespace parallax::cli

#endif  // PARALLAX_CLI_RUN_H_
