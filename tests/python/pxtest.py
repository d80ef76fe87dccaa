"""Helpers of the Python tests: running a job with `parallax run`, and the plain-PyTorch
reference a Parallax run must equal."""
import contextlib
import importlib.util
import json
import os
import shutil
import subprocess
import textwrap
import time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
BIN_DIR = os.environ.get("PARALLAX_BIN_DIR", os.path.join(HERE, "..", "..", "build", "bin"))


def load_trainer(name):
    """tests/python/trainers/<name>.py as a module (its main() does not run)."""
    path = os.path.join(HERE, "trainers", name + ".py")
    spec = importlib.util.spec_from_file_location("trainer_" + name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class Job:
    """A job directory under `tmp`: the trainer copied next to the job file (the agent runs
    programs under the job file's directory only), an output directory for the trainer."""

    def __init__(self, tmp, trainer, toml):
        self.dir = str(tmp)
        self.out = os.path.join(self.dir, "out")
        os.makedirs(self.out, exist_ok=True)
        shutil.copy(os.path.join(HERE, "trainers", trainer + ".py"), self.dir)
        self.file = os.path.join(self.dir, "job.toml")
        with open(self.file, "w") as f:
            f.write(textwrap.dedent(toml).replace("@OUT@", self.out))

    def run(self, timeout=240):
        """`parallax run` to the end: (exit code, its output and the trainers' logs)."""
        state = os.path.join(self.dir, "state")
        proc = subprocess.run([os.path.join(BIN_DIR, "parallax"), "run", "--state-dir", state,
                               self.file], cwd=self.dir, capture_output=True, text=True,
                              timeout=timeout)
        logs = ""
        tasks = os.path.join(state, "agent", "tasks")
        for task in sorted(os.listdir(tasks)) if os.path.isdir(tasks) else []:
            log = os.path.join(tasks, task, "task.log")
            if os.path.exists(log):
                with open(log, errors="replace") as f:
                    logs += f"--- {task}\n{f.read()[-3000:]}"
        return proc.returncode, proc.stdout + proc.stderr + logs

    @contextlib.contextmanager
    def coordinator(self):
        """A coordinator on the finished job's state database (the embedded one ended with
        `parallax run`): yields its address, or raises RuntimeError when it does not start."""
        state = os.path.join(self.dir, "state")
        port_file = os.path.join(self.dir, "coordinator.port")
        if os.path.exists(port_file):
            os.remove(port_file)
        coordinator = subprocess.Popen(
            [os.path.join(BIN_DIR, "parallax-coordinator"), "--db",
             os.path.join(state, "state.db"), "--listen", "127.0.0.1:0", "--port-file",
             port_file], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        try:
            deadline = time.monotonic() + 60
            while not os.path.exists(port_file) or not open(port_file).read().strip():
                if coordinator.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("the coordinator did not start: " + coordinator.stderr.read())
                time.sleep(0.05)
            with open(port_file) as f:
                yield "127.0.0.1:" + f.read().strip()
        finally:
            coordinator.terminate()
            coordinator.wait(timeout=30)

    def export(self, out):
        """`parallax export 1 --out OUT` of the finished job: (exit code, output)."""
        try:
            with self.coordinator() as address:
                proc = subprocess.run([os.path.join(BIN_DIR, "parallax"), "--coordinator",
                                       address, "export", "1", "--out", out],
                                      capture_output=True, text=True, timeout=120)
                return proc.returncode, proc.stdout + proc.stderr
        except RuntimeError as e:
            return 1, str(e)

    def status(self):
        """`parallax status 1 --json --points` of the finished job: its object."""
        with self.coordinator() as address:
            proc = subprocess.run([os.path.join(BIN_DIR, "parallax"), "--coordinator", address,
                                   "status", "1", "--json", "--points"],
                                  capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        return json.loads(proc.stdout)["jobs"][0]

    def rank_result(self, rank):
        with open(os.path.join(self.out, f"rank-{rank}.json")) as f:
            return json.load(f)

    def state(self, name):
        return torch.load(os.path.join(self.out, name))


def global_batches(size, global_batch, steps, seed):
    """The examples of global batches 0..steps-1 as parallax.torch.DistributedSampler documents
    them: epoch e shuffled by torch.randperm with a generator seeded seed * 1000003 + e, global
    batch b of the epoch its next global_batch indices."""
    per_epoch = size // global_batch
    out = []
    for t in range(steps):
        epoch, b = divmod(t, per_epoch)
        order = torch.randperm(size, generator=torch.Generator().manual_seed(seed * 1_000_003 +
                                                                              epoch))
        out.append(order[b * global_batch:(b + 1) * global_batch])
    return out


def assert_close(got, want, what, tol=1e-5):
    """Every tensor of `got` within tol relative of `want` (absolute for values near zero)."""
    assert got.keys() == want.keys(), (what, sorted(got), sorted(want))
    for key in want:
        g, w = got[key].float(), want[key].float()
        assert g.shape == w.shape, (what, key, g.shape, w.shape)
        err = ((g - w).abs() / w.abs().clamp(min=1.0)).max().item()
        assert err <= tol, f"{what}: '{key}' differs by {err:.3g} (relative) from plain PyTorch"
