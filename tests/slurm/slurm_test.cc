// Parallax under a real Slurm: Debian's munged, slurmctld and one slurmd per
// "node" (a network namespace on a bridge, tests/testing/net_hosts.h),
// started and stopped here with a generated slurm.conf (a NodeAddr per
// namespace, %n in the spool, pid and log paths, proctrack/linuxproc and
// task/none: no systemd, no cgroup tree to manage; private ports and a
// private munge socket and key). The batch script is the example users copy,
// examples/slurm/train.sbatch, submitted with sbatch as they would.
//
// - A hybrid job (a PS variable and an all-reduced one, no [job] workers)
//   on 3 nodes ends SUCCEEDED with one rank on each node, as the database
//   that `parallax slurm` copies to its state directory records.
// - scancel of a second job, its ranks held at a step: every process of that
//   job (found by a marker in the environment sbatch passes on, and by the
//   ranks' own pids) is gone soon after, and the database records the job
//   CANCELLED with Slurm as the reason.
// - `--resume` of that run's state directory in a third allocation: the job
//   goes on from its checkpoint to SUCCEEDED.
// - `--ps-nodes 1` puts the shards on the last node and the ranks on the
//   others; a job asking for more workers than the allocation holds is
//   refused before anything starts. Outside an allocation `parallax slurm`
//   says so (no Slurm needed for that one).
//
// Needs root (namespaces, Slurm's daemons as root); skips, saying which,
// where the slurm packages are missing (scripts/install-deps --test installs
// them).
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sqlite3.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <random>
#include <set>
#include <thread>

#include "tests/testing/build_paths.h"
#include "tests/testing/free_port.h"
#include "tests/testing/net_hosts.h"
#include "tests/testing/proc_scan.h"
#include "tests/testing/subprocess.h"
#include "tests/testing/temp_dir.h"

namespace parallax::testing {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

const std::string kBin = ::parallax::testing::BuildBinDir();
const std::string kSource = ::parallax::testing::SourceDir();
constexpr int kNodes = 3;

// Slurm's programs and munge's daemon, as Debian installs them.
const char* const kPrograms[] = {"/usr/sbin/munged", "/usr/sbin/slurmctld", "/usr/sbin/slurmd",
                                 "/usr/bin/sbatch",  "/usr/bin/srun",       "/usr/bin/scontrol",
                                 "/usr/bin/scancel"};

// One value of the SQLite database at `path` ("" when the query fails).
std::string Query(const std::string& path, const std::string& sql) {
  sqlite3* db = nullptr;
  std::string value;
  if (sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READONLY, nullptr) == SQLITE_OK) {
    sqlite3_stmt* st = nullptr;
    if (sqlite3_prepare_v2(db, sql.c_str(), -1, &st, nullptr) == SQLITE_OK &&
        sqlite3_step(st) == SQLITE_ROW) {
      const unsigned char* text = sqlite3_column_text(st, 0);
      value = text ? reinterpret_cast<const char*>(text) : "";
    }
    sqlite3_finalize(st);
  }
  sqlite3_close(db);
  return value;
}

bool Alive(int pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(stat, line)) return false;
  const size_t paren = line.rfind(')');
  return paren != std::string::npos && paren + 2 < line.size() && line[paren + 2] != 'Z';
}

class SlurmTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "needs root for ip netns and Slurm's daemons";
    for (const char* p : kPrograms) {
      if (access(p, X_OK) != 0) {
        GTEST_SKIP() << p << " is missing: the slurm packages are not installed (scripts/"
                     << "install-deps --test installs munge, slurmctld, slurmd, slurm-client)";
      }
    }
    if (std::string failed = net_.Create(); !failed.empty()) {
      GTEST_SKIP() << "the sandbox refused `" << failed << "`";
    }
    fs::create_directories(dir_.File("munge"));
    fs::create_directories(dir_.File("local"));
    chmod(dir_.path().c_str(), 0755);  // munged wants its socket's directories searchable
    chmod(dir_.File("munge").c_str(), 0755);
    StartMunge();
    WriteSlurmConf();
    StartSlurm();
  }

  void TearDown() override {
    if (slurmctld_) Slurm({"/usr/bin/scancel", "--full", "--user=root"});
    for (auto& d : slurmd_) d->Signal(SIGTERM);
    if (slurmctld_) slurmctld_->Signal(SIGTERM);
    for (auto& d : slurmd_) d->Wait(10'000);
    if (slurmctld_) slurmctld_->Wait(10'000);
    slurmd_.clear();
    slurmctld_.reset();
    if (munged_) {
      munged_->Signal(SIGTERM);
      munged_->Wait(5'000);
      munged_.reset();
    }
    KillAllWithEnv({JobMarker()});
    KillAllWithEnv({DaemonMarker()});
  }

  // In the environment of everything a job of this test runs (sbatch passes
  // it on), and of this test's Slurm daemons.
  std::string JobMarker() const { return "PX_SLURM_TEST_JOB=" + dir_.path(); }
  std::string DaemonMarker() const { return "PX_SLURM_TEST_DAEMON=" + dir_.path(); }
  std::string Node(int i) const { return "pxnode" + std::to_string(i); }
  std::string Conf() const { return dir_.File("slurm.conf"); }

  void StartMunge() {
    {
      std::random_device rd;
      std::ofstream key(dir_.File("munge/munge.key"), std::ios::binary);
      for (int i = 0; i < 1024; ++i) key.put(static_cast<char>(rd()));
    }
    chmod(dir_.File("munge/munge.key").c_str(), 0600);
    munged_ = std::make_unique<ChildProcess>(
        std::vector<std::string>{"/usr/sbin/munged", "--foreground", "--force",
                                 "--socket=" + dir_.File("munge/munge.sock"),
                                 "--key-file=" + dir_.File("munge/munge.key"),
                                 "--log-file=" + dir_.File("munge/munged.log"),
                                 "--pid-file=" + dir_.File("munge/munged.pid"),
                                 "--seed-file=" + dir_.File("munge/munged.seed")},
        dir_.File("munge/out.log"), std::vector<std::string>{DaemonMarker()});
    for (int i = 0; i < 200 && !fs::exists(dir_.File("munge/munge.sock")); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(25));
    }
    ASSERT_TRUE(fs::exists(dir_.File("munge/munge.sock")))
        << "munged did not start: " << ReadWholeFile(dir_.File("munge/out.log"));
  }

  void WriteSlurmConf() {
    char host[256] = {};
    gethostname(host, sizeof(host) - 1);
    std::string controller = host;
    controller = controller.substr(0, controller.find('.'));
    const int port = FreePort();
    ASSERT_GT(port, 0) << "no free port for slurmctld";
    const unsigned cpus = std::max(1u, std::thread::hardware_concurrency());
    for (const char* d : {"state", "spool", "log", "run"}) fs::create_directories(dir_.File(d));
    for (int i = 0; i < kNodes; ++i) fs::create_directories(dir_.File("spool/" + Node(i)));
    std::ofstream(dir_.File("plugstack.conf")) << "";
    std::ofstream conf(Conf());
    conf << "ClusterName=pxtest\n"
         << "SlurmctldHost=" << controller << "(" << net_.CoordinatorHost() << ")\n"
         << "SlurmctldPort=" << port << "\nSlurmdPort=6818\n"
         << "SlurmUser=root\nSlurmdUser=root\n"
         << "AuthType=auth/munge\nCredType=cred/munge\n"
         << "AuthInfo=socket=" << dir_.File("munge/munge.sock") << "\n"
         << "StateSaveLocation=" << dir_.File("state") << "\n"
         << "SlurmdSpoolDir=" << dir_.File("spool/%n") << "\n"
         << "SlurmctldPidFile=" << dir_.File("run/slurmctld.pid") << "\n"
         << "SlurmdPidFile=" << dir_.File("run/slurmd-%n.pid") << "\n"
         << "SlurmctldLogFile=" << dir_.File("log/slurmctld.log") << "\n"
         << "SlurmdLogFile=" << dir_.File("log/slurmd-%n.log") << "\n"
         << "PlugStackConfig=" << dir_.File("plugstack.conf") << "\n"
         << "MailProg=/bin/true\n"
         // No systemd and no cgroup tree of its own here: processes are
         // tracked by parent pid, and tasks are not bound.
         << "ProctrackType=proctrack/linuxproc\nTaskPlugin=task/none\n"
         << "JobAcctGatherType=jobacct_gather/none\nAccountingStorageType=accounting_storage/none\n"
         << "SchedulerType=sched/builtin\nSelectType=select/cons_tres\n"
         << "SelectTypeParameters=CR_Core_Memory\nMpiDefault=none\nReturnToService=2\n"
         << "KillWait=10\nMinJobAge=600\n"
         << "NodeName=" << Node(0) << " NodeAddr=" << net_.Host(0) << " CPUs=" << cpus
         << " RealMemory=1000 State=UNKNOWN\n";
    for (int i = 1; i < kNodes; ++i) {
      conf << "NodeName=" << Node(i) << " NodeAddr=" << net_.Host(i) << " CPUs=" << cpus
           << " RealMemory=1000 State=UNKNOWN\n";
    }
    conf << "PartitionName=px Nodes=ALL Default=YES MaxTime=INFINITE State=UP\n";
    // slurmd initialises a cgroup plugin even with proctrack/linuxproc; the
    // v1 one loads where /sys/fs/cgroup is not a cgroup2 mount (as here).
    struct statfs fs_info {};
    const bool v2 = statfs("/sys/fs/cgroup", &fs_info) == 0 && fs_info.f_type == 0x63677270;
    std::ofstream(dir_.File("cgroup.conf"))
        << (v2 ? "CgroupPlugin=cgroup/v2\nIgnoreSystemd=yes\n" : "CgroupPlugin=cgroup/v1\n");
  }

  void StartSlurm() {
    const std::vector<std::string> env = {DaemonMarker(), "SLURM_CONF=" + Conf()};
    slurmctld_ = std::make_unique<ChildProcess>(
        std::vector<std::string>{"/usr/sbin/slurmctld", "-D", "-i", "-f", Conf()},
        dir_.File("log/slurmctld.out"), env);
    for (int i = 0; i < kNodes; ++i) {
      slurmd_.push_back(std::make_unique<ChildProcess>(
          net_.InHost(i, {"/usr/sbin/slurmd", "-D", "-N", Node(i), "-f", Conf()}),
          dir_.File("log/slurmd" + std::to_string(i) + ".out"), env));
    }
    // Every node idle.
    std::string states;
    for (int i = 0; i < 300; ++i) {
      RunResult r = Slurm({"/usr/bin/sinfo", "-h", "-N", "-o", "%t"});
      states = r.out;
      int idle = 0;
      for (size_t at = 0; (at = states.find("idle", at)) != std::string::npos; ++at) ++idle;
      if (r.exit_code == 0 && idle == kNodes) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    FAIL() << "the nodes did not become idle: sinfo says '" << states << "'\n"
           << ReadWholeFile(dir_.File("log/slurmctld.out"))
           << ReadWholeFile(dir_.File("log/slurmd0.out"));
  }

  RunResult Slurm(const std::vector<std::string>& argv, std::vector<std::string> env = {}) {
    env.push_back("SLURM_CONF=" + Conf());
    return RunProcess(argv, env, 30'000);
  }

  // A hybrid job of the test model: `emb` on the PS, `w` all-reduced; no
  // [job] workers (the allocation sets it).
  std::string WriteJob(const std::string& name, int steps, const std::string& env,
                       const std::string& job = "", const std::string& ps = "shards = 2\n") {
    const std::string path = dir_.File(name + ".toml");
    fs::create_directories(dir_.File(name + "-ckpt"));
    std::ofstream(path) << "[job]\nname = \"" << name << "\"\narch = \"hybrid\"\n" << job
                        << "[trainer]\ncommand = [\"" << kBin << "/trainer_test_rank\", \""
                        << dir_.File(name + "-rank{rank}.out") << "\", \"" << steps
                        << "\", \"32\"]\nsteps = " << steps << "\ncheckpoint_every = 10\n"
                        << "checkpoint_dir = \"" << dir_.File(name + "-ckpt") << "\"\n"
                        << "metrics_every = 5\n" << env
                        << "[optimizer.dense]\ntype = \"sgd\"\nlr = 0.1\n"
                        << "[optimizer.sparse]\ntype = \"adagrad\"\nlr = 0.1\n"
                        << "[ps]\n" << ps << "[[variable]]\nname = \"emb\"\npath = \"ps\"\n"
                        << "[[variable]]\nname = \"w\"\npath = \"allreduce\"\n";
    return path;
  }

  // sbatch of the example script on 3 nodes; the Slurm job id.
  std::string Submit(const std::string& job_file, const std::vector<std::string>& more = {}) {
    std::vector<std::string> argv = {"/usr/bin/sbatch", "--parsable", "--chdir=" + dir_.path(),
                                     "--nodes=" + std::to_string(kNodes), "--ntasks-per-node=1",
                                     "--output=" + dir_.File("slurm-%j.out"),
                                     kSource + "/examples/slurm/train.sbatch", job_file};
    argv.insert(argv.end(), more.begin(), more.end());
    RunResult r = Slurm(argv,
                        {JobMarker(), "PATH=" + kBin + ":/usr/sbin:/usr/bin:/sbin:/bin",
                         "TMPDIR=" + dir_.File("local")});
    EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
    std::string id = LastLine(r.out);
    return id.substr(0, id.find(';'));
  }

  // The Slurm job's state (JobState=...), "" once Slurm forgot it.
  std::string JobState(const std::string& id) {
    RunResult r = Slurm({"/usr/bin/scontrol", "-o", "show", "job", id});
    const size_t at = r.out.find("JobState=");
    if (at == std::string::npos) return "";
    return r.out.substr(at + 9, r.out.find(' ', at) - at - 9);
  }

  std::string WaitForEnd(const std::string& id, int timeout_s) {
    std::string state;
    const auto deadline = Clock::now() + std::chrono::seconds(timeout_s);
    while (Clock::now() < deadline) {
      state = JobState(id);
      if (state != "PENDING" && state != "RUNNING" && state != "CONFIGURING" &&
          state != "COMPLETING" && !state.empty()) {
        return state;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
    return state;
  }

  std::string Logs(const std::string& id) {
    std::string out = "== slurm-" + id + ".out\n" + ReadWholeFile(dir_.File("slurm-" + id + ".out"));
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(dir_.File("parallax-slurm-" + id), ec)) {
      if (e.path().extension() == ".log") {
        out += "== " + e.path().string() + "\n" + ReadWholeFile(e.path().string());
      }
    }
    return out;
  }

  TempDir dir_;
  NetHosts net_{NetHostsOptions{.hosts = kNodes}};
  std::unique_ptr<ChildProcess> munged_, slurmctld_;
  std::vector<std::unique_ptr<ChildProcess>> slurmd_;
};

TEST_F(SlurmTest, HybridJobOnThreeNodesThenScancelLeavesNothingAndResumeFinishes) {
  // 1. A hybrid job to its end, one rank per node.
  const std::string id = Submit(WriteJob("hybrid", 20, ""));
  ASSERT_FALSE(id.empty());
  EXPECT_EQ(WaitForEnd(id, 120), "COMPLETED") << Logs(id);
  const std::string out = ReadWholeFile(dir_.File("slurm-" + id + ".out"));
  EXPECT_NE(out.find("job 1 SUCCEEDED"), std::string::npos) << Logs(id);
  const std::string db = dir_.File("parallax-slurm-" + id + "/state.db");
  EXPECT_EQ(Query(db, "SELECT state FROM jobs WHERE id = 1"), "SUCCEEDED") << Logs(id);
  EXPECT_EQ(Query(db, "SELECT workers FROM jobs WHERE id = 1"), std::to_string(kNodes));
  std::set<std::string> rank_nodes;
  for (int r = 0; r < kNodes; ++r) {
    rank_nodes.insert(Query(db, "SELECT agent_name FROM tasks WHERE job_id = 1 AND "
                                "role = 'TRAINER' AND task_index = " + std::to_string(r)));
  }
  EXPECT_EQ(rank_nodes, (std::set<std::string>{Node(0), Node(1), Node(2)})) << Logs(id);
  EXPECT_TRUE(PidsWithEnv({JobMarker()}).empty());

  // 2. scancel of a job whose ranks wait at step 3: nothing of it is left.
  fs::create_directories(dir_.File("pause"));
  const std::string held =
      WriteJob("held", 40, "[trainer.env]\nTINY_PAUSE_AT = \"step:15\"\nTINY_PAUSE_DIR = \"" +
                                 dir_.File("pause") + "\"\n");
  const std::string id2 = Submit(held);
  ASSERT_FALSE(id2.empty());
  std::vector<int> rank_pids;
  for (int i = 0; i < 600 && rank_pids.size() < kNodes; ++i) {
    rank_pids.clear();
    for (int r = 0; r < kNodes; ++r) {
      std::ifstream in(dir_.File("pause/paused-rank" + std::to_string(r)));
      int pid = 0;
      if (in >> pid && pid > 0) rank_pids.push_back(pid);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ASSERT_EQ(rank_pids.size(), static_cast<size_t>(kNodes)) << Logs(id2);
  const std::vector<int> job_pids = PidsWithEnv({JobMarker()});
  ASSERT_GE(job_pids.size(), static_cast<size_t>(kNodes * 2)) << "ranks and agents at least";
  const auto cancelled_at = Clock::now();
  ASSERT_EQ(Slurm({"/usr/bin/scancel", id2}).exit_code, 0);
  EXPECT_EQ(WaitForEnd(id2, 60), "CANCELLED") << Logs(id2);
  std::vector<int> left;
  for (int i = 0; i < 300; ++i) {
    left.clear();
    for (int pid : job_pids) {
      if (Alive(pid)) left.push_back(pid);
    }
    for (int pid : rank_pids) {
      if (Alive(pid)) left.push_back(pid);
    }
    for (int pid : PidsWithEnv({JobMarker()})) left.push_back(pid);
    if (left.empty()) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  std::string described;
  for (int pid : left) {
    described += std::to_string(pid) + " " +
                 ReadWholeFile("/proc/" + std::to_string(pid) + "/cmdline") + "\n";
  }
  EXPECT_TRUE(left.empty()) << "still running after scancel:\n" << described << Logs(id2);
  std::cout << "scancel to nothing left: "
            << std::chrono::duration<double>(Clock::now() - cancelled_at).count() << " s\n";
  // The coordinator recorded why.
  const std::string db2 = dir_.File("parallax-slurm-" + id2 + "/state.db");
  EXPECT_EQ(Query(db2, "SELECT state FROM jobs WHERE id = 1"), "CANCELLED") << Logs(id2);
  EXPECT_NE(Query(db2, "SELECT reason FROM jobs WHERE id = 1").find("Slurm"), std::string::npos)
      << Query(db2, "SELECT reason FROM jobs WHERE id = 1") << Logs(id2);

  // 3. The cancelled job resumes in a new allocation from its checkpoint of
  // step 10 (its ranks held at 15), to the end.
  const std::string id3 = Submit(held, {"--resume", dir_.File("parallax-slurm-" + id2)});
  ASSERT_FALSE(id3.empty());
  EXPECT_EQ(WaitForEnd(id3, 120), "COMPLETED") << Logs(id3);
  const std::string db3 = dir_.File("parallax-slurm-" + id3 + "/state.db");
  EXPECT_EQ(Query(db3, "SELECT state FROM jobs WHERE id = 1"), "SUCCEEDED") << Logs(id3);
  EXPECT_EQ(Query(db3, "SELECT attempt FROM jobs WHERE id = 1"), "2") << Logs(id3);
  EXPECT_NE(ReadWholeFile(dir_.File("held-rank0.out")).find("resumed 10"), std::string::npos)
      << ReadWholeFile(dir_.File("held-rank0.out")) << Logs(id3);
}

TEST(SlurmCommandTest, OutsideAnAllocationSaysSoAndHowToGetOne) {
  RunResult r = RunProcess({"/usr/bin/env", "-u", "SLURM_JOB_ID", "-u", "SLURM_JOB_NODELIST",
                            kBin + "/parallax", "slurm", kSource + "/examples/mlp.toml"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("not inside a Slurm allocation"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("sbatch examples/slurm/train.sbatch"), std::string::npos) << r.err;
}

TEST_F(SlurmTest, PsNodesGetTheShardsAndATooSmallAllocationIsRefused) {
  // --ps-nodes 1: the shards on the last node, the ranks on the two others.
  const std::string id = Submit(WriteJob("psnodes", 20, "", "", "shards = 2\nhosts = \"ps\"\n"),
                                {"--ps-nodes", "1"});
  ASSERT_FALSE(id.empty());
  EXPECT_EQ(WaitForEnd(id, 120), "COMPLETED") << Logs(id);
  const std::string db = dir_.File("parallax-slurm-" + id + "/state.db");
  EXPECT_EQ(Query(db, "SELECT state FROM jobs WHERE id = 1"), "SUCCEEDED") << Logs(id);
  EXPECT_EQ(Query(db, "SELECT group_concat(DISTINCT agent_name) FROM tasks WHERE role = 'PS'"),
            Node(2));
  EXPECT_EQ(Query(db, "SELECT group_concat(agent_name) FROM (SELECT agent_name FROM tasks "
                      "WHERE role = 'TRAINER' ORDER BY agent_name)"),
            Node(0) + "," + Node(1));

  // 7 workers on 3 nodes of one rank each: refused before anything starts,
  // naming both numbers.
  const std::string id2 = Submit(WriteJob("big", 20, "", "workers = 7\n"));
  ASSERT_FALSE(id2.empty());
  EXPECT_EQ(WaitForEnd(id2, 60), "FAILED") << Logs(id2);
  const std::string out = ReadWholeFile(dir_.File("slurm-" + id2 + ".out"));
  EXPECT_NE(out.find("asks for 7 workers"), std::string::npos) << out;
  EXPECT_NE(out.find("has 3 worker nodes"), std::string::npos) << out;
  EXPECT_FALSE(fs::exists(dir_.File("parallax-slurm-" + id2 + "/coordinator.log"))) << out;
}

}  // namespace
}  // namespace parallax::testing
