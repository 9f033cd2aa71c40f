"""The dgrr extension itself, with NumPy only: sessions, records, state,
checkpoints and resume, errors, and the launch record of a script."""

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import dgrr

CLI = os.environ.get("DGRR_CLI", "dgrr")


def run_loop(run_dir, w, steps, every, record=True):
    """A four-line training loop over one numpy parameter vector."""
    with dgrr.open(run_dir=run_dir, seed=5, checkpoint_every=every, total_steps=steps,
                   config={"lr": 0.5}) as s:
        s.register_state("w", w, "parameter")
        out = s.declare_boundary("w.next", "optimizer", "output", "optimizer")
        start = s.resume()
        for step in range(start, steps):
            s.begin_step(step)
            w *= np.float32(0.5)
            w += np.float32(step)
            if record:
                s.record(out, w, first_example=step, count=1)
            s.end_step(step, float(w[0]))
            if s.should_checkpoint(step):
                s.checkpoint(step)
            if s.should_stop(step):
                break
        return start


def test_error_classes_share_a_base_and_carry_codes():
    for cls in (dgrr.InvalidArgumentError, dgrr.NotFoundError, dgrr.IoError,
                dgrr.CorruptionError, dgrr.DivergenceError, dgrr.IntegrityFailureError,
                dgrr.FailedPreconditionError, dgrr.InternalError):
        assert issubclass(cls, dgrr.Error)
    assert issubclass(dgrr.InvalidArgumentError, ValueError)
    assert dgrr.InvalidArgumentError.exit_code == 1
    assert dgrr.IoError.exit_code == 2
    assert dgrr.CorruptionError.exit_code == 3
    assert dgrr.DivergenceError.exit_code == 4
    assert dgrr.IntegrityFailureError.exit_code == 5


def test_fingerprint_reads_memory_in_place():
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    xor64, xxh3 = dgrr.fingerprint(a)
    # XOR of the little-endian 64-bit words of the buffer.
    words = np.frombuffer(a.tobytes(), dtype="<u8")
    assert xor64 == int(np.bitwise_xor.reduce(words))
    b = a.copy()
    b.view(np.uint32)[1, 2] ^= 1
    assert dgrr.fingerprint(b)[0] != xor64 and dgrr.fingerprint(b)[1] != xxh3


def test_checkpoint_and_resume_restore_registered_state_bitwise(tmp_path):
    run = tmp_path / "run"
    w = np.linspace(-1, 1, 16, dtype=np.float32)
    assert run_loop(run, w, steps=4, every=2) == 0
    done = w.copy()
    # Re-running the finished run: resume restores the last checkpoint
    # (after step 3) into a fresh array and starts after it.
    w2 = np.zeros(16, dtype=np.float32)
    assert run_loop(run, w2, steps=4, every=2) == 4
    assert w2.tobytes() == done.tobytes()


def test_register_state_keeps_the_buffer_alive(tmp_path):
    import gc
    import weakref
    s = dgrr.open(run_dir=tmp_path / "r", seed=1)
    w = np.ones(1000, dtype=np.float64)
    alive = weakref.ref(w)
    s.register_state("w", w, "parameter")
    del w
    gc.collect()
    assert alive() is not None  # the session holds it while registered
    s.resume()
    s.begin_step(0)
    s.end_step(0, 0.0)  # fingerprints the registered buffer
    s.close()
    gc.collect()
    assert alive() is None  # and lets it go when closed


def test_bad_tensors_are_refused_with_a_clear_error(tmp_path):
    with dgrr.open(run_dir=tmp_path / "r", seed=1) as s:
        b = s.declare_boundary("x", "forward", "output", "other")
        s.resume()
        s.begin_step(0)
        with pytest.raises(dgrr.InvalidArgumentError, match="non-contiguous"):
            s.record(b, np.zeros((4, 4), np.float32)[:, ::2])
        with pytest.raises(dgrr.InvalidArgumentError, match="not a dtype dgrr records"):
            s.record(b, np.zeros(4, np.int16))
        with pytest.raises(dgrr.InvalidArgumentError, match="not a dtype dgrr records"):
            s.record(b, np.zeros(4, np.complex64))
        with pytest.raises(dgrr.InvalidArgumentError, match="holds no tensor memory"):
            s.record(b, [1.0, 2.0])
        with pytest.raises(dgrr.InvalidArgumentError, match="unknown phase 'sideways'"):
            s.declare_boundary("y", "sideways", "output", "other")
        ro = np.zeros(4, np.float32)
        ro.flags.writeable = False
        with pytest.raises(dgrr.InvalidArgumentError, match="read-only"):
            s.register_state("ro", ro, "parameter")
        with pytest.raises(dgrr.InvalidArgumentError, match="non-contiguous"):
            s.register_state("nc", np.zeros((4, 4), np.float32)[:, ::2], "parameter")
        s.end_step(0, 0.0)
    with pytest.raises(dgrr.FailedPreconditionError, match="closed"):
        s.begin_step(1)


def test_errors_of_the_runtime_map_to_their_classes(tmp_path):
    with pytest.raises(dgrr.InvalidArgumentError):
        dgrr.open(run_dir=tmp_path / "r", seed=1, mode="loud")
    with pytest.raises(dgrr.InvalidArgumentError):
        dgrr.open(run_dir=tmp_path / "r", seed=1, rank=3, world_size=2)
    with dgrr.open(run_dir=tmp_path / "c", seed=1, resume=False) as s:
        s.resume()
    # A second fresh (not resuming) session on the same run is refused.
    with pytest.raises(dgrr.FailedPreconditionError):
        dgrr.open(run_dir=tmp_path / "c", seed=1, resume=False)


def test_a_script_is_recorded_for_relaunch_and_compares_equal(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent(f"""
        import sys
        import numpy as np
        sys.path.insert(0, {os.path.dirname(__file__)!r})
        from test_binding import run_loop
        print(run_loop(sys.argv[1], np.linspace(-1, 1, 16, dtype=np.float32), 6, 2))
    """))
    for name in ("a", "b"):
        subprocess.run([sys.executable, str(script), str(tmp_path / name)], check=True,
                       cwd=tmp_path)
    launch = json.loads((tmp_path / "a" / "launch.json").read_text())
    assert launch["argv"] == [sys.executable, str(script), str(tmp_path / "a")]
    assert launch["script"] == str(script)
    assert int(launch["script_xxh3"], 16) == dgrr.file_digest(str(script))
    assert launch["working_directory"] == str(tmp_path)
    r = subprocess.run([CLI, "compare", str(tmp_path / "a"), str(tmp_path / "b")],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "result: no divergence" in r.stdout
