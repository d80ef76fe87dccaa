"""The process's Parallax context: one rank's options, set by init().

A process is one rank of one job (as with Horovod's hvd.init()), so the
context is per process; everything else (the Session, the model's variables)
belongs to the parallax.torch.Model that starts the job.
"""

import os
import tomllib

from parallax import _core

_current = None


def error(code, message):
    """A parallax.Error with `code` (a status code name) and `message`."""
    e = _core.Error(f"{code}: {message}")
    e.code = code
    e.message = message
    return e


class Context:
    """init()'s result: the rank's identity, the job's settings, pending state."""

    def __init__(self, options):
        self.options = options
        self.job = options.job
        self.states = []  # (name, save, restore) registered before the Model starts
        self.model = None  # the parallax.torch.Model of this process, once built

    @property
    def rank(self):
        return self.options.rank

    @property
    def world_size(self):
        return self.options.world_size

    def where(self):
        """'rank R' for messages."""
        return f"rank {self.options.rank}"


def init(job=None):
    """Reads this rank's task environment; see parallax.torch.init."""
    global _current
    if _current is not None:
        raise error("FAILED_PRECONDITION",
                    f"{_current.where()}: parallax.torch.init() was called twice; call it once, "
                    "before building the model")
    if job is not None and not os.environ.get("PARALLAX_JOB_FILE"):
        if not os.path.isfile(job):
            raise error("NOT_FOUND", f"init(job={job!r}): no such file")
        # SessionOptions reads the job file the agent names; a process not
        # started by an agent names its own (children inherit it, which is
        # what DataLoader workers should see too).
        os.environ["PARALLAX_JOB_FILE"] = os.path.abspath(job)
    _current = Context(_core.SessionOptions.from_environment())
    return _current


def current(what):
    """The context; FAILED_PRECONDITION naming `what` before init()."""
    if _current is None:
        raise error("FAILED_PRECONDITION",
                    f"{what} before parallax.torch.init(); call init() first")
    return _current


def job_settings(ctx):
    """The job's settings as a dict: steps, batch_size, workers, arch, consistency, the
    optimizers, checkpoint keys, and the [model] and [user] tables as dicts ([model] paths made
    absolute against the job file's directory, as for built-in models)."""
    job = dict(ctx.job)
    job["model"] = tomllib.loads(job.pop("model_toml", "") or "")
    job["user"] = tomllib.loads(job.pop("user_toml", "") or "")
    return job


def reset_for_tests():
    """Forgets the context (tests that init() more than once in a process)."""
    global _current
    _current = None
