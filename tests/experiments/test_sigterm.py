"""SIGTERM stops a `genret` command within seconds even while its main thread is blocked in a
long device call (where Python cannot run a signal handler), and never cuts a checkpoint save in
half: one in the main thread (deferred_interrupt) or one that orbax finishes in its threads."""

import signal
import subprocess
import sys
import time

import pytest

from experiments.cli import SIGTERM_GRACE_S

# A command `genret spin` run through the real entry point (cli.console: the signal set-up and
# the exit): it compiles a loop that never ends in practice, says "ready" and calls it.
SCRIPT = """
import sys, threading, time, types
import jax, jax.numpy as jnp
from experiments import cli
from rqvae.checkpoint import deferred_interrupt


def spin(n, x):
    def inner(c):
        return c[0] + 1, c[1] * 1.0000001 + 1e-9

    def outer(c):
        return c[0] + 1, jax.lax.while_loop(lambda d: d[0] < n, inner, (0, c[1]))[1]

    return jax.lax.while_loop(lambda c: c[0] < n, outer, (0, x))[1]


def add_arguments(parser):
    parser.add_argument("--save", choices=("none", "main", "orbax"), default="none")
    parser.add_argument("--save-s", type=float, default=0.0)


def save(seconds):
    time.sleep(seconds)
    print("saved", flush=True)


def run(args):
    forever = jax.jit(spin).lower(jnp.int32(0), jnp.float32(1)).compile()
    n, x = jnp.int32(2**31 - 1), jnp.float32(1)
    if args.save == "orbax":  # an asynchronous save, finished by a thread of orbax's name
        threading.Thread(target=save, args=(args.save_s,), name="async_save").start()
    print("ready", flush=True)
    if args.save == "main":
        with deferred_interrupt():
            save(args.save_s)
    forever(n, x).block_until_ready()
    return 0


command = types.ModuleType("experiments.commands.spin", "A device call that does not end.")
command.add_arguments, command.run = add_arguments, run
sys.modules[command.__name__] = command
cli.COMMANDS["spin"] = "a device call that does not end"
sys.argv = ["genret-test", "spin", *sys.argv[1:]]
cli.console()
"""
LINE = "genret spin: stopped by SIGTERM; rerun the same command to resume"


def _stop(*args: str) -> tuple[int, float, str, str]:
    """(exit code, seconds from SIGTERM to exit, stdout, stderr) of `genret spin ARGS`."""
    process = subprocess.Popen(
        [sys.executable, "-c", SCRIPT, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        ready = process.stdout.readline()
        assert ready == "ready\n", (ready, process.stderr.read())
        time.sleep(0.3)  # into the call (or the save)
        process.send_signal(signal.SIGTERM)
        sent = time.monotonic()
        code = process.wait(timeout=SIGTERM_GRACE_S + 30)
        seconds = time.monotonic() - sent
    finally:
        process.kill()
    return code, seconds, process.stdout.read(), process.stderr.read()


def test_sigterm_stops_a_command_blocked_in_a_device_call():
    code, seconds, _, err = _stop()
    assert code == 143, err
    assert seconds < SIGTERM_GRACE_S + 5, f"took {seconds:.1f} s to stop"
    assert err.strip().splitlines()[-1] == LINE, err
    assert "Traceback" not in err, err


@pytest.mark.parametrize("where", ["main", "orbax"])
def test_sigterm_waits_for_the_save_in_flight(where):
    save_s = SIGTERM_GRACE_S + 2
    code, seconds, out, err = _stop("--save", where, "--save-s", str(save_s))
    assert code == 143, err
    # The save completed (held past the grace period), then the command stopped at once.
    assert out == "saved\n", (out, err)
    assert save_s - 0.5 < seconds < save_s + 5, f"stopped after {seconds:.1f} s"
    assert err.strip().splitlines()[-1] == LINE, err
