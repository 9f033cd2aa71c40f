"""dgrr: deterministic record and replay for training loops (docs/python.md).

A Python training script opens one session per rank, registers its state,
asks the session where to start, and records the tensors that cross its
model-level boundaries::

    import dgrr
    with dgrr.open(run_dir="runs/a", seed=7, checkpoint_every=100,
                   total_steps=1000, config={"lr": 1e-3}) as session:
        session.register_state("w", w, role="parameter")
        out = session.declare_boundary("fc.out", "forward", "output", "matmul")
        for step in range(session.resume(), 1000):
            session.begin_step(step)
            ...
            session.record(out, y)
            session.end_step(step, loss)
            if session.should_checkpoint(step):
                session.checkpoint(step)
            if session.should_stop(step):
                break

The traces, checkpoints and run files are the C++ runtime's own, so every
`dgrr` command (compare, replay, rollback, bisect, ...) works on the run.
dgrr.torch instruments a torch.nn.Module and its optimizer.
"""

import atexit
import json
import os
import sys

from . import _dgrr
from ._dgrr import (  # noqa: F401  (re-exported)
    Boundary,
    Communicator,
    CorruptionError,
    DivergenceError,
    Error,
    FailedPreconditionError,
    IntegrityFailureError,
    InternalError,
    InvalidArgumentError,
    IoError,
    NotFoundError,
    Session,
    file_digest,
    fingerprint,
)

__all__ = [
    "open", "Session", "Boundary", "fingerprint", "file_digest", "Error",
    "InvalidArgumentError", "NotFoundError", "IoError", "CorruptionError",
    "DivergenceError", "IntegrityFailureError", "FailedPreconditionError",
    "InternalError", "launch_argv", "launch_script", "communicator", "Communicator",
    "have_mpi",
]

have_mpi = _dgrr.have_mpi   # whether this build can open an MPI communicator

# For the exception classes' repr and pickling: they live in dgrr.
for _name in __all__:
    _obj = globals().get(_name)
    if isinstance(_obj, type) and issubclass(_obj, BaseException):
        _obj.__module__ = "dgrr"
del _name, _obj


def launch_argv():
    """The command line that runs this program again: the interpreter by its
    absolute path, then the arguments it was started with (options such as
    -u or -m kept: sys.orig_argv), so the re-executor need not find `python3`
    on PATH (which may name another interpreter)."""
    original = list(getattr(sys, "orig_argv", None) or [sys.executable] + sys.argv)
    return [sys.executable] + original[1:]


def launch_script():
    """The absolute path of the script being run, or "" when there is none
    (python3 -c, the interactive prompt). Its digest goes into launch.json so
    a re-execution refuses a script that changed since the recording."""
    script = sys.argv[0] if sys.argv else ""
    if not script or script == "-c" or not os.path.isfile(script):
        return ""
    return os.path.abspath(script)


def _json_text(value, what):
    if value is None:
        return "{}" if what == "config" else ""
    if isinstance(value, str):
        return value
    if not isinstance(value, dict):
        raise InvalidArgumentError(f"{what} must be a dict (or JSON object text), not {type(value).__name__}")
    try:
        # Sorted keys: the same configuration gives the same digest whatever
        # order the script built the dict in.
        return json.dumps(value, sort_keys=True, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError) as e:
        raise InvalidArgumentError(f"{what} is not JSON-serialisable: {e}") from None


def _program_info(extra):
    info = {
        "python": sys.version.split()[0],
        "python_implementation": sys.implementation.name,
        "dgrr_python": "1",
    }
    numpy = sys.modules.get("numpy")
    if numpy is not None:
        info["numpy"] = numpy.__version__
    if extra:
        if not isinstance(extra, dict):
            raise InvalidArgumentError(f"program_info must be a dict, not {type(extra).__name__}")
        info.update(extra)
    return info


_communicator = None


def communicator(backend="auto"):
    """This process's rank of a data-parallel run: Open MPI's communicator
    when `mpirun` (or another MPI launcher) started the process, otherwise a
    world of one ("auto"); "mpi" insists on MPI, "single" never uses it.
    One per process (MPI cannot be opened twice): later calls return the
    same one. Pass it to dgrr.open(communicator=...).

    Under MPI, an exception that would end this rank's script ends the whole
    job instead (MPI_Abort, with the exit code of a dgrr.Error, else 2), so no
    other rank waits for it in a collective; at exit the communicator is
    closed (MPI_Finalize) after the sessions still open over it. A build
    without MPI raises FailedPreconditionError when MPI is asked for or the
    process was started by an MPI launcher."""
    global _communicator
    if _communicator is not None and not _communicator.closed:
        if backend == "single" and _communicator.backend != "in-process":
            raise FailedPreconditionError(
                "dgrr.communicator: this process already has an MPI communicator")
        if backend == "mpi" and _communicator.backend != "mpi":
            raise FailedPreconditionError(
                "dgrr.communicator: this process already has a communicator for a world of one; "
                "MPI must be asked for first")
        return _communicator
    _communicator = _dgrr._open_communicator(str(backend))
    atexit.register(_communicator.close)
    if _communicator.size > 1:
        _abort_job_on_uncaught_exception(_communicator)
    return _communicator


def _abort_job_on_uncaught_exception(comm):
    previous = sys.excepthook

    def hook(kind, value, traceback):
        previous(kind, value, traceback)
        sys.stderr.flush()
        code = getattr(kind, "code", "Internal error")
        comm.abort(f"rank {comm.rank}: uncaught {kind.__name__}: {value}", code)

    sys.excepthook = hook


def open(run_dir, seed, rank=None, world_size=None, threads=1, mode="full", resume=True,
         overwrite=False, checkpoint_every=0, total_steps=0, resume_fallback=False,
         config=None, program_info=None, reexecutable=True, communicator=None):
    """Opens this rank's session (dgrr::Open: checkpoints on HDF5).

    resume=True (OpenMode::kContinue): re-running the same command continues
    the run from its newest good checkpoint (Session.resume() says where);
    resume=False refuses a run directory that already has this rank's trace,
    unless overwrite=True replaces it. mode: "full", "trusted", "sdc", "off".
    config: a dict (stored as JSON, sorted keys) of what defines the run; its
    digest guards resumes. program_info: a dict recorded in the environment
    fingerprint under "program" (the interpreter's and NumPy's versions are
    added). communicator: this process's dgrr.communicator(), for a
    data-parallel run: rank and world_size come from it (given as well, they
    must agree) and the session checks the ranks' parameters agree after
    every step and writes sharded checkpoints over it. Without one, rank
    and world_size default to 0 and 1. Raises a dgrr.Error subclass on
    failure.
    """
    if communicator is not None:
        rank = communicator.rank if rank is None else rank
        world_size = communicator.size if world_size is None else world_size
    rank = 0 if rank is None else rank
    world_size = 1 if world_size is None else world_size
    if resume and overwrite:
        raise InvalidArgumentError("resume=True and overwrite=True contradict each other")
    open_mode = "continue" if resume else ("overwrite" if overwrite else "create")
    return _dgrr._open(
        run_dir=os.fspath(run_dir), seed=int(seed), rank=int(rank), world_size=int(world_size),
        threads=int(threads), mode=str(mode), open_mode=open_mode,
        checkpoint_every=int(checkpoint_every), total_steps=int(total_steps),
        resume_fallback=bool(resume_fallback), config_json=_json_text(config, "config"),
        program_info_json=_json_text(_program_info(program_info), "program_info"),
        argv=launch_argv(), script=launch_script(), reexecutable=bool(reexecutable),
        communicator=communicator)
