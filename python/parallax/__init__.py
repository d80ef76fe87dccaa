"""Parallax for Python: the Session API of libparallax (parallax/session.h).

``parallax.torch`` is what a PyTorch user wants (docs/PYTHON.md); this module
is the thin layer under it:

    import parallax
    options = parallax.SessionOptions.from_environment()  # set by the agent
    session = parallax.Session(options)
    emb = session.register_sparse("emb", 100_000, 64)
    w = session.register_dense("w", 64)
    session.start()
    rows = session.lookup(emb, ids)            # flat float32, len(ids) * 64
    session.gradient(w, dw)
    session.sparse_gradient(emb, ids, drows)
    session.step()

Every failure raises ``parallax.Error`` (a RuntimeError) whose ``code`` is the
status code name and whose message says what, where and what to do.
"""

from parallax._core import Error, Session, SessionOptions

__all__ = ["Error", "Session", "SessionOptions"]
